"""A load against a dead engine stops early, keeping its data; failures are timed on the clock of
the successes; a latency verdict on a run with too many errors fails (issue 20 items 5-6)."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from benchmarks.harness import workloads as w
from benchmarks.harness.client import OpenAIClient
from benchmarks.harness.load import run_load
from benchmarks.harness.load_config import LoadConfig
from benchmarks.harness.load_summary import requests_rows, summarize
from benchmarks.harness.request_record import RequestSpec
from benchmarks.harness.stopping import LIMITS, EarlyStop
from benchmarks.simulator.mock_server import MockConfig


def dead_url() -> str:
    """A loopback port nothing listens on: every connection is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def drive(url: str, config: LoadConfig, **client_kwargs):
    async def go():
        async with OpenAIClient(url, "m", **client_kwargs) as client:
            return await run_load(client, lambda i: RequestSpec(prompt=f"p {i}", max_tokens=8), config)

    return asyncio.run(go())


@pytest.mark.parametrize("transport", ["raw", "aiohttp"])
def test_a_closed_loop_against_a_dead_engine_stops_after_consecutive_connection_failures(transport):
    """Before: ~1,050 connection attempts a second until the planned end (44,204 in one run)."""
    config = LoadConfig(concurrency=16, duration_s=20.0)
    started = time.monotonic()
    outcome = drive(dead_url(), config, transport=transport)
    assert time.monotonic() - started < 5
    limit = LIMITS["consecutive_connection_failures"]
    assert limit <= len(outcome.records) <= limit + config.concurrency
    assert outcome.stopped_early and f"{limit} consecutive requests could not connect" in outcome.stopped_early
    point = summarize(outcome)
    assert point.extra["stopped_early"] == outcome.stopped_early
    assert point.requests_failed == len(outcome.records) and point.error_rate == 1.0


def test_failed_connections_are_timed_on_the_clock_of_the_successes():
    """Before: a refused request kept send_time 0, so its start_s was minus the process uptime
    (start_s = -2514.5 s) and it landed in the first window of the stability test."""
    outcome = drive(dead_url(), LoadConfig(concurrency=2, duration_s=5.0, stop_after_connection_failures=10))
    assert outcome.records and all(r.error_class == "connect" for r in outcome.records)
    assert all(outcome.run_start <= r.send_time <= r.end_time for r in outcome.records)
    starts = [row["start_s"] for row in requests_rows(outcome)]
    assert all(0 <= s < 5 for s in starts), starts[:5]


def test_a_load_where_nothing_succeeds_stops_after_the_time_without_success(with_mock):
    """HTTP errors are not connection failures: the clock rule stops them."""

    async def go(server):
        async with OpenAIClient(server.url, "m") as client:
            config = LoadConfig(concurrency=2, duration_s=20.0, stop_after_s_without_success=1.0)
            return await run_load(client, lambda i: RequestSpec(prompt="p", max_tokens=4), config)

    started = time.monotonic()
    outcome = with_mock(MockConfig(fail_status=500), go)
    assert time.monotonic() - started < 5
    assert outcome.stopped_early and outcome.stopped_early.startswith("no request succeeded for 1 s")


def test_the_clock_rule_never_stops_a_slow_healthy_engine():
    stop = EarlyStop(consecutive_connection_failures=5, seconds_without_success=1.0)
    stop.start(0.0)
    assert not stop.check(100.0)  # long requests still in flight, none failed: keep going
    assert not stop.observe(False, "http", "500", 100.5)
    assert stop.check(101.0) and "no request succeeded" in stop.reason


def test_a_latency_verdict_fails_when_the_error_rate_exceeds_the_budget():
    """Before: an engine that crashed after 30 requests gave 99 % errors and 'TTFT p95 within budget'
    passed on the few requests that succeeded."""
    from benchmarks.simulator.config import SimConfig
    from benchmarks.simulator.server import ServerThread

    config = SimConfig(time_scale=50.0, fault_crash_after_requests=30, max_model_len=8192)
    params = w.plan("concurrency_stress", {"peak_concurrency": 4, "avg_input_tokens": 16, "avg_output_tokens": 8})
    params |= {"duration_s": 2.0, "warmup_s": 0.0, "settle_s": 0.0, "abort_fraction": 0.0, "ttft_p95_ms": 60_000}
    with ServerThread(config) as server:
        target = w.Target(server.url, config.served_model_name, allowed_hosts=["127.0.0.1"])
        result = w.run_test_sync("concurrency_stress", target, params)
    point = result.points[0]
    assert point.requests_completed >= 1 and point.error_rate > 0.5
    verdict = next(v for v in result.verdicts if v["name"] == "ttft_p95_within_budget")
    assert verdict["passed"] is False and "of requests failed" in verdict["detail"]
