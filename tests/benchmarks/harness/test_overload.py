"""The overload test (issue 15, section 4): both outcomes on the simulator, and its judging rules.

The simulator runs in a thread of this process, so on a busy box the client may be flagged
client-bound: latency verdicts then say "inconclusive" instead of pass. What the engine did past
its sustainable load (rejection, queueing, OOM, crash, collapse) does not depend on that, and is
asserted exactly.
"""

import json

import pytest

from benchmarks.harness import overload as o
from benchmarks.harness import workloads as w
from benchmarks.harness.request_record import RequestRecord
from benchmarks.simulator.config import SimConfig, SimConfigError
from benchmarks.simulator.server import ServerThread
from benchmarks.verdicts import FAIL, INCONCLUSIVE, INSUFFICIENT_DATA, NOT_EXERCISED, PASS

CONSTRAINTS = {"peak_concurrency": 8, "avg_input_tokens": 64, "avg_output_tokens": 16, "ttft_p95_ms": 100}
SHORT = {"step_factors": [1, 2, 3], "step_duration_s": 1.2, "recovery_s": 1.5, "recovery_bound_s": 2.0}


def run_on_simulator(config: SimConfig, constraints=CONSTRAINTS, **overrides):
    params = w.plan("overload", constraints) | SHORT | overrides
    params["input_distribution"] = params["output_distribution"] = None  # fixed lengths: a sharp pool edge
    with ServerThread(config) as server:
        target = w.Target(
            server.url,
            config.served_model_name,
            engine="simulator",
            metrics_url=server.url + "/metrics",
            allowed_hosts=["127.0.0.1"],
        )
        return w.run_test_sync("overload", target, params)


def verdicts(result):
    return {v["name"]: v for v in result.verdicts}


def test_plan_steps_up_to_three_times_the_target_and_takes_the_constraints_rate():
    plan = w.plan("overload", CONSTRAINTS)
    assert plan["target_concurrency"] == 8 and plan["rate"] is None and max(plan["step_factors"]) == 3.0
    assert plan["ttft_p95_ms"] == 100 and plan["down_factors"][-1] == 1.0
    assert w.plan("overload", CONSTRAINTS | {"request_rate": 12.5})["rate"] == 12.5
    json.dumps(plan)
    with pytest.raises(w.PlanError, match="params.step_factors"):
        w.run_test_sync("overload", w.Target("http://127.0.0.1:9", "m"), plan | {"step_factors": []})
    with pytest.raises(w.PlanError, match="params.rate"):
        w.run_test_sync("overload", w.Target("http://127.0.0.1:9", "m"), plan | {"rate": -1})


def test_admission_control_rejects_past_the_limit_passes_and_recovers():
    result = run_on_simulator(SimConfig(max_num_seqs=8, reject_policy="429", max_waiting=0, max_model_len=8192))
    v = verdicts(result)
    assert result.test == "overload" and result.evidence == "SIMULATED"
    graceful = v["overload_handled_gracefully"]
    assert graceful["status"] == PASS and graceful["value"] == o.REJECTION and graceful["n"] > 0, graceful
    assert v["sustainable_load_meets_target"]["status"] in (PASS, INCONCLUSIVE)
    assert v["recovered_within_bound"]["status"] == PASS, v["recovered_within_bound"]
    ups = [p for p in result.points if p.extra["direction"] == "up"]
    assert ups[-1].extra["failures_by_kind"]["rejected"] > 0  # it stopped climbing at the errors
    assert result.points[-1].extra["recovery_step"] and result.points[-1].extra["direction"] == "down"
    for point in result.points:  # every step states its budget judgement with n (and interval)
        assert point.extra["budget"] and point.extra["budget"][0]["n"] is not None
    observed = result.metadata["observed"]
    assert "rejection" in observed["line"] and observed["behaviour"] == o.REJECTION
    assert result.metadata["derived"]["overload_handling"] == 1.0


def test_no_admission_control_runs_out_of_memory_and_fails():
    result = run_on_simulator(SimConfig(num_blocks=60, oom_without_admission="fail", max_model_len=512))
    graceful = verdicts(result)["overload_handled_gracefully"]
    assert graceful["status"] == FAIL and graceful["value"] == o.OOM, graceful
    assert result.metadata["derived"]["overload_handling"] == 0.0


def test_an_engine_that_dies_out_of_memory_fails_and_does_not_recover():
    result = run_on_simulator(
        SimConfig(num_blocks=60, oom_without_admission="crash", max_model_len=512), step_factors=[1, 2]
    )
    v = verdicts(result)
    assert v["overload_handled_gracefully"]["value"] == o.CRASH and v["overload_handled_gracefully"]["status"] == FAIL
    assert v["recovered_within_bound"]["status"] == FAIL


def test_a_closed_loop_queue_is_bounded_queueing():
    """Twice the slots in flight: half wait one request's length. Queueing is told from collapse by a
    TTFT p95 within 5x the reference; at full speed a request lasts about 110 ms, so the event-loop lag
    of a loaded 2-core box (760 to 1,850 ms p95 at the second step) read as collapse in 3 runs of 3.
    A quarter of real time stretches the queue wait to about 450 ms against a 400 ms reference: over the
    budget, and far below the 2 s that would be collapse."""
    config = SimConfig(max_num_seqs=8, max_model_len=8192, time_scale=0.25)
    result = run_on_simulator(config, CONSTRAINTS | {"ttft_p95_ms": 400}, step_factors=[1, 2], step_duration_s=2.0)
    graceful = verdicts(result)["overload_handled_gracefully"]
    assert graceful["value"] == o.QUEUEING and graceful["status"] == PASS, graceful
    assert result.points[1].extra["waiting_max"] > 0  # the engine's queue held the excess


def test_open_loop_rate_steps_into_an_unbounded_queue_collapse():
    config = SimConfig(max_num_seqs=8, max_model_len=8192)  # queues without limit
    result = run_on_simulator(config, CONSTRAINTS | {"request_rate": 60.0}, step_factors=[1, 3])
    assert result.metadata["overload"]["mode"] == "open"
    assert [p.request_rate for p in result.points[:2]] == [60.0, 180.0]
    graceful = verdicts(result)["overload_handled_gracefully"]
    assert graceful["status"] == FAIL and graceful["value"] == o.COLLAPSE, graceful


def step(level, status, direction="up", **kw):
    return o.Step(level=level, direction=direction, status=status, requests=50, **kw)


def test_sustainable_is_the_highest_step_within_budget_from_the_bottom():
    steps = [step(8, PASS), step(16, PASS), step(24, FAIL), step(32, PASS), step(8, PASS, "down")]
    assert o.sustainable_level(steps) == 16
    assert o.sustainable_level([step(8, FAIL), step(16, PASS)]) is None


def test_classify_orders_crash_oom_collapse_rejection_queueing():
    base = [step(8, PASS)]
    assert o.classify(base + [step(16, PASS)], 100)[0] is None  # never past the sustainable load
    assert o.classify(base + [step(16, FAIL, failures={"rejected": 5})], 100)[0] == o.REJECTION
    assert o.classify(base + [step(16, FAIL, ttft_p95_ms=300, waiting_max=8)], 100)[0] == o.QUEUEING
    assert o.classify(base + [step(16, FAIL, ttft_p95_ms=900)], 100)[0] == o.COLLAPSE
    assert o.classify(base + [step(16, FAIL, completion_ratio=0.5)], 100)[0] == o.COLLAPSE
    assert o.classify(base + [step(16, FAIL, failures={"oom": 1, "rejected": 9})], 100)[0] == o.OOM
    assert o.classify(base + [step(16, FAIL, failures={"oom": 1}, stopped_early="gone")], 100)[0] == o.CRASH


def record(status=None, error_class=None, error="", ttft=None, send=0.0):
    r = RequestRecord()
    r.http_status, r.error_class, r.error = status, error_class, error
    r.send_time = send
    if ttft is not None:
        r.first_token_time = send + ttft / 1000.0
        r.end_time = send + ttft / 1000.0 + 0.01
        r.finish_reason = "length"
    return r


def test_failure_kinds_tell_rejection_from_oom_and_crash():
    records = [
        record(429, "http", "server busy"),
        record(503, "http", "engine crashed (simulated fault)"),
        record(503, "http", "Service Unavailable"),
        record(500, "oom", "CUDA out of memory"),
        record(None, "connect", "refused"),
    ]
    assert o.failure_kinds(records) == {"rejected": 2, "oom": 1, "crash": 2, "other": 0}


def test_recovery_time_waits_for_latency_and_each_series():
    records = [record(ttft=500, send=10.0 + i * 0.1) for i in range(5)]
    records += [record(ttft=40, send=11.0 + i * 0.1) for i in range(10)]
    series = {"waiting": [[10.0, 20], [11.0, 5], [12.0, 0], [13.0, 0]]}
    found = o.recovery_time(10.0, records, 100.0, series, {"waiting": 0.0}, {}, until=14.0)
    assert found["parts_s"]["waiting"] == pytest.approx(2.0) and found["recovered_s"] == pytest.approx(2.0)
    assert found["parts_s"]["latency"] == pytest.approx(1.04, abs=0.01)
    never = o.recovery_time(10.0, records[:5], 100.0, {}, {}, {}, until=14.0)
    assert never["recovered_s"] is None and never["latency_median_ms"] == 500


def test_a_series_is_back_despite_single_arrival_blips_but_not_while_a_queue_stands():
    """At the target load a sample now and then catches a wave of arrivals before the scheduler
    admits it; a queue the overload left stands in consecutive samples."""
    blips = {"waiting": [[10.0, 12], [10.5, 6], [11.0, 0], [11.5, 7], [12.0, 0], [12.5, 0], [13.0, 1], [13.5, 0]]}
    found = o.recovery_time(10.0, [], None, blips, {"waiting": 0.0}, {}, until=14.0)
    assert found["parts_s"]["waiting"] == pytest.approx(1.0) and found["recovered_s"] == pytest.approx(1.0)
    last_blip = {"waiting": [[10.0, 12], [11.0, 0], [12.0, 0], [13.0, 7]]}  # one sample: not a queue
    assert o.recovery_time(10.0, [], None, last_blip, {"waiting": 0.0}, {}, until=14.0)["recovered_s"] == 1.0
    standing = {"waiting": [[10.0, 12], [11.0, 0], [12.0, 0], [13.0, 5], [13.5, 4]]}
    found = o.recovery_time(10.0, [], None, standing, {"waiting": 0.0}, {}, until=14.0)
    assert found["parts_s"]["waiting"] is None and found["recovered_s"] is None
    drained_late = {"waiting": [[10.0, 12], [11.0, 9], [12.0, 3], [13.0, 0], [13.5, 0]]}
    found = o.recovery_time(10.0, [], None, drained_late, {"waiting": 0.0}, {}, until=14.0)
    assert found["parts_s"]["waiting"] == pytest.approx(3.0)


def test_latency_is_back_within_the_tolerance_above_the_baseline_p95_and_not_past_it():
    limit = 100.0 * (1 + o.RECOVERY_LATENCY_TOLERANCE)
    near = [record(ttft=limit - 1, send=11.0 + i * 0.1) for i in range(5)]  # host noise, not a queue
    assert o.recovery_time(10.0, near, 100.0, {}, {}, {}, until=14.0)["parts_s"]["latency"] is not None
    above = [record(ttft=limit + 1, send=11.0 + i * 0.1) for i in range(5)]
    found = o.recovery_time(10.0, above, 100.0, {}, {}, {}, until=14.0)
    assert found["recovered_s"] is None and found["latency_median_ms"] == pytest.approx(limit + 1)


def not_recovered(parts):
    return {"recovered_s": None, "parts_s": parts, "latency_median_ms": 140.0, "baseline": {"ttft_p95_ms": 100.0}}


def test_recovery_judgement_fails_what_never_came_back_and_says_by_how_much():
    status, detail = o.judge_recovery(o.REJECTION, not_recovered({"latency": None, "waiting": 0.5}), 40, 2.0)
    assert status == FAIL and "(latency)" in str(detail)
    assert "140.0 ms vs the first step's p95 100.0 ms" in str(detail)
    back = {"recovered_s": 0.4, "parts_s": {"latency": 0.4, "waiting": 0.1}, "latency_median_ms": 90.0}
    status, detail = o.judge_recovery(o.REJECTION, back, 40, 2.0)
    assert status == PASS and "0.4 s after the overload ended (latency 0.4 s, waiting 0.1 s)" in str(detail)
    assert o.judge_recovery(o.REJECTION, back, 40, 0.2)[0] == FAIL  # back, but past the bound
    assert o.judge_recovery(o.REJECTION, back, o.RECOVERY_WINDOW - 1, 2.0)[0] == INSUFFICIENT_DATA
    assert o.judge_recovery(None, back, 40, 2.0)[0] == NOT_EXERCISED
    assert o.judge_recovery(o.CRASH, back, 40, 2.0)[0] == FAIL


def test_a_client_bound_run_leaves_latency_recovery_inconclusive_but_not_the_engines_own_series():
    reasons = ["client at 97% of a core"]
    latency_only = not_recovered({"latency": None, "waiting": 0.5})
    status, detail = o.judge_recovery(o.REJECTION, latency_only, 40, 2.0, reasons)
    assert status == INCONCLUSIVE and "client at 97% of a core" in str(detail)
    queue_left = not_recovered({"latency": None, "waiting": None})  # the engine's queue never drained
    assert o.judge_recovery(o.REJECTION, queue_left, 40, 2.0, reasons)[0] == FAIL


def test_the_simulator_knob_is_validated():
    with pytest.raises(SimConfigError, match="oom_without_admission"):
        SimConfig(oom_without_admission="explode")
