"""Verdicts from measurements whose values are known exactly."""

from __future__ import annotations

import math

import pytest
from spec_support import make_measurements

from stability import gradient_arrival, identity_at_init, variance_growth
from stability.measure.probe import Measurements


def measured(grad: list[float], var: list[float] | None = None, **kw: object) -> Measurements:
    var = var or [1.0] * len(grad)
    return Measurements(
        grad_norm=grad,
        act_var=var,
        act_sq_mean=var,
        param_grad_norm={},
        identity_error=kw.get("identity_error", 0.0),
        input_grad_error=kw.get("input_grad_error", 0.0),  # type: ignore[arg-type]
        nonfinite_at=kw.get("nonfinite_at"),
        nonfinite_kind=kw.get("nonfinite_kind"),  # type: ignore[arg-type]
    )


def geometric(factor: float, depth: int) -> list[float]:
    # grad_norm[l] = factor^(L−l): the gradient loses `factor` at every block going down.
    return [factor ** (depth - l) for l in range(depth + 1)]


def test_arrival_within_bounds_holds() -> None:
    v = gradient_arrival(measured(geometric(0.95, 10)), lo=0.5, hi=2.0)
    assert v.passed and v.observed == pytest.approx(0.95**10)


def test_vanishing_names_the_first_block_below_the_bound() -> None:
    # 0.5^l < 0.1 first at l = 4 from the output: boundary 10 − 4 = 6.
    v = gradient_arrival(measured(geometric(0.5, 10)), lo=0.1, hi=10)
    assert not v.passed and v.block == 6 and "vanishes" in v.detail
    assert v.observed == pytest.approx(0.5**10)


def test_exploding_fails_too() -> None:
    v = gradient_arrival(measured(geometric(1.5, 10)), lo=0.1, hi=10)
    assert not v.passed and "explodes" in v.detail and v.block == 10 - 6  # 1.5^6 = 11.4 > 10


def test_exact_zero_is_a_collapse_at_the_block_that_zeroed_it() -> None:
    v = gradient_arrival(measured([0.0, 0.0, 0.0, 0.5, 1.0]), lo=0.1, hi=10)
    assert not v.passed and v.observed == 0.0 and v.block == 2 and "exactly zero" in v.detail


def test_nonfinite_names_the_block() -> None:
    v = gradient_arrival(measured([math.nan] * 9, nonfinite_at=8, nonfinite_kind="activation"), lo=0.1, hi=10)
    assert not v.passed and v.block == 7 and "block 7 produced a non-finite activation" in v.detail
    v = gradient_arrival(measured([math.inf, math.inf, 1.0], nonfinite_at=1, nonfinite_kind="gradient"))
    assert not v.passed and "input of block 1" in v.detail


def test_variance_linear_growth_is_at_most_linear() -> None:
    var = [1 + 0.5 * l for l in range(41)]
    v = variance_growth(measured([1.0] * 41, var), max_growth="linear")
    assert v.passed and v.extra["growth"] == "linear"
    assert v.extra["slope"] == pytest.approx(0.5)
    v = variance_growth(measured([1.0] * 41, var), max_growth="bounded")
    assert not v.passed and v.block == 7 - 1  # ratio first exceeds 4 at boundary 7 (1 + 3.5), output of block 6


def test_variance_exponential_growth_reports_the_rate() -> None:
    var = [2.0**l for l in range(21)]
    v = variance_growth(measured([1.0] * 21, var), max_growth="linear")
    assert not v.passed and v.extra["growth"] == "exponential"
    assert v.extra["rate"] == pytest.approx(2.0)


def test_variance_ratio_bounds() -> None:
    var = [1.0, 1.5, 2.0, 3.0]
    assert not variance_growth(measured([1.0] * 4, var), max_growth="exponential", max_ratio=2.5).passed
    assert variance_growth(measured([1.0] * 4, var), max_growth="exponential", max_ratio=3.0).passed
    assert not variance_growth(
        measured([1.0] * 4, [1.0, 0.5, 0.2, 0.1]), max_growth="exponential", min_ratio=0.5
    ).passed


def test_identity_exact_and_approximate() -> None:
    assert identity_at_init(measured([1.0, 1.0])).passed
    v = identity_at_init(measured([1.0, 1.0], identity_error=1e-9), atol=0.0)
    assert not v.passed and "output differs" in v.detail
    assert identity_at_init(measured([1.0, 1.0], identity_error=1e-9), atol=1e-6).passed
    v = identity_at_init(measured([1.0, 1.0], identity_error=0.0, input_grad_error=0.1))
    assert not v.passed and "input gradient differs" in v.detail
    v = identity_at_init(measured([1.0, 1.0], identity_error=None))
    assert not v.passed and "shape" in v.detail


def test_identity_names_the_first_block_that_changes_its_input() -> None:
    m = measured([1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.7, 0.7], identity_error=0.3)
    assert identity_at_init(m).block == 1


# ----------------------------------------------------------------------------- thresholds and extremes


def _m(grad: list[float] | None = None, var: list[float] | None = None) -> Measurements:
    n = len(grad or var or [])
    grad = grad or [1.0] * n
    var = var or [1.0] * n
    return make_measurements(grad_norm=grad, act_var=var, act_sq_mean=var)


def test_gradient_ratio_exactly_at_lo_and_hi_holds_and_just_outside_fails() -> None:
    assert gradient_arrival(_m(grad=[0.1, 1.0]), lo=0.1, hi=10.0).passed
    assert gradient_arrival(_m(grad=[10.0, 1.0]), lo=0.1, hi=10.0).passed
    assert not gradient_arrival(_m(grad=[math.nextafter(0.1, 0.0), 1.0]), lo=0.1, hi=10.0).passed
    assert not gradient_arrival(_m(grad=[math.nextafter(10.0, 11.0), 1.0]), lo=0.1, hi=10.0).passed


def test_max_ratio_is_judged_on_the_peak_not_the_final_value() -> None:
    v = variance_growth(_m(var=[1.0, 5.0, 2.0]), max_growth="exponential", max_ratio=4.0)
    assert not v.passed and v.observed == 5.0 and v.block == 0
    v = variance_growth(_m(var=[1.0, 3.0, 3.9]), max_growth="exponential", max_ratio=4.0)
    assert v.passed


def test_min_ratio_is_judged_on_the_trough_not_the_final_value() -> None:
    v = variance_growth(_m(var=[1.0, 0.1, 0.9]), max_growth="exponential", min_ratio=0.5)
    assert not v.passed and v.observed == pytest.approx(0.1, rel=1e-15, abs=0) and v.block == 0
