"""The harness against a real engine nobody here wrote: llama.cpp's llama-server with a tiny GGUF.

The binary is built from the llama-cpp-python 0.3.9 sdist by scripts/build-llama-server.sh (cached
under var/cache/llama-server-0.3.9/, a few minutes the first time).
"""

import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from benchmarks.harness import workloads as w
from benchmarks.harness.tiny_gguf import write_tiny_llama

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
VERSION = "0.3.9"


def llama_server_binary() -> Path:
    cache = Path(os.environ.get("KVSELECT_LLAMA_CACHE", ROOT / "var" / "cache"))
    binary = cache / f"llama-server-{VERSION}" / "llama-server"
    if not binary.exists():
        env = dict(os.environ, LLAMA_CPP_PYTHON_VERSION=VERSION, KVSELECT_LLAMA_CACHE=str(cache))
        env.setdefault("PYTHON", os.environ.get("PYTHON") or __import__("sys").executable)
        subprocess.run(["bash", str(ROOT / "scripts" / "build-llama-server.sh")], check=True, env=env, timeout=1800)
    return binary


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(tmp_path_factory, slots: int):
    """Start llama-server with `slots` parallel slots (-np) on the tiny model; yields its URL."""
    binary = llama_server_binary()
    model = write_tiny_llama(tmp_path_factory.mktemp("model") / "tiny.gguf")
    port = free_port()
    log = open(tmp_path_factory.mktemp("log") / "llama-server.log", "w")
    process = subprocess.Popen(
        [
            str(binary),
            "-m",
            str(model),
            "-t",
            "1",
            "-tb",
            "1",
            "--metrics",
            "-np",
            str(slots),
            "-c",
            str(512 * slots),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
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
            raise RuntimeError(f"llama-server did not become healthy; see {log.name}")
        time.sleep(0.2)
    yield url
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    yield from serve(tmp_path_factory, 16)  # -c 8192: 512 tokens per slot


@pytest.fixture(scope="module")
def llama_server_4_slots(tmp_path_factory):
    yield from serve(tmp_path_factory, 4)


def target(url):
    return w.Target(
        url, "tiny", metrics_url=url + "/metrics", engine="llamacpp", api="completions", allowed_hosts=["127.0.0.1"]
    )


def test_concurrency_stress_against_llama_server(llama_server):
    params = w.plan("concurrency_stress", {"peak_concurrency": 8, "avg_input_tokens": 64, "avg_output_tokens": 32})
    params |= {"duration_s": 3.0, "warmup_s": 0.5, "settle_s": 5.0, "abort_fraction": 0.2}
    params |= {"input_distribution": None, "output_distribution": None}  # fixed lengths: exact prompt sizes
    result = w.run_test_sync("concurrency_stress", target(llama_server), params)
    v = {x["name"]: x for x in result.verdicts}
    assert v["zero_errors"]["passed"], v["zero_errors"]["detail"]
    # the in-flight average (the verdict also fails on event-loop lag, which a starved CI box can show)
    assert result.points[0].achieved_concurrency >= 7, v["concurrency_held"]["detail"]
    assert v["requests_released_after_aborts"]["passed"]
    point = result.points[0]
    assert point.requests_completed > 10 and point.extra["aborted"] > 0
    assert point.ttft_ms.p50 > 0 and point.tpot_ms.p50 > 0
    # engine-reported prompt tokens equal the requested length (exact prompts through /tokenize)
    assert result.metadata["prompts"]["source"] == "tokenize"
    assert set(result.requests["prompt_tokens"].dropna().astype(int)) == {64}
    # the llama.cpp KV metric is scraped and moves under load
    assert result.metadata["engine"] == "llamacpp"
    kv = [value for _, value in result.timeseries["kv_usage_ratio"]]
    assert len(kv) >= 3 and max(kv) > 0
    assert point.extra["kv_usage_ratio_max"] > 0 and "kv_usage_ratio" not in result.metadata["engine_metrics"]["absent"]


def test_swap_recovery_greedy_continuation_on_llama_server(llama_server):
    params = w.plan(
        "swap_recovery", {"concurrent_sessions": 4, "avg_input_tokens": 48, "idle_seconds_between_turns": 1.0}
    )
    params |= {"pressure_concurrency": 4, "output_tokens": 16}
    result = w.run_test_sync("swap_recovery", target(llama_server), params)
    v = {x["name"]: x for x in result.verdicts}
    assert v["zero_errors"]["passed"], v["zero_errors"]["detail"]
    assert v["continuation_identical"]["passed"], v["continuation_identical"]["detail"]


def test_overload_past_the_slots_queues_and_recovers_on_llama_server(llama_server_4_slots):
    """llama-server runs -np 4 slots and defers the rest (requests_deferred): past 4 in flight the
    requests queue for a slot. The budget is set from this box's own speed at the target (one
    request's end-to-end time): the target step meets it, 3x (8 waiting for 4 slots) does not."""
    url = llama_server_4_slots
    shape = {"peak_concurrency": 4, "avg_input_tokens": 48, "avg_output_tokens": 32}
    probe = w.plan("concurrency_stress", shape) | {"duration_s": 2.0, "warmup_s": 0.5, "settle_s": 1.0}
    probe |= {"abort_fraction": 0, "input_distribution": None, "output_distribution": None}
    alone = w.run_test_sync("concurrency_stress", target(url), probe).points[0]
    budget = max(alone.e2e_ms.p50, 3 * alone.ttft_ms.p95)
    params = w.plan("overload", shape | {"ttft_p95_ms": budget}) | {
        "step_factors": [1, 3],
        "step_duration_s": 4.0,
        "recovery_s": 4.0,
        "recovery_bound_s": 10.0,
        "input_distribution": None,
        "output_distribution": None,
    }
    result = w.run_test_sync("overload", target(url), params)
    v = {x["name"]: x for x in result.verdicts}
    up = [p for p in result.points if p.extra["direction"] == "up"]
    assert [p.extra["level"] for p in up] == [4.0, 12.0]
    assert up[1].extra["failures_by_kind"] == {"rejected": 0, "oom": 0, "crash": 0, "other": 0}
    assert up[1].extra["waiting_max"] > 0  # llama.cpp's deferred requests: the queue for a slot
    graceful = v["overload_handled_gracefully"]
    assert graceful["value"] == "queueing" and graceful["status"] == "pass", graceful["detail"]
    assert v["recovered_within_bound"]["status"] == "pass", v["recovered_within_bound"]["detail"]
    print("observed:", result.metadata["observed"]["line"])
