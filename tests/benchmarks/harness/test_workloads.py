import asyncio
import json
import threading
import time

import pytest

from benchmarks.harness import workloads as w
from benchmarks.harness.safety import TargetRefused
from benchmarks.result import REQUEST_COLUMNS, LoadPoint, Stats
from benchmarks.simulator.mock_server import MockConfig
from benchmarks.suite.base import CandidateFacts

CONSTRAINTS = {
    "peak_concurrency": 8,
    "avg_input_tokens": 64,
    "avg_output_tokens": 16,
    "max_input_tokens": 2048,
    "ttft_p95_ms": 1000,
    "concurrent_sessions": 6,
    "idle_seconds_between_turns": 1.0,
}


def target_for(server, **kwargs):
    defaults = dict(metrics_url=server.url + "/metrics", engine="vllm", api_key="sk-test", allowed_hosts=["127.0.0.1"])
    defaults.update(kwargs)
    return w.Target(server.url, "m", **defaults)


def verdicts(result):
    return {v["name"]: v for v in result.verdicts}


def test_plans_come_from_constraints_and_are_editable():
    stress = w.plan("concurrency_stress", CONSTRAINTS)
    assert stress["concurrency"] == 8 and stress["input_tokens"] == 64 and stress["ttft_p95_ms"] == 1000
    ladder = w.plan("long_context", {"max_input_tokens": 100_000})
    assert ladder["rungs"] == [16384, 32768, 65536, 100_000] and ladder["required_tokens"] == 100_000
    assert w.plan("long_context", None, CandidateFacts(max_model_len=40_000))["rungs"] == [16384, 32768, 39_968]
    assert w.plan("swap_recovery", CONSTRAINTS)["idle_s"] == 1.0
    json.dumps([w.plan(name, CONSTRAINTS) for name in w.PLANNERS])
    with pytest.raises(w.PlanError, match="test: must be one of"):
        w.plan("nope")


def test_concurrency_stress_with_aborts(with_mock):
    params = w.plan("concurrency_stress", CONSTRAINTS) | {
        "duration_s": 3.0,
        "warmup_s": 0.2,
        "settle_s": 3,
        "abort_fraction": 0.2,
    }
    progress = []
    result = with_mock(
        MockConfig(ttft_s=0.2, itl_s=0.01, metrics_style="vllm"),
        lambda s: w.run_test("concurrency_stress", target_for(s), params, progress=progress.append),
    )
    assert result.tool == "kvselect-harness" and result.evidence == "MEASURED" and not result.partial
    v = verdicts(result)
    assert v["zero_errors"]["passed"] and v["ttft_p95_within_budget"]["passed"]
    assert result.points[0].achieved_concurrency >= 7.5, v["concurrency_held"][
        "detail"
    ]  # verdict may flag loop lag on a busy box
    assert v["kv_back_to_baseline_after_aborts"]["passed"] and v["requests_released_after_aborts"]["passed"]
    point = result.points[0]
    assert point.extra["aborted"] > 0 and point.extra["kv_usage_ratio_max"] > 0
    assert list(result.requests.columns) == list(REQUEST_COLUMNS)
    assert "kv_usage_ratio" in result.timeseries and result.metadata["engine"] == "vllm"
    document = json.dumps(result.to_native())
    assert "sk-test" not in document
    assert progress and progress[-1]["percent"] >= 90


def test_budget_and_error_verdicts_fail_when_they_should(with_mock):
    params = w.plan("concurrency_stress", CONSTRAINTS) | {
        "duration_s": 3.0,
        "warmup_s": 0,
        "ttft_p95_ms": 1,
        "abort_fraction": 0,
    }
    result = with_mock(
        MockConfig(ttft_s=0.2, itl_s=0.01), lambda s: w.run_test("concurrency_stress", target_for(s), params)
    )
    ttft = verdicts(result)["ttft_p95_within_budget"]
    assert ttft["passed"] is False and ttft["status"] == "fail" and ttft["n"] >= 20, ttft
    low, high = ttft["interval"]
    assert 1 < low <= ttft["value"] <= high and "95% CI" in ttft["detail"]
    result = with_mock(
        MockConfig(oom_in_stream_after=1), lambda s: w.run_test("concurrency_stress", target_for(s), params)
    )
    v = verdicts(result)["zero_errors"]
    assert v["passed"] is False and "oom" in v["detail"]


def test_a_percentile_from_too_few_requests_is_insufficient_data_never_a_pass(with_mock):
    params = w.plan("concurrency_stress", CONSTRAINTS) | {
        "concurrency": 2,
        "duration_s": 0.1,
        "warmup_s": 0,
        "abort_fraction": 0,
    }
    result = with_mock(MockConfig(ttft_s=0.02), lambda s: w.run_test("concurrency_stress", target_for(s), params))
    ttft = verdicts(result)["ttft_p95_within_budget"]
    assert ttft["status"] == "insufficient_data" and ttft["passed"] is None and ttft["n"] < 20, ttft
    assert "at least 20" in ttft["detail"]


def test_long_context_ladder_with_background(with_mock):
    params = w.plan("long_context", CONSTRAINTS) | {
        "rungs": [256, 1024],
        "required_tokens": 1024,
        "background_lead_s": 0.5,
        "background_concurrency": 2,
    }
    result = with_mock(
        MockConfig(ttft_s=0.01, prefill_s_per_token=0.00002, metrics_style="llamacpp"),
        lambda s: w.run_test("long_context", target_for(s, engine="llamacpp"), params),
    )
    assert [p.label for p in result.points] == ["256 alone", "256 with_background", "1K alone", "1K with_background"]
    assert result.metadata["largest_successful_rung"] == 1024 and verdicts(result)["largest_rung_succeeds"]["passed"]
    assert result.points[2].extra["prompt_tokens_reported"] == [1024]
    assert result.points[1].extra["background_requests"] > 0
    # two short requests in flight: too few to judge the interference, said so with the count
    isolated = verdicts(result)["short_traffic_isolated[1K with_background]"]
    assert isolated["status"] == "insufficient_data" and isolated["n"] < 20
    assert "largest rung served 1024 of 1024" in result.metadata["observed"]["line"]


def test_the_ladder_climbs_to_the_requirement_and_the_engine_limit():
    assert w.context_ladder(100_000) == [16384, 32768, 65536, 100_000]
    # max_model_len 131072: the last rung is the engine's limit minus the output, not dropped
    assert (
        w.plan("long_context", None, CandidateFacts(max_model_len=131072))["rungs"][-1] == 131072 - w.LONG_OUTPUT_TOKENS
    )
    # the requirement beyond the engine's limit is still sent (and fails with the engine's error)
    plan = w.plan("long_context", {"max_input_tokens": 100_000}, CandidateFacts(max_model_len=65536))
    assert plan["rungs"] == [16384, 32768, 65504, 100_000]
    assert w.plan("long_context", {"max_input_tokens": 100_000}, max_context=8000)["rungs"] == [2000, 4000, 8000]
    with pytest.raises(w.PlanError, match="params.max_context"):
        w.plan("long_context", None, max_context=-1)


def test_a_rung_the_engine_truncated_is_not_served(with_mock):
    """An engine that reports fewer prompt tokens than sent (llama.cpp's context shift) cut the rung."""
    params = w.plan("long_context", CONSTRAINTS) | {"rungs": [256, 2048], "with_background": False}
    result = with_mock(
        MockConfig(ttft_s=0.01, truncate_prompt_to=1000),
        lambda s: w.run_test("long_context", target_for(s), params),
    )
    largest = verdicts(result)["largest_rung_succeeds"]
    assert largest["status"] == "fail" and largest["value"] == 256 and "truncated" in largest["detail"], largest


def test_a_ladder_that_stops_short_of_the_requirement_is_not_exercised(with_mock):
    params = w.plan("long_context", CONSTRAINTS) | {"rungs": [256], "with_background": False}
    result = with_mock(MockConfig(ttft_s=0.01), lambda s: w.run_test("long_context", target_for(s), params))
    largest = verdicts(result)["largest_rung_succeeds"]
    assert largest["status"] == "not_exercised" and largest["threshold"] == 2048, largest
    assert "never sent" in largest["detail"]


def test_prefix_reuse_on_and_off(with_mock):
    params = w.plan("prefix_reuse", CONSTRAINTS) | {"requests": 24, "kv_capacity_tokens": 65536}

    async def go(server):
        return await w.run_prefix_reuse(target_for(server), params, off_target=target_for(server))

    result = with_mock(MockConfig(metrics_style="vllm"), go)
    assert [p.label for p in result.points] == ["prefix_on", "prefix_off"]
    v = verdicts(result)
    assert v["prefix_reused"]["passed"] and v["kv_below_theory"]["n"] is not None and "kv_below_prefix_off" in v
    # one threshold: the one reported is the one applied, and the detail states it (it reported the
    # shared share 0.75 and passed at half of it)
    reused = v["prefix_reused"]
    shared = params["prefix_tokens"] / (params["prefix_tokens"] + params["suffix_tokens"])
    assert reused["threshold"] == pytest.approx(w.PREFIX_REUSE_MIN_SHARE * shared)
    assert reused["passed"] == (reused["value"] >= reused["threshold"])
    assert f"threshold {reused['threshold']:.3g}" in reused["detail"] and reused["source"] == "engine_counters"
    assert "prefix_off.kv_usage_ratio" in result.timeseries


def test_stability_windows_and_drift(with_mock):
    params = w.plan("stability", CONSTRAINTS) | {"duration_s": 1.5, "window_s": 0.5, "warmup_s": 0.3}
    result = with_mock(MockConfig(ttft_s=0.01), lambda s: w.run_test("stability", target_for(s), params))
    assert [p.label for p in result.points] == ["all", "first_window", "last_window"]
    v = verdicts(result)
    assert v["ttft_p50_drift"]["status"] in ("pass", "inconclusive") and v["ttft_p50_drift"]["n"] >= 40
    assert "kv_usage_slope_per_hour" in result.metadata["drift"]
    # the warm-up ran and was left out of every window
    excluded = result.metadata["warmup_excluded"]
    assert excluded["seconds"] == 0.3 and excluded["requests"] > 0
    assert result.metadata["observed"]["line"].startswith("short soak of 1.5 s: not the 2 h the plan asks for")
    assert "short soak of 1.5 s" in " ".join(result.notes)
    with pytest.raises(w.PlanError, match="params.window_s"):
        with_mock(None, lambda s: w.run_test("stability", target_for(s), params | {"window_s": 1.0}))


def test_cancel_returns_partial_result_quickly(with_mock):
    cancel = threading.Event()
    threading.Timer(0.8, cancel.set).start()
    params = w.plan("stability", CONSTRAINTS) | {"duration_s": 60, "window_s": 10, "warmup_s": 0.2}
    started = time.perf_counter()
    result = with_mock(MockConfig(ttft_s=0.01), lambda s: w.run_test("stability", target_for(s), params, cancel=cancel))
    assert time.perf_counter() - started < 0.8 + 2.5
    assert result.partial and "cancelled: partial data" in result.notes and result.points[0].requests_completed > 0


def test_simulator_evidence_and_target_refusal(with_mock):
    params = w.plan("concurrency_stress", CONSTRAINTS) | {"duration_s": 0.3, "warmup_s": 0, "abort_fraction": 0}
    result = with_mock(
        None, lambda s: w.run_test("concurrency_stress", target_for(s, engine="simulator", metrics_url=None), params)
    )
    assert result.evidence == "SIMULATED"
    refused = w.Target("http://169.254.169.254/v1", "m", allowed_hosts=["*"])
    with pytest.raises(TargetRefused):
        w.run_test_sync("concurrency_stress", refused, params)
    assert "sk-" not in repr(w.Target("http://x", "m", api_key="sk-zzz"))


def test_latency_verdicts_of_a_client_bound_point_say_the_client_may_be_in_them():
    reasons = [
        "client process needed 97% of a core (ran 97%, waited for one 0%): the client, not the engine, set the pace"
    ]
    bound = LoadPoint(
        label="c=256",
        ttft_ms=Stats(p95=80.0),
        client_bound=True,
        requests_completed=500,
        extra={"client_bound_reasons": reasons},
    )
    kept = LoadPoint(label="c=64", ttft_ms=Stats(p95=80.0), client_bound=False, requests_completed=500)
    (verdict,) = w.budget_verdicts(bound, {"ttft_p95_ms": 100})
    assert verdict["status"] == "inconclusive" and verdict["passed"] is None
    assert "inconclusive (client-bound)" in verdict["detail"] and "97% of a core" in verdict["detail"]
    (verdict,) = w.budget_verdicts(kept, {"ttft_p95_ms": 100})
    assert verdict["status"] == "pass" and "client-bound" not in verdict["detail"]


def test_concurrency_stress_runs_open_loop_at_the_constraints_rate(with_mock):
    params = w.plan("concurrency_stress", CONSTRAINTS | {"request_rate": 40.0}) | {
        "duration_s": 1.5,
        "warmup_s": 0,
        "settle_s": 0.5,
        "abort_fraction": 0,
    }
    assert params["rate"] == 40.0 and w.plan("concurrency_stress", CONSTRAINTS)["rate"] is None
    result = with_mock(
        MockConfig(ttft_s=0.01, itl_s=0.002, metrics_style="vllm"),
        lambda s: w.run_test("concurrency_stress", target_for(s), params),
    )
    v = verdicts(result)
    point = result.points[0]
    assert point.request_rate == 40.0 and point.label == "40 req/s"
    assert "rate_held" in v and "concurrency_held" not in v and v["rate_held"]["threshold"] == 40.0
    assert 20 <= point.extra["achieved_rate"] <= 70  # Poisson arrivals at 40/s over 1.5 s
    with pytest.raises(w.PlanError, match="params.rate"):
        w.run_test_sync("concurrency_stress", w.Target("http://127.0.0.1:9", "m"), params | {"rate": "fast"})


def test_concurrency_stress_reports_each_traffic_group_with_its_own_budget_verdicts(with_mock):
    constraints = CONSTRAINTS | {"avg_input_tokens": 200, "p95_input_tokens": 600, "max_input_tokens": 2000}
    params = w.plan("concurrency_stress", constraints) | {
        "duration_s": 2.0,
        "warmup_s": 0,
        "settle_s": 0.2,
        "abort_fraction": 0,
    }
    assert params["long_input_tokens"] == 600
    result = with_mock(
        MockConfig(ttft_s=0.01, itl_s=0.001, metrics_style="vllm"),
        lambda s: w.run_test("concurrency_stress", target_for(s), params),
    )
    labels = [p.label for p in result.points]
    assert labels[0] == "c=8" and labels[1:] == ["short", "long"]
    whole, short, long = result.points
    assert short.requests_completed + long.requests_completed == whole.requests_completed
    assert short.requests_completed > long.requests_completed > 0  # about 5 % are above the p95
    v = verdicts(result)
    assert v["ttft_p95_within_budget[short]"]["n"] == short.requests_completed
    if long.requests_completed < 20:  # a group with under 20 requests cannot be judged
        assert v["ttft_p95_within_budget[long]"]["status"] == "insufficient_data"
    assert result.metadata["traffic_groups"]["long_input_tokens"] == 600
    assert set(result.requests["point"]) == {0}  # the request rows stay under the whole point
    observed = result.metadata["observed"]
    assert "short TTFT p95" in observed["line"] and observed["groups"]["long"]["n"] == long.requests_completed


def test_a_targets_client_carries_its_key_timeout_and_receive_clock():
    from benchmarks.harness import wireclock

    user = w.Target("http://127.0.0.1:9", "m", api_key="sk-x", request_timeout_s=7, receive_clock="user")
    client = user.client()
    assert client.timestamping()["receive_clock"] == "user space"
    assert client.request_timeout_s == 7 and client.keep_alive and "sk-x" not in repr(client)
    assert user.describe()["receive_clock"] == "user" and "sk-x" not in json.dumps(user.describe())
    other = w.Target("http://127.0.0.1:9", "m", engine="llamacpp").client("http://127.0.0.1:10/", "m2")
    assert other.base_url == "http://127.0.0.1:10" and other.model == "m2" and not other.keep_alive
    expected = "kernel (SO_TIMESTAMPNS)" if wireclock.SUPPORTED else "user space"
    assert other.timestamping()["receive_clock"] == expected  # the default clock
    for made in (client, other):
        asyncio.run(made.close())
