"""Test 6, overload and rejection: its row of the suite (its run: `benchmarks.harness.workloads.overload_test`)."""

from __future__ import annotations

from typing import Any, Mapping

from benchmarks.harness.estimates import Load, number, numbers, request_seconds, request_tokens
from benchmarks.suite.base import CandidateFacts, Reading, RunFacts, ScoringContext, ValidationTest
from benchmarks.suite.params import (
    BUDGET_PARAMS,
    DISTRIBUTION_PARAMS,
    MAX_ERROR_RATE,
    ParamSpec,
    budget_params,
    constraint_value,
    length_distributions,
)
from selection.domain.messages import marked as _
from selection.domain.messages import pgettext

# What an engine does past the load it sustains (the verdict's stored figure is the English id), and
# each by name as a reader sees it: the run's sentences and the record's result table.
REJECTION, QUEUEING, COLLAPSE, OOM, CRASH = "rejection", "queueing", "collapse", "oom", "crash"
BEHAVIOUR_NAMES = {
    REJECTION: pgettext("overload behaviour", "rejection"),
    QUEUEING: pgettext("overload behaviour", "queueing"),
    COLLAPSE: pgettext("overload behaviour", "collapse"),
    OOM: pgettext("overload behaviour", "oom"),
    CRASH: pgettext("overload behaviour", "crash"),
}

PARAMS = (
    ParamSpec("target_concurrency", 64, _("Target concurrent requests (first step)"), "requests"),
    ParamSpec(
        "rate",
        None,
        _("Request rate, open loop (requests/s; empty: closed loop)"),
        "requests/s",
        positive=True,
        optional=True,
    ),
    ParamSpec("step_factors", [1.0, 1.5, 2.0, 2.5, 3.0], _("Steps up, as multiples of the target"), "x"),
    ParamSpec("down_factors", [1.0], _("Steps back down, as multiples of the target"), "x"),
    ParamSpec("step_duration_s", 30.0, _("Duration of each step (s)"), "s"),
    ParamSpec("recovery_s", 60.0, _("Duration of the recovery step (s)"), "s"),
    ParamSpec("recovery_bound_s", 30.0, _("Longest allowed time to recover (s)"), "s"),
    ParamSpec("input_tokens", 512, _("Input tokens per request"), "tokens"),
    ParamSpec("output_tokens", 128, _("Output tokens per request"), "tokens"),
    *DISTRIBUTION_PARAMS,
    ParamSpec("max_error_rate", 0.01, _("Largest error share of a sustainable step (0-1)"), "share"),
    *BUDGET_PARAMS,
)


def estimate_overload(params: Mapping[str, Any]) -> Load:
    """The steps up, the steps back down and the recovery step; open loop at `rate` requests/s
    (in flight ~ rate x request time, Little's law), else closed loop at the target x each step."""
    p = params
    factors, down = numbers(p, "step_factors"), numbers(p, "down_factors")
    step, recovery = number(p, "step_duration_s"), number(p, "recovery_s")
    seconds = step * (len(factors) + max(len(down) - 1, 0)) + recovery
    per_request = request_seconds(p, number(p, "input_tokens"))
    if p.get("rate"):
        rate = float(p["rate"])
        requests = rate * (step * (sum(factors) + sum(down[:-1])) + recovery * (down or [1])[-1])
        concurrency = rate * max(factors, default=1.0) * per_request
    else:
        base = number(p, "target_concurrency", 1)
        concurrency = base * max(factors, default=1.0)
        loads = [base * f * step for f in factors] + [base * f * step for f in down[:-1]]
        loads.append(base * (down or [1.0])[-1] * recovery)
        requests = sum(load / per_request for load in loads) if per_request > 0 else 0.0
    return Load(seconds, concurrency, requests, requests * request_tokens(p))


def plan_overload(constraints: dict[str, Any] | None = None, facts: CandidateFacts | None = None) -> dict[str, Any]:
    """Steps from the target load up to 3x it, then back down to the target (the recovery step).
    With the constraints' request rate the steps are open-loop rates (Poisson), else concurrencies."""
    rate = (constraints or {}).get("request_rate")
    return {
        "target_concurrency": int(constraint_value(constraints, "peak_concurrency", 64)),
        "rate": float(rate) if rate else None,  # requests/s at the first step; None: closed loop
        "step_factors": [1.0, 1.5, 2.0, 2.5, 3.0],  # of the target, on the way up (stops at errors)
        "down_factors": [1.0],  # after the top, back down; the last one is the recovery step
        "step_duration_s": 30.0,
        "recovery_s": 60.0,  # how long the recovery step runs (the time to recover is measured in it)
        "recovery_bound_s": 30.0,  # recovered within this after the overload ends, or it fails
        "input_tokens": int(constraint_value(constraints, "avg_input_tokens", 512)),
        "output_tokens": int(constraint_value(constraints, "avg_output_tokens", 128)),
        **length_distributions(constraints),
        "max_error_rate": MAX_ERROR_RATE,
        **budget_params(constraints),
    }


def indicators(run: RunFacts) -> dict[str, float]:
    """overload_handling = the level of what the engine did past its sustainable load (rejection
    1.0, bounded queueing 0.7, latency collapse 0.3, OOM or crash 0.0); missing when the load never
    passed it (nothing was observed)."""
    figures = run.metadata.get("overload") or {}
    if figures.get("handling_level") is not None:
        return {"overload_handling": float(figures["handling_level"])}
    return {}


def sustainable_concurrency_of(run: RunFacts) -> float | None:
    """Its sustainable concurrency: the highest step within the budget with under 1 % errors (closed
    loop). An open-loop run's sustainable level is a rate: the concurrency the engine held at that step
    stands for it. None when no step qualified or it was client-bound."""
    figures = run.metadata.get("overload") or {}
    sustainable = figures.get("sustainable")
    if sustainable is None:  # an uploaded result may state it among its derived figures
        stated = (run.metadata.get("derived") or {}).get("sustainable_concurrency")
        return None if stated is None else float(stated)
    if figures.get("mode") != "open":
        return float(sustainable)
    for point in run.load_points:
        extra = point.extra or {}
        if extra.get("direction") == "up" and extra.get("level") == sustainable and not point.client_bound:
            return point.achieved_concurrency
    return None


def readings(run: RunFacts, context: ScoringContext) -> list[Reading]:
    """The sustainable concurrency per GPU, measured step by step against the budget on the client's
    timings: it wins over a one-level stress's (read after it, in the suite's order)."""
    sustainable = sustainable_concurrency_of(run)
    if sustainable is None:
        return []
    return [Reading("sustainable_concurrency_per_gpu", sustainable / context.gpus, timing=True)]


TEST = ValidationTest(
    "overload",
    6,
    _("Overload and rejection"),
    _(
        "Step the load from the target concurrency (or, open loop, the request rate) up to 3x or until errors, "
        "then back down: the sustainable load (the highest step within the latency budget with under 1 % errors), "
        "what the engine does past it (rejection with 429/503, bounded queueing, latency collapse, OOM or a crash) "
        "and the time to recover to the first step's latency and KV level. Passes when the target is sustainable, "
        "the overload is handled by rejection or bounded queueing, and it recovers within the bound."
    ),
    _("the sustainable load, the engine's behaviour past it, and the time to recover"),
    ("overload_steps", "latency_vs_load", "kv_usage"),
    feeds=("scheduling", "cost"),
    # the target (32) up to 3x in short steps, then back down: queueing or rejection shows past
    # the sustainable load; closed loop (the constraints' 8 req/s would not load the simulators)
    demo={
        "rate": None,
        "step_factors": [1.0, 2.0, 3.0],
        "step_duration_s": 4.0,
        "recovery_s": 8.0,
        "recovery_bound_s": 20.0,
    },
    indicators=indicators,
    readings=readings,
    cli={"concurrency": "target_concurrency", "rate": "rate", "duration": "step_duration_s"},
    params=PARAMS,
    plan=plan_overload,
    estimate=estimate_overload,
)
