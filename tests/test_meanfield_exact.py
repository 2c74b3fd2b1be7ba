"""stability.judge.meanfield's residual branch, the Gauss–Hermite side of the quadrature and the plain
iteration's fallback, against closed forms at values where a slip shows (χ_F ≠ 1, α ≠ 1, σ_b² ≠ 0).
Written from the mutation check (docs/mutation.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stability.judge import meanfield as mf
from stability.judge import meanfield_quadrature as quad

EPS = float(np.finfo(np.float64).eps)


def _within(expected: float, rtol: float) -> object:
    return pytest.approx(expected, rel=rtol, abs=0.0)


@pytest.mark.parametrize("q", [1e-4, 0.1, 0.2])
def test_small_q_uses_gauss_hermite_and_it_is_exact_on_polynomials(q: float) -> None:
    assert mf.gaussian_expectation(lambda x: x * x, q) == _within(q, 1e-13)
    assert mf.gaussian_expectation(lambda x: x**4, q) == _within(3 * q * q, 1e-13)
    assert mf.gaussian_expectation(lambda x: np.maximum(x, 0.0) ** 2, q) == _within(
        q / 2, 1e-13
    )  # symmetric nodes: exact


def test_residual_chi1_with_a_branch_slope_other_than_one() -> None:
    # x + α(W relu(x) + b), σ_w² = 1: χ_F = σ_w²·E[relu′²] = ½, χ₁ = 1 + α²χ_F = 1 + ¼·½
    m = mf.mean_field("relu", sigma_w2=1.0, sigma_b2=0.3, residual=True, branch_scale=0.5)
    assert m.chi1 == _within(1.125, 4 * EPS) and m.xi == _within(1 / math.log(1.125), 1e-14)
    assert (m.activation, m.sigma_w2, m.sigma_b2, m.q_star) == ("relu", 1.0, 0.3, math.inf)
    assert mf.chi1("relu", sigma_w2=1.0, residual=True, branch_scale=0.5) == _within(1.125, 4 * EPS)
    assert mf.chi1("relu", sigma_w2=1.0) == _within(0.5, 4 * EPS)  # the plain stack for contrast
    still = mf.mean_field("relu", sigma_w2=1.0, residual=True, branch_scale=0.0)  # no branch: the stream stays
    assert still.q_star == 1.0 and still.chi1 == 1.0 and still.phase == "critical"


def test_residual_profile_with_bias_adds_alpha_squared_sigma_b_squared_per_block() -> None:
    # ReLU: p_{l+1} = p_l + α²(σ_w² p_l/2 + σ_b²) = p_l(1 + α²σ_w²/2) + α²σ_b²
    a2, sw2, sb2 = 0.25, 1.0, 0.4
    p = mf.layer_profile(
        "relu", sigma_w2=sw2, sigma_b2=sb2, depth=4, residual=True, branch_scale=0.5, input_second_moment=2.0
    )
    want = [2.0]
    for _ in range(3):
        want.append(want[-1] * (1 + a2 * sw2 / 2) + a2 * sb2)
    assert p.q == pytest.approx(want, rel=1e-14, abs=0.0)
    assert p.chi == pytest.approx([1.125] * 4, rel=4 * EPS, abs=0.0) and p.branch_scale == 0.5 and p.residual
    # v_l = (4α²χ_F + α⁴χ_F²(3κ − 1)) / (n (1 + α²χ_F)²) with χ_F = ½, κ = 2
    n = 40
    v = (4 * a2 * 0.5 + a2 * a2 * 0.25 * 5) / (n * 1.125**2)
    assert mf.log_factor_variance(p, width=n) == pytest.approx([v] * 4, rel=1e-13, abs=0.0)


def test_plain_iteration_fallback_finds_a_stable_point_or_says_unbounded() -> None:
    """GELU at σ_w² = 2, σ_b² = 0.05 from q0 = 10: Steffensen's limit is not stable, so the plain
    iteration decides; at σ_w² = 3 GELU grows like a ReLU with gain 1.5 per block: q* = ∞, never the
    quadrature's clamp."""
    q = mf.fixed_point("gelu", sigma_w2=2.0, sigma_b2=0.05, q0=10.0)

    def t(x: float) -> float:
        return 2.0 * quad.second_moment("gelu", x) + 0.05

    assert 0.0 < q < 1.0 and t(q) == _within(q, 1e-12)
    h = 1e-6 * q
    assert abs(t(q + h) - t(q - h)) / (2 * h) < 1.0  # stable
    assert mf.fixed_point("gelu", sigma_w2=3.0) == math.inf
    assert mf.mean_field("gelu", sigma_w2=3.0, sigma_b2=0.01).q_star == math.inf


def test_defaults_and_an_empty_profile() -> None:
    m = mf.mean_field("relu", sigma_w2=1.0)  # σ_b² = 0 by default: q* = 0 for a ReLU below criticality
    assert m.sigma_b2 == 0.0 and m.q_star == 0.0 and m.chi1 == _within(0.5, 4 * EPS)
    p = mf.layer_profile("tanh", sigma_w2=1.0, depth=0)
    assert (p.q, p.chi, p.kappa) == ((), (), ())
    with pytest.raises(ValueError, match="depth must be >= 0, got -1"):
        mf.layer_profile("tanh", sigma_w2=1.0, depth=-1)


def test_critical_homogeneous_map_keeps_every_q_and_the_residual_covariance_uses_the_streams_ratio() -> None:
    assert mf.fixed_point("relu", sigma_w2=2.0, q0=3.5) == 3.5  # T(q) = q: every q is fixed
    assert mf.fixed_point("identity", sigma_w2=1.0, q0=0.25) == 0.25
    # residual ReLU fed E[x²] = 0.5: p = (0.5, 0.625); ρ = √(0.5/0.625) although both are below 1
    res = mf.layer_profile("relu", sigma_w2=2.0, depth=2, residual=True, branch_scale=0.5, input_second_moment=0.5)
    assert res.q == pytest.approx((0.5, 0.625), rel=1e-15, abs=0.0)
    n = 50
    v = (4 * 0.25 + 0.0625 * 5) / (n * 1.25**2)
    want = 2 * v + 2 * 0.2**2 * (2 / math.pi) * math.asin(math.sqrt(0.5 / 0.625)) / n
    assert mf.log_rate_variance(res, width=n) == _within(want, 1e-14)
