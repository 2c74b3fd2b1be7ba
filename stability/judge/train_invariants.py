"""Stage 5 (training): optimizer runs → Verdicts for `update_size`, `trainability` and `residual_size`.

The verdict functions are pure functions of `stability.measure.train`'s measurements, like
`stability.judge.invariants`; `stability.run.training.evaluate` runs the measurement one case needs
and calls them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from stability.judge.invariants import Verdict
from stability.measure.train import TrainRun
from stability.measure.train_update import UpdateSweep

__all__ = ["update_size", "trainability", "residual_size", "boundary_name"]


def _finite(values: Sequence[float]) -> list[float | None]:
    """JSON-safe numbers: NaN and inf become None."""
    return [float(v) if math.isfinite(v) else None for v in values]


def boundary_name(b: int, n_boundaries: int) -> str:
    """Boundary b of h_0 … h_L, then the readout's output."""
    if b == n_boundaries - 1:
        return "the output (readout)"
    if b == 0:
        return "boundary 0 (the input layer's output, input of block 0)"
    return f"boundary {b} (output of block {b - 1})"


# ----------------------------------------------------------------------------- update_size


def update_size(sweep: UpdateSweep, *, max_abs_slope: float = 0.25, at: str = "all") -> Verdict:
    """µP's promise as a bound (Yang et al. 2021, Desiderata: every activation's update is Θ(1)
    coordinate-wise): |d log RMS(Δh) / d log width| ≤ max_abs_slope at every boundary (`at =
    "all"`) or at the readout's output only (`at = "output"`). Judged at the boundary with the
    largest |slope|; the failing width is the first whose RMS(Δh) leaves the cone
    RMS₀·(w/w₀)^(±max_abs_slope) drawn from the smallest width."""
    bound = f"|slope| ≤ {max_abs_slope:g}"
    n = len(sweep.slopes)
    candidates = [n - 1] if at == "output" else list(range(n))
    extra: dict[str, Any] = {
        "widths": list(sweep.widths),
        "slopes": _finite(sweep.slopes),
        "rms": [_finite(sweep.rms(b)) for b in range(n)],
        "at": at,
        "max_abs_slope": max_abs_slope,
        "weight_change": {
            k: _finite([r.weight_change[k] for r in sweep.records]) for k in sweep.records[0].weight_change
        },
    }
    for r in sweep.records:
        if r.run.diverged_at is not None:
            return Verdict(
                invariant="update_size",
                passed=False,
                observed=math.nan,
                bound=bound,
                block=None,
                detail=f"the loss became non-finite at step {r.run.diverged_at} at width {r.width}; lower train.lr",
                extra=extra,
            )
    bad = [b for b in candidates if not math.isfinite(sweep.slopes[b])]
    if bad:
        b = bad[0]
        values = sweep.rms(b)
        w = next(w for w, v in zip(sweep.widths, values, strict=True) if not (math.isfinite(v) and v > 0))
        extra.update(boundary=b, failing_width=w)
        return Verdict(
            invariant="update_size",
            passed=False,
            observed=math.nan,
            bound=bound,
            block=b,
            detail=f"RMS(Δh) at {boundary_name(b, n)} is {values[sweep.widths.index(w)]:.3g} at width {w}: no "
            "slope on a log scale "
            "(an update of exactly zero means that layer does not learn; raise train.lr or train.steps)",
            extra=extra,
        )
    worst = max(candidates, key=lambda b: abs(sweep.slopes[b]))
    slope = sweep.slopes[worst]
    values = sweep.rms(worst)
    w0, v0 = sweep.widths[0], values[0]
    outside = [
        w
        for w, v in zip(sweep.widths[1:], values[1:], strict=True)
        if abs(math.log(v / v0) / math.log(w / w0)) > max_abs_slope
    ]
    failing = outside[0] if outside else sweep.widths[-1]
    extra.update(boundary=worst, slope=slope)
    where = boundary_name(worst, n)
    growth = f"RMS(Δh) ∝ width^{slope:.2f} at {where} (×{values[-1] / v0:.3g} from width {w0} to {sweep.widths[-1]})"
    if abs(slope) <= max_abs_slope:
        return Verdict(
            invariant="update_size",
            passed=True,
            observed=slope,
            bound=bound,
            block=worst,
            detail=f"{growth}: the update size does not depend on the width",
            extra=extra,
        )
    extra["failing_width"] = failing
    trend = "grows" if slope > 0 else "shrinks"
    fix = (
        'use µP (train.parametrization = "mup") or scale the hidden learning rates by 1/width'
        if slope > 0
        else "the layer stops learning as the width grows; use µP's learning-rate scaling"
    )
    return Verdict(
        invariant="update_size",
        passed=False,
        observed=slope,
        bound=bound,
        block=worst,
        detail=f"{growth}: the update {trend} with the width, first outside the bound at width {failing}; {fix}",
        extra=extra,
    )


# ----------------------------------------------------------------------------- trainability


def trainability(
    runs: Sequence[TrainRun],
    *,
    max_loss_ratio: float | None = None,
    compare_depths: tuple[int, int] | None = None,
    max_depth_ratio: float = 1.0,
) -> Verdict:
    """Judge one run (or, with compare_depths, a shallow and a deep run trained the same way):
    every loss finite; final/initial ≤ max_loss_ratio when given; the deep run's final loss ≤
    max_depth_ratio × the shallow run's (He et al. 2016: deeper plain stacks degrade)."""
    parts = ["finite"]
    if max_loss_ratio is not None:
        parts.append(f"final/initial ≤ {max_loss_ratio:g}")
    if compare_depths is not None:
        parts.append(f"loss(depth {compare_depths[1]}) ≤ {max_depth_ratio:g}×loss(depth {compare_depths[0]})")
    bound = ", ".join(parts)
    extra: dict[str, Any] = {
        "curves": {str(r.depth): _finite(r.losses) for r in runs},
        "steps": runs[0].steps if runs else 0,
    }
    for r in runs:
        if r.diverged_at is not None:
            extra["diverged_at"] = r.diverged_at
            return Verdict(
                invariant="trainability",
                passed=False,
                observed=math.inf,
                bound=bound,
                block=None,
                detail=f"the loss became non-finite at step {r.diverged_at} (depth {r.depth}, loss "
                f"{r.losses[max(r.diverged_at - 1, 0)]:.3g} "
                f"the step before): the run diverged; lower train.lr or add train.warmup steps",
                extra=extra,
            )
    ratios = {r.depth: r.final / r.initial if r.initial > 0 else math.nan for r in runs}
    extra["loss_ratio"] = {str(d): v if math.isfinite(v) else None for d, v in ratios.items()}
    if max_loss_ratio is not None:
        for r in runs:
            q = ratios[r.depth]
            if not q <= max_loss_ratio:
                return Verdict(
                    invariant="trainability",
                    passed=False,
                    observed=q,
                    bound=bound,
                    block=None,
                    detail=f"the loss fell only to {q:.3g} of its start ({r.initial:.3g} → {r.final:.3g} in "
                    f"{r.steps} steps, depth {r.depth}); bound {max_loss_ratio:g}",
                    extra=extra,
                )
    if compare_depths is not None:
        shallow, deep = runs[0], runs[1]
        q = deep.final / shallow.final if shallow.final > 0 else math.inf
        extra["depth_ratio"] = q
        text = (
            f"after {deep.steps} steps the depth-{deep.depth} stack's loss is {deep.final:.3g}, {q:.3g}× "
            f"the depth-{shallow.depth} stack's {shallow.final:.3g}"
        )
        if q <= max_depth_ratio:
            return Verdict(
                invariant="trainability",
                passed=True,
                observed=q,
                bound=bound,
                block=None,
                detail=text + ": deeper is no worse",
                extra=extra,
            )
        return Verdict(
            invariant="trainability",
            passed=False,
            observed=q,
            bound=bound,
            block=None,
            detail=text + ": the deeper stack trains worse (the degradation problem)",
            extra=extra,
        )
    r = runs[0]
    q = ratios[r.depth]
    return Verdict(
        invariant="trainability",
        passed=True,
        observed=q,
        bound=bound,
        block=None,
        detail=f"the loss fell to {q:.3g} of its start ({r.initial:.3g} → {r.final:.3g} in {r.steps} steps)",
        extra=extra,
    )


# ----------------------------------------------------------------------------- residual_size


def residual_size(
    runs: Sequence[TrainRun],
    *,
    max_mean: float | None = None,
    compare_depths: tuple[int, int] | None = None,
    max_depth_ratio: float = 1.0,
) -> Verdict:
    """After training, the mean over blocks of ‖x_(l+1) − x_l‖/‖x_l‖ (the branch's relative
    output ‖F(x)‖/‖x‖ of an identity-skip block): ≤ max_mean, and with compare_depths the deep
    stack's mean ≤ max_depth_ratio × the shallow one's (He et al. 2015, Sec. 4.2: "the deeper
    ResNet has smaller magnitudes of responses")."""
    parts = []
    if max_mean is not None:
        parts.append(f"mean ≤ {max_mean:g}")
    if compare_depths is not None:
        parts.append(f"mean(depth {compare_depths[1]}) ≤ {max_depth_ratio:g}×mean(depth {compare_depths[0]})")
    bound = ", ".join(parts) or "finite"
    extra: dict[str, Any] = {
        "residuals": {str(r.depth): _finite(r.residuals) for r in runs},
        "curves": {str(r.depth): _finite(r.losses) for r in runs},
    }
    means: dict[int, float] = {}
    for r in runs:
        if r.diverged_at is not None:
            return Verdict(
                invariant="residual_size",
                passed=False,
                observed=math.nan,
                bound=bound,
                block=None,
                detail=f"the run diverged at step {r.diverged_at} (depth {r.depth}), so there is no trained "
                "network to measure; lower train.lr",
                extra=extra,
            )
        if not r.residuals or not all(math.isfinite(v) for v in r.residuals):
            return Verdict(
                invariant="residual_size",
                passed=False,
                observed=math.nan,
                bound=bound,
                block=None,
                detail="a block changes the shape of its input (or a boundary is zero), so ‖x_(l+1) − "
                "x_l‖/‖x_l‖ is undefined",
                extra=extra,
            )
        means[r.depth] = float(np.mean(r.residuals))
    extra["means"] = {str(d): v if math.isfinite(v) else None for d, v in means.items()}
    last = runs[-1]
    mean = means[last.depth]
    block = int(np.argmax(last.residuals))
    text = (
        f"after {last.steps} steps the blocks change the signal by {mean:.3g} on average (most: block "
        f"{block}, {last.residuals[block]:.3g})"
    )
    if max_mean is not None and mean > max_mean:
        return Verdict(
            invariant="residual_size",
            passed=False,
            observed=mean,
            bound=bound,
            block=block,
            detail=text + f" at depth {last.depth}, above {max_mean:g}",
            extra=extra,
        )
    if compare_depths is not None:
        q = mean / means[runs[0].depth] if means[runs[0].depth] > 0 else math.inf
        extra["depth_ratio"] = q
        text += f" at depth {last.depth}, {q:.3g}× the depth-{runs[0].depth} stack's {means[runs[0].depth]:.3g}"
        if q > max_depth_ratio:
            return Verdict(
                invariant="residual_size",
                passed=False,
                observed=mean,
                bound=bound,
                block=block,
                detail=text + ": the residuals do not shrink with depth",
                extra=extra,
            )
        return Verdict(
            invariant="residual_size",
            passed=True,
            observed=mean,
            bound=bound,
            block=block,
            detail=text + ": smaller in the deeper stack",
            extra=extra,
        )
    return Verdict(
        invariant="residual_size", passed=True, observed=mean, bound=bound, block=block, detail=text, extra=extra
    )


# ----------------------------------------------------------------------------- one case
