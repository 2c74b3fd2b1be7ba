"""A user's own architecture, tested through a `custom` spec: a residual MLP whose blocks scale
their branch by a learnable gain started at zero (ReZero), built by a plain factory function."""

import torch
from torch import nn


class GatedResidual(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.branch = nn.Sequential(
            nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )
        self.alpha = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.alpha * self.branch(x)


def residual_mlp(depth: int, width: int) -> nn.Sequential:
    return nn.Sequential(*[GatedResidual(width) for _ in range(depth)])
