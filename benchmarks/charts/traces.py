"""The charts of an imported trace (the traces page): its input and output lengths and its arrivals over time."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from benchmarks.charts.canvas import (
    chart,
    check_series,
    indexed_colour,
    legend,
    new_figure,
    number,
    reference_line,
    render_svg,
    time_axis,
    xy_pairs,
)
from benchmarks.charts.style import (
    ChartInputError,
    wrap,
)
from benchmarks.charts.style import translate as _


@chart
def length_distribution(
    histograms: Mapping[str, Mapping[str, Sequence[Any]]],
    title: str = "Input and output lengths",
    simulated: bool = False,
) -> str:
    """Requests per length bin (log-spaced token bins), one panel per histogram, side by side.

    histograms: label -> {"edges": [e0, e1, ... en], "counts": [c0 ... c(n-1)]} (bin i is [e_i, e_i+1)).
    """
    check_series("histograms", histograms)
    fig, axes = new_figure(title, simulated, size=(8.0, 3.4), ncols=len(histograms))
    for i, (ax, (label, data)) in enumerate(zip(axes, histograms.items(), strict=True)):
        edges = [number(e) for e in data.get("edges", [])]
        counts = [number(c) for c in data.get("counts", [])]
        if counts and len(edges) != len(counts) + 1:
            raise ChartInputError(
                f"histograms[{label!r}]: {len(edges)} edges for {len(counts)} counts (need one more edge)"
            )
        if counts:
            widths = [b - a for a, b in zip(edges[:-1], edges[1:], strict=True)]
            ax.bar(
                edges[:-1],
                counts,
                width=widths,
                align="edge",
                color=indexed_colour(i),
                edgecolor="white",
                linewidth=0.3,
            )
            ax.set_xscale("log")
            held = [k for k, count in enumerate(counts) if count]
            if held:  # the axis spans the bins that hold requests, not the empty ones below them
                low, high = edges[held[0]], edges[held[-1] + 1]
                if 0 < low < high:
                    ax.set_xlim(low, high)
        else:
            ax.text(0.5, 0.5, _("n/a"), ha="center", va="center", transform=ax.transAxes)
        ax.set_title(wrap(label, 40), fontsize=9)
        ax.set_xlabel(_("tokens"))
        ax.set_ylabel(_("requests"))
    return render_svg(fig, title, simulated)


@chart
def arrival_rate(
    points: Sequence[Sequence[Any]],
    title: str = "Arrivals over time",
    mean_rps: float | None = None,
    simulated: bool = False,
) -> str:
    """Requests per second (averaged per bin) against time since the first request (s, min or h by
    the trace's length); the mean dashed.

    points: [(t_s, requests_per_second), ...].
    """
    xs, ys = xy_pairs("points", points)
    fig, (ax,) = new_figure(title, simulated)
    divisor = time_axis(ax, xs, "since_first")
    ax.plot([x / divisor for x in xs], ys, color=indexed_colour(0), linewidth=1, label=_("arrivals"))
    if mean_rps is not None:
        reference_line(ax, mean_rps, _("mean %(rate)s req/s") % {"rate": f"{mean_rps:.3g}"})
    ax.set_ylabel(_("requests per second"))
    ax.set_ylim(bottom=0)
    legend(ax)
    return render_svg(fig, title, simulated)
