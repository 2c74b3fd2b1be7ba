"""`classify_ensemble`, `ensemble_growth` and `describe_ensemble` (stability/judge/growth.py) at their
edges: depth 3 is the first depth that decides, the exact linear law is fitted at p = 1, χ² from
the shrunk per-block variances (and their floor when the members agree exactly), which members an
ensemble keeps, the default bound, and every undecided description in full; and a depth-0 ensemble beside
the Jacobian estimate's defaults. Written from the surviving mutants of the whole-module run of growth.py and
of held-out sample 3 (docs/mutation.md)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from stability.judge.growth import EnsembleGrowth, classify_ensemble, describe_ensemble, ensemble_growth
from stability.measure.jacobian import jacobian_spectrum


def test_depth_three_decides_an_exponential() -> None:
    law = np.array([1.0, 3.0, 9.0, 27.0])
    g = classify_ensemble([law, law * np.exp(1e-6 * np.array([0.0, 1.0, -1.0, 1.0]))])
    assert (g.growth, g.lowest, g.decided) == (
        "exponential",
        "exponential",
        True,
    )  # two increments past block 1 rule linear out


def test_an_exact_linear_law_is_fitted_at_exponent_one() -> None:
    law = 1.0 + 0.5 * np.arange(0, 17, dtype=np.float64)
    g = classify_ensemble([law, law * (1 + 1e-9 * np.sin(np.arange(17)))])
    assert (g.growth, g.lowest) == ("linear", "linear") and g.exponent == pytest.approx(1.0, abs=1e-6)


def _chi2_exponential(profiles: np.ndarray) -> float:
    """χ² of the exponential law as growth.py's docstring states it: log-increments d_l (l ≥ 2),
    per-block variance (ddof 1) shrunk halfway to the pooled one, floored at 1e-12·mean(d²),
    weights S/v, residuals about the weighted mean."""
    y = np.log(profiles / profiles[:, :1])
    inc = np.diff(y, axis=1)[:, 1:]
    s = profiles.shape[0]
    d = inc.mean(axis=0)
    v = inc.var(axis=0, ddof=1)
    v = 0.5 * v + 0.5 * v.mean()
    w = s / np.maximum(v, 1e-12 * float((d * d).mean()))
    b = (w * d).sum() / w.sum()
    return float((w * (d - b) ** 2).sum())


def test_chi2_uses_the_unbiased_shrunk_variances() -> None:
    rng = np.random.default_rng(3)
    ls = np.arange(0, 7, dtype=np.float64)
    profiles = np.array([(1.0 + ls) * np.exp(rng.normal(0.0, 0.1, ls.shape)) for _ in range(3)])
    g = classify_ensemble(profiles.tolist())
    assert g.chi2["exponential"] == pytest.approx(_chi2_exponential(profiles), rel=1e-12, abs=0)


def test_members_that_agree_exactly_are_weighted_by_the_floor() -> None:
    law = 1.0 + 2.0 * np.arange(0, 6, dtype=np.float64)
    profiles = np.array([law, law])  # zero spread: every weight is S / (1e-12·mean d²)
    g = classify_ensemble(profiles.tolist())
    assert (
        g.chi2["exponential"] == pytest.approx(_chi2_exponential(profiles), rel=1e-9, abs=0)
        and g.chi2["exponential"] > 1e9
    )


def _ens(*profiles: list[float]) -> SimpleNamespace:
    return SimpleNamespace(size=len(profiles), profiles=lambda statistic: [list(p) for p in profiles])


def test_an_ensemble_keeps_members_positive_at_the_input_even_if_they_collapse_later() -> None:
    grow = [1.0, 2.0, 3.0, 4.0]
    g, why = ensemble_growth({"ensemble": _ens(grow, grow, [1.0, 0.0, 0.0, 0.0])}, "variance")
    assert g is not None and why == "" and g.size == 3 and g.growth == "decaying"  # the collapsed member counts
    g, why = ensemble_growth({"ensemble": _ens(grow, grow, [0.0, 1.0, 1.0, 1.0])}, "variance")
    assert g is not None and why == "" and g.size == 2  # a zero input cannot be divided by: left out


def test_the_default_bound_of_an_ensemble_is_four() -> None:
    g, _ = ensemble_growth({"ensemble": _ens([1.0, 2.0, 3.0, 4.5], [1.0, 2.0, 3.0, 4.5])}, "variance")
    assert g is not None and g.growth != "bounded"  # 4.5 > 4
    g, _ = ensemble_growth({"ensemble": _ens([1.0, 2.0, 3.0, 3.9], [1.0, 2.0, 3.0, 3.9])}, "variance")
    assert g is not None and g.growth == "bounded"


def test_a_zero_start_is_refused_in_the_functions_own_words() -> None:
    with pytest.raises(ValueError, match=r"^classify_ensemble: every profile's boundary-0 value must be positive$"):
        classify_ensemble([[0.0, 1.0], [1.0, 2.0]])


_COMMON = dict(
    size=4,
    ratios=[1.0, 2.0, 5.0],
    lo=[1.0, 1.8, 4.0],
    hi=[1.0, 2.2, 6.0],
    q25=[1.0] * 3,
    q75=[1.0] * 3,
    rate=2.24,
    slope=2.0,
)
_HEAD = "exponential (×2.24 per block, +2·s₀ per block; mean of 4 seeds, final ratio 5 in [4, 6])"


@pytest.mark.parametrize(
    ("lowest", "ratios", "tail"),
    [
        (
            "linear",
            [1.0, 2.0, 5.0],
            "; undecided at this depth (depth 2 is too small to tell linear from exponential: judged linear)",
        ),
        (
            "linear",
            [1.0, 2.0, 5.0, 9.0],
            "; undecided at this depth (linear … exponential fit within the ensemble's noise: judged linear)",
        ),
        ("polynomial", [1.0, 2.0, 5.0, 9.0], "; polynomial is not ruled out at this depth (judged polynomial)"),
    ],
)
def test_each_undecided_description_in_full(lowest: str, ratios: list[float], tail: str) -> None:
    common = {
        **_COMMON,
        "ratios": ratios,
        "lo": [1.0] * (len(ratios) - 1) + [4.0],
        "hi": [1.0] * (len(ratios) - 1) + [6.0],
    }
    g = EnsembleGrowth(growth="exponential", lowest=lowest, exponent=None, **common)  # type: ignore[arg-type]
    final = ratios[-1]
    assert describe_ensemble(g) == _HEAD.replace("final ratio 5", f"final ratio {final:g}") + tail


def test_depth_zero_ensembles_and_the_jacobian_defaults() -> None:
    g = classify_ensemble([[1.0], [2.0]])
    assert (g.growth, g.slope, g.rate) == ("bounded", 0.0, 1.0)
    x = torch.ones(2, 2, dtype=torch.float64)
    assert jacobian_spectrum(nn.Identity(), x).probes == 16 and jacobian_spectrum(nn.Identity(), x).iterations <= 50
