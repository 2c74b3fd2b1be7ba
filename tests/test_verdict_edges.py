"""Verdicts at their edges (issue 12's review): values exactly at a threshold, series that rise
then fall, curves between linear and exponential, the two-pass variance on ≥ 2,048-element
boundaries checked exactly, and which case the engine reports."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from stability import load_spec, probe
from stability.judge.invariants import classify_growth, gradient_arrival, variance_growth
from stability.measure.probe import Measurements
from stability.run.engine import RunOptions, run_spec


def _m(grad: list[float] | None = None, var: list[float] | None = None) -> Measurements:
    n = len(grad or var or [])
    grad = grad or [1.0] * n
    var = var or [1.0] * n
    return Measurements(
        grad_norm=grad,
        act_var=var,
        act_sq_mean=var,
        param_grad_norm={},
        identity_error=None,
        input_grad_error=None,
        nonfinite_at=None,
    )


# ----------------------------------------------------------------------------- thresholds


def test_gradient_ratio_exactly_at_lo_and_hi_holds_and_just_outside_fails() -> None:
    assert gradient_arrival(_m(grad=[0.1, 1.0]), lo=0.1, hi=10.0).passed
    assert gradient_arrival(_m(grad=[10.0, 1.0]), lo=0.1, hi=10.0).passed
    assert not gradient_arrival(_m(grad=[math.nextafter(0.1, 0.0), 1.0]), lo=0.1, hi=10.0).passed
    assert not gradient_arrival(_m(grad=[math.nextafter(10.0, 11.0), 1.0]), lo=0.1, hi=10.0).passed


def test_decaying_threshold_is_one_over_bounded_ratio() -> None:
    """Final ratio 0.2 lies between 1/8 and 1/4: decaying at bounded_ratio 4 (not at a halved threshold)."""
    assert classify_growth([1.0, 0.5, 0.2], bounded_ratio=4.0).growth == "decaying"
    assert classify_growth([1.0, 0.5, 0.25], bounded_ratio=4.0).growth == "bounded"  # 1/4 exactly is not below


def test_bounded_ratio_exactly_at_the_bound_is_bounded() -> None:
    assert classify_growth([1.0, 2.0, 4.0], bounded_ratio=4.0).growth == "bounded"
    assert classify_growth([1.0, 2.0, math.nextafter(4.0, 5.0)], bounded_ratio=4.0).growth != "bounded"


# ----------------------------------------------------------------------------- rise then fall


def test_max_ratio_is_judged_on_the_peak_not_the_final_value() -> None:
    v = variance_growth(_m(var=[1.0, 5.0, 2.0]), max_growth="exponential", max_ratio=4.0)
    assert not v.passed and v.observed == 5.0 and v.block == 0
    v = variance_growth(_m(var=[1.0, 3.0, 3.9]), max_growth="exponential", max_ratio=4.0)
    assert v.passed


def test_min_ratio_is_judged_on_the_trough_not_the_final_value() -> None:
    v = variance_growth(_m(var=[1.0, 0.1, 0.9]), max_growth="exponential", min_ratio=0.5)
    assert not v.passed and v.observed == pytest.approx(0.1, rel=1e-15, abs=0) and v.block == 0


# ----------------------------------------------------------------------------- between linear and exponential


def test_curve_between_linear_and_exponential_is_not_exponential() -> None:
    """r = 1 + l^1.6 on l = 0 … 8: the exponential's log-SSE is 0.92 of the linear's, so it does
    not clearly out-fit linear (the classifier asks for less than half); the log-log exponent 1.6
    makes it polynomial."""
    r = 1.0 + np.arange(9, dtype=np.float64) ** 1.6
    ls, logr = np.arange(1, 9, dtype=np.float64), np.log(r[1:])
    a = float((ls * (r[1:] - 1)).sum() / (ls * ls).sum())
    b = float((ls * logr).sum() / (ls * ls).sum())
    share = float(((logr - b * ls) ** 2).sum() / ((logr - np.log1p(a * ls)) ** 2).sum())
    assert 0.5 < share < 1.0  # the case this test is about
    fit = classify_growth(r.tolist())
    assert fit.growth == "polynomial"
    assert fit.exponent == pytest.approx(1.6, abs=0.1)


# ----------------------------------------------------------------------------- two-pass variance, exactly


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [2048, 4096, 6000])
def test_two_pass_variance_divides_by_n_exactly(n: int, dtype: torch.dtype) -> None:
    """±c alternating values, shifted by μ: mean μ and population variance c² exactly (the n − 1
    divisor would give c²·n/(n − 1), 1 + 4.9e-4 at n = 2,048). Every sum involved is exact in
    binary floating point, so the probe must return c² and μ to the last bit."""
    c, mu = 1.5, 0.25
    signs = torch.tensor([1.0, -1.0], dtype=dtype).repeat(n // 2)  # (n,)
    x = (mu + c * signs).reshape(n // 16, 16)  # (B, C) with B·C = n ≥ 2,048: the two-pass path
    m = probe([nn.Identity(), nn.Identity()], x)
    assert m.act_var == [c * c] * 3
    assert m.act_sq_mean == [c * c + mu * mu] * 3


# ----------------------------------------------------------------------------- which case the engine reports


HALVING = '''
import torch
from torch import nn


def halving(depth, width):
    """x ↦ x/2 per block: gradient ratio exactly 2^-depth, activation variance 4^-depth."""
    layers = [nn.Linear(width, width, bias=False) for _ in range(depth)]
    for layer in layers:
        with torch.no_grad():
            layer.weight.copy_(0.5 * torch.eye(width))
    return nn.Sequential(*layers)
'''


def _halving_spec(tmp_path: Path, expect: str) -> Path:
    (tmp_path / "halving_blocks.py").write_text(HALVING, encoding="utf-8")
    path = tmp_path / "halving.toml"
    path.write_text(
        textwrap.dedent("""\
        name = "halving"
        description = "x/2 per block"
        family = "custom"
        [block]
        factory = "halving_blocks:halving"
        [space]
        depth = [1, 30]
        width = 4
        batch = 2
        """)
        + expect,
        encoding="utf-8",
    )
    return path


def test_reports_the_shrunk_case_not_the_first_failing(tmp_path: Path) -> None:
    """0.5^L < 0.05 from L = 5 on: whatever depth the search first fails at, the report is depth 5."""
    spec = load_spec(_halving_spec(tmp_path, "[expect.gradient_arrival]\nlo = 0.05\nhi = 10.0\n"))
    (r,) = run_spec(spec, RunOptions(profile="ci")).results
    assert not r.met and r.case is not None
    assert r.case.depth == 5
    assert r.verdict is not None and r.verdict.observed == 0.5**5


def test_reports_the_passing_case_closest_to_the_bound(tmp_path: Path) -> None:
    """lo = 1e-12, hi = 1e12: every depth passes, and the deepest (0.5^L smallest) is nearest a bound
    in log distance, whichever depths the search drew."""
    spec = load_spec(_halving_spec(tmp_path, "[expect.gradient_arrival]\nlo = 1e-12\nhi = 1e12\n"))
    result = run_spec(spec, RunOptions(profile="ci"))
    (r,) = result.results
    deepest = max(c.depth for c in result.cases)
    assert r.met and r.case is not None and r.case.depth == deepest  # the smallest ratio, nearest lo
    assert r.verdict is not None and r.verdict.observed == 0.5**deepest


@pytest.mark.parametrize("expect", ["holds", "violated"])
def test_an_expectation_is_never_met_when_every_case_errored(tmp_path: Path, expect: str) -> None:
    """A 1-byte memory budget refuses every case: nothing was measured, so neither "holds" nor
    "violated" can be met (a violation found only as errors is no violation)."""
    spec = load_spec(_halving_spec(tmp_path, f'[expect.gradient_arrival]\nexpect = "{expect}"\nlo = 0.05\nhi = 10.0\n'))
    (r,) = run_spec(spec, RunOptions(profile="ci", memory_budget=1)).results
    assert not r.met
    assert r.error
