"""A real engine nobody here wrote: llama.cpp's llama-server on a tiny random-weight GGUF.

The binary is built from the llama-cpp-python 0.3.9 sdist by scripts/build-llama-server.sh and cached
under $KVSELECT_LLAMA_CACHE (default var/cache/llama-server-0.3.9/; CI caches it). Its own counters
(`/metrics` with --metrics) are read here independently of the harness, to check the harness's verdicts.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness.metrics import parse_prometheus
from benchmarks.harness.tiny_gguf import write_tiny_llama
from tests.support.environment import ROOT

VERSION = "0.3.9"
# the tiny model's shape (benchmarks.harness.tiny_gguf defaults): f16 KV, 2 x 2 layers x 2 KV heads x 16 x 2 B
TINY_CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 16384,
    "vocab_size": 400,
    "torch_dtype": "float16",
}
TINY_KV_BYTES_PER_TOKEN = 2 * 2 * 2 * 16 * 2  # K and V x layers x KV heads x head dim x 2 bytes = 256


def llama_server_binary() -> Path:
    cache = Path(os.environ.get("KVSELECT_LLAMA_CACHE", ROOT / "var" / "cache"))
    binary = cache / f"llama-server-{VERSION}" / "llama-server"
    if not binary.exists():
        env = dict(os.environ, LLAMA_CPP_PYTHON_VERSION=VERSION, KVSELECT_LLAMA_CACHE=str(cache))
        env.setdefault("PYTHON", os.environ.get("PYTHON") or sys.executable)
        subprocess.run(["bash", str(ROOT / "scripts" / "build-llama-server.sh")], check=True, env=env, timeout=1800)
    return binary


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class LlamaServer:
    """One llama-server process: `slots` parallel slots sharing `context` KV cells."""

    url: str
    process: subprocess.Popen
    log_path: Path
    slots: int
    context: int
    _log: Any = field(repr=False, default=None)

    def counters(self) -> dict[str, float]:
        """The engine's own counters and gauges now (llamacpp:* from /metrics, `_total` stripped)."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as response:
            samples = parse_prometheus(response.read().decode())
        return {
            name: sum(v for _labels, v in values) for name, values in samples.items() if name.startswith("llamacpp:")
        }

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        if self._log is not None:
            self._log.close()


def start_llama_server(directory: Path, slots: int, context: int, alias: str = "tiny-llama") -> LlamaServer:
    """llama-server on the tiny model, healthy, on a free port of 127.0.0.1 (one thread: two threads on two
    shared cores run hundreds of times slower)."""
    binary = llama_server_binary()
    directory.mkdir(parents=True, exist_ok=True)
    model = write_tiny_llama(directory / "tiny.gguf", context=max(context, 8192))
    port = free_port()
    log_path = directory / f"llama-server-{port}.log"
    log = open(log_path, "w")
    command = [str(binary), "-m", str(model), "--alias", alias, "-t", "1", "-tb", "1", "--metrics"]
    command += ["-np", str(slots), "-c", str(context), "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"llama-server did not become healthy; see {log_path}")
        time.sleep(0.2)
    return LlamaServer(url, process, log_path, slots, context, log)
