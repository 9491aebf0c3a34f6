"""Charts for the comparison page and the PDF: one module, so the two never disagree.

Pure functions: plain lists/dicts in, an SVG document (str) out. Deterministic: matplotlib's Agg
stack with a fixed `svg.hashsalt`, no date in the metadata, and text kept as <text> elements
(`svg.fonttype = none`) so labels stay searchable and a CJK font can render them (the family list
prefers Noto Sans CJK and falls back to DejaVu Sans). When `simulated=True` the chart carries a
visible "SIMULATED" label and its title says so: simulator output is never shown unmarked.

Missing values (None or NaN) are drawn as gaps or "n/a", never as zero.
"""

from __future__ import annotations

import contextvars
import io
import math
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")

from matplotlib.backends.backend_svg import FigureCanvasSVG  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

SIMULATED_LABEL = "SIMULATED"
# Axis and legend texts go through this translator; the web app and the PDF set Django's gettext
# for the duration of a request (`translated`), so charts follow the page's language while this
# module stays free of Django.
_translator: contextvars.ContextVar[Callable[[str], str]] = contextvars.ContextVar(
    "kvselect_chart_translator", default=lambda text: text
)


def _(text: str) -> str:  # named `_` so `makemessages` collects the chart texts
    return _translator.get()(text)


@contextmanager
def translated(translate: Callable[[str], str]) -> Iterator[None]:
    """Render charts with `translate` applied to every fixed text (axis labels, legends, marks)."""
    token = _translator.set(translate)
    try:
        yield
    finally:
        _translator.reset(token)


FONT_FAMILY = ["Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans CJK TC", "WenQuanYi Zen Hei", "DejaVu Sans"]
# Okabe-Ito: distinguishable with colour-vision deficiencies, stable order per series.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
HASH_SALT = "kvselect-charts"

RC = {
    "svg.hashsalt": HASH_SALT,
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.sans-serif": FONT_FAMILY,
    "font.size": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
}


class ChartInputError(ValueError):
    """Bad chart input: the message names the argument and the problem."""


# --------------------------------------------------------------------------- helpers


def _num(value: Any) -> float:
    """A float, NaN for missing (None/NaN/inf/non-numbers) so lines break instead of dropping to 0."""
    if value is None or isinstance(value, bool):
        return math.nan
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number if math.isfinite(number) else math.nan


def _pairs(name: str, points: Iterable[Sequence[Any]]) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for index, point in enumerate(points):
        if not isinstance(point, (list, tuple)) or len(point) != 2:
            raise ChartInputError(f"{name}[{index}]: expected an (x, y) pair, got {point!r}")
        xs.append(_num(point[0]))
        ys.append(_num(point[1]))
    return xs, ys


def _check_series(name: str, series: Mapping[str, Any]) -> None:
    if not isinstance(series, Mapping) or not series:
        raise ChartInputError(f"{name}: expected a non-empty mapping of label -> data")


def _figure(title: str, simulated: bool, size: tuple[float, float] = (7.0, 3.6), ncols: int = 1):
    fig = Figure(figsize=size)
    FigureCanvasSVG(fig)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    fig.suptitle(f"{title} ({_(SIMULATED_LABEL)})" if simulated else title, fontsize=11)
    return fig, list(axes)


def _render(fig: Figure, title: str, simulated: bool) -> str:
    if simulated:
        fig.text(
            0.5,
            0.5,
            SIMULATED_LABEL,
            ha="center",
            va="center",
            fontsize=40,
            color="#D55E00",
            alpha=0.25,
            rotation=20,
            fontweight="bold",
            gid="simulated-watermark",
        )
        fig.text(
            0.005,
            0.005,
            _("SIMULATED data: produced by the simulator, not measured"),
            ha="left",
            va="bottom",
            fontsize=7,
            color="#D55E00",
            gid="simulated-note",
        )
    fig.tight_layout(rect=(0, 0.05, 1, 1) if simulated else (0, 0, 1, 1))
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None, "Title": title})
    return buffer.getvalue()


def _chart(render):
    """Run a chart function under the module's fixed rcParams (global state left untouched)."""

    def wrapper(*args, **kwargs):
        with matplotlib.rc_context(RC):
            return render(*args, **kwargs)

    wrapper.__name__ = render.__name__
    wrapper.__doc__ = render.__doc__
    wrapper.__wrapped__ = render
    return wrapper


def _colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


# --------------------------------------------------------------------------- charts


@_chart
def dimension_bars(
    scores: Mapping[str, Mapping[str, float | None]],
    dimensions: Sequence[str] | None = None,
    labels: Mapping[str, str] | None = None,
    gates: Mapping[str, float] | None = None,
    title: str = "Score per dimension",
    simulated: bool = False,
) -> str:
    """Grouped bars: candidates x dimensions, scores in [0, 1]; gate thresholds as short marks.

    scores: candidate -> dimension -> score (None = no evidence, shown as "n/a").
    labels: optional display names for the dimension ids.
    """
    _check_series("scores", scores)
    dimensions = list(dimensions or dict.fromkeys(d for per in scores.values() for d in per))
    if not dimensions:
        raise ChartInputError("dimensions: no dimension to draw")
    labels = labels or {}
    fig, (ax,) = _figure(title, simulated, size=(8.0, 3.8))
    n = len(scores)
    width = 0.8 / n
    for i, (candidate, per) in enumerate(scores.items()):
        for j, dimension in enumerate(dimensions):
            x = j - 0.4 + width * (i + 0.5)
            value = _num(per.get(dimension))
            if math.isnan(value):
                ax.text(x, 0.02, _("n/a"), ha="center", va="bottom", fontsize=7, rotation=90, color="#555555")
                continue
            if not -1e-9 <= value <= 1 + 1e-9:
                raise ChartInputError(f"scores[{candidate!r}][{dimension!r}]: must be in [0, 1], got {value}")
            ax.bar(x, value, width=width * 0.95, color=_colour(i))
    for j, dimension in enumerate(dimensions):
        if gates and dimension in gates:
            ax.hlines(gates[dimension], j - 0.45, j + 0.45, colors="#000000", linestyles="dashed", linewidth=1.2)
            ax.text(
                j + 0.45,
                gates[dimension],
                _("gate %(value)s") % {"value": f"{gates[dimension]:.2f}"},
                fontsize=7,
                va="bottom",
                ha="right",
            )
    ax.set_xticks(range(len(dimensions)), [labels.get(d, d) for d in dimensions], rotation=15, ha="right")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel(_("score (0-1)"))
    handles = [Patch(color=_colour(i), label=candidate) for i, candidate in enumerate(scores)]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _render(fig, title, simulated)


@_chart
def latency_vs_concurrency(
    series: Mapping[str, Mapping[str, Sequence[Any]]],
    ttft_budget_ms: float | None = None,
    tpot_budget_ms: float | None = None,
    percentile: str = "p95",
    title: str = "TTFT and TPOT against concurrency",
    simulated: bool = False,
) -> str:
    """Two panels: TTFT and TPOT (ms) against concurrency, one line per candidate, budgets dashed.

    series: candidate -> {"concurrency": [...], "ttft_ms": [...], "tpot_ms": [...]} (same lengths).
    """
    _check_series("series", series)
    fig, (ax_ttft, ax_tpot) = _figure(title, simulated, size=(8.0, 3.6), ncols=2)
    for i, (candidate, data) in enumerate(series.items()):
        x = [_num(v) for v in data.get("concurrency", [])]
        for key, ax in (("ttft_ms", ax_ttft), ("tpot_ms", ax_tpot)):
            y = [_num(v) for v in data.get(key, [])]
            if len(y) != len(x):
                raise ChartInputError(
                    f"series[{candidate!r}].{key}: length {len(y)} does not match concurrency length {len(x)}"
                )
            ax.plot(x, y, marker="o", markersize=3, color=_colour(i), label=candidate)
    for ax, metric, budget in ((ax_ttft, "TTFT", ttft_budget_ms), (ax_tpot, "TPOT", tpot_budget_ms)):
        if budget is not None:
            ax.axhline(
                budget,
                color="#000000",
                linestyle="dashed",
                linewidth=1,
                label=_("%(metric)s budget") % {"metric": metric},
            )
        ax.set_xlabel(_("concurrency"))
        ax.set_ylabel(f"{metric} {percentile} (ms)")
        ax.set_title(f"{metric} {percentile}", fontsize=9)
    ax_ttft.legend(fontsize=7)
    return _render(fig, title, simulated)


@_chart
def kv_usage_over_time(
    series: Mapping[str, Sequence[Sequence[Any]]],
    title: str = "KV-cache usage over time",
    limit: float | None = None,
    simulated: bool = False,
) -> str:
    """KV-cache usage (share 0..1, shown in %) against time (s); an optional limit line.

    series: candidate -> [(t_s, usage), ...].
    """
    _check_series("series", series)
    fig, (ax,) = _figure(title, simulated)
    for i, (candidate, points) in enumerate(series.items()):
        xs, ys = _pairs(f"series[{candidate!r}]", points)
        ax.plot(xs, [y * 100 for y in ys], color=_colour(i), label=candidate)
    if limit is not None:
        ax.axhline(
            limit * 100,
            color="#D55E00",
            linestyle="dashed",
            linewidth=1,
            label=_("limit %(percent)s") % {"percent": f"{limit:.0%}"},
        )
    ax.set_xlabel(_("time (s)"))
    ax.set_ylabel(_("KV-cache usage (%)"))
    ax.set_ylim(0, 105)
    ax.legend(fontsize=8)
    return _render(fig, title, simulated)


@_chart
def ttft_vs_context(
    series: Mapping[str, Sequence[Sequence[Any]]],
    title: str = "TTFT against context length",
    percentile: str = "p95",
    simulated: bool = False,
) -> str:
    """TTFT (ms) against context length (tokens, log2 axis), one line per candidate.

    series: candidate -> [(context_tokens, ttft_ms), ...]; a rung that failed has ttft None.
    """
    _check_series("series", series)
    fig, (ax,) = _figure(title, simulated)
    ticks: set[float] = set()
    for i, (candidate, points) in enumerate(series.items()):
        xs, ys = _pairs(f"series[{candidate!r}]", points)
        if any(x <= 0 for x in xs if not math.isnan(x)):
            raise ChartInputError(f"series[{candidate!r}]: context lengths must be positive")
        ticks.update(x for x in xs if not math.isnan(x))
        ax.plot(xs, ys, marker="o", markersize=3, color=_colour(i), label=candidate)
    ax.set_xscale("log", base=2)
    if ticks:
        ordered = sorted(ticks)
        ax.set_xticks(ordered, [f"{int(t) // 1024}K" if t >= 1024 else f"{int(t)}" for t in ordered])
        ax.minorticks_off()
    ax.set_xlabel(_("context length (tokens)"))
    ax.set_ylabel(f"TTFT {percentile} (ms)")
    ax.legend(fontsize=8)
    return _render(fig, title, simulated)


@_chart
def prefix_on_off(
    data: Mapping[str, Mapping[str, Any]],
    metric: str = "KV memory (GiB)",
    title: str = "Prefix caching off vs on",
    simulated: bool = False,
) -> str:
    """Paired bars per candidate: the metric with prefix caching off and on, plus the theory.

    data: candidate -> {"off": value, "on": value, "theoretical_on": value (optional)}.
    """
    _check_series("data", data)
    fig, (ax,) = _figure(title, simulated)
    names = list(data)
    for j, (key, colour, label) in enumerate(
        (("off", "#999999", _("prefix caching off")), ("on", "#0072B2", _("prefix caching on")))
    ):
        values = [_num(data[n].get(key)) for n in names]
        xs = [i - 0.2 + 0.4 * j for i in range(len(names))]
        ax.bar(
            [x for x, v in zip(xs, values, strict=False) if not math.isnan(v)],
            [v for v in values if not math.isnan(v)],
            width=0.38,
            color=colour,
            label=label,
        )
        for x, v in zip(xs, values, strict=False):
            if math.isnan(v):
                ax.text(x, 0, _("n/a"), ha="center", va="bottom", fontsize=7, color="#555555")
    theory = [(i, _num(data[n].get("theoretical_on"))) for i, n in enumerate(names)]
    theory = [(i, v) for i, v in theory if not math.isnan(v)]
    if theory:
        ax.scatter(
            [0.2 + i for i, _ in theory],
            [v for _, v in theory],
            marker="_",
            s=400,
            color="#000000",
            zorder=3,
            label=_("theoretical with reuse"),
        )
    ax.set_xticks(range(len(names)), names)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_ylabel(metric)
    ax.legend(fontsize=8)
    return _render(fig, title, simulated)


@_chart
def soak_drift(
    series: Mapping[str, Sequence[Sequence[Any]]],
    metric: str = "TTFT p99 (ms)",
    title: str = "Latency drift during the soak",
    simulated: bool = False,
) -> str:
    """A latency percentile over a long run (hours on the x axis), one line per candidate; each
    line's start value is drawn dotted so drift is visible.

    series: candidate -> [(t_s, value), ...].
    """
    _check_series("series", series)
    fig, (ax,) = _figure(title, simulated)
    for i, (candidate, points) in enumerate(series.items()):
        xs, ys = _pairs(f"series[{candidate!r}]", points)
        hours = [x / 3600.0 for x in xs]
        ax.plot(hours, ys, color=_colour(i), label=candidate)
        first = next((y for y in ys if not math.isnan(y)), None)
        if first is not None:
            ax.axhline(first, color=_colour(i), linestyle="dotted", linewidth=0.8)
    ax.set_xlabel(_("elapsed (h)"))
    ax.set_ylabel(metric)
    ax.legend(fontsize=8)
    return _render(fig, title, simulated)


@_chart
def capacity_memory_vs_context(
    contexts: Sequence[Any],
    memory_gib: Mapping[str, Sequence[Any]],
    gpu_memory_gib: float,
    headroom: float = 0.2,
    title: str = "Memory against context length",
    simulated: bool = False,
) -> str:
    """Memory needed (GiB) against context length, one line per configuration, with the GPU's
    memory and the usable line that keeps `headroom` free (the article's 20-30%).

    memory_gib: label -> values, one per context in `contexts` (e.g. "weights + KV @ 16 concurrent").
    """
    _check_series("memory_gib", memory_gib)
    if not (0.0 <= headroom < 1.0):
        raise ChartInputError(f"headroom: must be in [0, 1), got {headroom}")
    if gpu_memory_gib is None or gpu_memory_gib <= 0:
        raise ChartInputError(f"gpu_memory_gib: must be positive, got {gpu_memory_gib!r}")
    xs = [_num(c) for c in contexts]
    fig, (ax,) = _figure(title, simulated)
    for i, (label, values) in enumerate(memory_gib.items()):
        ys = [_num(v) for v in values]
        if len(ys) != len(xs):
            raise ChartInputError(f"memory_gib[{label!r}]: length {len(ys)} does not match contexts length {len(xs)}")
        ax.plot(xs, ys, marker="o", markersize=3, color=_colour(i), label=label)
    ax.axhline(
        gpu_memory_gib, color="#000000", linewidth=1, label=_("GPU memory %(gib)s GiB") % {"gib": f"{gpu_memory_gib:g}"}
    )
    usable = gpu_memory_gib * (1 - headroom)
    ax.axhline(
        usable,
        color="#D55E00",
        linestyle="dashed",
        linewidth=1,
        label=_("%(percent)s headroom line %(gib)s GiB") % {"percent": f"{headroom:.0%}", "gib": f"{usable:.1f}"},
    )
    ax.set_xscale("log", base=2)
    valid = sorted({x for x in xs if not math.isnan(x) and x > 0})
    if valid:
        ax.set_xticks(valid, [f"{int(t) // 1024}K" if t >= 1024 else f"{int(t)}" for t in valid])
        ax.minorticks_off()
    ax.set_xlabel(_("context length (tokens)"))
    ax.set_ylabel(_("memory (GiB)"))
    ax.legend(fontsize=7)
    return _render(fig, title, simulated)


@_chart
def length_distribution(
    histograms: Mapping[str, Mapping[str, Sequence[Any]]],
    title: str = "Input and output lengths",
    simulated: bool = False,
) -> str:
    """Requests per length bin (log-spaced token bins), one panel per histogram, side by side.

    histograms: label -> {"edges": [e0, e1, ... en], "counts": [c0 ... c(n-1)]} (bin i is [e_i, e_i+1)).
    """
    _check_series("histograms", histograms)
    fig, axes = _figure(title, simulated, size=(8.0, 3.4), ncols=len(histograms))
    for i, (ax, (label, data)) in enumerate(zip(axes, histograms.items(), strict=True)):
        edges = [_num(e) for e in data.get("edges", [])]
        counts = [_num(c) for c in data.get("counts", [])]
        if counts and len(edges) != len(counts) + 1:
            raise ChartInputError(
                f"histograms[{label!r}]: {len(edges)} edges for {len(counts)} counts (need one more edge)"
            )
        if counts:
            widths = [b - a for a, b in zip(edges[:-1], edges[1:], strict=True)]
            ax.bar(edges[:-1], counts, width=widths, align="edge", color=_colour(i), edgecolor="white", linewidth=0.3)
            ax.set_xscale("log")
        else:
            ax.text(0.5, 0.5, _("n/a"), ha="center", va="center", transform=ax.transAxes)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel(_("tokens"))
        ax.set_ylabel(_("requests"))
    return _render(fig, title, simulated)


@_chart
def arrival_rate(
    points: Sequence[Sequence[Any]],
    title: str = "Arrivals over time",
    mean_rps: float | None = None,
    simulated: bool = False,
) -> str:
    """Requests per second (averaged per bin) against time since the first request; the mean dashed.

    points: [(t_s, requests_per_second), ...].
    """
    xs, ys = _pairs("points", points)
    fig, (ax,) = _figure(title, simulated)
    ax.plot(xs, ys, color=_colour(0), linewidth=1, label=_("arrivals"))
    if mean_rps is not None:
        ax.axhline(
            mean_rps,
            color="#000000",
            linestyle="dashed",
            linewidth=1,
            label=_("mean %(rate)s req/s") % {"rate": f"{mean_rps:.3g}"},
        )
    ax.set_xlabel(_("time since the first request (s)"))
    ax.set_ylabel(_("requests per second"))
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    return _render(fig, title, simulated)


CHARTS = {
    "length_distribution": length_distribution,
    "arrival_rate": arrival_rate,
    "dimension_bars": dimension_bars,
    "latency_vs_concurrency": latency_vs_concurrency,
    "kv_usage_over_time": kv_usage_over_time,
    "ttft_vs_context": ttft_vs_context,
    "prefix_on_off": prefix_on_off,
    "soak_drift": soak_drift,
    "capacity_memory_vs_context": capacity_memory_vs_context,
}
