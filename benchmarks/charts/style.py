"""What every chart shares and that needs no matplotlib: the translator the fixed texts go through,
the palette and the candidates' colours, the time and token units, and label wrapping.

The web app and the PDF set Django's gettext for the duration of a request (`translated`), so charts
follow the page's language while the package stays free of Django. Modules that draw import
`translate` as `_`, so `makemessages` collects their texts.
"""

from __future__ import annotations

import contextvars
import math
import re
import unicodedata
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, Mapping

SIMULATED_LABEL = "SIMULATED"
# Axis and legend texts go through this translator; the web app and the PDF set Django's gettext
# for the duration of a request (`translated`), so charts follow the page's language while this
# package stays free of Django.
_translator: contextvars.ContextVar[Callable[[str], str]] = contextvars.ContextVar(
    "kvselect_chart_translator", default=lambda text: text
)


def translate(text: str) -> str:
    """`text` in the language charts are drawn in now (see `translated`)."""
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


def display_width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


_CJK = "\u2e80-\u9fff\u3000-\u303f\uff00-\uffef"  # CJK characters and punctuation: a line may break between any two
_WRAP_TOKENS = re.compile(rf"\s+|[{_CJK}]|[^\s{_CJK}]+")


def wrap(text: str, width: int) -> str:
    """`text` on lines of at most `width` columns (a CJK character is two): at spaces, between CJK
    characters, and inside a word longer than a line (a long unbroken name never runs off)."""
    text = str(text)
    if display_width(text) <= width:
        return text
    lines: list[str] = []
    line, used = "", 0
    for token in _WRAP_TOKENS.findall(text):
        if token.isspace():
            if line:
                line, used = line + " ", used + 1
            continue
        while display_width(token) > width:  # a word longer than a line: cut it
            if line.strip():
                lines.append(line.rstrip())
                line, used = "", 0
            cut = 0
            while cut < len(token) and display_width(token[: cut + 1]) <= width:
                cut += 1
            lines.append(token[:cut])
            token = token[cut:]
        size = display_width(token)
        if line.strip() and used + size > width:
            lines.append(line.rstrip())
            line, used = "", 0
        line, used = line + token, used + size
    if line.strip():
        lines.append(line.rstrip())
    return "\n".join(lines)
