"""The charts a run's evidence is drawn as: one reader and one drawing per chart kind.

Which kinds a test has is a column of the test table (`benchmarks.suite`): the decision record
draws each of a run's kinds for that run, and the comparison page draws each kind once, over
every candidate's latest run of the first test that lists it. Both read the same fields of the
same points here, so a test's charts change in one place. Drawing is `benchmarks.charts`
(Django-free); texts are translated when drawn. Both take the page's or the record's candidate
colours (`candidate_colours`: by the candidates' order in the selection), so a candidate has one
colour in every chart.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from benchmarks import presentation, suite
from benchmarks.charts import candidates as candidate_charts
from benchmarks.charts import phases as phase_charts
from benchmarks.charts import style as chart_style
from benchmarks.models import BenchmarkRun
from selection.models import Selection
from selection.selectors import compared_candidates

logger = logging.getLogger(__name__)

KV_MAIN_SERIES = presentation.KV_SERIES_SUFFIX


@dataclass(frozen=True)
class Budgets:
    """The selection's latency budget (a p95), drawn on latency charts at that percentile."""

    ttft_p95_ms: float | None = None
    tpot_p95_ms: float | None = None


# --------------------------------------------------------------------------- readers (one run)


def latency_vs_load(run: BenchmarkRun) -> dict[str, Any] | None:
    """TTFT and TPOT at the run's percentile against load, and each traffic group (short, long) as a series
    of its own (`groups`: never joined to a load point); None with fewer than two loads and no group."""
    rows = list(run.points.values())
    percentile = presentation.chart_percentile(rows)
    series = presentation.latency_series("run", rows, percentile, _)
    groups = {label.removeprefix("run · "): data for label, data in series.items() if label != "run"}
    if "run" not in series or (len(set(series["run"]["concurrency"])) < 2 and not groups):
        return None  # a line against load needs two loads
    return {"percentile": percentile, **series["run"], "groups": groups}


def kv_usage(run: BenchmarkRun) -> dict[str, list] | None:
    """The engine's KV-cache usage ratio over the run, per series (the prefix-off one too)."""
    return presentation.kv_series(run.timeseries) or None


def context_rungs(run: BenchmarkRun) -> list[tuple[Any, Any]] | None:
    """Long-context ladder: (input tokens requested, TTFT p50) of each rung run alone."""
    rungs = [
        ((p.extra or {}).get("input_tokens_requested"), (p.ttft_ms or {}).get("p50"))
        for p in run.points.all()
        if "alone" in p.label
    ]
    return [(tokens, ttft) for tokens, ttft in rungs if tokens] or None


def prefix_peaks(run: BenchmarkRun) -> dict[str, Any] | None:
    """Prefix reuse: peak KV tokens measured with prefix caching on and off (off None when no
    caching-off run was made), what the requests in flight at the peak need with every one holding
    its own prompt (a labelled line) and with the shared prefix held once (the least caching can use)."""
    if ((run.metadata or {}).get("observed") or {}).get("per_slot_cache"):
        return None  # a per-slot prompt cache (llama.cpp) saves prefill, not memory: no memory chart to draw
    points = {p.label: p for p in run.points.all()}
    on, off = points.get("prefix_on"), points.get("prefix_off")
    if on is None or (on.extra or {}).get("kv_tokens_peak") is None:
        return None
    extra = on.extra or {}
    return {
        "on": extra["kv_tokens_peak"],
        "off": (off.extra or {}).get("kv_tokens_peak") if off is not None else None,
        "theory_own": extra.get("own_allocation_tokens"),
        "theoretical_on": extra.get("shared_once_tokens"),
        "off_modelled": False,
    }


def soak_drift_points(run: BenchmarkRun) -> list[tuple[float, Any]] | None:
    """Long-run stability: TTFT p99 of the first and the last window, at 0 and the run's duration."""
    points = {p.label: p for p in run.points.all()}
    first, last = points.get("first_window"), points.get("last_window")
    if first is None or last is None:
        return None
    duration = float((run.params or {}).get("duration_s") or 1.0)
    return [(0.0, (first.ttft_ms or {}).get("p99")), (duration, (last.ttft_ms or {}).get("p99"))]


def overload_step_series(run: BenchmarkRun) -> dict[str, list] | None:
    """Overload: each step in the order it ran (up, then down), its TTFT p95, failed and rejected requests."""
    steps = [p for p in run.points.all() if (p.extra or {}).get("direction") in ("up", "down")]
    if not steps:
        return None
    return {
        "labels": [p.label for p in steps],
        "ttft_p95_ms": [(p.ttft_ms or {}).get("p95") for p in steps],
        "failed": [p.requests_failed or 0 for p in steps],
        "rejected": [((p.extra or {}).get("failures_by_kind") or {}).get("rejected", 0) for p in steps],
    }


def switch_timeline(run: BenchmarkRun) -> dict[str, Any] | None:
    """Model switch: each request's TTFT by send time, the failed ones, the switch and the rollback."""
    switch = (run.metadata or {}).get("switch") or {}
    timeline = switch.get("timeline")
    if not timeline:
        return None
    return {
        "points": [(t, ttft) for t, ttft, ok in timeline if ok],
        "failed": [t for t, _ttft, ok in timeline if not ok],
        "switch_at": switch.get("switch_at_s"),
        "rollback_at": switch.get("rollback_at_s"),
    }


def tenant_isolation(run: BenchmarkRun) -> dict[str, Any] | None:
    """Isolation: tenant A's TTFT p95 alone and under the flood, with their 95% intervals."""
    figures = (run.metadata or {}).get("isolation") or {}
    if figures.get("a_ttft_p95_alone_ms") is None and figures.get("a_ttft_p95_flood_ms") is None:
        return None
    return {
        "alone": figures.get("a_ttft_p95_alone_ms"),
        "flood": figures.get("a_ttft_p95_flood_ms"),
        "alone_interval": figures.get("a_ttft_p95_alone_interval"),
        "flood_interval": figures.get("a_ttft_p95_flood_interval"),
    }


def swap_phase_figures(run: BenchmarkRun) -> dict[str, Any] | None:
    """Swap-out and recovery: TTFT p50 of the warm, resumed and recomputed turns with their 95%
    intervals (the test's `resume` figures, else its points). Phases, never load levels."""
    resume = (run.metadata or {}).get("resume") or {}
    points = {p.label: p for p in run.points.all()}
    data: dict[str, Any] = {}
    for phase in ("warm", "resume", "recompute"):
        figures = resume.get(f"{phase}_ttft_ms") or {}
        point = points.get(phase)
        data[phase] = figures.get("p50", (point.ttft_ms or {}).get("p50") if point is not None else None)
        data[f"{phase}_interval"] = figures.get("p50_interval")
    return data if any(data[phase] is not None for phase in ("warm", "resume", "recompute")) else None


# --------------------------------------------------------------------------- drawings ({label: data})

Colours = Mapping[str, str]  # candidate label -> colour (`chart_style.candidate_colours`)


def candidate_colours(labels: Sequence[str]) -> dict[str, str]:
    """The colour of each candidate, by its position among the selection's candidates (`labels`, in
    the selection's order): one mapping for every chart of a page or a record."""
    return chart_style.candidate_colours(labels)


def selection_colours(selection: Selection) -> dict[str, str]:
    """The colours of the selection's compared candidates, by display name (`candidate_colours`)."""
    return candidate_colours([candidate.display_name for candidate in compared_candidates(selection)])


def _draw_latency(
    data: Mapping[str, dict[str, Any]], simulated: bool, budgets: Budgets, colours: Colours
) -> tuple[str, str]:
    percentiles = {d["percentile"] for d in data.values()}
    percentile = percentiles.pop() if len(percentiles) == 1 else "mixed"
    on_budget = percentile == "p95"  # the budget is a p95: drawn only against p95 lines
    series = {}
    for label, d in data.items():
        series[label] = {k: d[k] for k in ("concurrency", "ttft_ms", "tpot_ms")}
        for group, values in (d.get("groups") or {}).items():  # a traffic group: its own series, its own points
            series[f"{label} · {group}"] = values
    title = _("TTFT and TPOT %(percentile)s per load point") % {"percentile": percentile}
    return title, candidate_charts.latency_vs_concurrency(
        series,
        percentile=percentile,
        simulated=simulated,
        title=title,
        ttft_budget_ms=budgets.ttft_p95_ms if on_budget else None,
        tpot_budget_ms=budgets.tpot_p95_ms if on_budget else None,
        colours=colours,
    )


KV_SERIES_NAMES = {"prefix_off": gettext_noop("prefix caching off")}


def kv_series_label(candidate: str, name: str) -> str:
    """A KV series as the legend names it: the candidate for its engine's own series, "candidate ·
    prefix caching off" for the prefix-off engine beside it (`prefix_off.kv_usage_ratio`)."""
    if name == KV_MAIN_SERIES:
        return candidate
    prefix = name.removesuffix("." + KV_MAIN_SERIES)
    return f"{candidate} · {_(KV_SERIES_NAMES[prefix]) if prefix in KV_SERIES_NAMES else prefix}"


def _draw_kv(
    data: Mapping[str, dict[str, list]], simulated: bool, budgets: Budgets, colours: Colours
) -> tuple[str, str]:
    series, series_colours = {}, {}
    known = chart_style.series_colours(data, colours)  # the candidates' own, then spare ones
    for label, per_run in data.items():
        for name, points in per_run.items():
            shown = kv_series_label(label, name)
            series[shown] = points
            series_colours[shown] = known[label]  # the prefix-off series in its candidate's colour (dashed)
    title = _("KV-cache usage over time")
    return title, candidate_charts.kv_usage_over_time(series, title=title, simulated=simulated, colours=series_colours)


def _draw_ladder(data: Mapping[str, Any], simulated: bool, budgets: Budgets, colours: Colours) -> tuple[str, str]:
    title = _("TTFT against context length")
    return title, candidate_charts.ttft_vs_context(
        dict(data), title=title, percentile="p50", simulated=simulated, colours=colours
    )


PREFIX_METRIC = gettext_noop("KV tokens at peak")
PREFIX_TITLE = gettext_noop("Prefix caching off vs on")
SOAK_TITLE = gettext_noop("Latency drift during the soak")


def _draw_prefix(data: Mapping[str, Any], simulated: bool, budgets: Budgets, colours: Colours) -> tuple[str, str]:
    return _(PREFIX_TITLE), candidate_charts.prefix_on_off(
        dict(data), metric=_(PREFIX_METRIC), title=_(PREFIX_TITLE), simulated=simulated, colours=colours
    )


def _draw_soak(data: Mapping[str, Any], simulated: bool, budgets: Budgets, colours: Colours) -> tuple[str, str]:
    return _(SOAK_TITLE), candidate_charts.soak_drift(
        dict(data), title=_(SOAK_TITLE), simulated=simulated, colours=colours
    )


OVERLOAD_TITLE = gettext_noop("Overload: the way up and down")


def _draw_overload(data: Mapping[str, Any], simulated: bool, budgets: Budgets, colours: Colours) -> tuple[str, str]:
    return _(OVERLOAD_TITLE), candidate_charts.overload_steps(
        dict(data), title=_(OVERLOAD_TITLE), simulated=simulated, ttft_budget_ms=budgets.ttft_p95_ms, colours=colours
    )


SWAP_TITLE = gettext_noop("Resume after the pause against warm and recomputed")


def _draw_swap(data: Mapping[str, Any], simulated: bool, budgets: Budgets, colours: Colours) -> tuple[str, str]:
    return _(SWAP_TITLE), phase_charts.swap_phases(
        dict(data), title=_(SWAP_TITLE), simulated=simulated, colours=colours
    )


SWITCH_TITLE = gettext_noop("TTFT across the switch and the rollback")
ISOLATION_TITLE = gettext_noop("Tenant A alone and under tenant B's flood")
ISOLATION_METRIC = gettext_noop("tenant A TTFT p95 (ms)")


def _draw_switch(data: Mapping[str, Any], simulated: bool, budgets: Budgets, colours: Colours) -> tuple[str, str]:
    return _(SWITCH_TITLE), phase_charts.switch_timeline(
        dict(data), title=_(SWITCH_TITLE), budget_ms=budgets.ttft_p95_ms, simulated=simulated, colours=colours
    )


def _draw_isolation(data: Mapping[str, Any], simulated: bool, budgets: Budgets, colours: Colours) -> tuple[str, str]:
    return _(ISOLATION_TITLE), phase_charts.tenant_isolation(
        dict(data),
        metric=_(ISOLATION_METRIC),
        title=_(ISOLATION_TITLE),
        budget_ms=budgets.ttft_p95_ms,
        simulated=simulated,
        colours=colours,
    )


@dataclass(frozen=True)
class ChartKind:
    id: str
    read: Callable[[BenchmarkRun], Any]  # one run's data, or None when it cannot be drawn
    draw: Callable[[Mapping[str, Any], bool, Budgets, Colours], tuple[str, str]]  # {label: data} -> (title, SVG)
    caption: str  # what the comparison page says under it (marked for translation)
    only_series: str | None = None  # on the comparison: keep this series of each run (KV usage)


KINDS: dict[str, ChartKind] = {
    kind.id: kind
    for kind in (
        ChartKind(
            "latency_vs_load",
            latency_vs_load,
            _draw_latency,
            gettext_noop(
                "TTFT and TPOT against the load, from each candidate's latest run of the test; dashed lines are the "
                "budgets (p95)."
            ),
        ),
        ChartKind(
            "kv_usage",
            kv_usage,
            _draw_kv,
            gettext_noop("KV-cache usage over time during each candidate's concurrency stress run."),
            only_series=KV_MAIN_SERIES,
        ),
        ChartKind(
            "context_ladder",
            context_rungs,
            _draw_ladder,
            gettext_noop("TTFT of one long request alone, per context rung of the long-context test."),
        ),
        ChartKind(
            "prefix_on_off",
            prefix_peaks,
            _draw_prefix,
            gettext_noop(
                "Peak KV tokens measured with prefix caching off (hatched) and on (solid); the dashed line is the "
                "theory of every request allocating its own prompt, the black mark the shared prefix held once. "
                "The percentage is the change caching made (against the theory when no caching-off run was made); "
                "red when it made it worse."
            ),
        ),
        ChartKind(
            "swap_phases",
            swap_phase_figures,
            _draw_swap,
            gettext_noop(
                "TTFT p50 of the swap-out and recovery test's phases, with 95% intervals: warm sessions whose "
                "history is still resident (hatched), idle sessions resumed after the pause (solid) and the same "
                "histories recomputed with the cache cleared (dotted). A resume as slow as the recompute saved "
                "nothing."
            ),
        ),
        ChartKind(
            "soak_drift",
            soak_drift_points,
            _draw_soak,
            gettext_noop(
                "TTFT p99 in the first and last window of the long-run stability test: drift shows as a slope."
            ),
        ),
        ChartKind(
            "overload_steps",
            overload_step_series,
            _draw_overload,
            gettext_noop(
                "The overload test's steps in the order they ran, up to the top and back down: TTFT p95 per step "
                "(the dashed line is the budget) and, below, failed requests per step (hatched: rejected with "
                "429/503)."
            ),
        ),
        ChartKind(
            "switch_timeline",
            switch_timeline,
            _draw_switch,
            gettext_noop(
                "Each request's TTFT by the time it was sent during the model-switch test: the switch (solid) and "
                "the rollback (dotted) as vertical lines, failed requests as crosses; the dashed line is the budget."
            ),
        ),
        ChartKind(
            "tenant_isolation",
            tenant_isolation,
            _draw_isolation,
            gettext_noop(
                "Tenant A's TTFT p95 alone (hatched) and while tenant B floods the engine with long requests "
                "(solid), with 95% intervals; the dashed line is the budget."
            ),
        ),
    )
}


def _render(
    kind: ChartKind, data: Mapping[str, Any], simulated: bool, budgets: Budgets, colours: Colours, where: str
) -> tuple[str, str] | None:
    try:
        return kind.draw(data, simulated, budgets, colours)
    except (chart_style.ChartInputError, TypeError, ValueError):
        logger.warning("chart %s for %s left out", kind.id, where, exc_info=True)
        return None


def record_charts(
    run: BenchmarkRun, budgets: Budgets | None = None, colours: Colours | None = None
) -> list[dict[str, str]]:
    """The charts of one run in the decision record, in its test's order, in the run's candidate's
    colour from `colours` (the record's candidates).

    A chart the data cannot make is logged and left out: a record must not fail over a figure.
    """
    test = suite.BY_ID.get(run.test) or suite.BY_ID["custom"]
    label = run.candidate.display_name
    out = []
    for kind in (KINDS[k] for k in test.charts):
        data = kind.read(run)
        if data is None:
            continue
        drawn = _render(kind, {label: data}, run.is_simulated, budgets or Budgets(), colours or {}, f"run {run.pk}")
        if drawn:
            out.append({"kind": kind.id, "title": drawn[0], "svg": drawn[1]})
    return out


def comparison_charts(
    latest: Iterable[tuple[str, Mapping[str, BenchmarkRun]]],
    budgets: Budgets | None = None,
    colours: Colours | None = None,
) -> list[dict[str, str]]:
    """Each chart kind once, over every candidate's latest run of the first test listing it, every
    candidate in its colour from `colours` (default: by its position in `latest`).

    `latest`: (candidate label, {test id: run}) per candidate, already filtered (SIMULATED or not).
    """
    latest = list(latest)
    colours = colours if colours is not None else candidate_colours([label for label, _runs in latest])
    drawn: set[str] = set()
    out = []
    for test in suite.TESTS:
        for kind in (KINDS[k] for k in test.charts if k not in drawn):
            data, simulated = {}, False
            for label, runs in latest:
                run = runs.get(test.id)
                value = kind.read(run) if run is not None else None
                if value is None:
                    continue
                if kind.only_series is not None:
                    value = {kind.only_series: value[kind.only_series]} if kind.only_series in value else None
                    if value is None:
                        continue
                data[label] = value
                simulated |= run.is_simulated
            if not data:
                continue
            drawn.add(kind.id)
            rendered = _render(kind, data, simulated, budgets or Budgets(), colours, f"the comparison of {test.id}")
            if rendered:
                out.append({"kind": kind.id, "title": rendered[0], "svg": rendered[1], "caption": _(kind.caption)})
    return out


# --------------------------------------------------------------------------- the run page


def _budget(selection: Selection, name: str) -> float | None:
    constraints = getattr(selection, "constraints", None)
    value = getattr(constraints, name, None) if constraints is not None else None
    return float(value) if value is not None else None


def run_page_charts(
    selection: Selection, run: BenchmarkRun, points: list[dict[str, Any]]
) -> tuple[str, str, list[str]]:
    """A run page's latency chart (at the percentile its points hold, with the budget at p95) and KV-usage
    chart, in the candidate's colour, and the KV series' names ("" for a chart with no data)."""
    simulated = run.is_simulated
    latency_chart = ""
    percentile = presentation.chart_percentile(points)
    name = run.label or run.candidate.display_name
    colour = selection_colours(selection).get(run.candidate.display_name)  # the candidate's, as on every page
    series = presentation.latency_series(name, points, percentile, _)
    if series:
        budgets = percentile == "p95"  # the latency budget is a p95: drawn only against p95 lines
        latency_chart = presentation.chart_svg(
            "latency_vs_concurrency",
            series=series,
            simulated=simulated,
            percentile=percentile,
            ttft_budget_ms=_budget(selection, "ttft_p95_ms") if budgets else None,
            tpot_budget_ms=_budget(selection, "tpot_p95_ms") if budgets else None,
            title=_("TTFT and TPOT %(percentile)s per load point") % {"percentile": percentile},
            colours={name: colour} if colour else None,
        )
    kv = presentation.kv_series(run.timeseries)
    kv_named = {kv_series_label(name, key): points for key, points in kv.items()}
    kv_chart = (
        presentation.chart_svg(
            "kv_usage_over_time",
            series=kv_named,
            simulated=simulated,
            title=_("KV-cache usage over time"),
            colours=dict.fromkeys(kv_named, colour) if colour else None,
        )
        if kv
        else ""
    )
    return latency_chart, kv_chart, list(kv_named)  # as the legend names them, never the metric keys
