"""Edges of stability/meanfield.py: the composite rule's Gaussian density at q ≠ 1 (E[x²] = q,
E[x⁴] = 3q²), a stack with no weights and no bias (q* = χ₁ = ξ = 0: it used to divide by zero),
the defaults (no bias, branch scale 1), and the error when the edge of chaos lies outside the
searched range. Written from the surviving mutants of the whole-module run of meanfield.py
(docs/mutation.md)."""

from __future__ import annotations

import pytest

from stability.meanfield import MeanField, chi1, critical_sigma_w2, gaussian_expectation, mean_field


@pytest.mark.parametrize("q", [0.1, 0.3, 4.0, 50.0])
def test_gaussian_moments_at_any_variance(q: float) -> None:
    assert gaussian_expectation(lambda x: x * x, q) == pytest.approx(q, rel=1e-12, abs=0)
    assert gaussian_expectation(lambda x: x**4, q) == pytest.approx(3.0 * q * q, rel=1e-12, abs=0)


@pytest.mark.parametrize("activation", ["tanh", "gelu", "sigmoid", "relu", "identity"])
def test_a_stack_without_weights_or_bias_collapses_to_zero(activation: str) -> None:
    assert mean_field(activation, sigma_w2=0.0) == MeanField(activation, 0.0, 0.0, 0.0, 0.0, 0.0)  # ξ = 0: gone in one block


def test_the_defaults_are_no_bias_and_a_unit_branch() -> None:
    assert chi1("tanh", sigma_w2=1.5) == mean_field("tanh", sigma_w2=1.5, sigma_b2=0.0).chi1 != mean_field("tanh", sigma_w2=1.5, sigma_b2=1.0).chi1
    assert chi1("relu", sigma_w2=1.0, residual=True) == pytest.approx(1.5, rel=1e-14, abs=0)  # 1 + α²σ_w²/2 with α = 1
    assert mean_field("relu", sigma_w2=1.0, residual=True).chi1 == pytest.approx(1.5, rel=1e-14, abs=0)
    assert critical_sigma_w2("tanh") == pytest.approx(1.0, abs=1e-6)  # tanh′(0) = 1: σ_w² = 1 without bias


def test_no_edge_of_chaos_in_range_is_an_error_that_says_so() -> None:
    with pytest.raises(ValueError, match=r"^no critical sigma_w2 in \[1e-3, 1e4\] for tanh with sigma_b2 = 1000000000000.0$"):
        critical_sigma_w2("tanh", 1e12)
