"""Charts for the comparison page and the PDF: one module, so the two never disagree.

Pure functions: plain lists/dicts in, an SVG document (str) out. Deterministic: matplotlib's Agg
stack with a fixed `svg.hashsalt`, no date in the metadata, and text kept as <text> elements
(`svg.fonttype = none`) so labels stay searchable and a CJK font can render them (the family list
prefers Noto Sans CJK and falls back to DejaVu Sans). When `simulated=True` the chart carries a
visible "SIMULATED" label and its title says so: simulator output is never shown unmarked.
matplotlib is loaded when the first chart is drawn (`_mpl`), not when a page module imports this one.

The rules every chart follows, in one place:

* **One colour per candidate.** `candidate_colours` gives each candidate a colour by its position
  in the selection; a page or a record passes that mapping (`colours`) to every chart it draws, so
  a candidate keeps its colour from chart to chart. A series the mapping does not name takes the
  next colour no candidate of the mapping uses. Reference lines (budgets, limits, the GPU's memory)
  are black or grey, never a candidate's colour.
* **No line through a single point.** A latency chart whose candidates were each measured at one
  load draws bars (one per candidate, the load in its label) instead of lines "against" a load
  that did not vary.
* **Units that fit the data.** Time axes are in seconds, minutes or hours by the span shown (a 15 s
  run in seconds, a 4 h soak in hours); token axes read 512, 1.5K, 128K, 1M, and ticks closer than
  the labels' width are thinned so they never overlap.
* **Nothing clipped.** Long tick and legend labels are wrapped (CJK by character), legends sit
  outside the plot, and the saved figure is cropped to everything drawn (`bbox_inches="tight"`).

Missing values (None or NaN) are drawn as gaps or "n/a", never as zero.
"""

from __future__ import annotations

import contextvars
import functools
import io
import math
import re
import unicodedata
from contextlib import contextmanager
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

SIMULATED_LABEL = "SIMULATED"
# Axis and legend texts go through this translator; the web app and the PDF set Django's gettext
# for the duration of a request (`translated`), so charts follow the page's language while this
# module stays free of Django.
_translator: contextvars.ContextVar[Callable[[str], str]] = contextvars.ContextVar(
    "kvselect_chart_translator", default=lambda text: text
)


def _(text: str) -> str:  # named `_` so `makemessages` collects the chart texts
    return _translator.get()(text)


def gettext_noop(text: str) -> str:  # marks a text for `makemessages`; `_` translates it when drawn
    return text


_language: contextvars.ContextVar[Callable[[], str]] = contextvars.ContextVar(
    "kvselect_chart_language", default=lambda: ""
)


@contextmanager
def translated(translate: Callable[[str], str], language: Callable[[], str] | None = None) -> Iterator[None]:
    """Render charts with `translate` applied to every fixed text (axis labels, legends, marks);
    `language` says which language `translate` gives now (Django's get_language), for caches."""
    token = _translator.set(translate)
    language_token = _language.set(language or (lambda: f"translator-{id(translate)}"))
    try:
        yield
    finally:
        _language.reset(language_token)
        _translator.reset(token)


def translation_key() -> str:
    """What the fixed texts are translated into now: part of the key of any cache of drawn charts,
    so a chart drawn in English is never served to a Chinese page."""
    return _language.get()()


FONT_FAMILY = ["Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans CJK TC", "WenQuanYi Zen Hei", "DejaVu Sans"]
# Okabe-Ito, distinguishable with colour-vision deficiencies, without its black (kept for reference
# lines): the candidates' colours, in the order candidates take them. Past seven candidates the
# colours repeat.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442"]
REFERENCE = "#000000"  # budgets, the GPU's memory
REFERENCE_SOFT = "#555555"  # limits and headroom lines, the legend's neutral swatches
WORSE = "#B2182B"  # "caching made it worse"
NA = "#555555"
HASH_SALT = "kvselect-charts"
LEGEND_WIDTH = 28  # characters (a CJK character counts two) before a legend label wraps
TICK_WIDTH = 16

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

# Time axes: the largest span (s) each unit is used for, and the label of each axis in that unit.
TIME_UNITS = ((180.0, "s", 1.0), (3 * 3600.0, "min", 60.0), (math.inf, "h", 3600.0))
TIME_LABELS = {
    "time": {"s": gettext_noop("time (s)"), "min": gettext_noop("time (min)"), "h": gettext_noop("time (h)")},
    "elapsed": {
        "s": gettext_noop("elapsed (s)"),
        "min": gettext_noop("elapsed (min)"),
        "h": gettext_noop("elapsed (h)"),
    },
    "since_first": {
        "s": gettext_noop("time since the first request (s)"),
        "min": gettext_noop("time since the first request (min)"),
        "h": gettext_noop("time since the first request (h)"),
    },
}


class ChartInputError(ValueError):
    """Bad chart input: the message names the argument and the problem."""


# --------------------------------------------------------------------------- helpers


def candidate_colours(names: Iterable[str]) -> dict[str, str]:
    """One colour per candidate, by its position in `names` (the selection's candidates in their
    order): pass the result to every chart of a page or a record so a candidate keeps its colour."""
    out: dict[str, str] = {}
    for name in names:
        if name not in out:
            out[name] = PALETTE[len(out) % len(PALETTE)]
    return out


def series_colours(names: Iterable[str], colours: Mapping[str, str] | None = None) -> dict[str, str]:
    """The colour of each series: the one `colours` gives it, else the next colour that no
    candidate of `colours` uses (so a series the page did not name never takes a candidate's)."""
    colours = dict(colours or {})
    taken = set(colours.values())
    spare = [c for c in PALETTE if c not in taken] or PALETTE
    out, extra = {}, 0
    for name in names:
        if name in colours:
            out[name] = colours[name]
        else:
            out[name] = spare[extra % len(spare)]
            extra += 1
    return out


def time_unit(span_s: float) -> tuple[str, float]:
    """The unit a time axis spanning `span_s` seconds reads in (s, min, h) and its divisor."""
    for limit, unit, divisor in TIME_UNITS:
        if span_s <= limit:
            return unit, divisor
    return "h", 3600.0  # pragma: no cover (inf above)


def token_label(tokens: float) -> str:
    """A token count as an axis reads it: 512, 1000, 1K, 1.5K, 128K, 1M."""
    if tokens < 1024:
        return f"{tokens:g}" if tokens != int(tokens) else str(int(tokens))
    if tokens < 1024 * 1024:
        return f"{round(tokens / 1024, 1):g}K"
    return f"{round(tokens / (1024 * 1024), 1):g}M"


def thinned_log_ticks(values: Iterable[float], max_ticks: int = 9, min_gap: float = 0.4) -> list[float]:
    """The values to tick on a log2 axis: sorted, without ones closer (in log2 units) than the
    larger of `min_gap` and the span / `max_ticks` to the previous tick; the largest is kept."""
    ordered = sorted({v for v in values if v is not None and math.isfinite(v) and v > 0})
    if len(ordered) <= 1:
        return ordered
    gap = max(min_gap, (math.log2(ordered[-1]) - math.log2(ordered[0])) / max_ticks)
    kept = [ordered[0]]
    for value in ordered[1:]:
        if math.log2(value) - math.log2(kept[-1]) >= gap - 1e-9:
            kept.append(value)
    if kept[-1] != ordered[-1]:  # the largest (the context asked for) is always labelled
        kept[-1] = ordered[-1]
        if len(kept) > 1 and math.log2(kept[-1]) - math.log2(kept[-2]) < gap - 1e-9:
            kept.pop(-2)
    return kept


def _display_width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


_CJK = "\u2e80-\u9fff\u3000-\u303f\uff00-\uffef"  # CJK characters and punctuation: a line may break between any two
_WRAP_TOKENS = re.compile(rf"\s+|[{_CJK}]|[^\s{_CJK}]+")


def wrap(text: str, width: int) -> str:
    """`text` on lines of at most `width` columns (a CJK character is two): at spaces, between CJK
    characters, and inside a word longer than a line (a long unbroken name never runs off)."""
    text = str(text)
    if _display_width(text) <= width:
        return text
    lines: list[str] = []
    line, used = "", 0
    for token in _WRAP_TOKENS.findall(text):
        if token.isspace():
            if line:
                line, used = line + " ", used + 1
            continue
        while _display_width(token) > width:  # a word longer than a line: cut it
            if line.strip():
                lines.append(line.rstrip())
                line, used = "", 0
            cut = 0
            while cut < len(token) and _display_width(token[: cut + 1]) <= width:
                cut += 1
            lines.append(token[:cut])
            token = token[cut:]
        size = _display_width(token)
        if line.strip() and used + size > width:
            lines.append(line.rstrip())
            line, used = "", 0
        line, used = line + token, used + size
    if line.strip():
        lines.append(line.rstrip())
    return "\n".join(lines)


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


def reference_line(ax: Any, y: float, label: str) -> Any:
    """The dashed grey line every chart draws for a budget or a reference level."""
    return ax.axhline(y, color=REFERENCE, linestyle="dashed", linewidth=1, label=label)


def _figure(title: str, simulated: bool, size: tuple[float, float] = (7.0, 3.6), ncols: int = 1, nrows: int = 1):
    fig = _mpl().Figure(figsize=size)
    _mpl().FigureCanvasSVG(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False).flatten()
    shown = f"{title} ({_(SIMULATED_LABEL)})" if simulated else title
    fig.suptitle(wrap(shown, 90), fontsize=11)
    return fig, list(axes)


def _legend(ax, handles=None):
    """The legend right of the plot, labels wrapped: it never hides data."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
        for handle, label in zip(handles, labels, strict=True):
            handle.set_label(label)
    for handle in handles:
        handle.set_label(wrap(handle.get_label(), LEGEND_WIDTH))
    if not handles:
        return None
    return ax.legend(handles=handles, fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))


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
    fig.savefig(buffer, format="svg", metadata={"Date": None, "Title": title}, bbox_inches="tight", pad_inches=0.08)
    return buffer.getvalue()


@functools.cache
def _mpl() -> SimpleNamespace:
    """matplotlib, loaded when the first chart is drawn. Drawing is the honest boundary: importing it
    costs about half a second, which every process importing a page module (the URL conf, `manage.py`
    commands, workers that never draw) would otherwise pay at start-up (tests/architecture/test_lean_imports.py)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    return SimpleNamespace(
        rc_context=matplotlib.rc_context, Figure=Figure, FigureCanvasSVG=FigureCanvasSVG, Line2D=Line2D, Patch=Patch
    )


def _chart(render):
    """Run a chart function under the module's fixed rcParams (global state left untouched)."""

    def wrapper(*args, **kwargs):
        with _mpl().rc_context(RC):
            return render(*args, **kwargs)

    wrapper.__name__ = render.__name__
    wrapper.__doc__ = render.__doc__
    wrapper.__wrapped__ = render
    return wrapper


def _colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _token_axis(ax, values: Iterable[float]) -> None:
    ticks = thinned_log_ticks(values)
    if ticks:
        ax.set_xticks(ticks, [token_label(t) for t in ticks])
        ax.minorticks_off()


def _time_axis(ax, spans: Iterable[float], kind: str) -> float:
    """Set the axis label in the unit the span fits; returns the divisor for the x values."""
    span = max((s for s in spans if not math.isnan(s)), default=0.0)
    unit, divisor = time_unit(span)
    ax.set_xlabel(_(TIME_LABELS[kind][unit]))
    return divisor


# --------------------------------------------------------------------------- charts


@_chart
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
    _check_series("scores", scores)
    dimensions = list(dimensions or dict.fromkeys(d for per in scores.values() for d in per))
    if not dimensions:
        raise ChartInputError("dimensions: no dimension to draw")
    labels = labels or {}
    palette = series_colours(scores, colours)
    fig, (ax,) = _figure(title, simulated, size=(8.0, 3.8))
    n = len(scores)
    width = 0.8 / n
    for i, (candidate, per) in enumerate(scores.items()):
        for j, dimension in enumerate(dimensions):
            x = j - 0.4 + width * (i + 0.5)
            value = _num(per.get(dimension))
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
    _legend(ax, [_mpl().Patch(color=palette[candidate], label=candidate) for candidate in scores])
    return _render(fig, title, simulated)


def _single_load(xs_per_series: Iterable[list[float]]) -> bool:
    """Whether no series has two distinct loads (then a line 'against the load' would be one point)."""
    return all(len({x for x in xs if not math.isnan(x)}) < 2 for xs in xs_per_series)


@_chart
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
    _check_series("series", series)
    palette = series_colours(series, colours)
    data = {}
    for candidate, values in series.items():
        x = [_num(v) for v in values.get("concurrency", [])]
        data[candidate] = {"x": x}
        for key in ("ttft_ms", "tpot_ms"):
            y = [_num(v) for v in values.get(key, [])]
            if len(y) != len(x):
                raise ChartInputError(
                    f"series[{candidate!r}].{key}: length {len(y)} does not match concurrency length {len(x)}"
                )
            data[candidate][key] = y
    # a traffic group's series ("vLLM · short requests"): its candidate's colour, markers only, no line to
    # the load points (a part of one load, at its own concurrency)
    parent = {name: name.split(" · ")[0] for name in data if " · " in name and name.split(" · ")[0] in data}
    palette.update({name: palette[owner] for name, owner in parent.items()})
    bars = _single_load(d["x"] for name, d in data.items() if name not in parent)
    fig, (ax_ttft, ax_tpot) = _figure(title, simulated, size=(8.0, 3.6), ncols=2)
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
    _legend(ax_tpot, [found[n] for n in names if n in found] + [h for n, h in found.items() if n not in names])
    return _render(fig, title, simulated)


@_chart
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
    _check_series("series", series)
    palette = series_colours(series, colours)
    fig, (ax,) = _figure(title, simulated)
    parsed = {label: _pairs(f"series[{label!r}]", points) for label, points in series.items()}
    divisor = _time_axis(ax, (x for xs, _ys in parsed.values() for x in xs), "time")
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
    _legend(ax)
    return _render(fig, title, simulated)


@_chart
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
    _check_series("series", series)
    palette = series_colours(series, colours)
    fig, (ax,) = _figure(title, simulated)
    ticks: set[float] = set()
    for candidate, points in series.items():
        xs, ys = _pairs(f"series[{candidate!r}]", points)
        if any(x <= 0 for x in xs if not math.isnan(x)):
            raise ChartInputError(f"series[{candidate!r}]: context lengths must be positive")
        ticks.update(x for x in xs if not math.isnan(x))
        ax.plot(xs, ys, marker="o", markersize=3, color=palette[candidate], label=candidate)
    ax.set_xscale("log", base=2)
    _token_axis(ax, ticks)
    ax.set_xlabel(_("context length (tokens)"))
    ax.set_ylabel(f"TTFT {percentile} (ms)")
    _legend(ax)
    return _render(fig, title, simulated)


@_chart
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
    _check_series("data", data)
    palette = series_colours(data, colours)
    fig, (ax,) = _figure(title, simulated, size=(8.0, 3.6))
    names = list(data)
    top = 0.0
    modelled = False
    own_lines = []
    not_run = False
    for i, name in enumerate(names):
        off, on = _num(data[name].get("off")), _num(data[name].get("on"))
        own = _num(data[name].get("theory_own"))
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
    theory = [(i, _num(data[n].get("theoretical_on"))) for i, n in enumerate(names)]
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
        _mpl().Patch(
            facecolor="white",
            edgecolor=REFERENCE_SOFT,
            hatch="///",
            label=_("off (modelled): every request holds its own copy of the prefix")
            if modelled
            else _("off: measured with prefix caching off"),
        ),
        _mpl().Patch(facecolor=REFERENCE_SOFT, label=_("on: measured with prefix caching on (the candidate's colour)")),
    ]
    if theory:
        key.append(
            _mpl().Line2D(
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
            _mpl().Line2D(
                [],
                [],
                color=REFERENCE,
                linestyle="dashed",
                label=_("theory: every request allocates its own prompt")
                + (_(" (no caching-off run: the change is against it)") if not_run else ""),
            )
        )
    key.append(
        _mpl().Patch(
            facecolor="none", edgecolor="none", label=_("lower is better; the percentage is the change from off to on")
        )
    )
    _legend(ax, key)
    return _render(fig, title, simulated)


@_chart
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
    _check_series("series", series)
    palette = series_colours(series, colours)
    fig, (ax,) = _figure(title, simulated)
    parsed = {candidate: _pairs(f"series[{candidate!r}]", points) for candidate, points in series.items()}
    divisor = _time_axis(ax, (x for xs, _ys in parsed.values() for x in xs), "elapsed")
    for candidate, (xs, ys) in parsed.items():
        ax.plot([x / divisor for x in xs], ys, marker="o", markersize=3, color=palette[candidate], label=candidate)
        first = next((y for y in ys if not math.isnan(y)), None)
        if first is not None:
            ax.axhline(first, color=palette[candidate], linestyle="dotted", linewidth=0.8)
    ax.set_ylabel(metric)
    _legend(ax)
    return _render(fig, title, simulated)


@_chart
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
    _check_series("series", series)
    palette = series_colours(series, colours)
    fig, (top, bottom) = _figure(title, simulated, size=(7.0, 4.6), ncols=1, nrows=2)
    labels: list[str] = []
    for data in series.values():
        if len(data.get("labels") or ()) > len(labels):
            labels = list(data["labels"])
    width = 0.8 / max(len(series), 1)
    for index, (candidate, data) in enumerate(series.items()):
        xs = list(range(len(data["labels"])))
        ttft = [_num(v) for v in data["ttft_p95_ms"]]
        top.plot(xs, ttft, marker="o", markersize=3, drawstyle="steps-mid", color=palette[candidate], label=candidate)
        offset = (index - (len(series) - 1) / 2) * width
        failed = [_num(v) for v in data["failed"]]
        rejected = [_num(v) for v in data["rejected"]]
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
    if any(v > 0 for data in series.values() for v in (_num(x) for x in data["ttft_p95_ms"]) if not math.isnan(v)):
        top.set_yscale("log")
    top.set_ylabel(_("TTFT p95 (ms)"))
    top.set_xticks(range(len(labels)), [""] * len(labels))
    bottom.set_xticks(range(len(labels)), [wrap(label, TICK_WIDTH) for label in labels], fontsize=7)
    bottom.set_ylabel(_("failed requests"))
    top.grid(axis="x", visible=False)
    bottom.grid(axis="x", visible=False)
    key = [
        _mpl().Patch(facecolor=REFERENCE_SOFT, label=_("failed: OOM, crash or other errors")),
        _mpl().Patch(facecolor="white", edgecolor=REFERENCE_SOFT, hatch="///", label=_("rejected (HTTP 429/503)")),
    ]
    _legend(top)
    _legend(bottom, key)
    return _render(fig, title, simulated)


LINESTYLES = ("solid", "dashed", "dashdot", "dotted")


@_chart
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
        ax.plot(
            xs,
            ys,
            marker="os^D"[i % 4],
            markersize=3,
            color=colour or _colour(i),
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
    _token_axis(ax, xs)
    ax.set_xlabel(_("context length (tokens)"))
    ax.set_ylabel(_("memory (GiB)"))
    _legend(ax)
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
    return _render(fig, title, simulated)


@_chart
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
    xs, ys = _pairs("points", points)
    fig, (ax,) = _figure(title, simulated)
    divisor = _time_axis(ax, xs, "since_first")
    ax.plot([x / divisor for x in xs], ys, color=_colour(0), linewidth=1, label=_("arrivals"))
    if mean_rps is not None:
        reference_line(ax, mean_rps, _("mean %(rate)s req/s") % {"rate": f"{mean_rps:.3g}"})
    ax.set_ylabel(_("requests per second"))
    ax.set_ylim(bottom=0)
    _legend(ax)
    return _render(fig, title, simulated)


# --------------------------------------------------------------------------- model switch and isolation


@_chart
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
    _check_series("series", series)
    palette = series_colours(series, colours)
    fig, (ax,) = _figure(title, simulated, size=(8.0, 3.6))
    parsed = {name: _pairs(f"series[{name!r}].points", data.get("points") or []) for name, data in series.items()}
    spans = [x for xs, _ys in parsed.values() for x in xs] + [
        _num(t) for data in series.values() for t in (data.get("failed") or [])
    ]
    divisor = _time_axis(ax, spans, "time")
    for name, (xs, ys) in parsed.items():
        colour = palette[name]
        ax.scatter([x / divisor for x in xs], ys, s=6, color=colour, label=name)
        failed = [_num(t) / divisor for t in (series[name].get("failed") or [])]
        if failed:
            ax.scatter(failed, [0.0] * len(failed), marker="x", s=18, color=colour, linewidths=1)
        for key, style in (("switch_at", "solid"), ("rollback_at", "dotted")):
            at = _num(series[name].get(key))
            if not math.isnan(at):
                ax.axvline(at / divisor, color=colour, linestyle=style, linewidth=1)
    handles, _labels = ax.get_legend_handles_labels()
    if budget_ms is not None:
        handles.append(reference_line(ax, budget_ms, _("TTFT budget %(ms)s ms (p95)") % {"ms": f"{budget_ms:g}"}))
    handles.append(_mpl().Line2D([], [], color=REFERENCE_SOFT, linestyle="solid", label=_("switch")))
    handles.append(_mpl().Line2D([], [], color=REFERENCE_SOFT, linestyle="dotted", label=_("rollback")))
    handles.append(_mpl().Line2D([], [], color=REFERENCE_SOFT, marker="x", linestyle="none", label=_("failed request")))
    ax.set_ylabel(_("TTFT (ms)"))
    ax.set_ylim(bottom=0)
    _legend(ax, handles)
    return _render(fig, title, simulated)


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
            value = _num(data[name].get(key))
            if math.isnan(value):
                ax.text(x, 0, _("n/a"), ha="center", va="bottom", fontsize=7, color=NA)
                continue
            interval = data[name].get(f"{key}_interval")
            error = None
            if interval and len(interval) == 2 and not any(math.isnan(_num(v)) for v in interval):
                error = [[max(value - _num(interval[0]), 0.0)], [max(_num(interval[1]) - value, 0.0)]]
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
    return _mpl().Patch(
        facecolor="white" if hatch else REFERENCE_SOFT, edgecolor=REFERENCE_SOFT, hatch=hatch, label=label
    )


@_chart
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
    _check_series("data", data)
    fig, (ax,) = _figure(title, simulated, size=(8.0, 3.6))
    _bars_with_intervals(ax, data, (("alone", "///"), ("flood", None)), series_colours(data, colours))
    handles = [_bar_key(_("alone"), "///"), _bar_key(_("under the flood"), None)]
    if budget_ms is not None:
        handles.append(reference_line(ax, budget_ms, _("budget %(ms)s ms (p95)") % {"ms": f"{budget_ms:g}"}))
    ax.set_ylabel(metric)
    ax.set_ylim(bottom=0)
    _legend(ax, handles)
    return _render(fig, title, simulated)


@_chart
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
    _check_series("data", data)
    fig, (ax,) = _figure(title, simulated, size=(8.0, 3.6))
    bars = (("warm", "///"), ("resume", None), ("recompute", ".."))
    _bars_with_intervals(ax, data, bars, series_colours(data, colours))
    labels = (_("warm (resident)"), _("resumed after the pause"), _("recomputed (cache cleared)"))
    ax.set_ylabel(_("TTFT p50 (ms)"))
    ax.set_ylim(bottom=0)
    _legend(ax, [_bar_key(label, hatch) for label, (_key, hatch) in zip(labels, bars, strict=True)])
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
    "overload_steps": overload_steps,
    "capacity_memory_vs_context": capacity_memory_vs_context,
    "switch_timeline": switch_timeline,
    "tenant_isolation": tenant_isolation,
    "swap_phases": swap_phases,
}
