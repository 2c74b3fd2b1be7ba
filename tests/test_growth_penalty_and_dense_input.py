"""Unit tests for two slips that once survived every test and the shipped gate: the sign (or the
size) of the power law's extra-parameter penalty in the growth model comparison, and a dense layer
whose input is detached from the gradient."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from stability.families.blocks import DenseLayer
from stability.families.build import build
from stability.judge.growth import EnsembleGrowth, classify_ensemble
from stability.measure.probe import probe
from stability.spec.case import corner_case
from stability.spec.load import parse_spec

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


# ----------------------------------------------------------------------------- the dense layer's gradient


def test_a_dense_layer_passes_the_gradient_to_its_input_on_both_routes() -> None:
    """y = cat(x, W x): ∂L/∂x = g₁ + Wᵀ g₂ exactly, the first term through the concatenation, the
    second through the layer. A detached input on either route drops one of them."""
    gen = torch.Generator().manual_seed(0)
    lin = nn.Linear(3, 2, bias=False, dtype=torch.float64)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(2, 3, generator=gen, dtype=torch.float64))
    x = torch.randn(4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    g = torch.randn(4, 5, generator=gen, dtype=torch.float64)  # ∂L/∂y: (B, 3 + 2)
    y = DenseLayer(nn.Identity(), nn.Identity(), lin)(x)
    (grad,) = torch.autograd.grad(y, x, g)
    torch.testing.assert_close(grad, g[:, :3] + g[:, 3:] @ lin.weight.detach(), rtol=1e-15, atol=1e-15)


DENSE = """
name = "dense-linear"
description = "a linear DenseNet-style stack: the gradient is a product of known matrices"
family = "dense"
[block]
layer = "linear"
activation = "identity"
norm = "none"
growth = 2
[space]
depth = 4
width = 3
batch = 2
weight_init = ["xavier_normal"]
bias_init = 0.0
dtype = ["float64"]
[expect.gradient_arrival]
lo = 1e-6
hi = 1e6
"""


def test_the_probe_of_a_built_dense_stack_sees_the_closed_form_gradient() -> None:
    """Block l maps x to A_l x with A_l = [I; W_l] (identity activation, no norm, zero bias), so with
    the loss Σ x_L the gradient at the input is (A_{L-1} ⋯ A_0)ᵀ 1: the probe's ratio r₀ must equal
    its norm over √(width_L), from the built weights alone."""
    spec = parse_spec(DENSE)
    case = corner_case(spec)
    net = build(spec, case)
    product = torch.eye(3, dtype=torch.float64)
    for block in net.blocks:
        assert isinstance(block, DenseLayer)
        w = block.layer.weight.detach()
        product = torch.cat([torch.eye(w.shape[1], dtype=torch.float64), w]) @ product
    ones = torch.ones(product.shape[0], dtype=torch.float64)
    expected = float(torch.linalg.vector_norm(product.T @ ones) / math.sqrt(product.shape[0]))
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    m = probe(net.blocks, x, loss="sum")
    assert m.grad_norm[0] / m.grad_norm[-1] == pytest.approx(expected, rel=1e-12, abs=0.0)
