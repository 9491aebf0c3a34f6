"""The harness against a real engine nobody here wrote: llama.cpp's llama-server with a tiny GGUF.

The binary is built from the llama-cpp-python 0.3.9 sdist by scripts/build-llama-server.sh (cached
under var/cache/llama-server-0.3.9/, a few minutes the first time).
"""

import contextlib
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


@contextlib.contextmanager
def serving(tmp_path_factory):
    """A llama-server on a free port with the tiny model, until the block ends."""
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
            "16",
            "-c",
            "8192",
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
    try:
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    with serving(tmp_path_factory) as url:
        yield url


@pytest.fixture(scope="module")
def second_llama_server(tmp_path_factory):
    """The "new version" the model-switch test moves the load to (a second process)."""
    with serving(tmp_path_factory) as url:
        yield url


def target(url):
    return w.Target(
        url, "tiny", metrics_url=url + "/metrics", engine="llamacpp", api="completions", allowed_hosts=["127.0.0.1"]
    )


def test_concurrency_stress_against_llama_server(llama_server):
    params = w.plan("concurrency_stress", {"peak_concurrency": 8, "avg_input_tokens": 64, "avg_output_tokens": 32})
    params |= {"duration_s": 3.0, "warmup_s": 0.5, "settle_s": 5.0, "abort_fraction": 0.2}
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


def test_model_switch_between_two_llama_servers(llama_server, second_llama_server):
    """Traffic moves to a second llama-server process and back (the real-engine path: two endpoints,
    no switch command): no request fails, the new process starts with a cold cache."""
    params = w.plan("model_switch", {"peak_concurrency": 8, "avg_input_tokens": 64, "avg_output_tokens": 16})
    params |= {"before_s": 3.0, "switched_s": 3.0, "after_s": 3.0, "switch_endpoint": second_llama_server}
    result = w.run_test_sync("model_switch", target(llama_server), params)
    v = {x["name"]: x for x in result.verdicts}
    assert v["switch_errors"]["status"] == "pass", v["switch_errors"]["detail"]
    switch = result.metadata["switch"]
    assert switch["mode"] == "endpoint" and switch["switch_requests"] > 0 and switch["rollback_requests"] > 0
    points = {p.label: p for p in result.points}
    assert points["switched"].requests_completed > 0 and points["rolled_back"].requests_completed > 0
    assert any(name.startswith("switched.") for name in result.timeseries)  # the second process's metrics
    assert result.metadata["observed"]["line"].startswith("switch by endpoint pair: 0 errors")


def test_isolation_with_two_clients_on_llama_server(llama_server):
    """Tenant A's short requests alone and beside tenant B's long ones (llama-server has no priority
    scheduling: the field is not sent). Each slot holds 8192 / 16 = 512 tokens."""
    params = w.plan("isolation", {"request_rate": 8, "tenants": 2, "avg_input_tokens": 32, "avg_output_tokens": 8})
    params |= {
        "alone_s": 3.0,
        "flood_lead_s": 1.0,
        "flood_s": 3.0,
        "tenant_b_concurrency": 4,
        "tenant_b_input_tokens": 400,
        "tenant_b_output_tokens": 32,
    }
    result = w.run_test_sync("isolation", target(llama_server), params)
    v = {x["name"]: x for x in result.verdicts}
    figures = result.metadata["isolation"]
    assert figures["scheduling"] == "fcfs" and figures["a_errors_flood"] == 0
    assert figures["a_ttft_n_alone"] >= 5 and figures["a_ttft_n_flood"] >= 5
    assert figures["b_requests_completed"] > 0 and v["flood_held"]["status"] == "pass", v["flood_held"]["detail"]
    assert figures["a_ttft_p95_slowdown"] is not None and "n=" in result.metadata["observed"]["line"]
