"""Stage 5 (training): language-model runs → Verdicts for `attention_logits`, `output_logits`,
`loss_spike` and `early_warning` (Wortsman et al. 2023, "Small-scale proxies for large-scale
Transformer training instabilities"); `lr_sensitivity`, judged over a grid of runs, is
`stability.judge.lr_sensitivity`'s.

Pure functions of `stability.measure.lm_records.LMRun`, like `stability.judge.train_invariants`.
A verdict is evidence only on what was measured: a run that recorded nothing, or diverged before
anything the invariant reads was recorded, or stopped (its loss non-finite) before the bound was
crossed, gives a verdict with `measured=False` and the reason, so that neither `holds` nor
`violated` is met on it (`stability.judge.verdict.is_evidence`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from stability.judge.verdict import Verdict
from stability.measure.lm_records import LMRun

_F = TypeVar("_F", bound=Callable[..., Verdict])

__all__ = [
    "attention_logits",
    "output_logits",
    "loss_spike",
    "early_warning",
    "indicator",
    "progress",
    "growth_per_100",
    "WARNING_DIRECTION",
    "NotMeasured",
    "lm_judge",
    "finite_or_none",
]


class NotMeasured(Exception):
    """Raised inside a judge when the run does not hold what it judges; `lm_judge` turns it into a
    verdict with `measured=False`."""

    def __init__(self, reason: str, bound: str) -> None:
        super().__init__(reason)
        self.bound = bound


def lm_judge(name: str) -> Callable[[_F], _F]:
    """The decorator of every judge of a language-model run: a `NotMeasured` raised inside becomes the
    verdict `name` with `measured=False` and the reason."""

    def wrap(fn: _F) -> _F:
        @functools.wraps(fn)
        def judged(*args: Any, **kwargs: Any) -> Verdict:
            try:
                return fn(*args, **kwargs)
            except NotMeasured as exc:
                return Verdict(
                    invariant=name,
                    passed=False,
                    observed=math.nan,
                    bound=exc.bound,
                    block=None,
                    detail=f"not measured: {exc}",
                    measured=False,
                )

        return judged  # type: ignore[return-value]

    return wrap


def finite_or_none(values: Sequence[float]) -> list[float | None]:
    """The values for a verdict's `extra` (JSON): a non-finite one as None."""
    return [float(v) if math.isfinite(v) else None for v in values]


def _stopped(run: LMRun, what: str, value: float, bound: str) -> NotMeasured:
    return NotMeasured(
        f"the run diverged at step {run.diverged_at} (its loss became non-finite) while {what} was still "
        f"{value:.3g}, within {bound}; "
        "it stopped before the bound could be judged through the run (lower train.lr to see whether the bound holds)",
        bound,
    )


def growth_per_100(steps: Sequence[int], values: Sequence[float]) -> float:
    """exp(100·r), r the least-squares slope of log(value) against the step: the factor a value
    that grows like exp(r·t) gains per 100 steps. NaN with fewer than two positive finite values."""
    pts = [(s, v) for s, v in zip(steps, values, strict=True) if math.isfinite(v) and v > 0]
    if len(pts) < 2 or len({s for s, _ in pts}) < 2:
        return math.nan
    x = np.asarray([s for s, _ in pts], dtype=np.float64)
    y = np.log(np.asarray([v for _, v in pts], dtype=np.float64))
    return float(math.exp(min(100.0 * float(np.polyfit(x, y, 1)[0]), 700.0)))


# ----------------------------------------------------------------------------- attention_logits


@lm_judge("attention_logits")
def attention_logits(run: LMRun, *, max_logit: float | None = 100.0, max_growth: float | None = None) -> Verdict:
    """The largest attention logit l_t ≤ max_logit at every recorded step; with max_growth, the
    fitted growth of l_t per 100 steps (`growth_per_100`) ≤ max_growth."""
    parts = ([f"max logit ≤ {max_logit:g}"] if max_logit is not None else []) + (
        [f"growth ≤ ×{max_growth:g} per 100 steps"] if max_growth is not None else []
    )
    bound = ", ".join(parts)
    if not run.recorded:
        raise NotMeasured(
            f"the run recorded nothing (it diverged at step {run.diverged_at})"
            if run.diverged_at is not None
            else "the run recorded nothing",
            bound,
        )
    largest = run.largest_logit()
    if not any(math.isfinite(v) or v == math.inf for v in largest):
        raise NotMeasured(
            "no attention logits were captured: "
            f"{run.attention_missing or 'the model computes no attention the harness can read'}",
            bound,
        )
    extra: dict[str, Any] = {
        "steps": list(run.recorded),
        "max_logit": finite_or_none(largest),
        "entropy": finite_or_none([min(e) if e else math.nan for e in run.entropy]),
        "losses": finite_or_none(run.losses),
        "lr": run.lr,
    }
    growth = growth_per_100(run.recorded, largest)
    extra["growth_per_100"] = growth if math.isfinite(growth) else None
    if max_logit is not None:
        for i, v in enumerate(largest):
            if v > max_logit:  # inf included: a measured overflow
                layer = max(
                    range(run.layers),
                    key=lambda j: run.max_logit[i][j] if math.isfinite(run.max_logit[i][j]) else math.inf,
                )
                extra.update(first_step=run.recorded[i], layer=layer)
                return Verdict(
                    invariant="attention_logits",
                    passed=False,
                    observed=v,
                    bound=bound,
                    block=layer,
                    detail=f"the largest attention logit reached {v:.3g} at step {run.recorded[i]} in layer "
                    f"{layer} (from {largest[0]:.3g} at step {run.recorded[0]}), "
                    f"above {max_logit:g}; attention entropy "
                    f"{extra['entropy'][i] if extra['entropy'][i] is not None else math.nan:.3g} nats "
                    "there: "
                    'add qk_norm = "layer" (or attn_softcap), warm up longer or lower train.lr',
                    extra=extra,
                )
    if max_growth is not None:
        if not math.isfinite(growth):
            raise NotMeasured("the growth of the attention logits needs two recorded steps with positive logits", bound)
        if growth > max_growth:
            return Verdict(
                invariant="attention_logits",
                passed=False,
                observed=growth,
                bound=bound,
                block=None,
                detail=f"the largest attention logit grows ×{growth:.3g} per 100 steps (fitted over the run), "
                f"above ×{max_growth:g}",
                extra=extra,
            )
    peak = max(v for v in largest if math.isfinite(v))
    if run.diverged_at is not None:
        raise _stopped(run, "the largest attention logit", peak, bound)
    observed = peak if max_logit is not None else growth
    i = largest.index(peak)
    return Verdict(
        invariant="attention_logits",
        passed=True,
        observed=observed,
        bound=bound,
        block=None,
        detail=f"the largest attention logit peaked at {peak:.3g} (step {run.recorded[i]}) over {run.steps} steps",
        extra=extra,
    )


# ----------------------------------------------------------------------------- output_logits


@lm_judge("output_logits")
def output_logits(run: LMRun, *, max_abs_logz: float = 20.0, statistic: str = "max", after: float = 0.0) -> Verdict:
    """|log Z| ≤ max_abs_logz at every recorded step from after·steps on (the largest over the
    scored tokens, or of their mean)."""
    bound = f"{'max' if statistic == 'max' else 'mean'} |log Z| ≤ {max_abs_logz:g}" + (
        f" from step {math.ceil(after * run.steps)}" if after else ""
    )
    start = math.ceil(after * run.steps)
    values = run.largest_abs_logz() if statistic == "max" else [abs(v) for v in run.logz_mean]
    judged = [(s, v) for s, v in zip(run.recorded, values, strict=True) if s >= start]
    extra: dict[str, Any] = {
        "steps": list(run.recorded),
        "logz_mean": finite_or_none(run.logz_mean),
        "logz_max": finite_or_none(run.logz_max),
        "logz_min": finite_or_none(run.logz_min),
        "losses": finite_or_none(run.losses),
        "lr": run.lr,
    }
    if not judged:
        why = f"it diverged at step {run.diverged_at}" if run.diverged_at is not None else "nothing was recorded"
        raise NotMeasured(f"no log Z was recorded from step {start} on ({why})", bound)
    for s, v in judged:
        if v > max_abs_logz:
            extra["first_step"] = s
            return Verdict(
                invariant="output_logits",
                passed=False,
                observed=v,
                bound=bound,
                block=None,
                detail=f"|log Z| reached {v:.3g} at step {s}, above {max_abs_logz:g}: the output logits drift "
                "(Wortsman et al. 2023); add train.z_loss = 1e-4 or weight decay",
                extra=extra,
            )
    finite = [v for _, v in judged if math.isfinite(v)]
    if not finite:
        raise NotMeasured(f"log Z was non-finite at every recorded step from {start} on", bound)
    peak = max(finite)
    if run.diverged_at is not None:
        raise _stopped(run, "|log Z|", peak, bound)
    s = next(s for s, v in judged if v == peak)
    return Verdict(
        invariant="output_logits",
        passed=True,
        observed=peak,
        bound=bound,
        block=None,
        detail=f"|log Z| peaked at {peak:.3g} (step {s}) over {run.steps} steps",
        extra=extra,
    )


# ----------------------------------------------------------------------------- loss_spike


@lm_judge("loss_spike")
def loss_spike(run: LMRun, *, max_factor: float = 2.0, window: int = 10) -> Verdict:
    """loss_t ≤ max_factor × mean(loss_(t−window) … loss_(t−1)) for every t ≥ window; a
    non-finite loss after finite ones is an infinite spike."""
    bound = f"loss ≤ {max_factor:g}× the mean of the {window} steps before"
    losses = run.losses
    if len(losses) < window + 1:
        raise NotMeasured(
            f"the run has {len(losses)} losses, and a spike is judged against the {window} before it"
            + (f" (it diverged at step {run.diverged_at})" if run.diverged_at is not None else ""),
            bound,
        )
    arr = np.asarray(losses, dtype=np.float64)
    csum = np.concatenate([[0.0], np.cumsum(np.where(np.isfinite(arr), arr, 0.0))])
    worst, worst_t = 0.0, window
    extra: dict[str, Any] = {"losses": finite_or_none(losses), "window": window, "lr": run.lr}
    for t in range(window, len(losses)):
        mean = (csum[t] - csum[t - window]) / window
        ratio = arr[t] / mean if math.isfinite(arr[t]) and mean > 0 else math.inf
        if ratio > worst:
            worst, worst_t = ratio, t
        if ratio > max_factor:
            extra["step"] = t
            shown = f"{arr[t]:.3g}" if math.isfinite(arr[t]) else "non-finite"
            return Verdict(
                invariant="loss_spike",
                passed=False,
                observed=ratio,
                bound=bound,
                block=None,
                detail=f"the loss at step {t} is {shown}, {ratio:.3g}× the mean {mean:.3g} of the {window} "
                "steps before",
                extra=extra,
            )
    extra["step"] = worst_t
    return Verdict(
        invariant="loss_spike",
        passed=True,
        observed=worst,
        bound=bound,
        block=None,
        detail=f"the largest rise was {worst:.3g}× the running mean (step {worst_t}) over {len(losses)} steps",
        extra=extra,
    )


# ----------------------------------------------------------------------------- early_warning


def progress(run: LMRun, step: int, *, window: int = 10) -> float:
    """(L₀ − L)/(L₀ − H): how much of the way from the first loss L₀ to the entropy rate H the
    mean loss L of the `window` steps up to `step` (inclusive) has come; −inf when it is non-finite."""
    losses = run.losses[max(0, step + 1 - window) : step + 1]
    if not losses or not run.losses:
        return math.nan
    level = float(np.mean(losses))
    gap = run.losses[0] - run.entropy_rate
    if not math.isfinite(level):
        return -math.inf
    return (run.losses[0] - level) / gap if gap > 0 else math.nan


def indicator(run: LMRun, name: str, steps: int) -> float:
    """The early-warning indicator over the steps before `steps` (see `EarlyWarning`): the growth
    max l_t / l_0 and the largest value max l_t of the largest attention logit, the smallest
    attention entropy, or `progress` at step steps − 1. Non-finite values count as the worst
    (inf, or −inf for progress); NaN when nothing the indicator reads was recorded."""
    if name == "loss_progress":
        last = min(steps, len(run.losses)) - 1
        return progress(run, last) if last >= 0 else math.nan
    picked = [i for i, s in enumerate(run.recorded) if s < steps]
    if not picked:
        return math.nan
    if name == "min_entropy":
        ent = [min(run.entropy[i]) if run.entropy[i] else math.nan for i in picked]
        return min((0.0 if math.isnan(v) else v) for v in ent) if any(math.isfinite(v) for v in ent) else math.nan
    logits = [run.largest_logit()[i] for i in picked]
    worst = [math.inf if math.isnan(v) else v for v in logits]
    if name == "max_logit":
        return max(worst)
    first = logits[0]
    if not (math.isfinite(first) and first > 0):
        return math.nan
    return max(worst) / first


#: Which way each indicator warns: above its threshold (+1) or below it (−1).
WARNING_DIRECTION = {"logit_growth": 1, "max_logit": 1, "min_entropy": -1, "loss_progress": -1}


@lm_judge("early_warning")
def early_warning(run: LMRun, *, steps: int, name: str = "logit_growth", threshold: float) -> Verdict:
    """The indicator over the first `steps` steps does not cross `threshold` (above it for the
    logit indicators, below it for the entropy and the progress): the run is not predicted to
    diverge. Judged at step `steps`, without the rest of the run."""
    up = WARNING_DIRECTION[name] > 0
    bound = f"{name} {'≤' if up else '≥'} {threshold:g} over the first {steps} steps"
    value = indicator(run, name, steps)
    upto = [s for s in run.recorded if s < steps]
    # The indicator as it stood at each recorded step (what a
    # warning at that step would have read), and the losses so far.
    extra: dict[str, Any] = {
        "indicator": name,
        "steps": steps,
        "lr": run.lr,
        "recorded": upto,
        "curve": finite_or_none([indicator(run, name, s + 1) for s in upto]),
        "losses": finite_or_none(run.losses[:steps]),
    }
    if math.isnan(value):
        why = (
            f" (no attention logits were captured: {run.attention_missing})"
            if run.attention_missing and name != "loss_progress"
            else ""
        )
        raise NotMeasured(
            f"nothing {name} reads was recorded in the first {steps} steps"
            + (f" (the run diverged at step {run.diverged_at})" if run.diverged_at is not None else "")
            + why,
            bound,
        )
    fires = value > threshold if up else value < threshold
    if fires:
        return Verdict(
            invariant="early_warning",
            passed=False,
            observed=value,
            bound=bound,
            block=None,
            detail=f"{name} is {value:.3g} after {steps} steps ({'above' if up else 'below'} {threshold:g}): "
            "the run is predicted to diverge",
            extra=extra,
        )
    return Verdict(
        invariant="early_warning",
        passed=True,
        observed=value,
        bound=bound,
        block=None,
        detail=f"{name} is {value:.3g} after {steps} steps: no divergence predicted",
        extra=extra,
    )
