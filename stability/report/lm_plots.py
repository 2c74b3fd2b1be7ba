"""Stage 6 (pictures, language-model runs): a language-model invariant's verdict → its figures
(Wortsman et al. 2023's plots), chosen per invariant by `stability.report.spec_plots`.

- *largest attention logit against the step* (`attention_logits`), log scale, with the bound
  `max_logit` and the first step over it marked; and the run's loss curve;
- *log Z against the step* (`output_logits`): the mean over the scored tokens, the band from the
  smallest to the largest, the bound ±max_abs_logz from the step it is judged on, the first
  step over it marked;
- *the loss and its spike ceiling* (`loss_spike`): the loss of every step, max_factor × the mean
  of the `window` steps before it, and the step of the spike (or the closest one) marked;
- *the early-warning indicator against the step* (`early_warning`): its value as it stood at each
  recorded step of the first `steps`, the threshold, and the loss so far;
- *loss curves per learning rate* and *final loss against learning rate* (`lr_sensitivity`, the
  paper's LR-sensitivity curve): one line per seed, their mean thick, the initial loss L₀ and the
  task's entropy rate H as references.

Only the verdict's `extra` and the spec's expectation are read; nothing is trained again. Same
conventions as `stability.report.train_plots` (`stability.report.figures`): `Figure` + Agg, no
pyplot, `gid`s on what a test or tool looks for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from stability.report.figures import BAND_COLOR, FAIL_COLOR, new_figure, positive
from stability.report.train_plots import DIVERGED_GID, loss_figure

__all__ = [
    "BOUND_GID",
    "MARK_GID",
    "MEAN_GID",
    "LM_CAPTIONS",
    "attention_logit_figure",
    "log_z_figure",
    "loss_spike_figure",
    "early_warning_figure",
    "lr_loss_figure",
    "lr_curve_figure",
]

#: `gid`s of the bound (or threshold) drawn, of the marked step or learning rate, and of a mean over seeds.
BOUND_GID = "stability-lm-bound"
MARK_GID = "stability-lm-mark"
MEAN_GID = "stability-lm-mean"

#: What each figure kind shows (stability.report.html's captions).
LM_CAPTIONS = {
    "attention_logits": "Largest attention logit (over layers, heads, queries and the keys they see) at each "
    "recorded step (log scale). Dashed: the bound max_logit; red ✕: the first step "
    "over it.",
    "lm_loss": "Training loss of each step's batch, before its update, against the step. A red ✕ marks a "
    "step whose loss was not finite.",
    "log_z": "log Z of the output softmax at each recorded step: the mean over the scored tokens (line) and "
    "the smallest to the largest (shaded). "
    "Dashed: ±max_abs_logz from the step it is judged on; red ✕: the first step over it.",
    "loss_spike": "Training loss of each step (line) and the ceiling max_factor × the mean of the window "
    "steps before it (dashed). "
    "Red ✕: the step over the ceiling, or (when none is) the step closest to it.",
    "early_warning": "The early-warning indicator as it stood at each recorded step of the first steps (left "
    "axis; log scale for the logit "
    "indicators), the threshold (dashed), and the training loss so far (grey, right axis). Red ✕: the "
    "warning at the last step.",
    "lr_losses": "Training loss against the step at each learning rate of the grid: the mean over the seeds "
    "of the ensemble (thick) and each seed (thin).",
    "lr_curve": "Final held-out loss against the learning rate (log scale), the learning-rate sensitivity "
    "curve of Wortsman et al. 2023: each seed (thin), "
    "their mean (thick); a diverged run is drawn at the initial loss L₀ (its value in the LRS). Dotted: L₀ "
    "and the task's entropy rate H.",
}


def _mark(ax: Any, x: float, y: float, label: str) -> None:
    mark = ax.scatter([x], [y], marker="X", s=140, color=FAIL_COLOR, zorder=6, edgecolors="white", label=label)
    mark.set_gid(MARK_GID)


def _bound(ax: Any, y: float, label: str, **kw: Any) -> None:
    line = ax.axhline(y, color=BAND_COLOR, ls="--", lw=1.4, label=label, **kw)
    line.set_gid(BOUND_GID)


def _empty(ax: Any) -> None:
    ax.text(0.5, 0.5, "not measured", transform=ax.transAxes, ha="center", va="center", color="#666666")


def attention_logit_figure(extra: dict[str, Any], expectation: Any, *, failed: bool) -> Figure:
    fig, ax = new_figure()
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("largest attention logit")
    ax.set_title(f"largest attention logit (lr {extra.get('lr', math.nan):g}, deciding case)", fontsize=11, loc="left")
    steps: list[int] = extra.get("steps", [])
    ys = positive(extra.get("max_logit", []))
    if not steps:
        _empty(ax)
        return fig
    ax.plot(steps, ys, color=FAIL_COLOR if failed else "#111111", lw=2.0, marker="o", ms=3, label="largest logit")
    if expectation.max_logit is not None:
        _bound(ax, expectation.max_logit, f"bound max_logit = {expectation.max_logit:g}")
    first = extra.get("first_step")
    if first is not None and first in steps:
        y = ys[steps.index(first)]
        _mark(ax, first, y if math.isfinite(y) else expectation.max_logit or 1.0, f"over the bound at step {first}")
    ax.legend(loc="best", fontsize=8, framealpha=0.85)
    return fig


def lm_loss_figure(extra: dict[str, Any], *, title: str) -> Figure:
    return loss_figure(
        {"curves": {f"lr {extra.get('lr', math.nan):g}": extra.get("losses", [])}}, title=title, series=""
    )


def log_z_figure(extra: dict[str, Any], expectation: Any, *, failed: bool, steps_total: int) -> Figure:
    fig, ax = new_figure()
    ax.set_xlabel("step")
    ax.set_ylabel("log Z")
    ax.set_title(
        f"log Z of the output softmax (lr {extra.get('lr', math.nan):g}, deciding case)", fontsize=11, loc="left"
    )
    steps: list[int] = extra.get("steps", [])
    if not steps:
        _empty(ax)
        return fig
    nan = [math.nan if v is None else v for v in extra.get("logz_mean", [])]
    lo = [math.nan if v is None else v for v in extra.get("logz_min", [])]
    hi = [math.nan if v is None else v for v in extra.get("logz_max", [])]
    ax.fill_between(steps, lo, hi, color="#1f77b4", alpha=0.18, lw=0, label="smallest … largest over the tokens")
    ax.plot(
        steps, nan, color=FAIL_COLOR if failed else "#1f77b4", lw=2.0, marker="o", ms=3, label="mean over the tokens"
    )
    start = math.ceil(expectation.after * steps_total)
    bound = expectation.max_abs_logz
    for sign in (1.0, -1.0):
        line = ax.hlines(
            sign * bound,
            start,
            max(steps[-1], start),
            colors=BAND_COLOR,
            linestyles="--",
            lw=1.4,
            label=f"±{bound:g} ({expectation.statistic}, from step {start})" if sign > 0 else None,
        )
        line.set_gid(BOUND_GID)
    first = extra.get("first_step")
    if first is not None and first in steps:
        i = steps.index(first)
        y = nan[i] if expectation.statistic == "mean" else (hi[i] if abs(hi[i]) >= abs(lo[i]) else lo[i])
        _mark(ax, first, y if math.isfinite(y) else bound, f"over the bound at step {first}")
    ax.legend(loc="best", fontsize=8, framealpha=0.85)
    return fig


def loss_spike_figure(extra: dict[str, Any], expectation: Any, *, failed: bool) -> Figure:
    fig, ax = new_figure()
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title(
        f"loss and its spike ceiling (lr {extra.get('lr', math.nan):g}, deciding case)", fontsize=11, loc="left"
    )
    losses = [math.nan if v is None else v for v in extra.get("losses", [])]
    window = int(extra.get("window", expectation.window))
    if len(losses) <= window:
        _empty(ax)
        return fig
    ax.plot(range(len(losses)), losses, color="#111111", lw=1.3, label="loss")
    arr = np.asarray(losses, dtype=np.float64)
    ceiling = [expectation.max_factor * float(np.mean(arr[t - window : t])) for t in range(window, len(arr))]
    line = ax.plot(
        range(window, len(arr)),
        ceiling,
        color=BAND_COLOR,
        ls="--",
        lw=1.4,
        label=f"{expectation.max_factor:g} × mean of the {window} steps before",
    )[0]
    line.set_gid(BOUND_GID)
    step = extra.get("step")
    if step is not None and 0 <= step < len(losses):
        y = losses[step]
        finite = [v for v in losses if math.isfinite(v)]
        _mark(
            ax,
            step,
            y if math.isfinite(y) else max(finite, default=1.0),
            f"{'spike' if failed else 'closest'} at step {step}",
        )
    ax.legend(loc="best", fontsize=8, framealpha=0.85)
    return fig


def early_warning_figure(extra: dict[str, Any], expectation: Any, *, failed: bool) -> Figure:
    fig, ax = new_figure()
    name = extra.get("indicator", expectation.indicator)
    logit = name in ("logit_growth", "max_logit")
    if logit:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(name)
    ax.set_title(
        f"early warning: {name} over the first {expectation.steps} steps (lr {extra.get('lr', math.nan):g})",
        fontsize=11,
        loc="left",
    )
    steps: list[int] = extra.get("recorded", [])
    curve = [math.nan if v is None else v for v in extra.get("curve", [])]
    if not steps:
        _empty(ax)
        return fig
    ax.plot(
        steps,
        positive(curve) if logit else curve,
        color=FAIL_COLOR if failed else "#111111",
        lw=2.0,
        marker="o",
        ms=4,
        label=name,
    )
    _bound(ax, expectation.threshold, f"threshold {expectation.threshold:g}")
    if failed:
        _mark(
            ax,
            steps[-1],
            curve[-1] if math.isfinite(curve[-1]) else expectation.threshold,
            f"warning after {expectation.steps} steps",
        )
    losses = [math.nan if v is None else v for v in extra.get("losses", [])]
    if losses:
        fig.subplots_adjust(right=0.88)
        twin = ax.twinx()
        twin.plot(range(len(losses)), losses, color="#999999", lw=1.0, label="loss")
        twin.set_ylabel("training loss", color="#777777")
        twin.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:.3g}"))
    ax.legend(loc="upper left", fontsize=8, framealpha=0.85)
    return fig


def _lrs(extra: dict[str, Any]) -> list[float]:
    return [float(v) for v in extra.get("lrs", [])]


def lr_loss_figure(extra: dict[str, Any]) -> Figure:
    fig, ax = new_figure()
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title("loss curves per learning rate (the deciding case's ensemble)", fontsize=11, loc="left")
    lrs = _lrs(extra)
    curves: dict[str, dict[str, list[float | None]]] = extra.get("curves", {})
    if not lrs or not curves:
        _empty(ax)
        return fig
    cmap = colormaps["plasma"]
    for i, lr in enumerate(lrs):
        color = cmap(0.85 * i / max(len(lrs) - 1, 1))
        rows = [[math.nan if v is None else v for v in seed[f"{lr:g}"]] for seed in curves.values()]
        for row in rows:
            ax.plot(range(len(row)), positive(row), color=color, lw=0.6, alpha=0.35)
        length = max(len(r) for r in rows)
        padded = np.asarray([r + [math.nan] * (length - len(r)) for r in rows], dtype=np.float64)
        with np.errstate(all="ignore"):
            mean = np.nanmean(padded, axis=0) if np.isfinite(padded).any() else padded[0]
        line = ax.plot(range(length), positive(list(mean)), color=color, lw=2.0, label=f"lr {lr:g}")[0]
        line.set_gid(MEAN_GID)
        bad = [j for j, r in enumerate(rows) if any(not math.isfinite(v) for v in r)]
        if bad:
            mark = ax.scatter(
                [len(rows[bad[0]]) - 1],
                [float(np.nanmax(padded))],
                marker="X",
                s=90,
                color=FAIL_COLOR,
                zorder=6,
                edgecolors="white",
                label=f"lr {lr:g}: {len(bad)} seed(s) diverged",
            )
            mark.set_gid(DIVERGED_GID)
    ax.legend(loc="best", fontsize=8, framealpha=0.85)
    return fig


def _capped(values: Sequence[float | None], initial: float) -> list[float]:
    """A diverged run's final loss is L₀, as in the LRS (stability.judge.lr_sensitivity.lrs_of)."""
    return [min(v, initial) if v is not None and math.isfinite(v) else initial for v in values]


def lr_curve_figure(extra: dict[str, Any], expectation: Any, *, failed: bool) -> Figure:
    fig, ax = new_figure()
    ax.set_xscale("log")
    ax.set_xlabel("learning rate")
    ax.set_ylabel("final held-out loss")
    ax.set_title("final loss against learning rate (LR sensitivity)", fontsize=11, loc="left")
    lrs = _lrs(extra)
    finals: dict[str, list[float | None]] = extra.get("final_loss", {})
    initial: dict[str, float] = extra.get("initial_loss", {})
    if not lrs or not finals:
        _empty(ax)
        return fig
    rows = [_capped(v, initial.get(seed, math.inf)) for seed, v in finals.items()]
    for row in rows:
        ax.plot(lrs, row, color="#888888", lw=0.8, alpha=0.6, marker="o", ms=2)
    mean = [float(np.mean([r[i] for r in rows])) for i in range(len(lrs))]
    line = ax.plot(
        lrs,
        mean,
        color=FAIL_COLOR if failed else "#111111",
        lw=2.4,
        marker="o",
        ms=5,
        label=f"mean over {len(rows)} seed(s)",
    )[0]
    line.set_gid(MEAN_GID)
    l0 = float(np.mean(list(initial.values()))) if initial else math.nan
    h = float(np.mean(list(extra.get("entropy_rate", {}).values()) or [math.nan]))
    if math.isfinite(l0):
        ax.axhline(l0, color="#555555", ls=":", lw=1.2, label=f"initial loss L₀ ≈ {l0:.3g}")
    if math.isfinite(h):
        ax.axhline(h, color=BAND_COLOR, ls=":", lw=1.2, label=f"entropy rate H ≈ {h:.3g}")
    ax.legend(loc="best", fontsize=8, framealpha=0.85)
    return fig
