"""Stage 6 (pictures, shared): what every report figure is built with.

The house look (size, resolution, the colours of a failure and of a bound), a plain figure on the
Agg canvas, values a log axis can show, the legend below the plot, power-of-two depth ticks, and
PNG rendering. Figures are `matplotlib.figure.Figure` with the Agg canvas: no pyplot, no global
state, no display needed. The figure modules (`stability.report.plots`, `train_plots`,
`lm_plots`) build on these; nothing here knows a spec or a verdict.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

__all__ = [
    "FIGSIZE",
    "DPI",
    "FAIL_COLOR",
    "BAND_COLOR",
    "new_figure",
    "positive",
    "legend_below",
    "power_of_two_ticks",
    "to_png",
]

FIGSIZE = (6.4, 3.7)  # inches; 640 × 370 px at the default dpi
DPI = 100
#: A failing case or step, and the bound a verdict is judged against.
FAIL_COLOR = "#d62728"
BAND_COLOR = "#2ca02c"


def new_figure() -> tuple[Figure, Any]:
    """One plain axes on the Agg canvas, with a grid and fixed margins."""
    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=0.14, right=0.975, bottom=0.135, top=0.925)
    ax = fig.add_subplot()
    ax.grid(True, which="major", alpha=0.3)
    return fig, ax


def positive(values: Sequence[float | None]) -> list[float]:
    """Values a log axis can show: None, zero, negative, NaN and inf become gaps (NaN)."""
    return [v if v is not None and math.isfinite(v) and v > 0 else math.nan for v in values]


#: Height of one legend row below the plot, in inches (8-point text and its spacing).
_LEGEND_ROW_IN = 0.19


def legend_below(ax: Axes, *, fontsize: float = 8, ncol: int = 2) -> None:
    """The legend under the plot, outside the axes, so it never covers a curve: the figure grows
    by the legend's rows and every axes in it (a colour bar too) keeps its size in inches."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    fig = ax.get_figure()
    if not isinstance(fig, Figure):  # a subfigure: no room to grow, keep the legend inside
        ax.legend(loc="best", fontsize=fontsize)
        return
    rows = math.ceil(len(handles) / ncol)
    extra = _LEGEND_ROW_IN * rows * fontsize / 8 + 0.12
    height = fig.get_figheight()
    grown = height + extra
    for a in fig.axes:  # the same place in inches, above the new strip
        p = a.get_position()
        a.set_position((p.x0, (p.y0 * height + extra) / grown, p.width, p.height * height / grown))
    fig.set_figheight(grown)
    box = ax.get_position()
    ax.legend(
        handles,
        labels,
        loc="lower center",
        bbox_to_anchor=(box.x0 + box.width / 2, 0.04 / grown),
        bbox_transform=fig.transFigure,
        ncol=ncol,
        fontsize=fontsize,
        frameon=False,
    )


def power_of_two_ticks(axis: Axis, lo: float, hi: float) -> None:
    """Label a log-scaled depth axis at the powers of two in [lo, hi] as plain numbers (1, 2, 4, 8,
    16, …; every second one beyond eight labels), with no minor labels (matplotlib's default
    writes a depth of 60 as "6×10¹")."""
    ticks = [
        2.0**k
        for k in range(math.floor(math.log2(max(lo, 1e-300))), math.ceil(math.log2(max(hi, 1.0))) + 1)
        if lo <= 2.0**k <= hi
    ]
    if len(ticks) > 8:
        ticks = ticks[:: math.ceil(len(ticks) / 8)]
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_locator(NullLocator())


def to_png(fig: Figure, *, dpi: int = DPI) -> bytes:
    """Render a figure to PNG bytes (Agg, no display)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()
