"""Test 1, concurrency stress: its row of the suite."""

from __future__ import annotations

from benchmarks.suite.base import RunFacts, ValidationTest
from selection.domain.claims import Claim


def _(text: str) -> str:  # named `_` so `makemessages` collects the texts; translated where shown
    return text


def indicators(run: RunFacts) -> dict[str, float]:
    """kv_headroom_at_target = 1 - the peak KV usage ratio at the target load (its first point)."""
    first = next(iter(run.points.values()), None)
    peak = (first.extra or {}).get("kv_usage_ratio_max") if first is not None else None
    return {} if peak is None else {"kv_headroom_at_target": max(0.0, 1.0 - float(peak))}


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
)
