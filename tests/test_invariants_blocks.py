"""Where `gradient_arrival` and `variance_growth` (stability/judge/invariants.py) place a failure: the
invariant's own name on a non-finite gradient, the first zero of a collapsed gradient, and the
block after which a profile first crosses its bound when that is boundary 1 (block 0) or when a
value sits exactly on `min_ratio`. Written from the surviving mutants of the whole-module run of
invariants.py (dev/mutation/mutation_invariants_survivors.txt)."""

from __future__ import annotations

import math

from stability.judge.invariants import gradient_arrival, variance_growth
from stability.measure.probe import Measurements


def _m(grad: list[float], act: list[float], **kw: object) -> Measurements:
    return Measurements(
        grad_norm=grad,
        act_var=act,
        act_sq_mean=act,
        param_grad_norm={},
        identity_error=None,
        input_grad_error=None,
        **kw,
    )  # type: ignore[arg-type]


def test_a_non_finite_gradient_is_named_as_a_gradient_arrival_failure() -> None:
    v = gradient_arrival(_m([1.0] * 4, [1.0] * 4, nonfinite_at=1, nonfinite_kind="gradient"), lo=0.5, hi=2.0)
    assert (v.invariant, v.passed, v.bound, v.block) == ("gradient_arrival", False, "[0.5, 2]", 1) and math.isnan(
        v.observed
    )
    assert (
        v.detail
        == "the gradient became non-finite at the input of block 1; lower the learning scale or use a wider dtype"
    )


def test_a_collapsed_gradient_names_the_highest_block_where_it_is_zero() -> None:
    v = gradient_arrival(_m([0.0, 0.0, 0.0, 1.0], [1.0] * 4, nonfinite_at=None))
    assert (v.passed, v.observed, v.block) == (False, 0.0, 2)
    assert v.detail == "the gradient is exactly zero from the input of block 2 down (collapse)"


def test_growth_that_crosses_at_boundary_one_fails_after_block_zero() -> None:
    v = variance_growth(_m([1.0] * 5, [1.0, 100.0, 1e4, 1e6, 1e8], nonfinite_at=None), max_growth="linear")
    assert v.passed is False and v.block == 0 and v.detail.endswith("it passes 4× the input's after block 0")


def test_a_ratio_bound_crossed_at_boundary_one_fails_after_block_zero() -> None:
    high = variance_growth(_m([1.0] * 4, [1.0, 3.0, 3.0, 3.0], nonfinite_at=None), max_ratio=2.0)
    assert high.passed is False and high.block == 0 and "ratio 3 > 2, first after block 0;" in high.detail
    low = variance_growth(_m([1.0] * 4, [1.0, 0.3, 0.5, 0.5], nonfinite_at=None), min_ratio=0.5)
    assert low.passed is False and low.block == 0 and "ratio 0.3 < 0.5, first after block 0;" in low.detail


def test_a_value_exactly_at_min_ratio_is_not_the_crossing() -> None:
    v = variance_growth(_m([1.0] * 4, [1.0, 0.5, 0.3, 0.5], nonfinite_at=None), min_ratio=0.5)
    assert (
        v.passed is False and v.block == 1 and "first after block 1;" in v.detail
    )  # 0.5 at boundary 1 meets the bound
    ok = variance_growth(_m([1.0] * 4, [1.0, 0.6, 0.5, 0.5], nonfinite_at=None), min_ratio=0.5)
    assert ok.passed is True and ok.block == 0  # the whole profile meets the bound; its largest ratio is the input's
