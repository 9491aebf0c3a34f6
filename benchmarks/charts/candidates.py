"""The charts that compare candidates run by run: scores per dimension, latency against load, KV-cache
usage, TTFT against context, prefix caching off and on, the soak's drift, the overload's steps and
memory against context. Each takes the page's `colours` so a candidate keeps its colour.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from benchmarks.charts.canvas import (
    chart,
    check_series,
    indexed_colour,
    legend,
    mpl,
    new_figure,
    number,
    reference_line,
    render_svg,
    time_axis,
    token_axis,
    xy_pairs,
)
from benchmarks.charts.style import (
    NA,
    REFERENCE,
    REFERENCE_SOFT,
    TICK_WIDTH,
    WORSE,
    ChartInputError,
    series_colours,
    wrap,
)
from benchmarks.charts.style import translate as _


@chart
def dimension_bars(
    scores: Mapping[str, Mapping[str, float | None]],
    dimensions: Sequence[str] | None = None,
    labels: Mapping[str, str] | None = None,
    gates: Mapping[str, float] | None = None,
    title: str = "Score per dimension",
    simulated: bool = False,
    colours: Mapping[str, str] | None = None,
) -> str:
    """Grouped bars: candidates x dimensions, scores in [0, 1]; gate thresholds as short marks.

    scores: candidate -> dimension -> score (None = no evidence, shown as "n/a").
    labels: optional display names for the dimension ids (wrapped under the bars, never clipped).
    """
    check_series("scores", scores)
    dimensions = list(dimensions or dict.fromkeys(d for per in scores.values() for d in per))
    if not dimensions:
        raise ChartInputError("dimensions: no dimension to draw")
    labels = labels or {}
    palette = series_colours(scores, colours)
    fig, (ax,) = new_figure(title, simulated, size=(8.0, 3.8))
    n = len(scores)
    width = 0.8 / n
    for i, (candidate, per) in enumerate(scores.items()):
        for j, dimension in enumerate(dimensions):
            x = j - 0.4 + width * (i + 0.5)
            value = number(per.get(dimension))
            if math.isnan(value):
                ax.text(x, 0.02, _("n/a"), ha="center", va="bottom", fontsize=7, rotation=90, color=NA)
                continue
            if not -1e-9 <= value <= 1 + 1e-9:
                raise ChartInputError(f"scores[{candidate!r}][{dimension!r}]: must be in [0, 1], got {value}")
            ax.bar(x, value, width=width * 0.95, color=palette[candidate])
    for j, dimension in enumerate(dimensions):
        if gates and dimension in gates:
            ax.hlines(gates[dimension], j - 0.45, j + 0.45, colors=REFERENCE, linestyles="dashed", linewidth=1.2)
            ax.text(
                j + 0.45,
                gates[dimension],
                _("gate %(value)s") % {"value": f"{gates[dimension]:.2f}"},
                fontsize=7,
                va="bottom",
                ha="right",
            )
    ax.set_xticks(
        range(len(dimensions)), [wrap(labels.get(d, d), TICK_WIDTH) for d in dimensions], fontsize=8, ha="center"
    )
    ax.set_xlim(-0.55, len(dimensions) - 0.45)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel(_("score (0-1)"))
    legend(ax, [mpl().Patch(color=palette[candidate], label=candidate) for candidate in scores])
    return render_svg(fig, title, simulated)


def _single_load(xs_per_series: Iterable[list[float]]) -> bool:
    """Whether no series has two distinct loads (then a line 'against the load' would be one point)."""
    return all(len({x for x in xs if not math.isnan(x)}) < 2 for xs in xs_per_series)


@chart
def latency_vs_concurrency(
    series: Mapping[str, Mapping[str, Sequence[Any]]],
    ttft_budget_ms: float | None = None,
    tpot_budget_ms: float | None = None,
    percentile: str = "p95",
    title: str = "TTFT and TPOT against concurrency",
    simulated: bool = False,
    colours: Mapping[str, str] | None = None,
) -> str:
    """Two panels: TTFT and TPOT (ms) against concurrency, one line per candidate, budgets dashed.
    When no candidate was measured at two loads, one bar per candidate instead (its load in the label).

    series: candidate -> {"concurrency": [...], "ttft_ms": [...], "tpot_ms": [...]} (same lengths).
    """
    check_series("series", series)
    palette = series_colours(series, colours)
    data = {}
    for candidate, values in series.items():
        x = [number(v) for v in values.get("concurrency", [])]
        data[candidate] = {"x": x}
        for key in ("ttft_ms", "tpot_ms"):
            y = [number(v) for v in values.get(key, [])]
            if len(y) != len(x):
                raise ChartInputError(
                    f"series[{candidate!r}].{key}: length {len(y)} does not match concurrency length {len(x)}"
                )
            data[candidate][key] = y
    # a traffic group's series ("vLLM · short requests"): its candidate's colour, markers only, no line to
    # the load points (a part of one load, at its own concurrency); the group is the name's last part, so a
    # candidate named "SGLang · H100" owns "SGLang · H100 · short requests"
    parent = {name: name.rsplit(" · ", 1)[0] for name in data if " · " in name and name.rsplit(" · ", 1)[0] in data}
    palette.update({name: palette[owner] for name, owner in parent.items()})
    bars = _single_load(d["x"] for name, d in data.items() if name not in parent)
    fig, (ax_ttft, ax_tpot) = new_figure(title, simulated, size=(8.0, 3.6), ncols=2)
    names = list(data)
    for i, candidate in enumerate(names):
        d = data[candidate]
        for key, ax in (("ttft_ms", ax_ttft), ("tpot_ms", ax_tpot)):
            if bars:
                value = next((y for y in d[key] if not math.isnan(y)), math.nan)
                if math.isnan(value):
                    ax.text(i, 0, _("n/a"), ha="center", va="bottom", fontsize=7, color=NA)
                else:
                    ax.bar(i, value, width=0.6, color=palette[candidate], label=candidate)
            elif candidate in parent:
                ax.plot(
                    d["x"],
                    d[key],
                    linestyle="none",
                    marker="D",
                    markersize=4,
                    color=palette[candidate],
                    label=candidate,
                )
            else:
                ax.plot(d["x"], d[key], marker="o", markersize=3, color=palette[candidate], label=candidate)
    for ax, metric, budget in ((ax_ttft, "TTFT", ttft_budget_ms), (ax_tpot, "TPOT", tpot_budget_ms)):
        if budget is not None:
            reference_line(ax, budget, _("%(metric)s budget") % {"metric": metric})
        if bars:
            ticks = []
            for candidate in names:
                load = next((x for x in data[candidate]["x"] if not math.isnan(x)), math.nan)
                at = "" if math.isnan(load) else "\n" + _("at concurrency %(load)s") % {"load": f"{load:g}"}
                ticks.append(wrap(candidate, TICK_WIDTH) + at)
            ax.set_xticks(range(len(names)), ticks, fontsize=7)
            ax.set_xlim(-0.6, len(names) - 0.4)
            ax.set_ylim(bottom=0)
            ax.grid(axis="x", visible=False)
        else:
            ax.set_xlabel(_("concurrency"))
        ax.set_ylabel(f"{metric} {percentile} (ms)")
        ax.set_title(f"{metric} {percentile}", fontsize=9)
    found: dict[str, Any] = {}  # each candidate once (from either panel), then the budgets
    for ax in (ax_ttft, ax_tpot):
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            found.setdefault(label, handle)
    legend(ax_tpot, [found[n] for n in names if n in found] + [h for n, h in found.items() if n not in names])
    return render_svg(fig, title, simulated)


@chart
def kv_usage_over_time(
    series: Mapping[str, Sequence[Sequence[Any]]],
    title: str = "KV-cache usage over time",
    limit: float | None = None,
    simulated: bool = False,
    colours: Mapping[str, str] | None = None,
) -> str:
    """KV-cache usage (share 0..1, shown in %) against time (s, min or h by the span); an optional
    limit line. A series whose colour an earlier series of the chart already drew (the same
    candidate's prefix-off engine, say) is dashed.

    series: label -> [(t_s, usage), ...].
    """
    check_series("series", series)
    palette = series_colours(series, colours)
    fig, (ax,) = new_figure(title, simulated)
    parsed = {label: xy_pairs(f"series[{label!r}]", points) for label, points in series.items()}
    divisor = time_axis(ax, (x for xs, _ys in parsed.values() for x in xs), "time")
    drawn: set[str] = set()
    for label, (xs, ys) in parsed.items():
        colour = palette[label]
        ax.plot(
            [x / divisor for x in xs],
            [y * 100 for y in ys],
            color=colour,
            linestyle="dashed" if colour in drawn else "solid",
            label=label,
        )
        drawn.add(colour)
    if limit is not None:
        ax.axhline(
            limit * 100,
            color=REFERENCE_SOFT,
            linestyle="dashed",
            linewidth=1,
            label=_("limit %(percent)s") % {"percent": f"{limit:.0%}"},
        )
    ax.set_ylabel(_("KV-cache usage (%)"))
    ax.set_ylim(0, 105)
    legend(ax)
    return render_svg(fig, title, simulated)


@chart
def ttft_vs_context(
    series: Mapping[str, Sequence[Sequence[Any]]],
    title: str = "TTFT against context length",
    percentile: str = "p95",
    simulated: bool = False,
    colours: Mapping[str, str] | None = None,
) -> str:
    """TTFT (ms) against context length (tokens, log2 axis), one line per candidate.

    series: candidate -> [(context_tokens, ttft_ms), ...]; a rung that failed has ttft None.
    """
    check_series("series", series)
    palette = series_colours(series, colours)
    fig, (ax,) = new_figure(title, simulated)
    ticks: set[float] = set()
    for candidate, points in series.items():
        xs, ys = xy_pairs(f"series[{candidate!r}]", points)
        if any(x <= 0 for x in xs if not math.isnan(x)):
            raise ChartInputError(f"series[{candidate!r}]: context lengths must be positive")
        ticks.update(x for x in xs if not math.isnan(x))
        ax.plot(xs, ys, marker="o", markersize=3, color=palette[candidate], label=candidate)
    ax.set_xscale("log", base=2)
    token_axis(ax, ticks)
    ax.set_xlabel(_("context length (tokens)"))
    ax.set_ylabel(f"TTFT {percentile} (ms)")
    legend(ax)
    return render_svg(fig, title, simulated)


@chart
def prefix_on_off(
    data: Mapping[str, Mapping[str, Any]],
    metric: str = "KV memory (GiB)",
    title: str = "Prefix caching off vs on",
    simulated: bool = False,
    colours: Mapping[str, str] | None = None,
) -> str:
    """Per candidate, the metric (lower is better) with prefix caching off (hatched) and on (solid,
    the candidate's colour), the theory as a black tick, and the change caching made above each
    "on" bar: a saving, or in red when caching made it worse. The key below the chart says what
    each mark is.

    data: candidate -> {"off": value, "on": value, "theoretical_on": value (optional),
    "theory_own": the capacity model's every-request-allocates-its-own figure (optional: a dashed
    line over the pair; with no measured "off" the change is taken against it and says so),
    "off_modelled": True when "off" is that modelled figure rather than a run with caching off}.
    """
    check_series("data", data)
    palette = series_colours(data, colours)
    fig, (ax,) = new_figure(title, simulated, size=(8.0, 3.6))
    names = list(data)
    top = 0.0
    modelled = False
    own_lines = []
    not_run = False
    for i, name in enumerate(names):
        off, on = number(data[name].get("off")), number(data[name].get("on"))
        own = number(data[name].get("theory_own"))
        modelled |= bool(data[name].get("off_modelled"))
        if not math.isnan(own):
            own_lines.append(own)
            top = max(top, own)
            ax.hlines(own, i - 0.42, i + 0.42, colors=REFERENCE, linestyles="dashed", linewidth=1.2, zorder=3)
        against_theory = math.isnan(off) and not math.isnan(own)
        for x, value, solid in ((i - 0.2, off, False), (i + 0.2, on, True)):
            if math.isnan(value):
                missing = _("off not run") if (not solid and against_theory) else _("n/a")
                not_run |= not solid and against_theory
                ax.text(x, 0, missing, ha="center", va="bottom", fontsize=7, color=NA)
                continue
            top = max(top, value)
            ax.bar(
                x,
                value,
                width=0.38,
                color=palette[name] if solid else "white",
                edgecolor=palette[name],
                hatch=None if solid else "///",
                linewidth=1,
            )
        base = own if against_theory else off
        if not (math.isnan(base) or math.isnan(on)) and base > 0:
            change = (on - base) / base
            worse = change > 1e-9
            text = (
                _("+%(percent)s: worse with caching") % {"percent": f"{change:.0%}"}
                if worse
                else f"{change:.0%}".replace("-", "−")
            )
            if against_theory:
                text = _("%(change)s vs theory") % {"change": text}
            ax.annotate(
                text,
                (i + 0.2, on),
                xytext=(0, 3),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=7,
                color=WORSE if worse else "#000000",
                fontweight="bold" if worse else "normal",
            )
    theory = [(i, number(data[n].get("theoretical_on"))) for i, n in enumerate(names)]
    theory = [(i, v) for i, v in theory if not math.isnan(v)]
    if theory:
        top = max(top, max(v for _i, v in theory))
        ax.scatter([0.2 + i for i, _v in theory], [v for _i, v in theory], marker="_", s=400, color=REFERENCE, zorder=3)
    ax.set_xticks(range(len(names)), [wrap(n, TICK_WIDTH) for n in names], fontsize=8)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_ylim(0, top * 1.18 if top > 0 else 1)
    ax.grid(axis="x", visible=False)
    ax.set_ylabel(wrap(metric, 36))
    key = [
        mpl().Patch(
            facecolor="white",
            edgecolor=REFERENCE_SOFT,
            hatch="///",
            label=_("off (modelled): every request holds its own copy of the prefix")
            if modelled
            else _("off: measured with prefix caching off"),
        ),
        mpl().Patch(facecolor=REFERENCE_SOFT, label=_("on: measured with prefix caching on (the candidate's colour)")),
    ]
    if theory:
        key.append(
            mpl().Line2D(
                [],
                [],
                color=REFERENCE,
                marker="_",
                linestyle="none",
                markersize=14,
                label=_("theory: the shared prefix held once, the least caching can use"),
            )
        )
    if own_lines:
        key.append(
            mpl().Line2D(
                [],
                [],
                color=REFERENCE,
                linestyle="dashed",
                label=_("theory: every request allocates its own prompt")
                + (_(" (no caching-off run: the change is against it)") if not_run else ""),
            )
        )
    key.append(
        mpl().Patch(
            facecolor="none", edgecolor="none", label=_("lower is better; the percentage is the change from off to on")
        )
    )
    legend(ax, key)
    return render_svg(fig, title, simulated)


@chart
def soak_drift(
    series: Mapping[str, Sequence[Sequence[Any]]],
    metric: str = "TTFT p99 (ms)",
    title: str = "Latency drift during the soak",
    simulated: bool = False,
    colours: Mapping[str, str] | None = None,
) -> str:
    """A latency percentile over a long run (s, min or h on the x axis by the run's length), one
    line per candidate; each line's start value is drawn dotted so drift is visible.

    series: candidate -> [(t_s, value), ...].
    """
    check_series("series", series)
    palette = series_colours(series, colours)
    fig, (ax,) = new_figure(title, simulated)
    parsed = {candidate: xy_pairs(f"series[{candidate!r}]", points) for candidate, points in series.items()}
    divisor = time_axis(ax, (x for xs, _ys in parsed.values() for x in xs), "elapsed")
    for candidate, (xs, ys) in parsed.items():
        ax.plot([x / divisor for x in xs], ys, marker="o", markersize=3, color=palette[candidate], label=candidate)
        first = next((y for y in ys if not math.isnan(y)), None)
        if first is not None:
            ax.axhline(first, color=palette[candidate], linestyle="dotted", linewidth=0.8)
    ax.set_ylabel(metric)
    legend(ax)
    return render_svg(fig, title, simulated)


@chart
def overload_steps(
    series: Mapping[str, Mapping[str, Sequence[Any]]],
    title: str = "Overload: the way up and down",
    simulated: bool = False,
    ttft_budget_ms: float | None = None,
    colours: Mapping[str, str] | None = None,
) -> str:
    """The overload test's steps in the order they ran (up to the top, then back down): TTFT p95
    per step on top (log scale, the budget dashed), failed requests per step below (rejections
    hatched, other failures solid), one colour per candidate.

    series: candidate -> {"labels": [step label, ...], "ttft_p95_ms": [...], "rejected": [...],
    "failed": [...]} (failed: every failed request, rejections included).
    """
    check_series("series", series)
    palette = series_colours(series, colours)
    fig, (top, bottom) = new_figure(title, simulated, size=(7.0, 4.6), ncols=1, nrows=2)
    labels: list[str] = []
    for data in series.values():
        if len(data.get("labels") or ()) > len(labels):
            labels = list(data["labels"])
    width = 0.8 / max(len(series), 1)
    for index, (candidate, data) in enumerate(series.items()):
        xs = list(range(len(data["labels"])))
        ttft = [number(v) for v in data["ttft_p95_ms"]]
        top.plot(xs, ttft, marker="o", markersize=3, drawstyle="steps-mid", color=palette[candidate], label=candidate)
        offset = (index - (len(series) - 1) / 2) * width
        failed = [number(v) for v in data["failed"]]
        rejected = [number(v) for v in data["rejected"]]
        other = [max(f - r, 0.0) if not math.isnan(f) else 0.0 for f, r in zip(failed, rejected, strict=True)]
        bottom.bar([x + offset for x in xs], other, width=width, color=palette[candidate])
        bottom.bar(
            [x + offset for x in xs],
            rejected,
            width=width,
            bottom=other,
            color="white",
            edgecolor=palette[candidate],
            hatch="///",
        )
    if ttft_budget_ms:
        top.axhline(ttft_budget_ms, color=REFERENCE, linestyle="dashed", linewidth=1, label=_("TTFT budget (p95)"))
    if any(v > 0 for data in series.values() for v in (number(x) for x in data["ttft_p95_ms"]) if not math.isnan(v)):
        top.set_yscale("log")
    top.set_ylabel(_("TTFT p95 (ms)"))
    top.set_xticks(range(len(labels)), [""] * len(labels))
    bottom.set_xticks(range(len(labels)), [wrap(label, TICK_WIDTH) for label in labels], fontsize=7)
    bottom.set_ylabel(_("failed requests"))
    top.grid(axis="x", visible=False)
    bottom.grid(axis="x", visible=False)
    key = [
        mpl().Patch(facecolor=REFERENCE_SOFT, label=_("failed: OOM, crash or other errors")),
        mpl().Patch(facecolor="white", edgecolor=REFERENCE_SOFT, hatch="///", label=_("rejected (HTTP 429/503)")),
    ]
    legend(top)
    legend(bottom, key)
    return render_svg(fig, title, simulated)


LINESTYLES = ("solid", "dashed", "dashdot", "dotted")


@chart
def capacity_memory_vs_context(
    contexts: Sequence[Any],
    memory_gib: Mapping[str, Sequence[Any]],
    gpu_memory_gib: float,
    headroom: float = 0.2,
    title: str = "Memory against context length",
    simulated: bool = False,
    colour: str | None = None,
) -> str:
    """Memory needed (GiB) against context length, one line per configuration, with the GPU's
    memory and the usable line that keeps `headroom` free (the article's 20-30%).

    memory_gib: label -> values, one per context in `contexts` (e.g. "weights + KV @ 16 concurrent").
    colour: the candidate's colour (`candidate_colours`); its configurations differ by line style.
    """
    check_series("memory_gib", memory_gib)
    if not (0.0 <= headroom < 1.0):
        raise ChartInputError(f"headroom: must be in [0, 1), got {headroom}")
    if gpu_memory_gib is None or gpu_memory_gib <= 0:
        raise ChartInputError(f"gpu_memory_gib: must be positive, got {gpu_memory_gib!r}")
    xs = [number(c) for c in contexts]
    fig, (ax,) = new_figure(title, simulated)
    for i, (label, values) in enumerate(memory_gib.items()):
        ys = [number(v) for v in values]
        if len(ys) != len(xs):
            raise ChartInputError(f"memory_gib[{label!r}]: length {len(ys)} does not match contexts length {len(xs)}")
        ax.plot(
            xs,
            ys,
            marker="os^D"[i % 4],
            markersize=3,
            color=colour or indexed_colour(i),
            linestyle=LINESTYLES[i % len(LINESTYLES)] if colour else "solid",
            label=label,
        )
    ax.axhline(
        gpu_memory_gib,
        color=REFERENCE,
        linewidth=1,
        label=_("GPU memory %(gib)s GiB") % {"gib": f"{gpu_memory_gib:g}"},
    )
    usable = gpu_memory_gib * (1 - headroom)
    ax.axhline(
        usable,
        color=REFERENCE_SOFT,
        linestyle="dashed",
        linewidth=1,
        label=_("%(percent)s headroom line %(gib)s GiB") % {"percent": f"{headroom:.0%}", "gib": f"{usable:.1f}"},
    )
    ax.set_xscale("log", base=2)
    token_axis(ax, xs)
    ax.set_xlabel(_("context length (tokens)"))
    ax.set_ylabel(_("memory (GiB)"))
    legend(ax)
    return render_svg(fig, title, simulated)
