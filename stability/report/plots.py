"""Stage 6 (pictures, probed cases): a spec's probed cases → its gradient, variance and identity
figures (which a spec gets is `stability.report.spec_plots`'s choice).

- *gradient arrival*: r_l = ‖∂L/∂x_l‖ / ‖∂L/∂x_L‖ at every boundary l (log scale), one line per
  probed case; the `gradient_arrival` bound [lo, hi] is a shaded band, and the invariant judges
  r_0, the left end of each line.
- *activation variance*: Var(x_l) / Var(x_0) (or the second moment, as the spec's `statistic`
  says) at every boundary (log scale); the band is what `max_growth = "bounded"`, `max_ratio` and
  `min_ratio` allow.
- *identity at initialisation* (when the spec declares `identity_at_init`): for every zero-branch
  case, how far each boundary's second moment and gradient norm have moved from the identity's
  (both equal at every boundary when each block is the identity), and, as dots, the two errors the
  invariant judges (symmetric-log scale, so an exact 0 is drawn at 0).

Lines are coloured by depth (by weight init when the depth is fixed); the case that decided the
invariant is drawn thick on top, red when the expectation was not met. Figures are built on
`matplotlib.figure.Figure` with the Agg canvas (`stability.report.figures`): no pyplot, no global
state, no display needed. Only measurements are read here; nothing is rebuilt or re-probed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import ListedColormap, Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, MaxNLocator, NullLocator

from stability.report.figures import BAND_COLOR, DPI, FAIL_COLOR, FIGSIZE, legend_below, positive
from stability.run.results import CaseRecord
from stability.spec.case import Case

__all__ = [
    "BAND_EDGE_GID",
    "BAND_GID",
    "HIGHLIGHT_GID",
    "ENSEMBLE_GID",
    "Highlight",
    "gradient_figure",
    "identity_figure",
    "variance_figure",
]

#: `gid` of the shaded bound band and of the highlighted line, so tests and tools can find them.
BAND_GID = "stability-bound-band"
BAND_EDGE_GID = "stability-bound-edge"
HIGHLIGHT_GID = "stability-highlight"
#: `gid` of the dots that mark the two errors `identity_at_init` judges.
JUDGED_GID = "stability-judged"

#: The shaded min–max spread of the highlighted case's seed ensemble (stability/measure/ensemble.py).
ENSEMBLE_GID = "stability-ensemble-band"

_DECIDING_COLOR = "#111111"
#: viridis without its last, pale yellow stretch, which is hard to see on white.
_DEPTH_CMAP = ListedColormap(colormaps["viridis"](np.linspace(0.0, 0.82, 256)), name="depth")


@dataclass(frozen=True)
class Highlight:
    """The case to draw on top, and whether it is the failing one (red) or the closest (black)."""

    case: Case
    failed: bool

    @property
    def label(self) -> str:
        return "failing case" if self.failed else "deciding case"


def _gradient_ratios(record: CaseRecord) -> list[float] | None:
    m = record.measurements
    if m is None or not m.grad_norm:
        return None
    top = m.grad_norm[-1]
    if not (math.isfinite(top) and top > 0):
        return None
    return positive([g / top for g in m.grad_norm])


def _variance_ratios(record: CaseRecord, statistic: str) -> list[float] | None:
    m = record.measurements
    if m is None:
        return None
    values = m.act_var if statistic == "variance" else m.act_sq_mean
    if not values or not (math.isfinite(values[0]) and values[0] > 0):
        return None
    return positive([v / values[0] for v in values])


Colour = tuple[float, float, float, float]  # RGBA


def _colouring(records: Sequence[CaseRecord]) -> tuple[dict[Case, Colour], ScalarMappable | None, dict[str, Colour]]:
    """A colour per case: by depth (with a colour bar) when depths differ, else by weight init."""
    depths = sorted({r.case.depth for r in records})
    if len(depths) > 1:
        norm = Normalize(depths[0], depths[-1])
        mappable = ScalarMappable(norm=norm, cmap=_DEPTH_CMAP)
        return {r.case: _DEPTH_CMAP(float(norm(r.case.depth))) for r in records}, mappable, {}
    inits = sorted({r.case.weight_init for r in records})
    palette = colormaps["tab10"]
    by_init: dict[str, Colour] = {name: palette(i % 10) for i, name in enumerate(inits)}
    legend = by_init if len(inits) > 1 else {}
    return {r.case: by_init[r.case.weight_init] for r in records}, None, legend


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _power_of_ten(y: float, _pos: int | None = None) -> str:
    """Tick label 10ⁿ in plain text (mathtext labels cost most of the rendering time)."""
    if not (math.isfinite(y) and y > 0):
        return ""
    n = math.log10(y)
    if abs(n - round(n)) > 1e-9:
        return ""
    n = int(round(n))
    return {0: "1", 1: "10"}.get(n, "10" + str(n).translate(_SUPERSCRIPT))


def _short_label(ax: Axes, y: float) -> str:
    """Label the 2 and 5 ticks too when the axis spans under two decades (else it has one label)."""
    lo, hi = ax.get_ylim()
    if lo <= 0 or hi / lo >= 100:
        return ""
    return f"{y:g}"


def _new_figure() -> tuple[Figure, Axes]:
    fig = Figure(figsize=FIGSIZE, dpi=DPI)  # fixed margins: constrained layout doubles the time
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=0.125, right=0.975, bottom=0.135, top=0.925)
    ax = fig.add_subplot()
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, numticks=8))
    ax.yaxis.set_major_formatter(FuncFormatter(_power_of_ten))
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0), numticks=12))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _pos: _short_label(ax, y)))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, which="major", alpha=0.3)
    ax.set_xlabel("boundary l (input of block l; the last is the output)")
    return fig, ax


def _draw_lines(
    fig: Figure,
    ax: Axes,
    series: list[tuple[CaseRecord, list[float]]],
    highlight: Highlight | None,
) -> None:
    colours, mappable, by_init = _colouring([r for r, _ in series])
    alpha = 0.85 if len(series) <= 20 else max(0.25, 0.85 * 20 / len(series))
    top: tuple[CaseRecord, list[float]] | None = None
    for record, ys in series:
        if highlight is not None and record.case == highlight.case:
            top = (record, ys)
            continue
        ax.plot(range(len(ys)), ys, color=colours[record.case], lw=1.1, alpha=alpha)
    if top is not None and highlight is not None:
        record, ys = top
        top_colour = FAIL_COLOR if highlight.failed else _DECIDING_COLOR
        (line,) = ax.plot(
            range(len(ys)),
            ys,
            color=top_colour,
            lw=3.0,
            zorder=5,
            label=f"{highlight.label} (depth {record.case.depth})",
        )
        line.set_gid(HIGHLIGHT_GID)
    for name, colour in by_init.items():
        ax.plot([], [], color=colour, lw=2, label=f"init {name}")
    if mappable is not None:
        fig.subplots_adjust(right=0.915)  # room for the colour bar's ticks and label
        bar = fig.colorbar(mappable, ax=ax, label="depth", pad=0.015, aspect=30, fraction=0.05)
        bar.ax.yaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
        bar.ax.minorticks_off()


def _draw_band(ax: Axes, lo: float | None, hi: float | None, label: str) -> None:
    """Shade [lo, hi]; a missing side runs to the edge of what is plotted."""
    ax.autoscale_view()
    y0, y1 = ax.get_ylim()
    low = lo if lo is not None else min(y0, (hi or y0) / 10)
    high = hi if hi is not None else max(y1, (lo or y1) * 10)
    span = ax.axhspan(low, high, color=BAND_COLOR, alpha=0.13, zorder=0, label=label)
    span.set_gid(BAND_GID)
    for edge in (lo, hi):
        if edge is not None:
            ax.axhline(edge, color=BAND_COLOR, lw=1.0, ls="--", zorder=1, gid=BAND_EDGE_GID)
    ax.set_ylim(min(y0, low if lo is not None else y0) / 1.5, max(y1, high if hi is not None else y1) * 1.5)


def _finish(ax: Axes, title: str, note: str | None) -> None:
    ax.set_title(title, fontsize=11, loc="left")
    if not ax.lines:
        ax.text(
            0.5, 0.5, note or "no case was measured", transform=ax.transAxes, ha="center", va="center", color="#666666"
        )
    legend_below(ax)


def gradient_figure(
    records: Sequence[CaseRecord],
    *,
    bound: tuple[float, float] | None = None,
    highlight: Highlight | None = None,
    title: str = "gradient arrival",
) -> Figure:
    """‖∂L/∂x_l‖ / ‖∂L/∂x_L‖ per boundary, one line per case, with the [lo, hi] band."""
    fig, ax = _new_figure()
    series = [(r, ys) for r in records if (ys := _gradient_ratios(r)) is not None]
    _draw_lines(fig, ax, series, highlight)
    ax.set_ylabel("‖∂L/∂x_l‖ / ‖∂L/∂x_L‖")
    if bound is not None:
        lo, hi = bound
        _draw_band(ax, lo, hi, f"bound [{lo:g}, {hi:g}] at l = 0")
    _finish(ax, title, None)
    return fig


def variance_figure(
    records: Sequence[CaseRecord],
    *,
    statistic: str = "variance",
    band: tuple[float | None, float | None] | None = None,
    highlight: Highlight | None = None,
    title: str = "activation variance",
) -> Figure:
    """Var(x_l) / Var(x_0) (or E[x_l²] / E[x_0²]) per boundary, one line per case, with the band."""
    fig, ax = _new_figure()
    series = [(r, ys) for r in records if (ys := _variance_ratios(r, statistic)) is not None]
    _draw_lines(fig, ax, series, highlight)
    _draw_ensemble(ax, records, highlight, statistic)
    ax.set_ylabel("Var(x_l) / Var(x_0)" if statistic == "variance" else "E[x_l²] / E[x_0²]")
    if band is not None:
        lo, hi = band
        text = " ≤ ".join(
            filter(None, [f"{lo:g}" if lo is not None else "", "ratio", f"{hi:g}" if hi is not None else ""])
        )
        _draw_band(ax, lo, hi, f"allowed: {text}")
    _finish(ax, title, None)
    return fig


def ensemble_spread(record: CaseRecord, statistic: str) -> tuple[list[float], list[float], int] | None:
    """Per-boundary min and max of the ratio over the case's seed ensemble, and its size; None
    without an ensemble (or with fewer than two finite members)."""
    ens = None if record.measurements is None else record.measurements.extra.get("ensemble")
    if ens is None:
        return None
    rows = [
        [v / p[0] for v in p] for p in ens.profiles(statistic) if p and p[0] > 0 and all(math.isfinite(v) for v in p)
    ]
    if len(rows) < 2:
        return None
    cols = list(zip(*rows, strict=True))
    return [min(c) for c in cols], [max(c) for c in cols], len(rows)


def _draw_ensemble(ax: Axes, records: Sequence[CaseRecord], highlight: Highlight | None, statistic: str) -> None:
    """Shade the highlighted case's ensemble spread (min to max over its seeds) behind its line."""
    record = next((r for r in records if highlight is not None and r.case == highlight.case), None)
    spread = None if record is None else ensemble_spread(record, statistic)
    if spread is None:
        return
    lo, hi, size = spread
    colour = FAIL_COLOR if highlight is not None and highlight.failed else _DECIDING_COLOR
    band = ax.fill_between(
        range(len(lo)),
        positive(lo),
        positive(hi),
        color=colour,
        alpha=0.12,
        zorder=4,
        lw=0,
        label=f"its {size} seeds (min–max)",
    )
    band.set_gid(ENSEMBLE_GID)


def _identity_series(record: CaseRecord) -> tuple[list[float], list[float]] | None:
    """Per boundary l: |E[x_l²] − E[x_0²]| / E[x_0²] (forward) and |‖g_l‖ − ‖g_L‖| / ‖g_L‖
    (backward, g_l = ∂L/∂x_l). A stack of identity blocks has both exactly 0 everywhere."""
    m = record.measurements
    if m is None or not m.act_sq_mean or not m.grad_norm:
        return None
    q0, top = m.act_sq_mean[0], m.grad_norm[-1]
    if not (math.isfinite(q0) and q0 > 0 and math.isfinite(top) and top > 0):
        return None
    fwd = [abs(q - q0) / q0 if math.isfinite(q) else math.nan for q in m.act_sq_mean]
    bwd = [abs(g - top) / top if math.isfinite(g) else math.nan for g in m.grad_norm]
    return fwd, bwd


#: Linear range of the identity plot's symmetric-log axis: errors below it are rounding.
_ID_LINTHRESH = 1e-9


def identity_figure(
    records: Sequence[CaseRecord],
    *,
    atol: float | None = None,
    highlight: Highlight | None = None,
    title: str = "identity at initialisation",
) -> Figure:
    """How far each boundary is from the identity, one pair of lines per (zero-branch) case.

    Solid: |E[x_l²] − E[x_0²]| / E[x_0²]; dashed: |‖∂L/∂x_l‖ − ‖∂L/∂x_L‖| / ‖∂L/∂x_L‖. Dots: the
    errors `identity_at_init` judges, ‖f(x) − x‖/‖x‖ at the output (l = L) and
    ‖∂L/∂x_0 − ∂L/∂y‖/‖∂L/∂y‖ at the input (l = 0). The bound: [0, atol] shaded, or a line at 0.
    """
    fig, ax = _new_figure()
    ax.set_yscale("symlog", linthresh=_ID_LINTHRESH, linscale=0.4)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: "0" if y == 0 else _power_of_ten(y)))
    ax.yaxis.set_minor_locator(NullLocator())
    series = [(r, s) for r in records if (s := _identity_series(r)) is not None]
    colours, mappable, by_init = _colouring([r for r, _ in series])
    alpha = 0.85 if len(series) <= 20 else max(0.25, 0.85 * 20 / len(series))
    for record, (fwd, bwd) in sorted(series, key=lambda rs: highlight is not None and rs[0].case == highlight.case):
        top = highlight is not None and record.case == highlight.case
        colour = (
            (FAIL_COLOR if highlight.failed else _DECIDING_COLOR)
            if top and highlight is not None
            else colours[record.case]
        )
        lw, z = (3.0, 5) if top else (1.1, 2)
        xs = range(len(fwd))
        (line,) = ax.plot(xs, fwd, color=colour, lw=lw, alpha=1.0 if top else alpha, zorder=z)
        ax.plot(xs, bwd, color=colour, lw=lw, ls="--", alpha=1.0 if top else alpha, zorder=z)
        if top and highlight is not None:
            line.set_gid(HIGHLIGHT_GID)
            line.set_label(f"{highlight.label} (depth {record.case.depth})")
        m = record.measurements
        if m is not None:
            judged = [(len(fwd) - 1, m.identity_error), (0, m.input_grad_error)]
            px = [x for x, v in judged if v is not None and math.isfinite(v)]
            py = [v for _, v in judged if v is not None and math.isfinite(v)]
            ax.plot(px, py, ls="none", marker="o", ms=7 if top else 4, color=colour, zorder=z + 1, gid=JUDGED_GID)
    ax.plot([], [], color="#666666", lw=1.5, label="forward: |E[x_l²] − E[x_0²]| / E[x_0²]")
    ax.plot([], [], color="#666666", lw=1.5, ls="--", label="backward: |‖g_l‖ − ‖g_L‖| / ‖g_L‖")
    ax.plot(
        [],
        [],
        color="#666666",
        ls="none",
        marker="o",
        label="judged: ‖f(x) − x‖/‖x‖ (l = L), ‖∂L/∂x − ∂L/∂y‖/‖∂L/∂y‖ (l = 0)",
    )
    for name, colour in by_init.items():
        ax.plot([], [], color=colour, lw=2, label=f"init {name}")
    if mappable is not None:
        fig.subplots_adjust(right=0.915)
        bar = fig.colorbar(mappable, ax=ax, label="depth", pad=0.015, aspect=30, fraction=0.05)
        bar.ax.yaxis.set_major_locator(MaxNLocator(nbins=6, integer=True))
        bar.ax.minorticks_off()
    ax.set_ylabel("relative change from the input's")
    if atol is not None:
        if atol > 0:
            ax.axhspan(0.0, atol, color=BAND_COLOR, alpha=0.13, zorder=0, label=f"allowed: error ≤ {atol:g}").set_gid(
                BAND_GID
            )
            ax.axhline(atol, color=BAND_COLOR, lw=1.0, ls="--", zorder=1, gid=BAND_EDGE_GID)
        else:
            ax.axhline(0.0, color=BAND_COLOR, lw=2.0, zorder=1, gid=BAND_EDGE_GID, label="bound: exactly 0")
    # 0 at the bottom, then every other decade from 1e-8 up to the largest error (at least 1)
    values = [v for _, (fwd, bwd) in series for v in (*fwd, *bwd) if math.isfinite(v)]
    values += [
        v
        for r, _ in series
        if r.measurements is not None
        for v in (r.measurements.identity_error, r.measurements.input_grad_error)
        if v is not None and math.isfinite(v)
    ]
    y_top = max(1.0, max(values, default=1.0), atol or 0.0)
    decades = range(-8, math.ceil(math.log10(y_top)) + 1, 2)
    ax.yaxis.set_major_locator(FixedLocator([0.0, *(10.0**k for k in decades)]))
    ax.set_ylim(-_ID_LINTHRESH, 10.0 ** decades[-1] * 3)
    ax.set_title(title, fontsize=11, loc="left")
    if not series:
        ax.text(
            0.5,
            0.5,
            "no zero-branch case was probed",
            transform=ax.transAxes,
            ha="center",
            va="center",
            color="#666666",
        )
    legend_below(ax, fontsize=7, ncol=1)  # three long entries: one per row
    return fig
