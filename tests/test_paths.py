"""stability.measure.paths: gradient components by path length against an explicit sum over all 2^L paths,
and the Binomial(L, p) law for orthogonal branches (Veit et al. 2016)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from stability.families.blocks import PreActBlock
from stability.measure.paths import binomial_shares, path_gradient_components, path_length_shares


def _chain(depth: int, width: int, alpha: float, *, seed: int, orthogonal: bool = True) -> list[PreActBlock]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(depth):
        lin = nn.Linear(width, width, bias=False, dtype=torch.float64)
        with torch.no_grad():
            if orthogonal:
                nn.init.orthogonal_(lin.weight, generator=gen)
            else:
                nn.init.normal_(lin.weight, std=1 / math.sqrt(width), generator=gen)
            lin.weight.mul_(alpha)
        out.append(PreActBlock(nn.Sequential(lin), nn.Identity(), nn.Identity()))
    return out


def test_components_equal_the_sum_over_all_paths() -> None:
    depth, width = 6, 10
    blocks = _chain(depth, width, 0.7, seed=0, orthogonal=False)
    x = torch.randn(2, width, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    r = torch.randn(2, width, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    c = path_gradient_components(blocks, x, r)
    mats = [b.branch[0].weight.detach() for b in blocks]  # type: ignore[index]
    want = [torch.zeros(2, width, dtype=torch.float64) for _ in range(depth + 1)]
    for path in itertools.product([0, 1], repeat=depth):  # the test's own reference enumerates; the module never does
        g = r
        for i in reversed(range(depth)):
            if path[i]:
                g = g @ mats[i]  # row-vector gradient through branch l: g A_l
        want[sum(path)] = want[sum(path)] + g
    for k in range(depth + 1):
        assert torch.allclose(c[k].real, want[k], rtol=0, atol=1e-13), k
    assert float(c.imag.abs().max()) < 1e-13
    # The components add up to the full input gradient (the gate at t = 1).
    x_ = x.clone().requires_grad_(True)
    h = x_
    for b in blocks:
        h = b(h)
    (full,) = torch.autograd.grad(h, x_, r)
    assert torch.allclose(c.real.sum(0), full, rtol=0, atol=1e-13)


@pytest.mark.parametrize("alpha", [1.0, 0.3])
def test_shares_follow_the_binomial_law(alpha: float) -> None:
    """‖c_k‖² = C(L,k) α^{2k} ‖r‖² (1 + ε_k): distinct paths' contributions have inner products of
    relative size ~1/√N (N = batch × width), and ε_k averages C(L,k)(C(L,k) − 1) of them over
    C(L,k)², so sd(ε_k) ≲ 1/√N; shares are ratios, so 2·5/√N bounds their relative error."""
    depth, width, batch = 8, 256, 2
    blocks = _chain(depth, width, alpha, seed=5)
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    r = torch.randn(batch, width, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    shares, law = path_length_shares(blocks, x, r), binomial_shares(depth, alpha)
    band = 10 / math.sqrt(batch * width)
    for got, want in zip(shares, law, strict=True):
        assert abs(got / want - 1) <= band, (shares, law)
    if alpha == 1.0:  # most of the gradient takes about half the branches
        assert max(range(depth + 1), key=lambda k: shares[k]) == depth // 2
        assert sum(shares[k] for k in (3, 4, 5)) > 0.6
    else:  # short paths carry most of it: p = α²/(1 + α²) ≈ 0.083, mean path length pL ≈ 0.66
        assert sum(shares[:3]) > 0.9


def test_binomial_shares_sum_to_one() -> None:
    assert sum(binomial_shares(12, 0.7)) == pytest.approx(1.0, rel=1e-14, abs=0.0)


def test_non_residual_blocks_are_refused() -> None:
    with pytest.raises(TypeError, match="not a residual block"):
        path_gradient_components([nn.Linear(3, 3)], torch.zeros(1, 3), torch.zeros(1, 3))
