"""A validation test's duration and load are estimated from its parameters before Run."""

from __future__ import annotations

from benchmarks import suite
from benchmarks.harness import estimates, workloads

CONSTRAINTS = {
    "peak_concurrency": 200,
    "avg_input_tokens": 800,
    "avg_output_tokens": 200,
    "max_input_tokens": 65536,
    "ttft_p95_ms": 800.0,
    "tpot_p95_ms": 50.0,
    "concurrent_sessions": 200,
    "idle_seconds_between_turns": 60.0,
}


def test_a_one_hour_soak_at_high_concurrency_is_long_and_heavy():
    plan = dict(workloads.plan("stability", CONSTRAINTS), concurrency=200, duration_s=3600.0)
    figures = workloads.estimate("stability", plan)
    assert figures["seconds"] == 3600 + 60 and figures["concurrency"] == 200  # the soak and its warm-up
    assert figures["warnings"] == [estimates.LONG, estimates.HEAVY]
    # 200 in flight, each request 0.8 s + 200 x 50 ms = 10.8 s, for an hour and the warm-up
    assert figures["requests"] == round(200 * 3660 / 10.8)
    assert abs(figures["tokens"] - figures["requests"] * 1000) < 1000


def test_the_stress_test_counts_its_fixed_phases():
    plan = workloads.plan("concurrency_stress", dict(CONSTRAINTS, peak_concurrency=32))
    figures = workloads.estimate("concurrency_stress", plan)
    assert figures["seconds"] == plan["warmup_s"] + plan["duration_s"] + plan["settle_s"]
    assert figures["warnings"] == [] and figures["concurrency"] == 32


def test_every_planned_test_has_an_estimate():
    for test in suite.RUNNABLE_TEST_IDS:  # the tests the validation page offers (a trace replay runs from the CLI)
        figures = workloads.estimate(test, workloads.plan(test, CONSTRAINTS))
        assert figures is not None and figures["seconds"] > 0 and figures["concurrency"] >= 1, test


def test_an_unknown_test_is_estimated_from_the_usual_names_or_not_at_all():
    assert workloads.estimate("new_test", {"duration_s": 60, "concurrency": 4})["seconds"] == 60
    assert workloads.estimate("new_test", {"rows": 3}) is None
    assert workloads.estimate("stability", {"duration_s": "x", "concurrency": None})["seconds"] == 0


def test_the_overload_test_counts_its_steps_up_and_the_recovery():
    plan = workloads.plan("overload", CONSTRAINTS)  # 1, 1.5, 2, 2.5, 3 x 200 for 30 s each, then 60 s at 200
    figures = workloads.estimate("overload", plan)
    assert figures["seconds"] == 5 * 30 + 60 and figures["concurrency"] == 600
    # each request 0.8 s + 200 x 50 ms = 10.8 s
    assert figures["requests"] == round((200 * 10 * 30 + 200 * 60) / 10.8)
    open_loop = workloads.estimate("overload", dict(plan, rate=10.0))
    assert open_loop["requests"] == round(10 * 10 * 30 + 10 * 60)
