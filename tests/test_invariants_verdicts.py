"""Every branch of the invariants in stability/judge/invariants.py compared as a whole `Verdict` (name,
passed, observed, bound, block, words, extra) on hand-made measurements whose boundaries all
differ, so a wrong index, key, name or threshold shows. Written from the whole-module mutation
check of invariants.py (docs/mutation.md)."""

from __future__ import annotations

import math

import pytest

from stability.judge.growth import classify_ensemble, classify_growth, describe_ensemble
from stability.judge.invariants import Verdict, identity_at_init, mean_shift, variance_growth
from stability.measure.channels import ChannelProfile
from stability.measure.ensemble import Ensemble
from stability.measure.probe import Measurements

NAN_TAIL = "; lower the learning scale or use a wider dtype"


def _m(
    grad: list[float],
    var: list[float],
    sq: list[float] | None = None,
    *,
    nonfinite_at: int | None = None,
    identity: float | None = None,
    grad_error: float | None = None,
    extra: dict[str, object] | None = None,
) -> Measurements:
    return Measurements(
        grad_norm=grad,
        act_var=var,
        act_sq_mean=sq or list(var),
        param_grad_norm={},
        identity_error=identity,
        input_grad_error=grad_error,
        nonfinite_at=nonfinite_at,
        nonfinite_kind="activation" if nonfinite_at is not None else None,
        extra=extra or {},
    )  # type: ignore[arg-type]


def _same(a: Verdict, b: Verdict) -> None:
    """Equality with NaN observed values equal to each other."""
    assert (a.invariant, a.passed, a.bound, a.block, a.detail, a.extra) == (
        b.invariant,
        b.passed,
        b.bound,
        b.block,
        b.detail,
        b.extra,
    )
    assert a.observed == b.observed or (math.isnan(a.observed) and math.isnan(b.observed))


def test_a_verdict_reads_as_holds_or_violated() -> None:
    assert (
        str(Verdict(invariant="x", passed=True, observed=1.0, bound="b", block=None, detail="fine")) == "x holds: fine"
    )
    assert (
        str(Verdict(invariant="x", passed=False, observed=1.0, bound="b", block=None, detail="broken"))
        == "x violated: broken"
    )


def test_variance_growth_refuses_an_unknown_class() -> None:
    with pytest.raises(
        ValueError, match=r"^max_growth='fast': choose one of decaying, bounded, linear, polynomial, exponential$"
    ):
        variance_growth(_m([1.0, 1.0], [1.0, 1.0]), max_growth="fast")


BOUND = "growth ≤ linear, ratio ≤ 4, ratio ≥ 0.5"


def test_variance_growth_early_exits_in_full() -> None:
    kw = dict(max_ratio=4.0, min_ratio=0.5)
    _same(
        variance_growth(_m([1.0] * 3, [1.0, 2.0, 3.0], nonfinite_at=2), **kw),  # type: ignore[arg-type]
        Verdict(
            invariant="variance_growth",
            passed=False,
            observed=math.nan,
            bound=BOUND,
            block=1,
            detail="block 1 produced a non-finite activation (NaN/inf first seen at boundary 2)" + NAN_TAIL,
        ),
    )
    _same(
        variance_growth(_m([1.0] * 3, [0.0, 2.0, 3.0]), **kw),  # type: ignore[arg-type]
        Verdict(
            invariant="variance_growth",
            passed=False,
            observed=math.nan,
            bound=BOUND,
            block=0,
            detail="the input's variance is zero; feed a non-constant input",
        ),
    )
    _same(
        variance_growth(_m([1.0] * 4, [1.0, 2.0, 3.0, math.inf]), **kw),  # type: ignore[arg-type]
        Verdict(
            invariant="variance_growth",
            passed=False,
            observed=math.inf,
            bound=BOUND,
            block=2,
            detail="the variance overflows the float range after block 2 (activations beyond ~1e19 in "
            "magnitude); the variance runs away: scale the branches or the init down",
        ),
    )


def test_variance_growth_judges_the_statistic_asked_for_and_reports_the_fit() -> None:
    m = _m([1.0] * 4, [1.0, 1.5, 2.0, 2.5], [2.0, 5.0, 12.0, 30.0])  # the second moment grows ×15, the variance ×2.5
    var = variance_growth(m, max_ratio=4.0)
    fit = classify_growth([1.0, 1.5, 2.0, 2.5])
    assert var.passed and var.observed == 2.5 and var.detail.startswith("variance grows bounded")
    assert (var.invariant, var.bound, var.block) == ("variance_growth", "growth ≤ linear, ratio ≤ 4", 3)
    assert var.extra == {
        "growth": fit.growth,
        "rate": fit.rate,
        "slope": fit.slope,
        "exponent": fit.exponent,
        "final_ratio": 2.5,
        "min_ratio": fit.min_ratio,
        "max_ratio": 2.5,
    }
    assert fit.min_ratio == 1.0  # boundary 0 against itself: the smallest ratio min_ratio bounds
    sq = variance_growth(m, max_ratio=4.0, statistic="second_moment", max_growth="exponential")
    assert (
        not sq.passed
        and sq.observed == 15.0
        and sq.block == 1
        and sq.detail.startswith("second_moment ratio 15 > 4, first after block 1; growth ")
    )
    assert (sq.invariant, sq.bound) == ("variance_growth", "growth ≤ exponential, ratio ≤ 4") and sq.extra[
        "final_ratio"
    ] == 15.0
    assert sq.extra["final_ratio"] == 15.0 and sq.extra["exponent"] == classify_growth([2.0, 5.0, 12.0, 30.0]).exponent


def test_variance_growth_on_an_ensemble_uses_its_statistic_bound_and_words() -> None:
    var = [[1.0, 1.2, 1.3, 1.5, 1.6], [1.0, 1.1, 1.4, 1.4, 1.7], [1.0, 1.3, 1.2, 1.6, 1.5]]
    sq = [[1.0, 2.5, 5.0, 6.5, 7.0], [1.0, 2.4, 4.6, 6.0, 7.5], [1.0, 2.6, 4.8, 6.2, 7.2]]
    ens = Ensemble(seeds=[0, 1, 2], act_var=var, act_sq_mean=sq, vectorised=True)
    v = variance_growth(
        _m([1.0] * 5, var[0], sq[0], extra={"ensemble": ens}),
        statistic="second_moment",
        bounded_ratio=8.0,
        max_growth="bounded",
    )
    want = classify_ensemble(sq, bounded_ratio=8.0)
    assert want.growth == "bounded" and classify_ensemble(sq).growth != "bounded"  # the bound matters here
    assert v.passed and v.detail.startswith(f"second_moment grows {describe_ensemble(want)}")
    e = v.extra
    assert (e["growth"], e["lowest"], e["decided"], e["rate"], e["slope"], e["exponent"], e["final_ratio"]) == (
        want.growth,
        want.lowest,
        want.decided,
        want.rate,
        want.slope,
        want.exponent,
        want.final_ratio,
    )
    assert e["ensemble"]["mean_log"] == want.ratios and e["ensemble"]["size"] == 3


def test_identity_verdicts_in_full() -> None:
    bound = "≤ 0.001"
    _same(
        identity_at_init(_m([1.0] * 3, [1.0] * 3, nonfinite_at=1), atol=1e-3),
        Verdict(
            invariant="identity_at_init",
            passed=False,
            observed=math.nan,
            bound=bound,
            block=0,
            detail="block 0 produced a non-finite activation (NaN/inf first seen at boundary 1)" + NAN_TAIL,
        ),
    )
    _same(
        identity_at_init(_m([1.0] * 3, [1.0] * 3, identity=None), atol=1e-3),
        Verdict(
            invariant="identity_at_init",
            passed=False,
            observed=math.nan,
            bound=bound,
            block=None,
            detail="the output's shape differs from the input's, so the stack cannot be the identity",
        ),
    )
    _same(
        identity_at_init(_m([1.0] * 3, [1.0, 1.0, 3.0], identity=0.5, grad_error=0.25), atol=1e-3),
        Verdict(
            invariant="identity_at_init",
            passed=False,
            observed=0.5,
            bound=bound,
            block=1,
            detail="output differs from the input: relative error 0.5 forward, 0.25 backward; block 1 is the "
            "first to change its input",
        ),
    )
    _same(
        identity_at_init(_m([1.0] * 3, [1.0] * 3, identity=0.5, grad_error=0.0), atol=1e-3),
        Verdict(
            invariant="identity_at_init",
            passed=False,
            observed=0.5,
            bound=bound,
            block=None,
            detail="output differs from the input: relative error 0.5 forward, 0 backward",
        ),
    )


def test_first_change_is_relative_to_the_input_value_however_small() -> None:
    # |0.012 − 0.01| = 0.002 > 0.1·0.01: a change of 20% at a small value is a change
    assert identity_at_init(_m([1.0] * 3, [0.01, 0.012, 0.012], identity=0.5), atol=0.1).block == 0
    assert identity_at_init(_m([0.012, 0.01, 0.01], [1.0] * 3, identity=0.0, grad_error=0.5), atol=0.1).block == 0
    # |5 − 4| = 1 ≤ 0.5·4: a change of 25% at atol = 0.5 is not one; block 1 (4 → 9) is
    assert identity_at_init(_m([1.0] * 3, [4.0, 5.0, 9.0], identity=1.0), atol=0.5).block == 1


def _prof(sq: list[float], var: list[float]) -> ChannelProfile:
    return ChannelProfile(sq, var, [0.0] * len(sq), [2] * len(sq))  # N = 2: ρ = M/V − 1 exactly


def test_mean_shift_verdicts_in_full() -> None:
    _same(
        mean_shift(_m([1.0] * 2, [1.0] * 2, nonfinite_at=1), max_ratio=0.125),
        Verdict(
            invariant="mean_shift",
            passed=False,
            observed=math.nan,
            bound="≤ 0.125",
            block=0,
            detail="block 0 produced a non-finite activation (NaN/inf first seen at boundary 1)" + NAN_TAIL,
        ),
    )
    _same(
        mean_shift(_m([1.0] * 2, [1.0] * 2)),
        Verdict(
            invariant="mean_shift",
            passed=False,
            observed=math.nan,
            bound="≤ 0.25",
            block=None,
            detail="channel statistics were not measured; probe with "
            "observers=[stability.measure.channels.ChannelStats()]",
        ),
    )
    # ρ = 0, 0.125 (exactly at the bound), 0.5, 0.75: first above the bound at boundary 2, after block 1
    prof = _prof([1.0, 2.25, 6.0, 14.0], [1.0, 2.0, 4.0, 8.0])
    m = _m([1.0] * 4, [1.5, 2.5, 2.75, 3.0], extra={"channels": prof})
    numbers = "average squared channel mean 14, average channel variance 8 (whole-tensor variance 3; input 1, 1)"
    extra = {
        "ratio": [0.0, 0.125, 0.5, 0.75],
        "sq_channel_mean": prof.sq_mean,
        "channel_var": prof.var,
        "whole_var": [1.5, 2.5, 2.75, 3.0],
    }
    _same(
        mean_shift(m, max_ratio=0.125),
        Verdict(
            invariant="mean_shift",
            passed=False,
            observed=0.75,
            bound="≤ 0.125",
            block=1,
            detail="mean shift ρ = 0.75 > 0.125 at the output (first above the bound after block 1): "
            f"{numbers}; the per-channel offsets grow inside the variance",
            extra=extra,
        ),
    )
    dead = _prof([1.0, 2.25, 3.0, 0.0], [1.0, 2.0, 3.0, 0.0])
    numbers = "average squared channel mean 0, average channel variance 0 (whole-tensor variance 3; input 1, 1)"
    _same(
        mean_shift(_m([1.0] * 4, [1.5, 2.5, 2.75, 3.0], extra={"channels": dead})),
        Verdict(
            invariant="mean_shift",
            passed=False,
            observed=math.nan,
            bound="≤ 0.25",
            block=3,
            detail=f"the output's channel variance is zero or undefined: {numbers}",
            extra={
                "ratio": [0.0, 0.125, 0.0, None],
                "sq_channel_mean": dead.sq_mean,
                "channel_var": dead.var,
                "whole_var": [1.5, 2.5, 2.75, 3.0],
            },
        ),
    )


def test_the_growth_rate_is_fitted_through_the_positive_boundaries_only() -> None:
    assert classify_growth([1.0, 0.5, 0.25]).rate == pytest.approx(0.5, rel=1e-12, abs=0.0)  # below 1 counts too
    gap = classify_growth([1.0, 2.0, 0.0, 8.0])  # log r = l·log 2 at l = 0, 1, 3; the collapsed boundary is left out
    assert gap.growth == "decaying" and gap.rate == pytest.approx(2.0, rel=1e-12, abs=0.0)
    assert math.isnan(classify_growth([1.0, 0.0, 0.0]).rate)  # one positive boundary: no rate


def test_failing_growth_verdicts_name_their_invariant_and_bound() -> None:
    fast = variance_growth(_m([1.0] * 5, [1.0, 2.0, 4.0, 8.0, 16.0]), max_ratio=32.0, min_ratio=0.5)
    assert (fast.invariant, fast.passed, fast.bound, fast.block) == (
        "variance_growth",
        False,
        "growth ≤ linear, ratio ≤ 32, ratio ≥ 0.5",
        2,
    )
    low = variance_growth(_m([1.0] * 3, [1.0, 0.8, 0.3]), min_ratio=0.5)
    assert (low.invariant, low.passed, low.observed, low.bound, low.block) == (
        "variance_growth",
        False,
        0.3,
        "growth ≤ linear, ratio ≥ 0.5",
        1,
    )
    assert (
        low.detail.startswith("variance ratio 0.3 < 0.5, first after block 1; growth ")
        and low.extra["final_ratio"] == 0.3
    )
    assert (
        variance_growth(_m([1.0] * 4, [1.0, 0.8, 0.3, 0.2]), min_ratio=0.5).block == 1
    )  # the first boundary below, not the last
    assert classify_growth([1.0, 3.0]).slope == pytest.approx(
        2.0, rel=1e-12, abs=0.0
    )  # one block: the slope of two points


def test_the_ensemble_law_is_judged_on_the_variance_profiles_when_asked_and_on_two_members() -> None:
    var = [[1.0, 1.2, 1.3, 1.5, 1.6], [1.0, 1.1, 1.4, 1.4, 1.7]]
    sq = [[1.0, 2.5, 5.0, 6.5, 7.0], [1.0, 2.4, 4.6, 6.0, 7.5]]
    v = variance_growth(
        _m(
            [1.0] * 5,
            var[0],
            sq[0],
            extra={"ensemble": Ensemble(seeds=[0, 1], act_var=var, act_sq_mean=sq, vectorised=True)},
        )
    )
    assert v.extra["ensemble"]["size"] == 2 and v.extra["ensemble"]["mean_log"] == classify_ensemble(var).ratios


def test_gradient_arrival_crossings_at_the_exact_bounds_and_above_one() -> None:
    from stability.judge.invariants import gradient_arrival

    assert (
        gradient_arrival(_m([1.0, 2.0, 4.0], [1.0] * 3), lo=0.5).block == 0
    )  # ratios 0.25, 0.5, 1: 0.5 is not below 0.5
    assert gradient_arrival(_m([4.0, 2.0, 1.0], [1.0] * 3), hi=2.0).block == 0  # ratios 4, 2, 1: 2 is not above 2
    assert (
        gradient_arrival(_m([1.5, 3.0, 1.0], [1.0] * 3), lo=2.0).block == 2
    )  # lo > 1: the output's own ratio 1 is below it
    one = gradient_arrival(_m([1.0], [1.0]), lo=2.0)  # no block at all
    assert not one.passed and one.detail.endswith("(crosses the bound at the input of block 0; 1 per block on average)")


def test_a_ratio_just_past_its_bound_never_prints_as_the_bound() -> None:
    from stability.judge.invariants import gradient_arrival

    above = gradient_arrival(_m([1.0049, 1.0], [1.0] * 2), lo=0.5, hi=1.0)
    assert not above.passed and above.detail.startswith("gradient ratio 1.005 > 1:")  # 3 digits print "1"
    below = gradient_arrival(_m([0.09999, 1.0], [1.0] * 2), lo=0.1)
    assert not below.passed and below.detail.startswith("gradient ratio 0.09999 < 0.1:")
    far = gradient_arrival(_m([0.0123456, 1.0], [1.0] * 2), lo=0.1)
    assert far.detail.startswith("gradient ratio 0.0123 < 0.1:")  # 3 digits where 3 tell them apart


def test_classify_growth_edges() -> None:
    assert classify_growth([1.0, 2.0]).rate == pytest.approx(2.0, rel=1e-12, abs=0.0)  # two points give a rate
    assert classify_growth([1.0]).slope == 0.0 and math.isnan(classify_growth([1.0]).rate)
    assert classify_growth([1.0, 2.0, 5.0]).exponent == pytest.approx(
        2.0, rel=1e-12, abs=0.0
    )  # r − 1 = 1, 4 at l = 1, 2
    r = [1.0, 1.5, 3.0, 5.0, 8.0]
    import numpy as np

    want = float(np.polyfit(np.log([1.0, 2.0, 3.0, 4.0]), np.log([0.5, 2.0, 4.0, 7.0]), 1)[0])  # every l ≥ 1 with r > 1
    assert classify_growth(r).exponent == pytest.approx(want, rel=1e-12, abs=0.0)


def test_variance_growth_blocks_at_the_exact_bounds() -> None:
    assert (
        variance_growth(_m([1.0] * 4, [1.0, 4.0, 3.0, 6.0]), max_ratio=4.0, max_growth="exponential").block == 2
    )  # 4 is not above 4
    assert variance_growth(_m([1.0] * 3, [1.0, 0.5, 0.8]), min_ratio=0.5).passed  # 0.5 is not below 0.5
    worse = variance_growth(_m([1.0] * 3, [1.0, 1.5, 2.0]), max_growth="decaying")  # bounded > decaying, never above 4
    assert (worse.passed, worse.block) == (False, 1) and worse.detail.endswith("it passes 4× the input's after block 1")
    unusable = Ensemble(
        seeds=[0, 1],
        act_var=[[1.0, 1.5, 2.0], [1.0, math.nan, 2.0]],
        act_sq_mean=[[1.0, 1.5, 2.0], [1.0, math.nan, 2.0]],
        vectorised=False,
    )
    v = variance_growth(_m([1.0] * 3, [1.0, 1.5, 2.0], extra={"ensemble": unusable}))
    assert v.extra["ensemble"] == {"skipped": "1 of 2 ensemble members have a finite profile"}
