"""`classify_ensemble` (stability/judge/growth.py) on closed-form profiles: exact laws, laws with known
multiplicative noise, the thresholds at their exact values, and depths too small to decide; and
`classify_growth` on one profile at its thresholds and between the linear and exponential laws."""

from __future__ import annotations

import math

import numpy as np
import pytest
from approx_support import approx

from stability.judge.growth import DECISION_CHI2, MIN_DECIDABLE_DEPTH, classify_ensemble, describe_ensemble
from stability.judge.invariants import classify_growth
from stability.spec.schema import GROWTH_CLASSES


def _noisy(law: np.ndarray, *, seeds: int = 8, sigma: float = 0.05, seed: int = 0) -> np.ndarray:
    """S profiles: the law times independent log-normal factors per block (a random walk in log
    space, as finite-width noise is), so each seed's log-increments are the law's plus N(0, σ²)."""
    rng = np.random.default_rng(seed)
    steps = rng.normal(0.0, sigma, size=(seeds, len(law) - 1))
    walk = np.concatenate([np.zeros((seeds, 1)), np.cumsum(steps, axis=1)], axis=1)
    return law[None, :] * np.exp(walk)


L = np.arange(0, 49, dtype=np.float64)


def test_exact_exponential_is_exponential_with_its_rate() -> None:
    g = classify_ensemble([1.3**L, 1.3**L])
    assert (g.growth, g.lowest) == ("exponential", "exponential")
    assert g.rate == approx(1.3, rel=1e-12)
    assert g.chi2["exponential"] == pytest.approx(0.0, abs=1e-9)  # the law fits exactly


def test_exact_linear_is_linear() -> None:
    law = 1.0 + 0.37 * L
    g = classify_ensemble([law, law])
    assert (g.growth, g.lowest) == ("linear", "linear")
    assert g.slope == pytest.approx(0.37, rel=1e-12, abs=0.0)


def test_power_law_between_linear_and_exponential_is_polynomial() -> None:
    """The transformer profile 1 + 0.012·l^1.94 of issue 12: the single-seed classifier, which
    weighs only exponential against linear, calls it exponential; the ensemble's power law wins."""
    law = 1.0 + 0.012 * L**1.94
    assert classify_growth(law.tolist()).growth == "exponential"  # the old verdict, for the record
    g = classify_ensemble(_noisy(law, sigma=0.02))
    assert (g.growth, g.lowest) == ("polynomial", "polynomial")
    assert g.exponent == pytest.approx(1.94, abs=0.1)
    assert g.chi2["power"] + DECISION_CHI2 < g.chi2["exponential"]


@pytest.mark.parametrize(("p", "expected"), [(1.2, "linear"), (2.5, "polynomial")])
def test_power_laws_either_side_of_the_linear_cut(p: float, expected: str) -> None:
    law = 1.0 + 0.05 * L**p
    g = classify_ensemble(_noisy(law, sigma=0.01, seed=1))
    assert g.growth == expected
    assert g.exponent == pytest.approx(p, abs=0.15)


@pytest.mark.parametrize("seed", range(5))
def test_noisy_linear_is_never_exponential(seed: int) -> None:
    """Per-block noise as large as the signal's curvature: the linear law must stay plausible."""
    law = 1.0 + 0.37 * np.arange(0, 8, dtype=np.float64)
    g = classify_ensemble(_noisy(law, sigma=0.3, seed=seed))
    assert g.lowest != "exponential"


def test_noisy_exponential_is_exponential_at_depth_8() -> None:
    law = 2.0 ** np.arange(0, 9, dtype=np.float64)
    g = classify_ensemble(_noisy(law, sigma=0.4, seed=3))
    assert g.growth == "exponential"
    assert g.lowest in ("polynomial", "exponential")  # faster than linear beyond doubt


@pytest.mark.parametrize("depth", range(1, MIN_DECIDABLE_DEPTH))
def test_too_shallow_is_undecided_and_judged_linear(depth: int) -> None:
    """With at most one increment past the first block every law fits: the verdict passes
    max_growth = "linear" and says why, whatever the numbers."""
    law = 3.0 ** np.arange(0, depth + 1, dtype=np.float64) * 2.0
    law[0] = 1.0
    g = classify_ensemble([law, law * 1.01])
    assert g.lowest == "linear"
    if depth >= 2:
        assert not g.decided
        assert "undecided at this depth" in describe_ensemble(g)


def test_bounded_and_decaying_thresholds_are_inclusive_and_strict() -> None:
    """bounded: max R ≤ bounded_ratio (equal counts); decaying: R_L < 1/bounded_ratio (equal does not)."""
    at = np.array([1.0, 2.0, 4.0])
    assert classify_ensemble([at, at]).growth == "bounded"
    over = np.array([1.0, 2.0, math.nextafter(4.0, 5.0)])
    assert classify_ensemble([over, over]).growth != "bounded"
    edge = np.array([1.0, 0.5, 0.25])
    assert classify_ensemble([edge, edge]).growth == "bounded"
    under = np.array([1.0, 0.5, math.nextafter(0.25, 0.0)])
    assert classify_ensemble([under, under]).growth == "decaying"


def test_rise_then_fall_uses_the_extreme_not_the_final_value() -> None:
    up_down = np.array([1.0, 3.0, 6.0, 3.0, 1.5])
    g = classify_ensemble([up_down, up_down])
    assert g.max_ratio == approx(6.0, rel=1e-12)
    assert g.growth != "bounded"  # 6 > 4 at boundary 2, though the final ratio is 1.5


def test_average_is_geometric_and_spread_is_per_boundary() -> None:
    a = np.array([1.0, 2.0, 8.0])
    b = np.array([2.0, 2.0, 4.0])  # its own boundary-0 value divides it: ratios 1, 1, 2
    g = classify_ensemble([a, b])
    assert g.ratios == approx([1.0, math.sqrt(2.0), 4.0], rel=1e-12)
    assert g.lo == approx([1.0, 1.0, 2.0], rel=1e-12)
    assert g.hi == approx([1.0, 2.0, 8.0], rel=1e-12)
    assert g.rate == approx(2.0, rel=1e-12)  # R_L^(1/L) = 4^(1/2)


def test_refuses_a_single_profile() -> None:
    with pytest.raises(ValueError, match="at least 2 profiles"):
        classify_ensemble([[1.0, 2.0]])


def _walks(increments: np.ndarray, *, sd: float, seeds: int = 8, seed: int = 0) -> np.ndarray:
    """S profiles whose log-increments are `increments` (block 1 … L) plus N(0, sd²) per seed and block."""
    rng = np.random.default_rng(seed)
    d = increments[None, :] + rng.normal(0.0, sd, size=(seeds, len(increments)))
    return np.exp(np.concatenate([np.zeros((seeds, 1)), np.cumsum(d, axis=1)], axis=1))


@pytest.mark.parametrize(("b", "a", "sd"), [(0.51, 0.14, 0.43), (0.61, 0.06, 0.31)])
def test_exponential_with_the_controls_decaying_transient_is_exponential(b: float, a: float, sd: float) -> None:
    """The unnormalised residual control's measured shape (docs/ensembles.md; per-block seed spread
    from benchmarks/residual_lyapunov.py): mean increments b + a·e^(−l/15) falling from ~0.65 to a
    positive constant b (width 16: 0.51, width 32: 0.61), 8 seeds. Every draw at every depth from 8
    is reported exponential and violates "at most linear"; by depth 16 every other law is ruled out."""
    for depth in (8, 16, 32, 64):
        blocks = np.arange(1, depth + 1, dtype=np.float64)
        for seed in range(6):
            g = classify_ensemble(_walks(b + a * np.exp(-blocks / 15.0), sd=sd, seed=seed))
            assert g.growth == "exponential", (depth, seed, g.chi2)
            assert GROWTH_CLASSES.index(g.lowest) > GROWTH_CLASSES.index("linear")
            if depth >= 16:
                assert g.lowest == "exponential", (depth, seed, g.chi2)


def test_power_law_with_the_same_noise_is_never_judged_exponential() -> None:
    """R_l = 1 + 0.5·l² with the control's per-block spread: exponential is never the judged class,
    and from depth 32 the reported class is polynomial."""
    for depth in (8, 16, 32, 64):
        blocks = np.arange(0, depth + 1, dtype=np.float64)
        for seed in range(6):
            g = classify_ensemble(_walks(np.diff(np.log(1.0 + 0.5 * blocks**2)), sd=0.3, seed=seed))
            assert g.lowest != "exponential"
            if depth >= 32:
                assert g.growth == "polynomial", (depth, seed, g.chi2)


def test_power_law_exponent_never_exceeds_the_documented_cap() -> None:
    """A profile steeper than any power law the classifier fits (1 + 1e-4·l⁵, eight seeds with
    small multiplicative noise) is fitted at the cap, `growth._MAX_EXPONENT` = 3, never above it;
    a law of exponent 2 is fitted near 2 (the grid reaches below the cap)."""
    from stability.judge import growth

    rng = np.random.default_rng(0)
    ls = np.arange(0, 33, dtype=np.float64)
    for p, want in ((5.0, None), (2.0, 2.0)):
        profiles = [
            (1.0 + (1e-4 if p == 5.0 else 0.05) * ls**p) * np.exp(rng.normal(0.0, 0.01, ls.shape)) for _ in range(8)
        ]
        profiles = [(prof / prof[0]).tolist() for prof in profiles]
        g = growth.classify_ensemble(profiles)
        assert g.exponent is not None and g.exponent <= growth._MAX_EXPONENT
        if want is None:
            assert g.exponent == pytest.approx(growth._MAX_EXPONENT, abs=0.11)  # the grid's last point, refined
        else:
            assert g.exponent == pytest.approx(want, abs=0.25)


def test_decaying_threshold_is_one_over_bounded_ratio() -> None:
    """Final ratio 0.2 lies between 1/8 and 1/4: decaying at bounded_ratio 4 (not at a halved threshold)."""
    assert classify_growth([1.0, 0.5, 0.2], bounded_ratio=4.0).growth == "decaying"
    assert classify_growth([1.0, 0.5, 0.25], bounded_ratio=4.0).growth == "bounded"  # 1/4 exactly is not below


def test_bounded_ratio_exactly_at_the_bound_is_bounded() -> None:
    assert classify_growth([1.0, 2.0, 4.0], bounded_ratio=4.0).growth == "bounded"
    assert classify_growth([1.0, 2.0, math.nextafter(4.0, 5.0)], bounded_ratio=4.0).growth != "bounded"


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
