"""Test 1, concurrency stress: its row of the suite (its run: `benchmarks.harness.workloads.stress`)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from benchmarks.harness.estimates import Load, number, steady_load
from benchmarks.suite.base import (
    CandidateFacts,
    PointFacts,
    PointRow,
    Reading,
    RunFacts,
    ScoringContext,
    ValidationTest,
)
from benchmarks.suite.params import (
    BUDGET_PARAMS,
    DISTRIBUTION_PARAMS,
    ParamSpec,
    budget_params,
    constraint_value,
    length_distributions,
)
from selection.domain.claims import Claim
from selection.domain.messages import marked as _
from selection.domain.scoring.inputs import cost_per_million_output_tokens, sustainable_concurrency

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


def readings(run: RunFacts, context: ScoringContext) -> list[Reading]:
    """Scoring's headline figures at the target load (the point nearest the constraints' peak
    concurrency, traffic groups aside: a group's point is a part of the load, not a load of its own):
    TTFT and TPOT p95 with the intervals their budget verdicts measured (uploads have none), the
    error rate, the concurrency held, the goodput per GPU and its cost; and the sweep's sustainable
    concurrency per GPU."""
    points = [p for p in run.load_points if not (p.extra or {}).get("traffic_group")]
    found = []
    point = target_point(points, context.constraints.get("peak_concurrency"))
    if point is not None:
        found += [
            Reading(
                "ttft_p95_ms", point.ttft_ms.get("p95"), (run.verdict("ttft_p95_within_budget") or {}).get("interval")
            ),
            Reading(
                "tpot_p95_ms", point.tpot_ms.get("p95"), (run.verdict("tpot_p95_within_budget") or {}).get("interval")
            ),
            Reading("error_rate", point.error_rate),
            Reading("achieved_concurrency", point.achieved_concurrency or point.concurrency),
        ]
        goodput_tokens = point.output_token_throughput
        if goodput_tokens is not None and point.slo_attainment is not None:
            goodput_tokens *= point.slo_attainment
        if goodput_tokens:
            found.append(Reading("output_tokens_per_s_per_gpu", goodput_tokens / context.gpus))
            cost = context.constraints.get("cost_per_gpu_hour")
            if cost is not None:
                cost_per_mtok = cost_per_million_output_tokens(goodput_tokens, context.gpus, float(cost))
                found.append(Reading("cost_per_mtok", cost_per_mtok))
    found.append(sweep_sustainable(points, context))
    return found


def target_point(points: list[PointFacts], target: float | None) -> PointFacts | None:
    """The point nearest the target concurrency (the higher of two as near), else the last one."""
    with_concurrency = [p for p in points if p.concurrency is not None]
    if target and with_concurrency:
        return min(with_concurrency, key=lambda p: (abs(p.concurrency - target), -p.concurrency))
    return points[-1] if points else None


def sweep_sustainable(points: list[PointFacts], context: ScoringContext) -> Reading:
    """The sweep's sustainable concurrency per GPU (its highest point within every budget; none without
    both budgets); with a client-bound client's lateness, its interval runs up to the value with that
    lateness taken off the client-bound points' latencies. Judged on the client's timings: without a
    measured lateness, a client-bound sweep's is held out."""
    constraints, gpus = context.constraints, context.gpus
    if not (constraints.get("ttft_p95_ms") and constraints.get("tpot_p95_ms") and points):
        return Reading("sustainable_concurrency_per_gpu", None)

    def highest(slack: float) -> float | None:
        return sustainable_concurrency(
            [
                {
                    "concurrency": p.achieved_concurrency or p.concurrency,
                    "ttft_p95_ms": _less(p.ttft_ms.get("p95"), slack if p.client_bound else 0.0),
                    "tpot_p95_ms": _less(p.tpot_ms.get("p95"), slack if p.client_bound else 0.0),
                    "error_rate": p.error_rate,
                }
                for p in points
                if (p.achieved_concurrency or p.concurrency) is not None
            ],
            constraints["ttft_p95_ms"],
            constraints["tpot_p95_ms"],
        )

    sustainable, late = highest(0.0), None
    slack_ms = context.client_slack_ms
    if sustainable is not None and slack_ms is not None and any(p.client_bound for p in points):
        late = (sustainable / gpus, (highest(slack_ms) or sustainable) / gpus)
    value = None if sustainable is None else sustainable / gpus
    return Reading("sustainable_concurrency_per_gpu", value, late=late, timing=True)


def _less(value: Any, slack: float) -> float | None:
    return None if value is None else max(0.0, float(value) - slack)


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
    readings=readings,
    thresholds=thresholds,
    params=PARAMS,
    plan=plan_concurrency_stress,
    estimate=estimate_concurrency_stress,
)
