"""How every chart is drawn: matplotlib loaded on first use, the fixed rcParams, the figure with its
title and SIMULATED marks, the legend outside the plot, the SVG rendered deterministically, and the
input checks and axis helpers the chart modules share.

matplotlib is loaded when the first chart is drawn (`mpl`), not when a page module imports a chart
module: importing it costs about half a second (tests/architecture/test_lean_imports.py).
"""

from __future__ import annotations

import functools
import io
import math
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from benchmarks.charts.style import (
    LEGEND_WIDTH,
    PALETTE,
    RC,
    REFERENCE,
    SIMULATED_LABEL,
    TIME_LABELS,
    ChartInputError,
    thinned_log_ticks,
    time_unit,
    token_label,
    wrap,
)
from benchmarks.charts.style import translate as _

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def number(value: Any) -> float:
    """A float, NaN for missing (None/NaN/inf/non-numbers) so lines break instead of dropping to 0."""
    if value is None or isinstance(value, bool):
        return math.nan
    try:
        parsed = float(value)
    except (TypeError, ValueError):
        return math.nan
    return parsed if math.isfinite(parsed) else math.nan


def xy_pairs(name: str, points: Iterable[Sequence[Any]]) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for index, point in enumerate(points):
        if not isinstance(point, (list, tuple)) or len(point) != 2:
            raise ChartInputError(f"{name}[{index}]: expected an (x, y) pair, got {point!r}")
        xs.append(number(point[0]))
        ys.append(number(point[1]))
    return xs, ys


def check_series(name: str, series: Mapping[str, Any]) -> None:
    if not isinstance(series, Mapping) or not series:
        raise ChartInputError(f"{name}: expected a non-empty mapping of label -> data")


def reference_line(ax: Any, y: float, label: str) -> Any:
    """The dashed grey line every chart draws for a budget or a reference level."""
    return ax.axhline(y, color=REFERENCE, linestyle="dashed", linewidth=1, label=label)


def new_figure(title: str, simulated: bool, size: tuple[float, float] = (7.0, 3.6), ncols: int = 1, nrows: int = 1):
    fig = mpl().Figure(figsize=size)
    mpl().FigureCanvasSVG(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False).flatten()
    shown = f"{title} ({_(SIMULATED_LABEL)})" if simulated else title
    fig.suptitle(wrap(shown, 90), fontsize=11)
    return fig, list(axes)


def legend(ax, handles=None):
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


def render_svg(fig: Figure, title: str, simulated: bool) -> str:
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
def mpl() -> SimpleNamespace:
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


def chart(draw):
    """Run a chart function under the module's fixed rcParams (global state left untouched)."""

    def wrapper(*args, **kwargs):
        with mpl().rc_context(RC):
            return draw(*args, **kwargs)

    wrapper.__name__ = draw.__name__
    wrapper.__doc__ = draw.__doc__
    wrapper.__wrapped__ = draw
    return wrapper


def indexed_colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def token_axis(ax, values: Iterable[float]) -> None:
    ticks = thinned_log_ticks(values)
    if ticks:
        ax.set_xticks(ticks, [token_label(t) for t in ticks])
        ax.minorticks_off()


def time_axis(ax, spans: Iterable[float], kind: str) -> float:
    """Set the axis label in the unit the span fits; returns the divisor for the x values."""
    span = max((s for s in spans if not math.isnan(s)), default=0.0)
    unit, divisor = time_unit(span)
    ax.set_xlabel(_(TIME_LABELS[kind][unit]))
    return divisor


# --------------------------------------------------------------------------- charts
