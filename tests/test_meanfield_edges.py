"""Edges of stability/judge/meanfield.py and its quadrature and profile modules: the composite
rule's Gaussian density at q ≠ 1 (E[x²] = q, E[x⁴] = 3q²), a stack with no weights and no bias
(q* = χ₁ = ξ = 0: it used to divide by zero), the defaults (no bias, branch scale 1), and the error
when the edge of chaos lies outside the searched range. Written from the surviving mutants of the
whole-module run of meanfield.py, before it was split (docs/mutation.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stability.judge.meanfield import (
    LayerProfile,
    MeanField,
    chi1,
    critical_sigma_w2,
    fixed_point,
    gaussian_expectation,
    layer_profile,
    log_factor_variance,
    log_rate_variance,
    mean_field,
)


@pytest.mark.parametrize("q", [0.1, 0.3, 4.0, 50.0])
def test_gaussian_moments_at_any_variance(q: float) -> None:
    assert gaussian_expectation(lambda x: x * x, q) == pytest.approx(q, rel=1e-12, abs=0)
    assert gaussian_expectation(lambda x: x**4, q) == pytest.approx(3.0 * q * q, rel=1e-12, abs=0)


@pytest.mark.parametrize("activation", ["tanh", "gelu", "sigmoid", "relu", "identity"])
def test_a_stack_without_weights_or_bias_collapses_to_zero(activation: str) -> None:
    assert mean_field(activation, sigma_w2=0.0) == MeanField(
        activation=activation, sigma_w2=0.0, sigma_b2=0.0, q_star=0.0, chi1=0.0, xi=0.0
    )  # ξ = 0: gone in one block


def test_the_defaults_are_no_bias_and_a_unit_branch() -> None:
    assert (
        chi1("tanh", sigma_w2=1.5)
        == mean_field("tanh", sigma_w2=1.5, sigma_b2=0.0).chi1
        != mean_field("tanh", sigma_w2=1.5, sigma_b2=1.0).chi1
    )
    assert chi1("relu", sigma_w2=1.0, residual=True) == pytest.approx(1.5, rel=1e-14, abs=0)  # 1 + α²σ_w²/2 with α = 1
    assert mean_field("relu", sigma_w2=1.0, residual=True).chi1 == pytest.approx(1.5, rel=1e-14, abs=0)
    assert critical_sigma_w2("tanh") == critical_sigma_w2("tanh", 0.0) == 1.0  # tanh′(0) = 1: σ_w² = 1 without bias


@pytest.mark.parametrize(
    ("activation", "sigma_b2", "closed"),
    [("tanh", 0.0, 1.0), ("relu", 0.0, 2.0), ("relu", 0.7, 2.0), ("identity", 0.3, 1.0)],
)
def test_the_closed_forms_of_the_critical_line_agree_with_the_quadrature(
    activation: str, sigma_b2: float, closed: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ReLU and the identity: χ₁ = σ_w² E[φ′(z)²] at every q (1/2 and 1); tanh without bias: q* = 0
    below σ_w² = 1/tanh′(0)² = 1, where χ₁ = σ_w², and q* > 0 with χ₁ > 1 above. The quadrature's χ₁
    crosses 1 there, and the closed form asks it nothing (it was a bisection of 540,683 quadratures)."""
    with monkeypatch.context() as m:
        m.setattr("stability.judge.meanfield.mean_field", None)  # a call would raise TypeError
        assert critical_sigma_w2(activation, sigma_b2) == closed
    for eps in (1e-2, 1e-4):
        below = mean_field(activation, sigma_w2=closed * (1 - eps), sigma_b2=sigma_b2)
        above = mean_field(activation, sigma_w2=closed * (1 + eps), sigma_b2=sigma_b2)
        assert below.phase == "ordered" and above.phase == "chaotic"
        assert below.chi1 == pytest.approx(1 - eps, rel=1e-12, abs=0) if activation != "tanh" else below.chi1 < 1
    if activation == "tanh":  # below the edge q* = 0, so χ₁ = σ_w² tanh′(0)² = σ_w² exactly
        assert mean_field("tanh", sigma_w2=0.99).q_star == 0.0
        assert mean_field("tanh", sigma_w2=0.99).chi1 == pytest.approx(0.99, rel=1e-12, abs=0)


def test_without_a_closed_form_the_critical_line_is_searched() -> None:
    """Sigmoid has φ(0) ≠ 0 and tanh with a bias has q* > 0: χ₁ crosses 1 where the search stops.
    GELU has φ(0) = 0 and φ′(0) = 1/2, but from q = 1 its q grows without bound from σ_w² ≈ 2.35 on,
    before 1/φ′(0)² = 4: χ₁ jumps across 1 there, from σ_w² φ′(0)² (q* = 0) to past 1 (q* = ∞)."""
    for activation, sigma_b2 in (("sigmoid", 0.0), ("tanh", 0.05)):
        c = critical_sigma_w2(activation, sigma_b2)
        assert mean_field(activation, sigma_w2=c, sigma_b2=sigma_b2).chi1 == pytest.approx(1.0, rel=1e-9, abs=0)
    c = critical_sigma_w2("gelu")
    assert 2.3 < c < 2.4
    below, above = mean_field("gelu", sigma_w2=c * (1 - 1e-9)), mean_field("gelu", sigma_w2=c * (1 + 1e-9))
    assert (below.q_star, above.q_star) == (0.0, math.inf)
    assert below.chi1 == pytest.approx(c / 4, rel=1e-6, abs=0) and above.chi1 > 1.1


def test_no_edge_of_chaos_in_range_is_an_error_that_says_so() -> None:
    with pytest.raises(
        ValueError, match=r"^no critical sigma_w2 in \[1e-3, 1e4\] for tanh with sigma_b2 = 1000000000000.0$"
    ):
        critical_sigma_w2("tanh", 1e12)


def test_bad_parameters_are_refused_in_one_line_each() -> None:
    with pytest.raises(
        ValueError, match=r"^unknown activation 'foo'; expected one of relu, tanh, gelu, sigmoid, identity$"
    ):
        mean_field("foo", sigma_w2=1.0)
    with pytest.raises(ValueError, match=r"^sigma_b2 must be a finite number >= 0, got -1\.0$"):
        mean_field("tanh", sigma_w2=1.0, sigma_b2=-1.0)
    with pytest.raises(ValueError, match=r"^width must be >= 1, got 0$"):
        log_factor_variance(layer_profile("relu", sigma_w2=2.0, depth=2), width=0)


def test_a_residual_stream_grows_whenever_the_branch_adds_anything() -> None:
    assert mean_field("tanh", sigma_w2=1.0, sigma_b2=5.0, residual=True).q_star == math.inf
    assert mean_field("tanh", sigma_w2=0.0, sigma_b2=0.0, residual=True).q_star == 1.0  # nothing added: p stays p₀ = 1
    want = 1.0 + gaussian_expectation(
        lambda x: (1.0 - np.tanh(x) ** 2) ** 2, 1.0
    )  # 1 + σ_w² E[tanh′(z)²] at the input's p = 1
    assert mean_field("tanh", sigma_w2=1.0, residual=True).chi1 == pytest.approx(want, rel=1e-12, abs=0)
    assert layer_profile("tanh", sigma_w2=1.0, depth=3, residual=True) == layer_profile(
        "tanh", sigma_w2=1.0, depth=3, residual=True, branch_scale=1.0
    )


def test_width_one_and_a_zero_branch_and_a_malformed_profile() -> None:
    p = layer_profile("relu", sigma_w2=2.0, depth=3)
    assert log_factor_variance(p, width=1) == pytest.approx(
        tuple(10 * v for v in log_factor_variance(p, width=10)), rel=1e-14, abs=0
    )
    zero = LayerProfile(
        q=(1.0, 1.0), chi=(1.0, 1.0), kappa=(2.0, 2.0), residual=True, branch_scale=0.0, activation="relu"
    )
    assert log_factor_variance(zero, width=4) == (0.0, 0.0)
    with pytest.raises(ValueError):
        log_factor_variance(
            LayerProfile(q=(1.0,), chi=(2.0, 2.0), kappa=(2.0,), residual=False, branch_scale=1.0), width=4
        )


@pytest.mark.parametrize(("q", "rho"), [((0.0, 0.0), 1.0), ((4.0, 1.0), 1.0), ((1.0, 4.0), 0.5)])
def test_the_relu_covariance_between_blocks_uses_the_streams_correlation_clipped_to_one(
    q: tuple[float, float], rho: float
) -> None:
    p = LayerProfile(q=q, chi=(2.0, 3.0), kappa=(2.0, 2.0), residual=True, branch_scale=1.0, activation="relu")
    cross = 2 * (1 / 2) * (2 / 3) * (2 / math.pi) * math.asin(rho) / 10  # weights χ_F/(1 + χ_F) with χ_F = χ − 1
    assert log_rate_variance(p, width=10) == pytest.approx(
        sum(log_factor_variance(p, width=10)) + cross, rel=1e-14, abs=0
    )


def test_the_smooth_covariance_with_kappa_below_two() -> None:
    p = LayerProfile(
        q=(1.0, 1.0), chi=(2.0, 3.0), kappa=(1.5, 1.25), residual=True, branch_scale=1.0, activation="tanh"
    )
    cross = 2 * (1 / 2) * (2 / 3) * math.sqrt(0.5 * 0.25) / 10
    assert log_rate_variance(p, width=10) == pytest.approx(
        sum(log_factor_variance(p, width=10)) + cross, rel=1e-14, abs=0
    )


def test_fixed_points_in_closed_form_at_the_corners() -> None:
    assert (
        fixed_point("relu", sigma_w2=2.0) == 1.0 and fixed_point("relu", sigma_w2=2.0, q0=3.0) == 3.0
    )  # every q is fixed: q0 itself
    assert fixed_point("relu", sigma_w2=3.0) == math.inf  # slope 3/2 without bias: no finite fixed point
    assert (
        fixed_point("tanh", sigma_w2=0.5) == 0.0 and fixed_point("gelu", sigma_w2=0.5) == 0.0
    )  # ordered, no bias: collapses to exactly 0
