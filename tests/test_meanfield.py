"""stability.judge.meanfield against closed forms and published anchors.

Independent references: closed forms where they exist (ReLU, identity), else a 4·10⁵-point
trapezoid in x-space, which shares no code with the module's quadrature.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from stability.judge import meanfield as mf
from stability.judge import meanfield_quadrature as quad

EPS = float(np.finfo(np.float64).eps)


def _within(expected: float, rtol: float) -> object:
    return pytest.approx(expected, rel=rtol, abs=0.0)


def _trapezoid(f: object, q: float) -> float:
    s = math.sqrt(q)
    x = np.linspace(-40 * s - 30, 40 * s + 30, 400_001)
    w = np.exp(-x * x / (2 * q)) / math.sqrt(2 * math.pi * q)
    return float(np.trapezoid(f(x) * w, x))  # type: ignore[operator]


def test_relu_at_sigma_w2_two_is_exactly_critical() -> None:
    for sb2 in (0.0, 0.1):
        m = mf.mean_field("relu", sigma_w2=2.0, sigma_b2=sb2)
        assert m.chi1 == _within(1.0, 4 * EPS)
        assert m.xi == math.inf and m.phase == "critical"


@pytest.mark.parametrize("sw2", [0.5, 1.0, 1.9, 2.5, 4.0])
def test_homogeneous_chi1_closed_form(sw2: float) -> None:
    assert mf.chi1("relu", sigma_w2=sw2) == _within(sw2 / 2, 4 * EPS)
    assert mf.chi1("identity", sigma_w2=sw2, sigma_b2=0.3) == _within(sw2, 4 * EPS)
    assert mf.mean_field("relu", sigma_w2=sw2).xi == _within(1 / abs(math.log(sw2 / 2)), 1e-12) if sw2 != 2 else True
    # q* closed form for ReLU with a bias: σ_b²/(1 − σ_w²/2) below criticality, ∞ above.
    q = mf.fixed_point("relu", sigma_w2=sw2, sigma_b2=0.2)
    assert q == (_within(0.2 / (1 - sw2 / 2), 4 * EPS) if sw2 < 2 else math.inf)


def test_tanh_at_1_and_0_05_is_ordered_and_matches_an_independent_integral() -> None:
    m = mf.mean_field("tanh", sigma_w2=1.0, sigma_b2=0.05)
    assert m.phase == "ordered" and m.chi1 < 1
    # q* is a fixed point of the map, computed with the independent trapezoid.
    assert _trapezoid(lambda x: np.tanh(x) ** 2, m.q_star) + 0.05 == _within(m.q_star, 1e-9)
    assert _trapezoid(lambda x: (1 - np.tanh(x) ** 2) ** 2, m.q_star) == _within(m.chi1, 1e-9)
    assert m.xi == _within(-1 / math.log(m.chi1), 1e-12)


def test_tanh_chaotic_side() -> None:
    m = mf.mean_field("tanh", sigma_w2=4.0, sigma_b2=0.05)
    assert m.phase == "chaotic" and m.chi1 > 1 and m.xi == _within(1 / math.log(m.chi1), 1e-12)


@pytest.mark.parametrize("activation", ["tanh", "gelu", "sigmoid"])
@pytest.mark.parametrize("q", [0.01, 0.2, 1.0, 10.0, 100.0, 1e4])
def test_quadrature_against_trapezoid(activation: str, q: float) -> None:
    phi, d = quad.activation_function(activation), quad._dphi(activation)
    got = quad._expect3(activation, q)
    ref = (_trapezoid(lambda x: phi(x) ** 2, q), _trapezoid(lambda x: d(x) ** 2, q), _trapezoid(lambda x: d(x) ** 4, q))
    for a, b in zip(got, ref, strict=True):
        assert a == _within(b, 1e-9)


def test_nf_gains() -> None:
    # Exact: Var[relu(z)] = 1/2 − 1/(2π), so γ = √(2/(1 − 1/π)).
    assert mf.nf_gain("relu") == _within(math.sqrt(2 / (1 - 1 / math.pi)), 4 * EPS)
    t = np.tanh
    var_tanh = _trapezoid(lambda x: t(x) ** 2, 1.0)  # tanh is odd: E[tanh] = 0
    assert mf.nf_gain("tanh") == _within(1 / math.sqrt(var_tanh), 1e-10)
    assert mf.nf_gain("identity") == _within(1.0, 4 * EPS)
    # Brock et al. (2021) publish γ_relu ≈ 1.7139588594 and γ_tanh ≈ 1.5939117670, estimated from a
    # finite sample of N(0, 1) draws; both lie within 0.1% of the exact values above (the exact
    # ReLU value is 1.7128585504), which is the size of such a sample estimate's error.
    for name, published in (("relu", 1.7139588594), ("tanh", 1.5939117670)):
        assert abs(published / mf.nf_gain(name) - 1) < 1e-3
        # γ makes Var[γ φ(z)] = 1 by the module's own quadrature too.
        phi = quad.activation_function(name)
        g = mf.nf_gain(name)
        mean = mf.gaussian_expectation(phi)
        assert g * g * (mf.gaussian_expectation(lambda x, phi=phi: phi(x) ** 2) - mean * mean) == _within(1.0, 1e-12)


def test_critical_line() -> None:
    assert mf.critical_sigma_w2("relu", 0.0) == _within(2.0, 1e-12)
    assert mf.critical_sigma_w2("identity", 0.3) == _within(1.0, 1e-12)
    c = mf.critical_sigma_w2("tanh", 0.05)
    assert mf.chi1("tanh", sigma_w2=c, sigma_b2=0.05) == _within(1.0, 1e-9)
    # Schoenholz et al. (2017), Fig. 1: for tanh with σ_b² = 0.05 the transition is at σ_w² ≈ 1.76.
    assert abs(c - 1.76) < 0.005
    assert mf.mean_field("tanh", sigma_w2=c * 0.99, sigma_b2=0.05).phase == "ordered"
    assert mf.mean_field("tanh", sigma_w2=c * 1.01, sigma_b2=0.05).phase == "chaotic"


def test_fixed_point_is_a_fixed_point_and_is_stable() -> None:
    for act, sw2, sb2 in (("tanh", 1.5, 0.05), ("gelu", 1.5, 0.05), ("sigmoid", 3.0, 0.3), ("tanh", 2.5, 0.0)):
        q = mf.fixed_point(act, sigma_w2=sw2, sigma_b2=sb2)
        assert sw2 * quad.second_moment(act, q) + sb2 == _within(q, 1e-12)
        plain = 1.0
        for _ in range(3000):
            plain = sw2 * quad.second_moment(act, plain) + sb2
        assert plain == _within(q, 1e-9)
    assert mf.fixed_point("tanh", sigma_w2=0.5) == 0.0
    assert mf.fixed_point("gelu", sigma_w2=3.0, sigma_b2=0.3) == math.inf


def test_residual_chi1() -> None:
    # x + α(W relu(x) + b): χ₁ = 1 + α² σ_w² / 2 whatever the stream's variance.
    m = mf.mean_field("relu", sigma_w2=2.0, residual=True, branch_scale=0.5)
    assert m.chi1 == _within(1.25, 4 * EPS) and m.q_star == math.inf
    p = mf.layer_profile("relu", sigma_w2=2.0, depth=4, residual=True, branch_scale=0.5)
    assert p.q == pytest.approx([1.0, 1.25, 1.5625, 1.953125], rel=1e-15, abs=0.0)
    assert all(c == _within(1.25, 4 * EPS) for c in p.chi)


def test_plain_profile_and_finite_width_variance() -> None:
    p = mf.layer_profile("relu", sigma_w2=2.0, depth=3)
    assert p.chi == pytest.approx([1.0] * 3, rel=4 * EPS, abs=0.0)
    assert p.kappa == pytest.approx([2.0] * 3, rel=4 * EPS, abs=0.0)
    assert mf.log_factor_variance(p, width=50) == pytest.approx([5 / 50] * 3, rel=1e-12, abs=0.0)  # Hanin (2018)
    lin = mf.layer_profile("identity", sigma_w2=1.0, depth=2)
    assert mf.log_factor_variance(lin, width=10) == pytest.approx([0.2, 0.2], rel=1e-12, abs=0.0)
    t = mf.layer_profile("tanh", sigma_w2=1.0, sigma_b2=0.05, depth=40)
    assert t.q[-1] == _within(mf.fixed_point("tanh", sigma_w2=1.0, sigma_b2=0.05), 1e-6)


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="unknown activation"):
        mf.mean_field("swish", sigma_w2=1.0)
    with pytest.raises(ValueError, match="sigma_w2"):
        mf.mean_field("relu", sigma_w2=-1.0)


def test_log_rate_variance() -> None:
    plain = mf.layer_profile("tanh", sigma_w2=1.5, sigma_b2=0.05, depth=5)
    assert mf.log_rate_variance(plain, width=32) == pytest.approx(
        sum(mf.log_factor_variance(plain, width=32)), rel=1e-15, abs=0.0
    )
    # Residual ReLU, α = 0.5, σ_w² = 2, two blocks: χ_F = 1, p = (1, 1.25), ρ = √(1/1.25), a = 0.25/1.25,
    # v = (4α²χ_F + α⁴χ_F²·5)/(n (1 + α²χ_F)²) per block, plus 2a²·(2/π)·arcsin(ρ)/n.
    res = mf.layer_profile("relu", sigma_w2=2.0, depth=2, residual=True, branch_scale=0.5)
    n = 50
    v = (4 * 0.25 + 0.0625 * 5) / (n * 1.25**2)
    want = 2 * v + 2 * 0.2**2 * (2 / math.pi) * math.asin(math.sqrt(1 / 1.25)) / n
    assert mf.log_rate_variance(res, width=n) == _within(want, 1e-14)
