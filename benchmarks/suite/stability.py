"""Test 5, long-run stability: its row of the suite (its run: `benchmarks.harness.workloads.stability`)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from benchmarks.harness.estimates import Load, number, steady_load
from benchmarks.suite.base import CandidateFacts, Figure, PointRow, RunFacts, ValidationTest
from benchmarks.suite.params import (
    BUDGET_PARAMS,
    DISTRIBUTION_PARAMS,
    ParamSpec,
    budget_params,
    constraint_value,
    length_distributions,
)
from selection.domain.messages import Message
from selection.domain.messages import marked as _

# The soak's length. The articles soak "for hours" (medium concurrency; does fragmentation keep rising,
# do latencies after hours drift from the start?): a soak shorter than ARTICLES_SOAK_S says so. The plan
# takes its length from the scenario (one table): multi-turn sessions (C) keep caches across turns and
# build fragmentation slowly, so they soak longest.
ARTICLES_SOAK_S = 2 * 3600.0  # "hours": the least that reads as more than one
SOAK_BY_SCENARIO = {"A": 2 * 3600.0, "B": 2 * 3600.0, "C": 4 * 3600.0, "D": 2 * 3600.0}
SOAK_S = ARTICLES_SOAK_S  # no scenario (and single-turn traffic)
SOAK_MULTI_TURN_S = SOAK_BY_SCENARIO["C"]  # multi-turn sessions, whatever the scenario
DEFAULT_SESSION_TURNS = 4  # turns per soak session when the constraints are multi-turn without an average


def soak_seconds(constraints: dict[str, Any] | None) -> float:
    """The plan's soak length: the scenario's (`SOAK_BY_SCENARIO`), at least the multi-turn length
    when sessions persist across turns."""
    scenario = (constraints or {}).get("scenario")
    base = SOAK_BY_SCENARIO.get(str(scenario), SOAK_S)
    return max(base, SOAK_MULTI_TURN_S) if is_multi_turn(constraints) else base


def session_turns(constraints: dict[str, Any] | None) -> int:
    """Turns per soak session: 1 (single requests) unless the traffic is multi-turn, then the
    constraints' average turns (rounded, at least 2), else DEFAULT_SESSION_TURNS."""
    if not is_multi_turn(constraints):
        return 1
    average = float((constraints or {}).get("average_turns") or 0)
    return max(2, int(round(average))) if average >= 2 else DEFAULT_SESSION_TURNS


def is_multi_turn(constraints: dict[str, Any] | None) -> bool:
    c = constraints or {}
    return bool(c.get("multi_turn")) or float(c.get("average_turns") or 0) >= 2 or c.get("scenario") == "C"


PARAMS = (
    ParamSpec("concurrency", 16, _("Concurrent requests"), "requests"),
    ParamSpec("duration_s", 7200.0, _("Duration (s)"), "s"),
    ParamSpec("recommended_duration_s", 7200.0, _("Recommended soak duration (s)"), "s"),
    ParamSpec("session_turns", 1, _("Turns per session (1: single requests)"), "count"),
    ParamSpec("warmup_s", 60.0, _("Warm-up (s)"), "s"),
    ParamSpec("window_s", 300.0, _("Drift window (s)"), "s"),
    ParamSpec("input_tokens", 512, _("Input tokens per request"), "tokens"),
    ParamSpec("output_tokens", 128, _("Output tokens per request"), "tokens"),
    *DISTRIBUTION_PARAMS,
    ParamSpec("max_drift_pct", 25.0, _("Largest allowed drift (%)"), "%"),
    ParamSpec("max_kv_slope_per_hour", 0.05, _("Largest allowed KV usage rise per hour (0-1)"), "share"),
    ParamSpec("max_gpu_memory_slope_mib_per_hour", 512.0, _("Largest allowed GPU memory rise per hour (MiB)"), "MiB"),
    ParamSpec("max_preemption_rate_ratio", 2.0, _("Largest allowed preemption-rate growth (x)"), "x"),
    ParamSpec("max_fragmentation_rise", 0.05, _("Largest allowed fragmentation rise (0-1)"), "share"),
    ParamSpec("max_queue_growth", None, _("Largest allowed rise of the waiting queue (requests)"), "requests"),
    ParamSpec("metrics_interval_s", 1.0, _("Engine metrics interval (s)"), "s"),
    # not planned: `make demo` sets it so the short soak is named a demonstration wherever it is shown
    ParamSpec("soak_label", None, _("Soak label (“demo”: a demonstration's short soak)"), ""),
    *BUDGET_PARAMS,
)


def estimate_stability(params: Mapping[str, Any]) -> Load:
    """The warm-up (run, then excluded) and the soak at a steady concurrency."""
    return steady_load(params, number(params, "warmup_s") + number(params, "duration_s"))


def plan_stability(constraints: dict[str, Any] | None = None, facts: CandidateFacts | None = None) -> dict[str, Any]:
    """A soak as long as the scenario asks (`SOAK_BY_SCENARIO`: hours, 4 h for multi-turn
    sessions) at steady load, warm-up excluded, request lengths drawn from the constraints'
    distribution with mixed outputs, so fragmentation can appear; multi-turn traffic soaks as sessions
    of its average turns, each turn sending the session's history."""
    length = soak_seconds(constraints)
    return {
        "concurrency": max(int(constraint_value(constraints, "peak_concurrency", 32)) // 2, 1),
        "duration_s": length,
        "recommended_duration_s": length,
        "session_turns": session_turns(constraints),
        "warmup_s": 60.0,  # excluded: caches fill and the first prefills pile up
        "window_s": 300.0,
        "input_tokens": int(constraint_value(constraints, "avg_input_tokens", 512)),
        "output_tokens": int(constraint_value(constraints, "avg_output_tokens", 128)),
        **length_distributions(constraints),
        "max_drift_pct": 25.0,
        "max_kv_slope_per_hour": 0.05,  # KV usage (share of the pool) gained per hour at steady load
        "max_gpu_memory_slope_mib_per_hour": 512.0,
        "max_preemption_rate_ratio": 2.0,  # late preemptions per second / early, beyond one extra per window
        "max_fragmentation_rise": 0.05,  # fragmentation ratio late minus early (engines that export it)
        "max_queue_growth": None,  # requests waiting, last window minus first (None: 10 % of the concurrency)
        "metrics_interval_s": 1.0,
        **budget_params(constraints),
    }


def indicators(run: RunFacts) -> dict[str, float]:
    """soak_drift_p99_ratio = late p99 TTFT / early p99 TTFT (1 + drift %), windows after the
    excluded warm-up; none when the drift had too few requests to judge."""
    drift = run.verdict("ttft_p99_drift")
    if drift and drift.get("value") is not None:
        return {"soak_drift_p99_ratio": max(0.0, 1.0 + float(drift["value"]) / 100.0)}
    return {}


WINDOWS = {"first_window": _("TTFT p99, first window"), "last_window": _("TTFT p99, last window")}


SOAK_SHORT = _(
    "This soak ran %(ran)s, shorter than the %(planned)s h the plan asks for this traffic; the articles soak for "
    "hours. Slow leaks and fragmentation may not show in it."
)


def record_note(metadata: Mapping[str, Any]) -> Message | None:
    """The record's sentence on a soak shorter than planned (or than the articles' hours); None otherwise."""
    length = (metadata.get("observed") or {}).get("soak_length")
    if not length or not length.get("shorter_than_planned"):
        return None
    duration = float(length["duration_s"])
    ran = (
        Message(_("%(n)s s"), {"n": f"{duration:g}"})
        if duration < 3600
        else Message(_("%(n)s h"), {"n": f"{duration / 3600:.2g}"})
    )
    return Message(SOAK_SHORT, {"ran": ran, "planned": f"{float(length['planned_s']) / 3600:g}"})


def drift_as_ratio(drift_pct: float) -> float:
    """A drift verdict's value (late vs early, %) as the soak_drift ratio scoring reads (late / early)."""
    return max(0.0, 1.0 + drift_pct / 100.0)


def figures(points: Sequence[PointRow], metadata: Mapping[str, Any]) -> list[Figure] | None:
    """The soak's first and last window, TTFT p99 (the drift it judged); None when a window is
    missing (an upload without them shows its heaviest load level)."""
    by_label = {str(p.get("label") or ""): p for p in points}
    if not all(window in by_label for window in WINDOWS):
        return None
    return [
        Figure(
            name, (by_label[window].get("ttft_ms") or {}).get("p99"), "ms", by_label[window].get("requests_completed")
        )
        for window, name in WINDOWS.items()
    ]


TEST = ValidationTest(
    "stability",
    5,
    _("Long-run stability"),
    _(
        "Medium concurrency for a long time: drift of TTFT/TPOT p50 and p99 between the first and last "
        "windows, the KV usage trend, preemptions and errors."
    ),
    _("latency drift between the first and the last window, the KV usage trend"),
    ("soak_drift", "kv_usage"),
    feeds=("memory",),
    # a short soak, labelled as such in the run's observed line, notes and the record (the plan asks for hours)
    demo={
        "concurrency": 16,
        "duration_s": 16.0,
        "window_s": 4.0,
        "warmup_s": 2.0,
        "metrics_interval_s": 0.5,
        "soak_label": "demo",
    },
    indicators=indicators,
    figure_intervals={"soak_drift_p99_ratio": ("ttft_p99_drift", drift_as_ratio)},
    figures=figures,
    cli={"concurrency": "concurrency", "duration": "duration_s", "trace": "length_trace"},
    params=PARAMS,
    plan=plan_stability,
    estimate=estimate_stability,
    record_note=record_note,
)
