"""Phase diagrams and the mean-field depth scale: χ₁ against its closed forms, and the plain tanh
stack's measured depth budget against 6ξ (Schoenholz et al. 2017)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure
from spec_support import SPECS

from stability.report.phase import depth_scale, heatmap_figure, mean_field_chi1, to_png
from stability.run.executor import InProcessExecutor
from stability.run.grid import parse_axis
from stability.run.store import Store
from stability.run.sweep import run_sweep
from stability.spec.load import load_spec


def test_chi1_closed_forms() -> None:
    # tanh, σ_b² = 0, σ_w² < 1: q* = 0 and tanh'(0) = 1, so χ₁ = σ_w² exactly
    for s in (0.3, 0.5, 0.8):
        assert math.isclose(mean_field_chi1("tanh", s), s, rel_tol=1e-9)
    # ReLU: φ'² = 1{h > 0} has mean 1/2 at every q, so χ₁ = σ_w²/2 (the He-init critical point σ_w² = 2)
    assert mean_field_chi1("relu", 2.0) == 1.0 and mean_field_chi1("relu", 3.0) == 1.5
    # identity: χ₁ = σ_w²
    assert math.isclose(mean_field_chi1("identity", 0.7), 0.7, rel_tol=1e-12)
    # the chaotic side: q* > 0 solves q = σ_w² E tanh(√q z)² and χ₁ = σ_w² E sech⁴(√q* z) > 1
    z, w = np.polynomial.hermite_e.hermegauss(121)
    w = w / math.sqrt(2 * math.pi)
    chi = mean_field_chi1("tanh", 2.0)
    q = 1.0
    for _ in range(2000):
        q = 2.0 * float(w @ np.tanh(math.sqrt(q) * z) ** 2)
    assert math.isclose(chi, 2.0 * float(w @ (1 / np.cosh(math.sqrt(q) * z)) ** 4), rel_tol=1e-9) and chi > 1.0
    assert math.isclose(depth_scale("tanh", 0.5), 1 / math.log(2), rel_tol=1e-9)


@pytest.mark.slow  # a bisection over depth 1-64 on 4 seeds at width 256, per side of the phase line
@pytest.mark.parametrize("sigma_w2", [0.5, 3.0])
def test_the_tanh_depth_budget_lands_near_six_xi(tmp_path: Path, sigma_w2: float) -> None:
    """gradient_arrival holds while e⁻³ ≤ r₀ ≤ e³. Mean field: ‖g₀‖²/‖g_L‖² ≈ χ₁^L, so
    r₀ ≈ exp(−L / 2ξ) on the ordered side (χ₁ < 1) and exp(+L / 2ξ) on the chaotic side, and
    either bound is crossed at L = 2·3·ξ = 6ξ. The measured budget (every one of 4 seeds, width
    256) must be within a factor of 2 of it: the finite-width fluctuations and, on the ordered
    side, the first blocks (where q has not yet decayed to q* = 0 and χ per block is below χ₁)
    make it differ, not the depth scale."""
    spec = load_spec(SPECS / "plain_tanh_mlp.toml")
    ga = spec.expect.gradient_arrival
    assert (
        ga is not None
        and math.isclose(-math.log(ga.lo), 3, rel_tol=1e-6)
        and math.isclose(math.log(ga.hi), 3, rel_tol=1e-6)
    )
    with Store(tmp_path / "r.sqlite") as store:
        result = run_sweep(
            spec, [parse_axis(f"sigma_w2={sigma_w2}")], store, InProcessExecutor(), seeds=range(4), depth_range=(1, 64)
        )
    budget = next(b for b in result.budgets if b.invariant == "gradient_arrival")
    predicted = 6 * depth_scale("tanh", sigma_w2)
    assert budget.status == "found" and budget.budget is not None
    assert predicted / 2 <= budget.budget <= 2 * predicted, (budget.budget, predicted)


@pytest.mark.slow  # a four-point sweep with depth budgets by bisection
def test_the_heatmap_draws_the_budgets_and_the_mean_field_line(tmp_path: Path) -> None:
    spec = load_spec(SPECS / "plain_tanh_mlp.toml")
    axes = [parse_axis("depth=2,16"), parse_axis("sigma_w2=0.5,3")]
    with Store(tmp_path / "r.sqlite") as store:
        result = run_sweep(spec, axes, store, InProcessExecutor(), seeds=range(1))
    fig = heatmap_figure(result, "gradient")
    assert isinstance(fig, Figure)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert (
        any(lab.startswith("6ξ") for lab in labels)
        and any("budget" in lab for lab in labels)
        and any("χ₁ = 1" in lab for lab in labels)
    )
    line = next(ln for ln in fig.axes[0].get_lines() if ln.get_label().startswith("6ξ"))
    x, y = line.get_data()
    k = int(np.argmin(np.abs(np.asarray(x) - 0.5)))
    assert math.isclose(float(np.asarray(y)[k]), 6 * depth_scale("tanh", float(np.asarray(x)[k])), rel_tol=1e-9)
    assert to_png(fig).startswith(b"\x89PNG")
    assert to_png(heatmap_figure(result, "variance")).startswith(b"\x89PNG")
