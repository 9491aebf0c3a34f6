"""Test 6, overload and rejection: its row of the suite."""

from __future__ import annotations

from benchmarks.suite.base import RunFacts, ValidationTest


def _(text: str) -> str:  # named `_` so `makemessages` collects the texts; translated where shown
    return text


def indicators(run: RunFacts) -> dict[str, float]:
    """overload_handling = the level of what the engine did past its sustainable load (rejection
    1.0, bounded queueing 0.7, latency collapse 0.3, OOM or crash 0.0); missing when the load never
    passed it (nothing was observed)."""
    figures = run.metadata.get("overload") or {}
    if figures.get("handling_level") is not None:
        return {"overload_handling": float(figures["handling_level"])}
    return {}


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
    cli={"concurrency": "target_concurrency", "rate": "rate", "duration": "step_duration_s"},
)
