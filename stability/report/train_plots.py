"""Stage 6 (pictures, training): a training invariant's verdict → a PNG-ready figure (which
figures a verdict gets is `stability.report.spec_plots`'s choice).

- *update size against width* (`update_size`, the coordinate-check plot of the `mup` package):
  RMS(Δh) at every boundary against the width, log-log, one line per boundary; the judged
  boundary is drawn thick, the cone RMS₀·(w/w₀)^(±max_abs_slope) the bound allows around it is
  shaded, and the first width outside it is marked with a red ✕.
- *loss curves* (`trainability`, `residual_size`): the training loss against the step, one line
  per trained depth; a run that diverged ends in a red ✕ at the step whose loss was not finite.

The language-model invariants' figures are `stability.report.lm_plots`'s. Only the verdict's
`extra` (what `stability.judge.train_invariants` recorded for the deciding case) is read; nothing
is trained again. Same conventions as `stability.report.plots` (`stability.report.figures`):
`Figure` + Agg, no pyplot.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, MaxNLocator, NullFormatter, NullLocator

from stability.report.figures import BAND_COLOR, FAIL_COLOR, legend_below, new_figure, positive

__all__ = ["FAILING_WIDTH_GID", "DIVERGED_GID", "CONE_GID", "update_size_figure", "loss_figure", "CAPTIONS"]

#: `gid`s of the marked failing width and of the shaded bound, so tests and tools can find them.
FAILING_WIDTH_GID = "stability-failing-width"
DIVERGED_GID = "stability-diverged-step"
CONE_GID = "stability-bound-cone"

#: What each figure kind shows (stability.report.html's captions).
CAPTIONS = {
    "update_size": "RMS change of the activation after the optimizer steps, against the width (log-log), one "
    "line per boundary; "
    "the judged boundary is thick. Shaded: the slopes the bound allows from the smallest width; red ✕: the "
    "first width outside it.",
    "loss": "Training loss against the step for each trained depth (log scale). A red ✕ marks a step whose "
    "loss was not finite.",
}


def update_size_figure(extra: dict[str, Any], *, failed: bool, title: str = "update size against width") -> Figure:
    """The coordinate check of one case from `update_size`'s verdict extra."""
    fig, ax = new_figure()
    widths: list[int] = extra.get("widths", [])
    rms: list[list[float | None]] = extra.get("rms", [])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("width")
    ax.set_ylabel("RMS(Δh) = ‖Δh‖ / √n")
    ax.set_title(title, fontsize=11, loc="left")
    if not widths or not rms:
        ax.text(0.5, 0.5, "not measured", transform=ax.transAxes, ha="center", va="center", color="#666666")
        return fig
    judged = extra.get("boundary")
    cmap = colormaps["viridis"]
    n = len(rms)
    for b, values in enumerate(rms):
        label = ("output" if b == n - 1 else f"boundary {b}") if n <= 8 else None
        if b == judged:
            continue
        ax.plot(
            widths,
            positive(values),
            color=cmap(0.85 * b / max(n - 1, 1)),
            lw=1.1,
            alpha=0.8,
            marker="o",
            ms=3,
            label=label,
        )
    if judged is not None:
        ys = positive(rms[judged])
        name = "output" if judged == n - 1 else f"boundary {judged}"
        ax.plot(
            widths,
            ys,
            color=FAIL_COLOR if failed else "#111111",
            lw=3.0,
            marker="o",
            ms=5,
            zorder=5,
            label=f"judged: {name} (slope {extra.get('slope', math.nan):.2f})",
        )
        b_max = float(extra.get("max_abs_slope", 0.0))
        w0, y0 = widths[0], ys[0]
        if math.isfinite(y0) and b_max > 0:
            w = np.geomspace(widths[0], widths[-1], 50)
            lo, hi = y0 * (w / w0) ** (-b_max), y0 * (w / w0) ** b_max
            cone = ax.fill_between(
                w, lo, hi, color=BAND_COLOR, alpha=0.15, zorder=0, label=f"bound |slope| ≤ {b_max:g}"
            )
            cone.set_gid(CONE_GID)
        failing = extra.get("failing_width")
        if failing is not None and failing in widths:
            y = ys[widths.index(failing)]
            mark = ax.scatter(
                [failing],
                [y if math.isfinite(y) else y0],
                marker="X",
                s=140,
                color=FAIL_COLOR,
                zorder=6,
                edgecolors="white",
                label=f"first width outside: {failing}",
            )
            mark.set_gid(FAILING_WIDTH_GID)
    ax.xaxis.set_major_locator(FixedLocator(widths))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(w) for w in widths])
    legend_below(ax)
    return fig


def loss_figure(extra: dict[str, Any], *, title: str = "training loss", series: str = "depth ") -> Figure:
    """Loss curves (one per depth) from `trainability`'s or `residual_size`'s verdict extra
    (`{"curves": {key: losses}}`, each labelled `series` + key)."""
    fig, ax = new_figure()
    curves: dict[str, list[float | None]] = extra.get("curves", {})
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title(title, fontsize=11, loc="left")
    palette = colormaps["tab10"]
    for i, (depth, losses) in enumerate(curves.items()):
        ys = positive(losses)
        ax.plot(
            range(len(ys)),
            ys,
            color=palette(i % 10),
            lw=1.5,
            label=f"{series}{depth}",
            marker="o" if len(ys) <= 20 else None,
            ms=4,
        )
        bad = [k for k, v in enumerate(losses) if v is None]
        if bad:
            finite = [y for y in ys if math.isfinite(y)]
            y = finite[-1] if finite else 1.0
            mark = ax.scatter(
                [bad[0]],
                [y],
                marker="X",
                s=140,
                color=FAIL_COLOR,
                zorder=6,
                edgecolors="white",
                label=f"{series}{depth}: not finite at step {bad[0]}",
            )
            mark.set_gid(DIVERGED_GID)
    if not curves:
        ax.text(0.5, 0.5, "not measured", transform=ax.transAxes, ha="center", va="center", color="#666666")
    else:
        _plain_log_labels(ax)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    legend_below(ax)
    return fig


def _plain_log_labels(ax: Any) -> None:
    """Log-axis labels as plain numbers (0.3, 1e+04), and the 2 and 5 ticks labelled only when the
    axis spans under two decades (mathtext labels would crowd the axis label)."""
    lo, hi = ax.get_ylim()
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:g}"))
    narrow = lo > 0 and hi / lo < 100
    ax.yaxis.set_minor_locator(LogLocator(base=10, subs=(2.0, 3.0, 5.0)))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _pos: f"{y:g}") if narrow else NullFormatter())
