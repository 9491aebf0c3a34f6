"""Test 5, long-run stability: its row of the suite."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from benchmarks.suite.base import Figure, PointRow, RunFacts, ValidationTest


def _(text: str) -> str:  # named `_` so `makemessages` collects the texts; translated where shown
    return text


def indicators(run: RunFacts) -> dict[str, float]:
    """soak_drift_p99_ratio = late p99 TTFT / early p99 TTFT (1 + drift %), windows after the
    excluded warm-up; none when the drift had too few requests to judge."""
    drift = run.verdict("ttft_p99_drift")
    if drift and drift.get("value") is not None:
        return {"soak_drift_p99_ratio": max(0.0, 1.0 + float(drift["value"]) / 100.0)}
    return {}


WINDOWS = {"first_window": _("TTFT p99, first window"), "last_window": _("TTFT p99, last window")}


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
    figures=figures,
    cli={"concurrency": "concurrency", "duration": "duration_s", "trace": "length_trace"},
)
