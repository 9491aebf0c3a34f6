"""GPU check (run only on a machine with an NVIDIA GPU): a real engine on the GPU under the harness.

Why: the harness's NVML sampler and its tests 1 (concurrency stress) and 4 (prefix reuse) should be
seen working against a real engine on a real GPU. The engine is `transformers serve
--continuous-batching` (paged attention) serving a random-weight Llama of realistic size (built
from a config here, no download). It exports no /metrics, so engine KV series are recorded as
absent; GPU memory and utilisation come from NVML.

    python benchmarks/perf/gpu_validation.py --out DIR [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.harness import workloads as w
from benchmarks.harness.tiny_gguf import CHAT_TEMPLATE, train_tokenizer


def build_model(directory: Path, hidden: int, layers: int) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=train_tokenizer(2000),
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(directory)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 8 // 3 // 64 * 64,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 128,
        num_key_value_heads=max(hidden // 256, 1),
        max_position_embeddings=16384,
        bos_token_id=0,
        eos_token_id=None,
        pad_token_id=0,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.generation_config = GenerationConfig(bos_token_id=0, eos_token_id=None, pad_token_id=0, do_sample=False)
    model.save_pretrained(directory)
    params = sum(p.numel() for p in model.parameters())
    print(
        f"model: {params / 1e9:.2f} B parameters, hidden {hidden}, {layers} layers, vocab {len(tokenizer)}", flush=True
    )
    del model
    torch.cuda.empty_cache()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="var/gpu-check")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=16)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        print("gpu_validation: skipped (no CUDA GPU on this machine)")
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model_dir = Path("/tmp/kvselect-gpu-model")
    started = time.time()
    build_model(model_dir, args.hidden, args.layers)
    print(f"model written in {time.time() - started:.1f} s", flush=True)
    port = free_port()
    log = open(out / "engine.log", "w")
    command = [
        sys.executable,
        "-m",
        "transformers.cli.transformers",
        "serve",
        str(model_dir),
        "--continuous-batching",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--device",
        "cuda:0",
        "--log-level",
        "info",
    ]
    engine = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 180
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if engine.poll() is not None or time.time() > deadline:
                raise SystemExit(f"engine did not become healthy (exit {engine.poll()}); see engine.log")
            time.sleep(0.5)
        print(f"engine healthy after {time.time() - started:.1f} s", flush=True)
        target = w.Target(url, str(model_dir), engine="transformers", api="chat", ignore_eos=None, metrics_url=None)
        constraints = {"peak_concurrency": 32, "avg_input_tokens": 512, "avg_output_tokens": 128}
        summary = {}
        stress = w.plan("concurrency_stress", constraints) | {
            "duration_s": args.seconds,
            "warmup_s": 5.0,
            "abort_fraction": 0.05,
            "settle_s": 5,
        }
        prefix = w.plan("prefix_reuse", constraints) | {
            "requests": 384,
            "concurrency": 32,
            "prefix_tokens": 768,
            "suffix_tokens": 128,
            "output_tokens": 64,
        }
        for test, params in (("concurrency_stress", stress), ("prefix_reuse", prefix)):
            t0 = time.time()
            result = w.run_test_sync(test, target, params)
            document = result.to_native(include_requests=False)
            (out / f"{test}.json").write_text(json.dumps(document, indent=1, default=str))
            point = result.points[0]
            gpu = result.metadata["gpu"]
            peak_mem = max(
                (v for k, s in result.timeseries.items() if k.endswith("memory_used_mib") for _, v in s), default=None
            )
            peak_util = max(
                (v for k, s in result.timeseries.items() if k.endswith("util_pct") for _, v in s), default=None
            )
            summary[test] = {
                "wall_s": round(time.time() - t0, 1),
                "completed": point.requests_completed,
                "failed": point.requests_failed,
                "achieved_concurrency": point.achieved_concurrency,
                "ttft_ms": point.ttft_ms.__dict__,
                "tpot_ms": point.tpot_ms.__dict__,
                "output_tok_s": point.output_token_throughput,
                "client_bound": point.client_bound,
                "gpu": gpu,
                "gpu_peak_memory_mib": peak_mem,
                "gpu_peak_util_pct": peak_util,
                "verdicts": [(v["name"], v["passed"], v["detail"]) for v in result.verdicts],
                "engine_metrics_absent": result.metadata["engine_metrics"]["absent"],
                "prompts": result.metadata["prompts"]["source"],
            }
            print(json.dumps({test: summary[test]}, indent=1, default=str), flush=True)
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    finally:
        engine.terminate()
        try:
            engine.wait(20)
        except subprocess.TimeoutExpired:
            engine.kill()
        log.close()


if __name__ == "__main__":
    main()
