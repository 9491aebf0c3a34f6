#!/usr/bin/env bash
# Build llama.cpp's `llama-server` from the source vendored in the PyPI sdist of llama-cpp-python.
#
# Why this way: no registry ships the llama-server binary, but every llama-cpp-python sdist carries
# the llama.cpp tree. 0.3.9 still exports `llamacpp:kv_cache_usage_ratio` with --metrics, which the
# harness integration tests check. The binary is cached by version and the build skipped when present.
#
# Usage: scripts/build-llama-server.sh            (prints the binary path on its last line)
# Env:   LLAMA_CPP_PYTHON_VERSION (default 0.3.9), KVSELECT_LLAMA_CACHE (default var/cache),
#        PYTHON (default .venv/bin/python, else python3), BUILD_JOBS (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.9}"
CACHE_ROOT="${KVSELECT_LLAMA_CACHE:-$PWD/var/cache}"
CACHE_DIR="$CACHE_ROOT/llama-server-$VERSION"
BINARY="$CACHE_DIR/llama-server"
JOBS="${BUILD_JOBS:-2}"
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

if [ -x "$BINARY" ]; then
  echo "llama-server $VERSION already built" >&2
  echo "$BINARY"
  exit 0
fi

for tool in cmake c++; do
  command -v "$tool" >/dev/null || { echo "build-llama-server: '$tool' not found (install cmake and a C++ compiler)" >&2; exit 1; }
done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/llama-build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

echo "downloading llama-cpp-python==$VERSION sdist" >&2
"$PYTHON" -m pip download -q --no-deps --no-binary :all: --dest "$WORK" "llama-cpp-python==$VERSION" >&2
tar -xzf "$WORK"/llama_cpp_python-"$VERSION".tar.gz -C "$WORK"
SRC="$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp"
[ -d "$SRC" ] || { echo "build-llama-server: vendored llama.cpp not found in the sdist ($SRC)" >&2; exit 1; }

GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)
echo "configuring llama.cpp (jobs=$JOBS)" >&2
cmake -S "$SRC" -B "$WORK/build" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=ON >&2
echo "building llama-server" >&2
cmake --build "$WORK/build" --target llama-server -j "$JOBS" >&2

mkdir -p "$CACHE_DIR"
cp "$WORK/build/bin/llama-server" "$BINARY.tmp"
mv "$BINARY.tmp" "$BINARY"
echo "$BINARY"
