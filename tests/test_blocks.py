"""The block modules (stability/families/blocks.py) against their formulas, one module at a time, on
inputs where every term of the formula shows (no symmetric input hides a wrong axis); and the dense
layer's gradient to its input on both routes, alone and through a built dense stack."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from stability.families.blocks import (
    ChannelRMSNorm,
    ChannelsLast,
    DenseLayer,
    HighwayBlock,
    PlainBlock,
    PostNormBlock,
    PreActBlock,
    Scale,
    Transition,
)
from stability.families.build import build
from stability.measure.probe import probe
from stability.spec.case import corner_case
from stability.spec.load import parse_spec


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def test_channel_rms_norm_divides_by_the_rms_over_channels_and_scales_per_channel() -> None:
    x = _x(2, 3, 4, 5)  # (B, C, H, W)
    norm = ChannelRMSNorm(3, eps=0.25, dtype=torch.float64)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.0, 2.0, -3.0]))
    want = (
        x
        / torch.sqrt((x**2).mean(dim=1, keepdim=True) + 0.25)
        * torch.tensor([1.0, 2.0, -3.0], dtype=torch.float64).view(1, 3, 1, 1)
    )
    torch.testing.assert_close(norm(x), want, rtol=1e-15, atol=0)
    assert ChannelRMSNorm(3).eps == 1e-6 and ChannelRMSNorm(3).weight.dtype == torch.float32


def test_channels_last_norms_each_channel_over_batch_and_tokens() -> None:
    x = _x(3, 5, 4) * torch.tensor([1.0, 10.0, 0.1, 3.0], dtype=torch.float64) + torch.tensor(
        [0.0, 5.0, -2.0, 1.0], dtype=torch.float64
    )  # (B, T, C)
    block = ChannelsLast(nn.BatchNorm1d(4, dtype=torch.float64))
    assert isinstance(block.norm, nn.BatchNorm1d)
    y = block(x)
    assert y.shape == (3, 5, 4)
    mean = x.mean(dim=(0, 1))
    var = x.var(dim=(0, 1), unbiased=False)
    torch.testing.assert_close(y, (x - mean) / torch.sqrt(var + 1e-5), rtol=1e-12, atol=1e-12)


def test_scale_fixed_and_learnable_scalar_and_per_channel() -> None:
    x = _x(2, 3, 4)
    fixed = Scale(torch.tensor(0.5, dtype=torch.float64), learnable=False)
    assert "scale" in dict(fixed.named_buffers()) and not list(fixed.parameters())
    torch.testing.assert_close(fixed(x), 0.5 * x, rtol=0, atol=0)
    learn = Scale(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), learnable=True)
    assert [n for n, _ in learn.named_parameters()] == ["scale"]
    torch.testing.assert_close(
        learn(x), x * torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64).view(1, 3, 1), rtol=0, atol=0
    )
    last = Scale(torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64), learnable=False, channel_dim=-1)
    torch.testing.assert_close(last(x), x * torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64), rtol=0, atol=0)


def _lin(w: float) -> nn.Linear:
    layer = nn.Linear(3, 3, bias=False, dtype=torch.float64)
    with torch.no_grad():
        layer.weight.copy_(
            w * torch.eye(3, dtype=torch.float64)
            + torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
        )
    return layer


def test_plain_preact_postnorm_and_highway_follow_their_formulas() -> None:
    x = _x(4, 3)
    W = _lin(2.0).weight.detach()
    relu = nn.ReLU()
    torch.testing.assert_close(PlainBlock(_lin(2.0), nn.Identity(), relu)(x), torch.relu(x @ W.T))
    half = Scale(torch.tensor(0.5, dtype=torch.float64), learnable=False)
    branch = nn.Sequential(_lin(2.0))
    torch.testing.assert_close(PreActBlock(branch, None, half)(x), 0.5 * (x @ W.T))  # skip = "none": no route around
    torch.testing.assert_close(PreActBlock(branch, nn.Identity(), half)(x), x + 0.5 * (x @ W.T))
    torch.testing.assert_close(
        PreActBlock(branch, Scale(torch.tensor(3.0, dtype=torch.float64), learnable=False), half)(x),
        3 * x + 0.5 * (x @ W.T),
    )
    torch.testing.assert_close(PostNormBlock(branch, None, half, nn.Identity(), relu)(x), torch.relu(0.5 * (x @ W.T)))
    torch.testing.assert_close(
        PostNormBlock(branch, nn.Identity(), half, nn.Identity(), relu)(x), torch.relu(x + 0.5 * (x @ W.T))
    )
    torch.testing.assert_close(
        PostNormBlock(
            branch, Scale(torch.tensor(-1.0, dtype=torch.float64), learnable=False), half, nn.Identity(), relu
        )(x),
        torch.relu(-x + 0.5 * (x @ W.T)),
    )
    gate = nn.Linear(3, 3, dtype=torch.float64)
    with torch.no_grad():
        gate.weight.copy_(_lin(0.5).weight)
        gate.bias.fill_(-1.0)
    t = torch.sigmoid(x @ gate.weight.detach().T - 1.0)
    torch.testing.assert_close(
        HighwayBlock(PlainBlock(_lin(2.0), nn.Identity(), relu), gate)(x), t * torch.relu(x @ W.T) + (1 - t) * x
    )


def test_dense_layer_concatenates_along_its_channel_dim_and_transition_compresses() -> None:
    x = _x(2, 3)
    W = _lin(2.0).weight.detach()
    y = DenseLayer(nn.Identity(), nn.ReLU(), _lin(2.0))(x)
    torch.testing.assert_close(y, torch.cat([x, torch.relu(x) @ W.T], dim=1))
    tokens = _x(2, 5, 3)  # (B, T, C)
    y = DenseLayer(nn.Identity(), nn.ReLU(), _lin(2.0), channel_dim=-1)(tokens)
    assert y.shape == (2, 5, 6)
    torch.testing.assert_close(y, torch.cat([tokens, torch.relu(tokens) @ W.T], dim=-1))
    torch.testing.assert_close(Transition(nn.Identity(), nn.ReLU(), _lin(2.0))(x), torch.relu(x) @ W.T)


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
