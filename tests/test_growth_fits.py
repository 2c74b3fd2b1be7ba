"""The three laws' fits in `classify_ensemble` (stability/judge/growth.py) on exact, noise-free profiles,
where each fit has a known answer: a flat profile is the linear law with a = 0 (χ² exactly 0), and
an exact power law 1 + c·lᵖ is fitted at its own p anywhere on [0.1, 3], including between the
grid's first two points and its last two; and the power law's extra parameter paid for by Akaike's
penalty of 2 (Akaike 1974), neither more nor less. Written from the surviving mutants of the mutation
check (docs/mutation.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stability.judge import growth
from stability.judge.growth import EnsembleGrowth, classify_ensemble


def test_a_flat_profile_is_the_linear_law_with_no_slope_exactly() -> None:
    d = np.zeros(6)  # log-increments of a constant profile
    w = np.ones(6)
    ls = np.arange(2, 8, dtype=np.float64)
    chi2, _ = growth._fits(d, w, ls)
    assert chi2["linear"] == 0.0 and chi2["exponential"] == 0.0  # a = 0 is on the grid; g = 1 is the weighted mean


@pytest.mark.parametrize("p", [0.15, 2.23, 2.95, 3.0])  # 3.0: the cap itself
def test_an_exact_power_law_is_fitted_at_its_exponent_across_the_grid(p: float) -> None:
    depth = np.arange(0, 33, dtype=np.float64)
    law = 1.0 + 0.05 * depth**p
    noisy = law * np.exp(1e-9 * np.sin(depth))  # a second member a hair apart: the per-block variances are not zero
    g = classify_ensemble([law, noisy], bounded_ratio=1.01)
    assert g.exponent == pytest.approx(p, abs=2e-3)  # between grid points 0.1 apart, at either end too


def test_an_ensemble_that_cannot_rule_out_faster_laws_reports_its_best_fit() -> None:
    """Linear on average with 15% noise per block at depth 5: the linear law fits best and the
    exponential cannot be ruled out (within DECISION_CHI2): reported and judged linear."""
    rng = np.random.default_rng(1)
    ls = np.arange(0, 6, dtype=np.float64)
    profiles = [(1.0 + ls) * np.exp(rng.normal(0.0, 0.15, ls.shape)) for _ in range(4)]
    g = classify_ensemble([(p / p[0]).tolist() for p in profiles])
    assert min(g.chi2, key=lambda k: g.chi2[k] + (2.0 if k == "power" else 0.0)) == "linear"
    assert 0.0 < g.chi2["exponential"] - g.chi2["linear"] <= growth.DECISION_CHI2  # exponential stays plausible
    assert (g.growth, g.lowest, g.decided) == ("linear", "linear", True)


def test_a_profile_proportional_to_depth_is_fitted_at_the_top_of_the_scale_grid() -> None:
    # R_l ∝ l exactly: d_l = ln(l/(l−1)). The linear law ln((1 + a·l)/(1 + a·(l−1))) reaches it as
    # a → ∞, missing it by −1/(a·l·(l−1)) to first order, so χ²(a) = C/a² with C = Σ w_l/(l(l−1))²
    # falls all the way to the grid's top, a = e¹⁶, where the golden section must end.
    ls = np.arange(2, 12, dtype=np.float64)
    d = np.log(ls / (ls - 1))
    w = np.linspace(1.0, 2.0, len(ls))
    chi2, _ = growth._fits(d, w, ls)
    c = float((w / (ls * (ls - 1)) ** 2).sum())
    assert chi2["linear"] == pytest.approx(c * np.exp(-32.0), rel=1e-3, abs=0.0)


# ----------------------------------------------------------------------------- the Akaike penalty

SEEDS, DEPTH = 8, 24


def _power_law_ensemble(noise: float) -> EnsembleGrowth:
    """S profiles R_l = (1 + l²)·e^{noise·z_{s,l}} with z zero-mean over the seeds at every block:
    the geometric mean is exactly the power law 1 + l² (p = 2), and every χ² scales as 1/noise²,
    so `noise` sets how far the power law's fit beats the linear law's."""
    z = np.random.default_rng(0).normal(0.0, 1.0, (SEEDS, DEPTH))
    z -= z.mean(axis=0)
    ls = np.arange(1, DEPTH + 1, dtype=np.float64)
    y = np.log1p(ls**2)[None, :] + noise * z
    return classify_ensemble(np.exp(np.concatenate([np.zeros((SEEDS, 1)), y], axis=1)).tolist())


def _noise_for(chi2_linear: float) -> float:
    reference = 0.01
    return reference * math.sqrt(_power_law_ensemble(reference).chi2["linear"] / chi2_linear)


@pytest.mark.parametrize(("chi2_linear", "growth"), [(1.5, "linear"), (2.5, "polynomial")])
def test_the_power_law_pays_two_for_its_extra_parameter(chi2_linear: float, growth: str) -> None:
    """The power law fits this profile exactly (χ² 0) and the linear law misses by `chi2_linear`.
    Akaike's penalty of 2 (Akaike 1974) makes the linear law the better model when it misses by 1.5
    and the power law the better one when it misses by 2.5: a penalty of the wrong sign, of 0, or
    outside (1.5, 2.5) reports the other class."""
    g = _power_law_ensemble(_noise_for(chi2_linear))
    assert g.chi2["power"] == pytest.approx(0.0, abs=1e-6) and g.exponent == pytest.approx(2.0, abs=1e-3)
    assert g.chi2["linear"] == pytest.approx(chi2_linear, rel=1e-6, abs=0.0)
    assert g.chi2["exponential"] > g.chi2["linear"] + 1.0  # the exponential law is never the best model here
    assert g.growth == growth
    assert g.lowest == "linear"  # every law is within the decision threshold: judged by the least severe
