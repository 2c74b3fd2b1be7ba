"""stability.measure.paths with a skip other than the identity: on one channel every map is a scalar, so
the gradient through exactly k of L branches is C(L, k)·a^k·λ^(L−k)·r for branch a and skip λ, and
with no skip at all only the path through every branch is left. Written from the mutation check
(docs/mutation.md)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from stability.families.blocks import PreActBlock, Scale
from stability.measure.paths import path_gradient_components, path_length_shares


def _block(a: float, skip: nn.Module | None) -> PreActBlock:
    lin = nn.Linear(1, 1, bias=False, dtype=torch.float64)
    with torch.no_grad():
        lin.weight.fill_(a)
    return PreActBlock(nn.Sequential(lin), skip, nn.Identity())


def test_scaled_skip_components_are_binomial_terms() -> None:
    depth, a, lam = 5, 0.6, 0.8
    blocks = [_block(a, Scale(torch.tensor(lam, dtype=torch.float64), learnable=False)) for _ in range(depth)]
    x, r = torch.ones(1, 1, dtype=torch.float64), torch.full((1, 1), 2.0, dtype=torch.float64)
    c = path_gradient_components(blocks, x, r)
    want = [math.comb(depth, k) * a**k * lam ** (depth - k) * 2.0 for k in range(depth + 1)]
    assert c.real.flatten().tolist() == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert c.imag.abs().max().item() < 1e-15


def test_without_a_skip_only_the_path_through_every_branch_is_left() -> None:
    blocks = [_block(0.5, None) for _ in range(3)]
    x, r = torch.ones(1, 1, dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64)
    assert torch.equal(blocks[0](x), 0.5 * x)  # the block itself: no route around
    shares = path_length_shares(blocks, x, r)
    assert shares == pytest.approx([0.0, 0.0, 0.0, 1.0], rel=0, abs=1e-28)  # ‖c_k‖² of rounding size only
