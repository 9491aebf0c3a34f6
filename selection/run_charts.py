"""What each validation test's evidence looks like as chart data, read from one run.

Why here: the comparison page draws every candidate's latest run of a test on one chart, and the
decision record draws each run on its own; both read the same fields of the same points, so the
reading lives in one place. The chart module (`benchmarks.charts`) stays Django-free.
"""

from __future__ import annotations

import logging
from typing import Any

from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from benchmarks import charts, presentation
from benchmarks.models import BenchmarkRun

logger = logging.getLogger(__name__)


def kv_usage(run: BenchmarkRun) -> list | None:
    """The engine's KV-cache usage ratio over the run, [(t_s, ratio), ...]."""
    return (run.timeseries or {}).get("kv_usage_ratio") or None


def context_rungs(run: BenchmarkRun) -> list[tuple[Any, Any]]:
    """Long-context ladder: (input tokens requested, TTFT p50) of each rung run alone."""
    rungs = [((p.extra or {}).get("input_tokens_requested"), (p.ttft_ms or {}).get("p50"))
             for p in run.points.all() if "alone" in p.label]
    return [(tokens, ttft) for tokens, ttft in rungs if tokens]


def prefix_peaks(run: BenchmarkRun) -> dict[str, Any] | None:
    """Prefix reuse: peak KV tokens with prefix caching on and off (off falls back to the
    capacity model's every-request-allocates-its-own figure)."""
    points = {p.label: p for p in run.points.all()}
    on, off = points.get("prefix_on"), points.get("prefix_off")
    if on is None or (on.extra or {}).get("kv_tokens_peak") is None:
        return None
    off_value = (off.extra or {}).get("kv_tokens_peak") if off is not None else None
    if off_value is None:
        off_value = (on.extra or {}).get("own_allocation_tokens")
    return {"on": on.extra["kv_tokens_peak"], "off": off_value, "theoretical_on": None}


def soak_drift_points(run: BenchmarkRun) -> list[tuple[float, Any]] | None:
    """Long-run stability: TTFT p99 of the first and the last window, at 0 and the run's duration."""
    points = {p.label: p for p in run.points.all()}
    first, last = points.get("first_window"), points.get("last_window")
    if first is None or last is None:
        return None
    duration = float((run.params or {}).get("duration_s") or 1.0)
    return [(0.0, (first.ttft_ms or {}).get("p99")), (duration, (last.ttft_ms or {}).get("p99"))]


PREFIX_METRIC = gettext_noop("KV tokens at peak (off = every request allocates its own)")
PREFIX_TITLE = gettext_noop("Prefix caching off vs on")
SOAK_TITLE = gettext_noop("Latency drift during the soak")


def record_charts(run: BenchmarkRun, rows: list[dict[str, Any]], percentile: str) -> list[dict[str, str]]:
    """The charts of one run in the decision record: its test's own view, then KV usage over time.

    A chart the data cannot make is logged and left out: a record must not fail over a figure.
    """
    name, simulated = run.candidate.display_name, run.is_simulated
    renderers = []
    if run.test == "long_context":
        rungs = context_rungs(run)
        if rungs:
            renderers.append((_("TTFT against context length"), lambda: charts.ttft_vs_context(
                {name: rungs}, title=_("TTFT against context length"), percentile="p50", simulated=simulated)))
    elif run.test == "prefix_reuse":
        peaks = prefix_peaks(run)
        if peaks:
            renderers.append((_(PREFIX_TITLE), lambda: charts.prefix_on_off(
                {name: peaks}, metric=_(PREFIX_METRIC), title=_(PREFIX_TITLE), simulated=simulated)))
    elif run.test == "stability":
        drift = soak_drift_points(run)
        if drift:
            renderers.append((_(SOAK_TITLE), lambda: charts.soak_drift({name: drift}, title=_(SOAK_TITLE),
                                                                        simulated=simulated)))
    else:
        series = presentation.latency_series(name, rows, percentile)
        loads = set(next(iter(series.values()))["concurrency"]) if series else set()
        if len(loads) > 1:  # a line against load needs more than one load
            renderers.append((_("TTFT and TPOT %(percentile)s per load point") % {"percentile": percentile},
                              lambda: charts.latency_vs_concurrency(series, percentile=percentile, simulated=simulated)))
    kv = presentation.kv_series(run.timeseries)  # with the prefix-off configuration's series, if any
    if kv:
        renderers.append((_("KV-cache usage over time"), lambda: charts.kv_usage_over_time(
            kv, title=_("KV-cache usage over time"), simulated=simulated)))
    out = []
    for title, render in renderers:
        try:
            out.append({"title": title, "svg": render()})
        except charts.ChartInputError:
            logger.warning("record chart %r for run %s left out", title, run.pk, exc_info=True)
    return out
