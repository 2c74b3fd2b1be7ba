"""stability.measure.lesion against a linear residual chain whose lesioned outputs are matrix products."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from stability.families.blocks import PreActBlock
from stability.measure.lesion import lesion_changes


def _linear_chain(
    depth: int, width: int, alpha: float, *, orthogonal: bool, seed: int
) -> tuple[list[torch.Tensor], nn.Sequential]:
    gen = torch.Generator().manual_seed(seed)
    mats, blocks = [], []
    for _ in range(depth):
        lin = nn.Linear(width, width, bias=False, dtype=torch.float64)
        with torch.no_grad():
            if orthogonal:
                nn.init.orthogonal_(lin.weight, generator=gen)
            else:
                nn.init.normal_(lin.weight, std=1 / math.sqrt(width), generator=gen)
            lin.weight.mul_(alpha)
        mats.append(lin.weight.detach().clone())
        blocks.append(PreActBlock(nn.Sequential(lin), nn.Identity(), nn.Identity()))
    return mats, nn.Sequential(*blocks)


def test_linear_residual_chain_closed_form() -> None:
    """y = Π(I + A_l) x and y_{−l} = Π_{k≠l}(I + A_k) x, as explicit matrix products."""
    depth, width = 7, 9
    mats, blocks = _linear_chain(depth, width, 0.8, orthogonal=False, seed=0)
    x = torch.randn(3, width, generator=torch.Generator().manual_seed(1), dtype=torch.float64)  # (B, n)
    eye = torch.eye(width, dtype=torch.float64)

    def chain(skip: int | None) -> torch.Tensor:
        m = eye
        for i, a in enumerate(mats):
            if i != skip:
                m = (eye + a) @ m  # block l acts after blocks 0 … l−1
        return x @ m.T  # (B, n): rows are examples

    y = chain(None)
    want = [float((y - chain(i)).norm() / y.norm()) for i in range(depth)]
    assert lesion_changes(blocks, x) == pytest.approx(want, rel=1e-12, abs=0.0)


def test_orthogonal_branches_change_by_alpha_over_sqrt_one_plus_alpha_squared() -> None:
    """Branches αQ_l with Q_l Haar-orthogonal: E‖y − y_{−l}‖² = α²(1 + α²)^{L−1}‖x‖² and
    E‖y‖² = (1 + α²)^L‖x‖², so change_l² ≈ α²/(1 + α²) for every l. Each factor (I + αQ) rescales
    a vector's squared norm by (1 + α²)(1 + ε), ε = 2α uᵀQu/((1 + α²)‖u‖²) with sd 2α/((1 + α²)√N)
    (N = batch × width entries), and change² is a ratio of two products sharing all but one
    factor, so its relative error has sd at most about 2√L · 2α/((1 + α²)√N); 5 sd is the band."""
    depth, width, batch, alpha = 6, 256, 4, 0.5
    _, blocks = _linear_chain(depth, width, alpha, orthogonal=True, seed=3)
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    want = alpha**2 / (1 + alpha**2)
    sd = 2 * math.sqrt(depth) * 2 * alpha / ((1 + alpha**2) * math.sqrt(batch * width))
    for c in lesion_changes(blocks, x):
        assert abs(c * c / want - 1) <= 5 * sd


def test_zero_branch_lesion_changes_nothing_and_plain_layer_lesion_is_large() -> None:
    _, blocks = _linear_chain(4, 8, 0.0, orthogonal=False, seed=0)
    x = torch.randn(2, 8, dtype=torch.float64)
    assert lesion_changes(blocks, x) == [0.0, 0.0, 0.0, 0.0]
    gen = torch.Generator().manual_seed(0)
    plain = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64, dtype=torch.float64), nn.Tanh()) for _ in range(4)])
    for m in plain.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=1.5 / 8, generator=gen)  # σ_w² = 2.25: chaotic tanh
    assert min(lesion_changes(plain, torch.randn(4, 64, dtype=torch.float64))) > 0.5


def test_shape_changing_blocks_are_skipped() -> None:
    net = nn.Sequential(nn.Linear(3, 5), nn.Linear(5, 5))
    out = lesion_changes(net, torch.randn(2, 3))
    assert math.isnan(out[0]) and out[1] > 0


def test_lesioning_a_stack_whose_output_is_exactly_zero_changes_nothing() -> None:
    zero = nn.Linear(3, 3, bias=False).double()
    with torch.no_grad():
        zero.weight.zero_()
    assert lesion_changes(nn.Sequential(nn.Identity(), zero), torch.ones(2, 3, dtype=torch.float64)) == [
        0.0,
        math.inf,
    ]  # 0/0 is 0; x/0 is ∞
