"""Stage 5 (training): a grid of language-model runs → the Verdict of `lr_sensitivity`, the one
invariant judged over many runs (every seed of the ensemble at every learning rate of the grid)
rather than one (Wortsman et al. 2023, "Small-scale proxies for large-scale Transformer training
instabilities", eq. 1). Like `stability.judge.lm_invariants`, whose `NotMeasured` and `lm_judge`
it uses, a grid that does not hold what it judges gives a verdict with `measured=False`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from stability.judge.lm_invariants import NotMeasured, finite_or_none, lm_judge
from stability.judge.verdict import Verdict
from stability.measure.lm_records import LMRun

__all__ = ["lr_sensitivity", "lrs_of"]


def lrs_of(final: Sequence[float], initial: float) -> tuple[float, float]:
    """(LRS, L*) of one seed's grid: L* = min over the grid of min(L(η), L₀) and LRS = mean over
    the grid of min(L(η), L₀) − L* (Wortsman et al. 2023, eq. 1); a diverged run (NaN) counts as L₀."""
    capped = [min(v, initial) if math.isfinite(v) else initial for v in final]
    best = min(capped)
    return float(np.mean([v - best for v in capped])), best


@lm_judge("lr_sensitivity")
def lr_sensitivity(runs: Mapping[int, Mapping[float, LMRun]], *, lrs: Sequence[float], max_lrs: float) -> Verdict:
    """`runs[seed][lr]` for every seed of the ensemble and every lr of the grid; holds when the mean
    over the seeds of each seed's LRS (`lrs_of`) ≤ max_lrs."""
    bound = f"mean LRS ≤ {max_lrs:g}"
    per_seed: dict[int, float] = {}
    curves: dict[str, list[float | None]] = {}
    for seed, grid in runs.items():
        missing = [lr for lr in lrs if lr not in grid]
        if missing:
            raise NotMeasured(f"seed {seed} has no run at learning rate {missing[0]:g}", bound)
        initial = grid[lrs[0]].initial_eval
        if not math.isfinite(initial):
            raise NotMeasured(f"seed {seed}'s initial loss is non-finite", bound)
        final = [grid[lr].final_eval for lr in lrs]
        value, best = lrs_of(final, initial)
        if best >= initial:
            raise NotMeasured(
                f"no learning rate of the grid trained seed {seed} below its initial loss {initial:.3g}, so "
                "its sensitivity is not defined",
                bound,
            )
        per_seed[seed] = value
        curves[str(seed)] = finite_or_none(final)
    if not per_seed:
        raise NotMeasured("no seed was run", bound)
    mean = float(np.mean(list(per_seed.values())))
    extra: dict[str, Any] = {
        "lrs": list(lrs),
        "per_seed": {str(k): v for k, v in per_seed.items()},
        "final_loss": curves,
        "initial_loss": {str(s): g[lrs[0]].initial_eval for s, g in runs.items()},
        "entropy_rate": {str(s): g[lrs[0]].entropy_rate for s, g in runs.items()},
        "curves": {str(s): {f"{lr:g}": finite_or_none(g[lr].losses) for lr in lrs} for s, g in runs.items()},
    }
    spread = f"{min(per_seed.values()):.3g} … {max(per_seed.values()):.3g} over {len(per_seed)} seeds"
    mean_final = [
        float(
            np.mean(
                [g[lr].final_eval if math.isfinite(g[lr].final_eval) else g[lrs[0]].initial_eval for g in runs.values()]
            )
        )
        for lr in lrs
    ]
    best_lr = lrs[int(np.argmin(mean_final))]
    text = (
        f"LRS {mean:.3g} ({spread}) over learning rates {lrs[0]:g} … {lrs[-1]:g}; best mean final loss "
        f"{min(mean_final):.3g} at {best_lr:g}"
    )
    if mean <= max_lrs:
        return Verdict(
            invariant="lr_sensitivity", passed=True, observed=mean, bound=bound, block=None, detail=text, extra=extra
        )
    return Verdict(
        invariant="lr_sensitivity",
        passed=False,
        observed=mean,
        bound=bound,
        block=None,
        detail=text
        + f", above {max_lrs:g}: the final loss depends on the learning rate; add qk_norm and z_loss, warm up longer",
        extra=extra,
    )
