"""stability/judge/lm_invariants.py and lr_sensitivity.py on hand-built records: each verdict's
number against its formula (LRS on a hand-built grid of losses, the spike factor, the fitted growth
of an exponential, the indicators), the first step over a bound, and every way a run can leave an
invariant not measured (never "violated as expected")."""

from __future__ import annotations

import math

import pytest

from stability.judge.lm_invariants import (
    attention_logits,
    early_warning,
    growth_per_100,
    indicator,
    loss_spike,
    output_logits,
    progress,
)
from stability.judge.lr_sensitivity import lr_sensitivity, lrs_of
from stability.judge.verdict import Verdict
from stability.measure.lm_records import LMRun

NAN, INF = math.nan, math.inf


def _unmeasured(v: Verdict, why: str) -> None:
    assert not v.measured and v.detail.startswith("not measured: ") and why in v.detail and math.isnan(v.observed), v


def _run(
    *,
    logits: list[list[float]] | None = None,
    every: int = 10,
    losses: list[float] | None = None,
    logz: list[tuple[float, float, float]] | None = None,
    diverged: int | None = None,
    **kw: float,
) -> LMRun:
    """A run recording at steps 0, every, 2·every, …; logz as (mean, max, min) per record."""
    logits = logits if logits is not None else [[1.0, 2.0]] * 3
    n = len(logits)
    logz = logz if logz is not None else [(0.0, 0.5, -0.5)] * n
    run = LMRun(lr=0.1, seed=0, steps=kw.pop("steps", every * n), eps=1e-8, **kw)  # type: ignore[arg-type]
    run.recorded = [every * i for i in range(n)]
    run.max_logit = logits
    run.entropy = [[1.0] * len(row) for row in logits]
    run.logz_mean, run.logz_max, run.logz_min = ([z[i] for z in logz] for i in range(3))
    run.losses = losses if losses is not None else [3.0] * (every * n)
    run.diverged_at = diverged
    return run


# ----------------------------------------------------------------------------- attention_logits


def test_attention_logits_holds_with_the_peak_and_fails_at_the_first_step_over_the_bound() -> None:
    v = attention_logits(_run(logits=[[1.0, 2.0], [5.0, 4.0], [3.0, 2.5]]), max_logit=10.0)
    assert v.passed and v.observed == 5.0 and "step 10" in v.detail
    v = attention_logits(_run(logits=[[1.0, 2.0], [5.0, 40.0], [300.0, 2.0]]), max_logit=10.0)
    assert not v.passed and v.observed == 40.0 and v.block == 1 and v.extra["first_step"] == 10
    assert "qk_norm" in v.detail


def test_an_infinite_logit_is_a_measured_violation_and_nan_is_not_a_crossing() -> None:
    v = attention_logits(_run(logits=[[1.0], [INF]]), max_logit=10.0)
    assert not v.passed and v.observed == INF
    _unmeasured(attention_logits(_run(logits=[[1.0], [NAN]], diverged=10), max_logit=10.0), "diverged at step 10")


def test_growth_per_100_of_an_exponential_is_its_factor() -> None:
    steps = [0, 10, 20, 30, 40]
    assert growth_per_100(steps, [2.0 * math.exp(0.03 * s) for s in steps]) == pytest.approx(
        math.exp(3.0), rel=1e-12, abs=0.0
    )
    assert growth_per_100(steps, [5.0] * 5) == pytest.approx(1.0, rel=1e-12, abs=0.0)
    assert math.isnan(growth_per_100([0, 10], [1.0, NAN]))
    grows = _run(logits=[[math.exp(0.02 * 10 * i)] for i in range(4)])  # ×e² = 7.39 per 100 steps
    v = attention_logits(grows, max_logit=None, max_growth=8.0)
    assert v.passed and v.observed == pytest.approx(math.exp(2.0), rel=1e-12, abs=0.0)
    v = attention_logits(grows, max_logit=None, max_growth=7.0)
    assert not v.passed and v.observed == pytest.approx(math.exp(2.0), rel=1e-12, abs=0.0)
    assert attention_logits(grows, max_logit=100.0, max_growth=7.0).passed is False  # both bounds apply


@pytest.mark.parametrize(
    ("run", "why"),
    [
        (_run(logits=[]), "recorded nothing"),
        (_run(logits=[[NAN, NAN]] * 3), "no attention logits"),
        (_run(logits=[[1.0], [2.0]], diverged=15), "diverged at step 15"),
    ],
)
def test_attention_logits_not_measured(run: LMRun, why: str) -> None:
    _unmeasured(attention_logits(run, max_logit=10.0), why)


# ----------------------------------------------------------------------------- output_logits


def test_output_logits_judges_the_largest_or_the_mean_from_a_step_on() -> None:
    logz = [(1.0, 2.0, -30.0), (6.0, 8.0, 1.0), (2.0, 3.0, 1.0)]
    v = output_logits(_run(logits=[[1.0]] * 3, logz=logz), max_abs_logz=10.0)
    assert not v.passed and v.observed == 30.0 and v.extra["first_step"] == 0  # |min| counts
    v = output_logits(
        _run(logits=[[1.0]] * 3, logz=logz), max_abs_logz=10.0, after=0.3
    )  # from step 9 on: steps 10 and 20
    assert v.passed and v.observed == 8.0
    v = output_logits(_run(logits=[[1.0]] * 3, logz=logz), max_abs_logz=5.0, statistic="mean")
    assert not v.passed and v.observed == 6.0 and v.extra["first_step"] == 10


def test_output_logits_not_measured() -> None:
    _unmeasured(output_logits(_run(logits=[[1.0]] * 3, steps=40), after=0.75), "no log Z was recorded from step 30")
    _unmeasured(output_logits(_run(logits=[[1.0]] * 3, diverged=25), max_abs_logz=10.0), "diverged at step 25")


# ----------------------------------------------------------------------------- loss_spike


def test_loss_spike_is_the_ratio_to_the_mean_of_the_window_before() -> None:
    losses = [2.0, 2.0, 4.0, 2.0, 1.0, 5.0]
    # window 2: step 2: 4/2, step 3: 2/3, step 4: 1/3, step 5: 5/1.5
    v = loss_spike(_run(losses=losses), max_factor=4.0, window=2)
    assert v.passed and v.observed == pytest.approx(5.0 / 1.5, rel=1e-15, abs=0.0) and v.extra["step"] == 5
    v = loss_spike(_run(losses=losses), max_factor=3.0, window=2)
    assert not v.passed and v.observed == pytest.approx(5.0 / 1.5, rel=1e-15, abs=0.0) and v.extra["step"] == 5


def test_a_non_finite_loss_is_an_infinite_spike_and_a_short_run_is_not_measured() -> None:
    v = loss_spike(_run(losses=[1.0, 1.0, 1.0, NAN], diverged=3), max_factor=2.0, window=2)
    assert not v.passed and v.observed == INF and "non-finite" in v.detail
    _unmeasured(loss_spike(_run(losses=[1.0, NAN], diverged=1), window=2), "has 2 losses")


# ----------------------------------------------------------------------------- early_warning


def test_the_indicators_over_the_first_steps() -> None:
    run = _run(
        logits=[[2.0, 1.0], [3.0, 10.0], [1e4, 1.0]], losses=[5.0] * 10 + [4.0] * 10 + [1.0] * 10, entropy_rate=1.0
    )
    run.entropy = [[2.0, 1.5], [0.5, 1.0], [0.0, 0.0]]
    assert indicator(run, "logit_growth", 20) == 5.0  # max(2, 10)/2 over steps 0 and 10
    assert indicator(run, "max_logit", 20) == 10.0
    assert indicator(run, "min_entropy", 20) == 0.5
    assert indicator(run, "logit_growth", 30) == 5e3
    assert progress(run, 19, window=10) == pytest.approx(0.25, abs=1e-15)  # (5 − 4)/(5 − 1)
    assert indicator(run, "loss_progress", 20) == pytest.approx(0.25, abs=1e-15)
    v = early_warning(run, steps=20, name="logit_growth", threshold=4.0)
    assert not v.passed and v.observed == 5.0
    assert early_warning(run, steps=20, name="logit_growth", threshold=6.0).passed
    assert not early_warning(run, steps=20, name="loss_progress", threshold=0.5).passed  # warns below
    assert early_warning(run, steps=20, name="min_entropy", threshold=0.4).passed


def test_an_early_divergence_counts_as_the_worst_and_nothing_recorded_is_not_measured() -> None:
    run = _run(logits=[[2.0], [NAN]], losses=[5.0] * 10 + [NAN], diverged=10)
    assert indicator(run, "logit_growth", 20) == INF and progress(run, 10) == -INF
    assert not early_warning(run, steps=20, name="logit_growth", threshold=100.0).passed
    _unmeasured(early_warning(_run(logits=[], losses=[]), steps=5, threshold=1.0), "first 5 steps")


# ----------------------------------------------------------------------------- lr_sensitivity


def test_lrs_on_a_hand_built_grid() -> None:
    """L₀ = 5, finals (4, 2, 3, NaN, 7): capped (4, 2, 3, 5, 5), L* = 2, LRS = (2 + 0 + 1 + 3 + 3)/5 = 1.8."""
    assert lrs_of([4.0, 2.0, 3.0, NAN, 7.0], 5.0) == (pytest.approx(1.8, abs=1e-15), 2.0)
    grid = [0.01, 0.1, 1.0]
    runs = {}
    for seed, finals in ((0, [4.0, 2.0, NAN]), (1, [3.0, 3.0, 3.0])):
        runs[seed] = {
            lr: LMRun(lr=lr, seed=seed, steps=10, eps=1e-8, initial_eval=5.0, final_eval=f, entropy_rate=1.0)
            for lr, f in zip(grid, finals, strict=True)
        }
    # seed 0: capped (4, 2, 5), L* = 2, LRS = (2 + 0 + 3)/3 = 5/3; seed 1: 0; mean 5/6
    v = lr_sensitivity(runs, lrs=grid, max_lrs=1.0)
    assert (
        v.passed
        and v.observed == pytest.approx(5 / 6, abs=1e-15)
        and v.extra["per_seed"] == {"0": pytest.approx(5 / 3, abs=1e-15), "1": 0.0}
    )
    assert not lr_sensitivity(runs, lrs=grid, max_lrs=0.5).passed


def test_lrs_is_not_measured_when_nothing_trained_or_a_rate_is_missing() -> None:
    grid = [0.01, 0.1, 1.0]
    dead = {0: {lr: LMRun(lr=lr, seed=0, steps=10, eps=1e-8, initial_eval=5.0, final_eval=NAN) for lr in grid}}
    _unmeasured(
        lr_sensitivity(dead, lrs=grid, max_lrs=1.0), "no learning rate of the grid trained seed 0"
    )  # LRS would be 0: a false green
    _unmeasured(
        lr_sensitivity({0: {lr: dead[0][lr] for lr in grid[:2]}}, lrs=grid, max_lrs=1.0), "no run at learning rate 1"
    )
