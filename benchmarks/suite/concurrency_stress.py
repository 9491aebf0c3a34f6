"""Test 1, concurrency stress: its row of the suite (its run: `benchmarks.harness.workloads.stress`)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from benchmarks.harness.estimates import Load, number, steady_load
from benchmarks.suite.base import CandidateFacts, PointRow, RunFacts, ValidationTest
from benchmarks.suite.params import (
    BUDGET_PARAMS,
    DISTRIBUTION_PARAMS,
    ParamSpec,
    budget_params,
    constraint_value,
    length_distributions,
)
from selection.domain.claims import Claim


def _(text: str) -> str:  # named `_` so `makemessages` collects the texts; translated where shown
    return text


PARAMS = (
    ParamSpec("concurrency", 64, _("Concurrent requests"), "requests"),
    ParamSpec("duration_s", 300.0, _("Duration (s)"), "s"),
    ParamSpec("warmup_s", 10.0, _("Warm-up (s)"), "s"),
    ParamSpec("ramp_up_s", 0.0, _("Ramp-up (s)"), "s"),
    ParamSpec("input_tokens", 512, _("Input tokens per request"), "tokens"),
    ParamSpec("output_tokens", 128, _("Output tokens per request"), "tokens"),
    *DISTRIBUTION_PARAMS,
    ParamSpec("abort_fraction", 0.05, _("Share of requests aborted mid-stream (0-1)"), "share"),
    ParamSpec("settle_s", 30.0, _("Settling time after the load (s)"), "s"),
    ParamSpec(
        "rate",
        None,
        _("Request rate, open loop (requests/s; empty: closed loop)"),
        "requests/s",
        positive=True,
        optional=True,
    ),
    ParamSpec("long_input_tokens", None, _("Long traffic group from (input tokens)"), "tokens"),
    *BUDGET_PARAMS,
)


def estimate_concurrency_stress(params: Mapping[str, Any]) -> Load:
    """Warm-up, ramp-up and the measured load at the target concurrency, then the settling time."""
    loaded = number(params, "warmup_s") + number(params, "ramp_up_s") + number(params, "duration_s")
    load = steady_load(params, loaded)
    return load._replace(seconds=loaded + number(params, "settle_s"))


def plan_concurrency_stress(
    constraints: dict[str, Any] | None = None, facts: CandidateFacts | None = None
) -> dict[str, Any]:
    return {
        "concurrency": int(constraint_value(constraints, "peak_concurrency", 64)),
        "duration_s": 300.0,
        "warmup_s": 10.0,
        "ramp_up_s": 0.0,
        "input_tokens": int(constraint_value(constraints, "avg_input_tokens", 512)),
        "output_tokens": int(constraint_value(constraints, "avg_output_tokens", 128)),
        **length_distributions(constraints),
        "abort_fraction": 0.05,  # requests closed mid-stream on purpose
        "settle_s": 30.0,  # after the load: time allowed for KV usage to return to baseline
        # open loop at the constraints' request rate (Poisson arrivals, requests/s); None: closed loop
        "rate": float(constraints["request_rate"]) if (constraints or {}).get("request_rate") else None,
        # requests with at least this many input tokens form the "long" traffic group (None: the
        # constraints' p95 input, else benchmarks.traces.stats.LONG_INPUT_TOKENS)
        "long_input_tokens": (constraints or {}).get("p95_input_tokens"),
        **budget_params(constraints),
    }


def indicators(run: RunFacts) -> dict[str, float]:
    """kv_headroom_at_target = 1 - the peak KV usage ratio at the target load (its first point)."""
    first = next(iter(run.points.values()), None)
    peak = (first.extra or {}).get("kv_usage_ratio_max") if first is not None else None
    return {} if peak is None else {"kv_headroom_at_target": max(0.0, 1.0 - float(peak))}


def thresholds(points: Sequence[PointRow], metadata: Mapping[str, Any], planned: Mapping[str, Any]) -> dict[str, Any]:
    """The record's validated load: the planned peak concurrency, and the output tokens per second one
    replica served at the target load (its load point, traffic groups aside)."""
    served = next(
        (
            p["output_token_throughput"]
            for p in points
            if not (p.get("extra") or {}).get("traffic_group") and p.get("output_token_throughput")
        ),
        None,
    )
    return {
        "validated_concurrency": planned.get("peak_concurrency"),
        "validated_output_tokens_per_s": None if served is None else float(served),
    }


# the record's behaviour claims this test's verdicts support (`selection.domain.claims` judges them)
CONCURRENCY = Claim(
    "concurrency",
    "concurrency_stress",
    # "within the latency budget" is the TTFT and the TPOT budget: each part must pass (issue 33's audit)
    ("concurrency_held", "ttft_p95_within_budget", "tpot_p95_within_budget", "zero_errors"),
    _("up to %(n)s concurrent requests (held within the latency budget: %(evidence)s)"),
    _("up to %(n)s concurrent requests: not validated (%(evidence)s)"),
)


TEST = ValidationTest(
    "concurrency_stress",
    1,
    _("Concurrency stress"),
    _(
        "Hold the target concurrency for the duration: KV usage, queueing, preemptions and latency "
        "percentiles over time. Passes when TTFT p95 is within the budget, no request fails, and KV usage "
        "returns to its baseline after the deliberate aborts."
    ),
    _("latency and errors at the target concurrency, KV usage over time, release after aborts"),
    ("latency_vs_load", "kv_usage"),
    feeds=("memory", "scheduling", "cost", "observability"),
    demo={
        "concurrency": 32,
        "duration_s": 8.0,
        "warmup_s": 1.0,
        "settle_s": 2.0,
        "abort_fraction": 0.05,
        "rate": None,  # closed loop at the target concurrency (the constraints' 8 req/s is far below it)
    },
    indicators=indicators,
    cli={"concurrency": "concurrency", "rate": "rate", "duration": "duration_s", "trace": "length_trace"},
    claims=(CONCURRENCY,),
    thresholds=thresholds,
    params=PARAMS,
    plan=plan_concurrency_stress,
    estimate=estimate_concurrency_stress,
)
