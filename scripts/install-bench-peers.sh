#!/usr/bin/env bash
# `make bench BENCH=harness PEERS=1`: the established load clients the harness benchmark runs side
# by side with kvselect, each in a throwaway venv under var/cache/bench-peers/ (never the project's).
#   vllm/      `vllm bench serve`: vllm 0.33 with --no-deps (its registry wheel pins a CUDA torch),
#              the CPU torch wheel, and only what `vllm bench serve` imports.
#   guidellm/  guidellm 0.8 with its own dependencies.
# Each venv is built once (a stamp file per version); delete var/cache/bench-peers to rebuild.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
ROOT=var/cache/bench-peers
VLLM_VERSION=${VLLM_VERSION:-0.33.0}
GUIDELLM_VERSION=${GUIDELLM_VERSION:-0.8.1}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
mkdir -p "$ROOT"

fresh_venv() {  # fresh_venv DIR: a new venv with a current pip
  rm -rf "$1"
  "$PYTHON" -m venv "$1"
  "$1/bin/python" -m pip install -q --upgrade pip
}

stamp="$ROOT/vllm/.installed-$VLLM_VERSION"
if [ ! -f "$stamp" ]; then
  echo "bench peers: vllm $VLLM_VERSION (--no-deps) + CPU torch $TORCH_VERSION -> $ROOT/vllm"
  fresh_venv "$ROOT/vllm"
  "$ROOT/vllm/bin/pip" install -q "torch==$TORCH_VERSION"
  "$ROOT/vllm/bin/pip" install -q --no-deps "vllm==$VLLM_VERSION"
  # what `vllm bench serve` imports on its way (CLI, tokenizer, datasets, HTTP client)
  "$ROOT/vllm/bin/pip" install -q uvloop aiohttp tqdm numpy pillow "transformers<6" tokenizers sentencepiece \
    pydantic pydantic-core msgspec cloudpickle psutil pyzmq regex requests fastapi "openai>=1" \
    cbor2 pybase64 setproctitle blake3 py-cpuinfo gguf prometheus-client uvicorn cachetools \
    partial-json-parser diskcache einops openai-harmony watchfiles tiktoken lark jinja2 pyyaml \
    datasets pandas xgrammar llguidance orjson
  touch "$stamp"
fi

stamp="$ROOT/guidellm/.installed-$GUIDELLM_VERSION"
if [ ! -f "$stamp" ]; then
  echo "bench peers: guidellm $GUIDELLM_VERSION -> $ROOT/guidellm"
  fresh_venv "$ROOT/guidellm"
  "$ROOT/guidellm/bin/pip" install -q "guidellm==$GUIDELLM_VERSION"
  touch "$stamp"
fi
echo "bench peers: ready in $ROOT (vllm: $ROOT/vllm/bin/vllm, guidellm: $ROOT/guidellm/bin/guidellm)"
