"""Whole verdicts, not just pass/fail (stability/judge/invariants.py): the bound, the block and the words
each invariant reports on hand-made measurements, including the defaults, exact zeros and the
non-finite cases. Written from the mutation check (docs/mutation.md)."""

from __future__ import annotations

import math

import torch

from stability.judge.invariants import Verdict, gradient_arrival, identity_at_init, mean_shift, variance_growth
from stability.measure.channels import ChannelProfile, channel_moments
from stability.measure.probe import Measurements


def _m(
    grad: list[float],
    var: list[float] | None = None,
    *,
    nonfinite_at: int | None = None,
    kind: str | None = None,
    identity: float | None = None,
    grad_error: float | None = None,
    extra: dict[str, object] | None = None,
) -> Measurements:
    var = var or [1.0] * len(grad)
    return Measurements(
        grad_norm=grad,
        act_var=var,
        act_sq_mean=list(var),
        param_grad_norm={},
        identity_error=identity,
        input_grad_error=grad_error,
        nonfinite_at=nonfinite_at,
        nonfinite_kind=kind,
        extra=extra or {},
    )  # type: ignore[arg-type]


def test_gradient_arrival_defaults_are_a_tenth_and_ten() -> None:
    assert gradient_arrival(_m([0.1, 1.0])) == Verdict(
        invariant="gradient_arrival",
        passed=True,
        observed=0.1,
        bound="[0.1, 10]",
        block=0,
        detail="gradient ratio 0.1 within [0.1, 10]",
    )
    assert gradient_arrival(_m([10.0, 1.0])).passed
    assert not gradient_arrival(_m([0.0999, 1.0])).passed and not gradient_arrival(_m([10.01, 1.0])).passed


def test_gradient_arrival_reports_the_farthest_boundary_and_where_the_bound_is_crossed() -> None:
    v = gradient_arrival(_m([1.0, 4.0, 0.5, 1.0]), lo=0.2, hi=5.0)  # ratios 1, 4, 0.5, 1: 4 is farthest from 1 in log
    assert v == Verdict(
        invariant="gradient_arrival",
        passed=True,
        observed=1.0,
        bound="[0.2, 5]",
        block=1,
        detail="gradient ratio 1 within [0.2, 5]",
    )
    v = gradient_arrival(_m([0.01, 0.05, 0.5, 1.0]), lo=0.1, hi=10.0)
    assert v == Verdict(
        invariant="gradient_arrival",
        passed=False,
        observed=0.01,
        bound="[0.1, 10]",
        block=1,
        detail="gradient ratio 0.01 < 0.1: the gradient vanishes (crosses the bound at the input of block 1; "
        "0.2154 per block on average)",
    )
    v = gradient_arrival(_m([1000.0, 20.0, 2.0, 1.0]), lo=0.1, hi=10.0)
    assert v == Verdict(
        invariant="gradient_arrival",
        passed=False,
        observed=1000.0,
        bound="[0.1, 10]",
        block=1,
        detail="gradient ratio 1e+03 > 10: the gradient explodes (crosses the bound at the input of block 1; "
        "10 per block on average)",
    )


def test_gradient_arrival_exact_zeros() -> None:
    assert gradient_arrival(_m([1.0, 1.0, 0.0])) == Verdict(
        invariant="gradient_arrival",
        passed=False,
        observed=0.0,
        bound="[0.1, 10]",
        block=2,
        detail="the output gradient is zero; the loss does not depend on the output",
    )
    assert gradient_arrival(_m([0.0, 0.0, 0.5, 1.0])) == Verdict(
        invariant="gradient_arrival",
        passed=False,
        observed=0.0,
        bound="[0.1, 10]",
        block=1,
        detail="the gradient is exactly zero from the input of block 1 down (collapse)",
    )


def test_non_finite_verdicts_name_the_block() -> None:
    act = gradient_arrival(_m([1.0, 1.0, 1.0, 1.0], nonfinite_at=2, kind="activation"))
    assert (act.passed, act.block, act.bound) == (False, 1, "[0.1, 10]") and math.isnan(act.observed)
    assert (
        act.detail == "block 1 produced a non-finite activation (NaN/inf first seen at boundary 2); lower the learning "
        "scale or use a wider dtype"
    )
    inp = variance_growth(_m([1.0, 1.0], nonfinite_at=0, kind="activation"))
    assert inp.block == 0 and inp.detail.startswith("the input holds NaN/inf;") and inp.bound == "growth ≤ linear"
    grad = identity_at_init(_m([1.0, 1.0, 1.0], nonfinite_at=1, kind="gradient"))
    assert (
        grad.block == 1
        and grad.detail.startswith("the gradient became non-finite at the input of block 1;")
        and grad.bound == "exactly 0 (bit-exact)"
    )
    top = mean_shift(_m([1.0, 1.0, 1.0], nonfinite_at=2, kind="gradient"))
    assert top.block == 2 and top.detail.startswith("the output gradient is NaN/inf;") and top.bound == "≤ 0.25"


def test_identity_verdicts_say_bit_exact_or_the_error() -> None:
    assert identity_at_init(_m([1.0, 1.0], identity=0.0, grad_error=0.0)) == Verdict(
        invariant="identity_at_init",
        passed=True,
        observed=0.0,
        bound="exactly 0 (bit-exact)",
        block=None,
        detail="output equals input and input gradient equals output gradient bit-exactly",
    )
    assert identity_at_init(_m([1.0, 1.0], identity=1e-9, grad_error=None), atol=1e-6) == Verdict(
        invariant="identity_at_init",
        passed=True,
        observed=1e-9,
        bound="≤ 1e-06",
        block=None,
        detail="output equals input and input gradient equals output gradient (error 1e-09)",
    )
    v = identity_at_init(_m([1.0, 1.0], identity=None))
    assert (
        not v.passed
        and math.isnan(v.observed)
        and v.detail == "the output's shape differs from the input's, so the stack cannot be the identity"
    )


def test_identity_first_change_at_zero_tolerance_sees_the_smallest_change() -> None:
    # the forward statistics change by one ulp at block 1 only; at atol = 0 that is a change
    m = _m([1.0, 1.0, 1.0], [1.0, 1.0, math.nextafter(1.0, 2.0)], identity=2e-16, grad_error=0.0)
    v = identity_at_init(m)
    assert (
        v.block == 1
        and v.detail
        == "output differs from the input: relative error 2e-16 forward, 0 backward; block 1 is the first to "
        "change its input"
    )
    # a change below atol·|a| is not a change: no block named
    v = identity_at_init(_m([1.0, 1.0, 1.0], [1.0, 1.0, 1.0 + 1e-9], identity=0.0, grad_error=1e-3), atol=1e-6)
    assert v.block == 1 or v.block is None
    assert v.detail.startswith(
        "input gradient differs from the output gradient: relative error 0 forward, 0.001 backward"
    )
    grads = identity_at_init(_m([2.0, 1.0, 1.0], identity=0.0, grad_error=0.5))  # only the gradient changes, at block 0
    assert grads.block == 0


def _profile(sq: list[float], var: list[float], count: int = 101) -> ChannelProfile:
    return ChannelProfile(sq, var, [0.0] * len(sq), [count] * len(sq))


def test_mean_shift_verdicts_carry_the_ratio_profile_and_the_output_numbers() -> None:
    prof = _profile([0.01, 0.2, 0.1], [1.0, 1.0, 1.0])  # ρ = M − V/100: −0.0, 0.19, 0.09
    v = mean_shift(_m([1.0, 1.0, 1.0], [1.5, 1.5, 1.25], extra={"channels": prof}), max_ratio=0.1)
    assert (
        v.passed and v.observed == 0.1 - 0.01 and v.block is None and v.invariant == "mean_shift" and v.bound == "≤ 0.1"
    )
    numbers = "average squared channel mean 0.1, average channel variance 1 (whole-tensor variance 1.25; input 0.01, 1)"
    assert v.detail == f"mean shift ρ = 0.09 at the output ≤ 0.1: {numbers}"
    assert v.extra == {
        "ratio": [0.0, 0.2 - 0.01, 0.1 - 0.01],
        "sq_channel_mean": prof.sq_mean,
        "channel_var": prof.var,
        "whole_var": [1.5, 1.5, 1.25],
    }
    bad = mean_shift(_m([1.0, 1.0, 1.0], [1.5, 1.5, 1.25], extra={"channels": prof}), max_ratio=0.05)
    assert (
        not bad.passed
        and bad.block == 0
        and bad.detail.startswith("mean shift ρ = 0.09 > 0.05 at the output (first above the bound after block 0)")
    )
    dead = mean_shift(_m([1.0, 1.0, 1.0], extra={"channels": _profile([0.01, 0.2, 0.0], [1.0, 1.0, 0.0])}))
    assert (dead.invariant, dead.passed, dead.block) == ("mean_shift", False, 2) and math.isnan(dead.observed)
    assert dead.detail.startswith("the output's channel variance is zero or undefined: average squared channel mean 0,")
    assert dead.extra["ratio"] == [0.0, 0.2 - 0.01, None]
    unmeasured = mean_shift(_m([1.0, 1.0]))
    assert not unmeasured.passed and math.isnan(unmeasured.observed) and "ChannelStats" in unmeasured.detail


def test_channel_moments_of_a_vector_take_each_entry_as_a_channel() -> None:
    h = torch.tensor([1.0, 2.0, 3.0, 6.0], dtype=torch.float64)  # (C,): four channels of one value each
    for layout in ("auto", "channels_first", "channels_last"):
        assert channel_moments(h, layout=layout).tolist() == [12.5, 0.0, 3.0]  # type: ignore[arg-type]  # M = mean m_c², V = 0, m̄ = 3


def test_identity_first_change_compares_relative_to_atol() -> None:
    # atol = 1: block 0 changes the statistics by 50% (within), block 1 by 167% (beyond)
    m = _m([1.0, 1.0, 1.0], [1.0, 1.5, 4.0], identity=2.0, grad_error=0.0)
    assert identity_at_init(m, atol=1.0).block == 1
    assert identity_at_init(m, atol=0.4).block == 0


def test_identity_first_change_in_the_gradients_is_relative_to_atol_too() -> None:
    # statistics unchanged; gradients 1, 1.5, 4 from the input up: |1.5 − 4| = 2.5 ≤ 1·4 and
    # |1 − 1.5| = 0.5 ≤ 1·1.5, so at atol = 1 no block is named; at atol = 0.5 block 1 is
    m = _m([1.0, 1.5, 4.0], identity=0.0, grad_error=2.0)
    assert identity_at_init(m, atol=1.0).block is None
    assert identity_at_init(m, atol=0.5).block == 1


def test_variance_growth_verdicts_in_full() -> None:
    zero = variance_growth(_m([1.0, 1.0], [0.0, 1.0]))
    assert (zero.invariant, zero.passed, zero.block) == ("variance_growth", False, 0) and math.isnan(zero.observed)
    assert zero.detail == "the input's variance is zero; feed a non-constant input"
    over = variance_growth(_m([1.0, 1.0, 1.0], [1.0, 2.0, math.inf]))
    assert (over.passed, over.observed, over.block) == (False, math.inf, 1)
    assert over.detail.startswith("the variance overflows the float range after block 1")
    first = variance_growth(_m([1.0, 1.0, 1.0], [math.inf, 2.0, 2.0]))
    assert first.block == 0  # an overflow at the input is block 0, never −1
    ok = variance_growth(_m([1.0] * 4, [1.0, 3.0, 2.0, 2.5]))
    assert ok.passed and ok.observed == 3.0 and ok.block == 1 and ok.detail.endswith("max ratio 3")
    low = variance_growth(_m([1.0] * 4, [1.0, 0.8, 0.5, 0.9]), min_ratio=0.6)
    assert not low.passed and low.observed == 0.5 and low.block == 1
    assert low.detail.startswith("variance ratio 0.5 < 0.6, first after block 1; growth bounded")


def test_variance_growth_passes_its_bounded_ratio_to_the_classifier() -> None:
    values = [1.0, 3.0, 5.0, 6.0]  # max ratio 6: bounded under 8, not under the default 4
    assert variance_growth(_m([1.0] * 4, values), max_growth="bounded", bounded_ratio=8.0).passed
    assert not variance_growth(_m([1.0] * 4, values), max_growth="bounded").passed


def test_a_cubic_is_polynomial_not_exponential() -> None:
    from stability.judge.invariants import classify_growth

    fit = classify_growth([1.0 + 20.0 * k**3 for k in range(9)])
    assert fit.growth == "polynomial" and fit.exponent is not None and 2.5 < fit.exponent < 3.5


def test_variance_growth_on_an_ensemble_reports_the_ensembles_numbers() -> None:
    from stability.judge.growth import classify_ensemble
    from stability.measure.ensemble import Ensemble

    profiles = [[1.0, 1.5, 2.0, 2.4, 3.1], [1.0, 1.4, 2.1, 2.6, 2.9], [1.0, 1.6, 1.9, 2.5, 3.0]]
    ens = Ensemble(seeds=[0, 1, 2], act_var=profiles, act_sq_mean=profiles, vectorised=True)
    v = variance_growth(_m([1.0] * 5, profiles[0], extra={"ensemble": ens}))
    want = classify_ensemble(profiles)
    assert v.extra["rate"] == want.rate and v.extra["slope"] == want.slope and v.extra["growth"] == want.growth
    assert v.extra["ensemble"]["size"] == 3 and v.extra["ensemble"]["chi2"] == want.chi2
    assert v.extra["ensemble"]["mean_log"] == want.ratios


def test_channel_stats_count_values_per_channel_in_the_layout_asked_for() -> None:
    from stability.measure.channels import ChannelStats

    obs = ChannelStats(layout="channels_first")
    obs.start([])
    obs.observe(0, torch.ones(2, 3, 5, dtype=torch.float64))  # (B, C, T) read channels-first: C = 3, N = 10
    obs.observe(1, torch.ones(7, 1, dtype=torch.float64))  # one channel: N = 7
    prof = obs.finish()
    assert prof.count == [10, 7]
    auto = ChannelStats()
    auto.start([])
    auto.observe(0, torch.ones(2, 3, 5, dtype=torch.float64))  # auto: (B, T, C) tokens, C = 5, N = 6
    assert auto.finish().count == [6]
