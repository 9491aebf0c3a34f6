"""The model_switch and isolation tests against the in-process simulator: each passes under one
simulator setting and fails under another, as its verdicts say."""

from __future__ import annotations

import pytest

from benchmarks.harness import workloads as w
from benchmarks.harness.request_record import RequestRecord
from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.server import ServerThread

SWITCH_CONSTRAINTS = {"ttft_p95_ms": 300, "peak_concurrency": 8, "avg_input_tokens": 256, "avg_output_tokens": 16}
SWITCH_PARAMS = {"before_s": 1.5, "switched_s": 1.5, "after_s": 1.5, "restart_config": {"kv_bytes_per_token": 262144}}
# a small KV pool (H100 at 22 %: ~21K tokens) so usage shows, and doubles when the new version's KV does
SWITCH_SIM = dict(time_scale=2.0, restart_downtime_s=0.3, gpu_memory_utilization=0.22)
ISOLATION_CONSTRAINTS = {
    "ttft_p95_ms": 300,
    "request_rate": 30,
    "tenants": 2,
    "avg_input_tokens": 128,
    "avg_output_tokens": 16,
    "max_input_tokens": 16384,
    "peak_concurrency": 16,
}
ISOLATION_PARAMS = {"alone_s": 2.0, "flood_lead_s": 0.5, "flood_s": 2.0}
ISOLATION_SIM = dict(time_scale=2.0, max_num_batched_tokens=2048, max_model_len=32768)


def simulated(server, **kwargs) -> w.Target:
    values = dict(metrics_url=server.url + "/metrics", engine="simulator", allowed_hosts=["127.0.0.1"])
    return w.Target(server.url, "m", **(values | kwargs))


def run_on(config: SimConfig, test: str, params: dict, second: SimConfig | None = None):
    """Run `test` against the simulator on its own thread (its tokenizer and steps stay off the
    client's event loop, so the client keeps its send schedule)."""
    with ServerThread(config) as server:
        if second is None:
            return w.run_test_sync(test, simulated(server), params)
        with ServerThread(second) as other:
            return w.run_test_sync(test, simulated(server), params | {"switch_endpoint": other.url})


def by_name(result) -> dict:
    return {v["name"]: v for v in result.verdicts}


def judged(verdict: dict, status: str, budget: float) -> bool:
    """The verdict's status, or, on a box too busy for the client to keep A's send schedule, the
    inconclusive (client-bound) verdict whose whole interval sits on that status's side of the budget."""
    if verdict["status"] == status:
        return True
    low, high = verdict["interval"]
    return (
        verdict["status"] == "inconclusive"
        and "client-bound" in verdict["detail"]
        and (high < budget if status == "pass" else low > budget)
    )


def test_model_switch_passes_with_a_graceful_restart_and_reports_the_kv_spike_and_the_cache_hit_drop():
    params = w.plan("model_switch", SWITCH_CONSTRAINTS) | SWITCH_PARAMS
    result = run_on(SimConfig(**SWITCH_SIM), "model_switch", params)
    v = by_name(result)
    assert result.evidence == "SIMULATED" and result.test == "model_switch"
    for name in ("switch_errors", "budget_recovered_after_switch", "budget_recovered_after_rollback"):
        assert v[name]["status"] == "pass" and v[name]["n"] >= 20, v[name]
    switch = result.metadata["switch"]
    assert switch["mode"] == "restart" and [t["status"] for t in switch["triggers"]] == [202, 202]
    assert 0.25 <= switch["switch_recovery_s"] <= 5.0  # held through the 0.3 s downtime, then within budget
    assert switch["switch_stall_s"] >= 0.25 and switch["switch_downtime_s"] == 0  # held, never refused
    assert switch["kv_spike"] > 0  # twice the KV bytes per token in the same memory
    assert switch["hit_drop"] > 0  # the new engine starts with an empty cache
    observed = result.metadata["observed"]
    assert observed["line"].startswith("switch by restart: 0 errors") and "n=" in observed["line"]
    assert [p.label for p in result.points] == list(w.SWITCH_PHASES)


def test_model_switch_fails_when_the_restart_cuts_requests_and_refuses_new_ones():
    params = w.plan("model_switch", SWITCH_CONSTRAINTS) | SWITCH_PARAMS
    result = run_on(SimConfig(**SWITCH_SIM, restart_graceful=False), "model_switch", params)
    errors = by_name(result)["switch_errors"]
    assert errors["status"] == "fail" and errors["value"] > 0, errors
    assert result.metadata["switch"]["switch_downtime_s"] > 0.1
    # requests cut in flight count against the switch, not against the steady state before it
    assert by_name(result)["ttft_p95_within_budget[before]"]["status"] != "fail"


def test_model_switch_between_two_endpoints_fails_when_the_new_version_misses_the_budget():
    params = w.plan("model_switch", SWITCH_CONSTRAINTS) | SWITCH_PARAMS | {"max_recovery_s": 1.0}
    slow = SimConfig(**SWITCH_SIM, prefill_tokens_per_s=600)  # a prompt batch takes ~1.7 s: TTFT far over 300 ms
    result = run_on(SimConfig(**SWITCH_SIM), "model_switch", params, second=slow)
    v = by_name(result)
    assert result.metadata["switch"]["mode"] == "endpoint" and v["switch_errors"]["status"] == "pass"
    assert v["budget_recovered_after_switch"]["status"] == "fail", v["budget_recovered_after_switch"]
    assert v["budget_recovered_after_rollback"]["status"] == "pass"
    assert any(name.startswith("switched.") for name in result.timeseries)  # endpoint B's metrics


def test_model_switch_refuses_plans_it_cannot_run():
    real = w.Target("http://127.0.0.1:9", "m", engine="vllm")
    with pytest.raises(w.PlanError, match="params.switch_endpoint"):
        w.switch_mode(real, w.plan("model_switch"))
    with pytest.raises(w.PlanError, match="params.switch_mode"):
        w.switch_mode(real, w.plan("model_switch") | {"switch_mode": "restart"})
    assert w.switch_mode(real, w.plan("model_switch") | {"switch_endpoint": "http://127.0.0.1:10"}) == "endpoint"


def test_isolation_passes_when_priority_scheduling_protects_tenant_a():
    params = w.plan("isolation", ISOLATION_CONSTRAINTS) | ISOLATION_PARAMS | {"use_priority": True}
    result = run_on(SimConfig(**ISOLATION_SIM, scheduling_policy="priority"), "isolation", params)
    v = by_name(result)
    assert v["flood_held"]["status"] == "pass"
    budget = v["ttft_p95_within_budget[tenant_a_flood]"]
    assert judged(budget, "pass", 300) and budget["n"] >= 20, budget
    assert v["zero_errors[tenant_a_flood]"]["status"] == "pass"
    figures = result.metadata["isolation"]
    assert figures["scheduling"] == "priority" and figures["a_ttft_p95_slowdown"] > 1
    assert result.metadata["observed"]["line"].startswith("tenant A TTFT p95")
    assert [p.label for p in result.points] == ["tenant_a_alone", "tenant_a_flood", "tenant_b_flood"]


def test_isolation_fails_when_first_come_first_served_queues_tenant_a_behind_the_flood():
    params = w.plan("isolation", ISOLATION_CONSTRAINTS) | ISOLATION_PARAMS
    result = run_on(SimConfig(**ISOLATION_SIM), "isolation", params)
    budget = by_name(result)["ttft_p95_within_budget[tenant_a_flood]"]
    assert judged(budget, "fail", 300) and budget["n"] >= 20, budget
    assert result.metadata["isolation"]["scheduling"] == "fcfs"


def record(send: float, ttft_ms: float | None, ok: bool = True, tag: str = "switched", duration: float = 0.5):
    r = RequestRecord(tag=tag, send_time=send, end_time=send + duration)
    if ok:
        r.first_token_time = send + (ttft_ms or 0) / 1000.0
        r.output_tokens = 8
    else:
        r.error_class = "connect"
    return r


def test_recovery_downtime_and_stall_are_read_from_the_requests_as_defined():
    # switch at t=10: two refused, one over budget, then good ones
    records = [record(10.0, None, ok=False), record(10.2, None, ok=False), record(10.5, 900)]
    records += [record(11.0 + 0.1 * i, 50) for i in range(12)]
    params = {"ttft_p95_ms": 300}
    assert w.recovery_seconds(records, 10.0, params, window=10) == pytest.approx(1.0)  # the first of 10 good in a row
    assert w.recovery_seconds(records[:5], 10.0, params, window=10) is None  # never 10 good in a row
    assert w.downtime_seconds(records) == pytest.approx(0.5)  # first failure's send to the next success's send
    assert w.longest_stall_seconds(records, 10.0) == pytest.approx(1.0)  # the first success ended at 11.0
    # on a restart, a request sent before the switch and still running at it counts after the switch
    events = {"switch": 10.0, "rollback": 20.0}
    assert w.switch_phase_of(record(9.8, 40, tag="before"), events, 0.0, restart=True) == "switched"
    assert w.switch_phase_of(record(9.8, 40, tag="before"), events, 0.0, restart=False) == "before"
    assert w.switch_phase_of(record(9.0, 40, tag="before"), events, 0.0, restart=True) == "before"


def test_a_refused_restart_is_not_a_pass():
    params = w.plan("model_switch", SWITCH_CONSTRAINTS) | SWITCH_PARAMS | {"restart_config": {"profile": "nope"}}
    params |= {"before_s": 0.8, "switched_s": 0.8, "after_s": 0.8}
    result = run_on(SimConfig(**SWITCH_SIM), "model_switch", params)
    v = by_name(result)
    assert v["switch_errors"]["status"] == "not_exercised" and "refused" in v["switch_errors"]["detail"]
    assert any("refused the restart (400)" in note for note in result.notes)


def test_isolation_reads_each_parameter_once_with_the_bounds_the_form_checks():
    from benchmarks.validation.forms import ValidationParamsForm

    spec = w.SPECS["isolation"]
    plan = w.plan("isolation")
    read = spec.parse(plan)
    assert (read.tenant_a_rate, read.tenant_b_input_tokens, read.flood_lead_s) == (2.0, 32768, 5.0)
    assert isinstance(read.tenant_b_concurrency, int) and isinstance(read.alone_s, float)
    for key, refused, accepted in (
        ("tenant_a_rate", 0.001, 0.01),
        ("tenant_b_concurrency", 0, 1),
        ("flood_s", 0.05, 0.1),
    ):
        with pytest.raises(w.PlanError, match=f"params.{key}: must be at least"):
            spec.parse(plan | {key: refused})
        assert getattr(spec.parse(plan | {key: accepted}), key) == accepted
        form = ValidationParamsForm(
            {f"isolation-{k}": ("" if v is None else str(v)) for k, v in (plan | {key: refused}).items()},
            plan=plan,
            test="isolation",
        )
        assert not form.is_valid() and key in form.errors
    with pytest.raises(w.PlanError, match="params.tenant_a_input_tokens: must be a number"):
        spec.parse(plan | {"tenant_a_input_tokens": "many"})
