"""The charts of the tests that run in phases, never as load levels: the model switch and its rollback,
tenant A alone and under tenant B's flood, and the swap-out's warm, resumed and recomputed sessions.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from benchmarks.charts.canvas import (
    chart,
    check_series,
    legend,
    mpl,
    new_figure,
    number,
    reference_line,
    render_svg,
    time_axis,
    xy_pairs,
)
from benchmarks.charts.style import (
    NA,
    REFERENCE_SOFT,
    series_colours,
    wrap,
)
from benchmarks.charts.style import translate as _

if TYPE_CHECKING:
    from matplotlib.patches import Patch


@chart
def switch_timeline(
    series: Mapping[str, Mapping[str, Any]],
    title: str = "TTFT across the switch and the rollback",
    budget_ms: float | None = None,
    simulated: bool = False,
    colours: Mapping[str, str] | None = None,
) -> str:
    """Each request's TTFT against its send time, one colour per candidate; failed requests as
    crosses on the time axis; the switch and the rollback as vertical lines (solid and dotted, in the
    candidate's colour); the budget as a dashed black line.

    series: candidate -> {"points": [(t_s, ttft_ms), ...], "failed": [t_s, ...], "switch_at": t_s,
    "rollback_at": t_s}.
    """
    check_series("series", series)
    palette = series_colours(series, colours)
    fig, (ax,) = new_figure(title, simulated, size=(8.0, 3.6))
    parsed = {name: xy_pairs(f"series[{name!r}].points", data.get("points") or []) for name, data in series.items()}
    spans = [x for xs, _ys in parsed.values() for x in xs] + [
        number(t) for data in series.values() for t in (data.get("failed") or [])
    ]
    divisor = time_axis(ax, spans, "time")
    for name, (xs, ys) in parsed.items():
        colour = palette[name]
        ax.scatter([x / divisor for x in xs], ys, s=6, color=colour, label=name)
        failed = [number(t) / divisor for t in (series[name].get("failed") or [])]
        if failed:
            ax.scatter(failed, [0.0] * len(failed), marker="x", s=18, color=colour, linewidths=1)
        for key, style in (("switch_at", "solid"), ("rollback_at", "dotted")):
            at = number(series[name].get(key))
            if not math.isnan(at):
                ax.axvline(at / divisor, color=colour, linestyle=style, linewidth=1)
    handles, _labels = ax.get_legend_handles_labels()
    if budget_ms is not None:
        handles.append(reference_line(ax, budget_ms, _("TTFT budget %(ms)s ms (p95)") % {"ms": f"{budget_ms:g}"}))
    handles.append(mpl().Line2D([], [], color=REFERENCE_SOFT, linestyle="solid", label=_("switch")))
    handles.append(mpl().Line2D([], [], color=REFERENCE_SOFT, linestyle="dotted", label=_("rollback")))
    handles.append(mpl().Line2D([], [], color=REFERENCE_SOFT, marker="x", linestyle="none", label=_("failed request")))
    ax.set_ylabel(_("TTFT (ms)"))
    ax.set_ylim(bottom=0)
    legend(ax, handles)
    return render_svg(fig, title, simulated)


def _bars_with_intervals(
    ax, data: Mapping[str, Mapping[str, Any]], bars: Sequence[tuple[str, str | None]], palette: Mapping[str, str]
) -> None:
    """Per candidate, one bar per (key, hatch) of `bars` side by side (solid in the candidate's
    colour when the hatch is None, else white with the hatch), each with its 95% interval when
    `<key>_interval` is known; a missing value reads "n/a", never a zero bar."""
    width = 0.8 / len(bars)
    names = list(data)
    for i, name in enumerate(names):
        for j, (key, hatch) in enumerate(bars):
            x = i - 0.4 + width * (j + 0.5)
            value = number(data[name].get(key))
            if math.isnan(value):
                ax.text(x, 0, _("n/a"), ha="center", va="bottom", fontsize=7, color=NA)
                continue
            interval = data[name].get(f"{key}_interval")
            error = None
            if interval and len(interval) == 2 and not any(math.isnan(number(v)) for v in interval):
                error = [[max(value - number(interval[0]), 0.0)], [max(number(interval[1]) - value, 0.0)]]
            ax.bar(
                x,
                value,
                width=width * 0.95,
                color="white" if hatch else palette[name],
                edgecolor=palette[name],
                hatch=hatch,
                linewidth=1,
                yerr=error,
                ecolor=REFERENCE_SOFT,
                capsize=3,
            )
    ax.set_xticks(range(len(names)), [wrap(name, 18) for name in names], fontsize=8)


def _bar_key(label: str, hatch: str | None) -> Patch:
    return mpl().Patch(
        facecolor="white" if hatch else REFERENCE_SOFT, edgecolor=REFERENCE_SOFT, hatch=hatch, label=label
    )


@chart
def tenant_isolation(
    data: Mapping[str, Mapping[str, Any]],
    metric: str = "tenant A TTFT p95 (ms)",
    title: str = "Tenant A alone and under tenant B's flood",
    budget_ms: float | None = None,
    simulated: bool = False,
    colours: Mapping[str, str] | None = None,
) -> str:
    """Per candidate, tenant A's latency alone (hatched) and under tenant B's flood (solid, the
    candidate's colour), each bar with its 95% interval when known; the budget as a dashed line.

    data: candidate -> {"alone": ms, "flood": ms, "alone_interval": [low, high] (optional),
    "flood_interval": [low, high] (optional)}.
    """
    check_series("data", data)
    fig, (ax,) = new_figure(title, simulated, size=(8.0, 3.6))
    _bars_with_intervals(ax, data, (("alone", "///"), ("flood", None)), series_colours(data, colours))
    handles = [_bar_key(_("alone"), "///"), _bar_key(_("under the flood"), None)]
    if budget_ms is not None:
        handles.append(reference_line(ax, budget_ms, _("budget %(ms)s ms (p95)") % {"ms": f"{budget_ms:g}"}))
    ax.set_ylabel(metric)
    ax.set_ylim(bottom=0)
    legend(ax, handles)
    return render_svg(fig, title, simulated)


@chart
def swap_phases(
    data: Mapping[str, Mapping[str, Any]],
    title: str = "Resume after the pause against warm and recomputed",
    simulated: bool = False,
    colours: Mapping[str, str] | None = None,
) -> str:
    """The swap-out and recovery test's phases, never as load levels: per candidate the TTFT p50 of
    the warm sessions (history still resident, hatched), of the idle sessions resumed after the
    pause (solid) and of the same histories recomputed with the cache cleared (dotted hatch), each
    with its 95% interval. A resume near the recompute bar saved nothing.

    data: candidate -> {"warm": ms, "resume": ms, "recompute": ms, "<phase>_interval": [low, high]}.
    """
    check_series("data", data)
    fig, (ax,) = new_figure(title, simulated, size=(8.0, 3.6))
    bars = (("warm", "///"), ("resume", None), ("recompute", ".."))
    _bars_with_intervals(ax, data, bars, series_colours(data, colours))
    labels = (_("warm (resident)"), _("resumed after the pause"), _("recomputed (cache cleared)"))
    ax.set_ylabel(_("TTFT p50 (ms)"))
    ax.set_ylim(bottom=0)
    legend(ax, [_bar_key(label, hatch) for label, (_key, hatch) in zip(labels, bars, strict=True)])
    return render_svg(fig, title, simulated)
