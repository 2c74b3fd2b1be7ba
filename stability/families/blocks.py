"""The block modules the built-in families are made of.

Shapes: `linear` blocks map (B, C) → (B, C'); `conv2d` blocks map (B, C, H, W) → (B, C', H, W)
with 'same' padding. Formulas are the ones in the families' docstrings; `build.py` chooses and
initialises them from a spec and a case.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = [
    "PlainBlock",
    "PostNormBlock",
    "PreActBlock",
    "HighwayBlock",
    "DenseLayer",
    "Transition",
    "ChannelRMSNorm",
    "Scale",
    "ChannelsLast",
]


class ChannelRMSNorm(nn.Module):
    """RMS norm over the channel dimension of (B, C, H, W): x / sqrt(mean_c(x²) + eps) · γ."""

    def __init__(self, channels: int, eps: float = 1e-6, **factory: Any) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(channels, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = x.pow(2).mean(dim=1, keepdim=True).add(self.eps).rsqrt()  # (B, 1, H, W)
        return x * rms * self.weight.view(1, -1, 1, 1)


class Scale(nn.Module):
    """y = s · x with a fixed (buffer) or learnable (parameter) scalar or per-channel s."""

    def __init__(self, value: torch.Tensor, *, learnable: bool, channel_dim: int = 1) -> None:
        super().__init__()
        self.channel_dim = channel_dim
        if learnable:
            self.scale = nn.Parameter(value)
        else:
            self.register_buffer("scale", value)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s: torch.Tensor = self.scale
        if s.dim() == 1:  # per channel: (C,) → broadcast along the channel dim
            shape = [1] * x.dim()
            shape[self.channel_dim] = -1
            s = s.view(shape)
        return x * s


class PlainBlock(nn.Module):
    """x_{l+1} = act(norm(W x_l))."""

    def __init__(self, layer: nn.Module, norm: nn.Module, act: nn.Module) -> None:
        super().__init__()
        self.layer, self.norm, self.act = layer, norm, act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.act(self.norm(self.layer(x)))
        return y


class PreActBlock(nn.Module):
    """x_{l+1} = skip(x_l) + gain · F(x_l), F = W2·act(norm(W1·act(norm(x_l)))) (He et al. 2016).

    `gain` is the branch scale (1, 1/√L, …) times the ReZero/SkipInit gain where present; with an
    identity skip nothing at all sits on the route around.
    """

    def __init__(self, branch: nn.Sequential, skip: nn.Module | None, gain: nn.Module) -> None:
        super().__init__()
        self.branch, self.skip, self.gain = branch, skip, gain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.gain(self.branch(x))
        y: torch.Tensor = out if self.skip is None else self.skip(x) + out
        return y


class PostNormBlock(nn.Module):
    """x_{l+1} = act(norm(skip(x_l) + gain · F(x_l))), F = W2·act(norm(W1 x_l)) (He et al. 2015)."""

    def __init__(
        self, branch: nn.Sequential, skip: nn.Module | None, gain: nn.Module, norm: nn.Module, act: nn.Module
    ) -> None:
        super().__init__()
        self.branch, self.skip, self.gain, self.norm, self.act = branch, skip, gain, norm, act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.gain(self.branch(x))
        y: torch.Tensor = self.act(self.norm(out if self.skip is None else self.skip(x) + out))
        return y


class HighwayBlock(nn.Module):
    """x_{l+1} = T ⊙ H(x) + (1 − T) ⊙ x, T = sigmoid(W_T x + b_T), H = act(norm(W_H x)).

    (Srivastava et al. 2015.) A negative b_T keeps the carry path (1 − T) open at initialisation.
    """

    def __init__(self, transform: nn.Module, gate: nn.Module) -> None:
        super().__init__()
        self.transform, self.gate = transform, gate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = torch.sigmoid(self.gate(x))  # same shape as x
        y: torch.Tensor = t * self.transform(x) + (1.0 - t) * x
        return y


class DenseLayer(nn.Module):
    """y = cat(x, W·act(norm(x))): (B, k0 + k·l, …) → (B, k0 + k·(l+1), …) (Huang et al. 2017)."""

    def __init__(self, norm: nn.Module, act: nn.Module, layer: nn.Module, *, channel_dim: int = 1) -> None:
        super().__init__()
        self.norm, self.act, self.layer = norm, act, layer
        self.channel_dim = channel_dim  # -1 for (B, T, C) token inputs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.layer(self.act(self.norm(x)))], dim=self.channel_dim)


class Transition(nn.Module):
    """Compression between dense groups: y = W·act(norm(x)), C → ⌊θ·C⌋ channels."""

    def __init__(self, norm: nn.Module, act: nn.Module, layer: nn.Module) -> None:
        super().__init__()
        self.norm, self.act, self.layer = norm, act, layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.layer(self.act(self.norm(x)))
        return y


class ChannelsLast(nn.Module):
    """Applies a channels-first norm (BatchNorm1d, GroupNorm: (B, C, T)) to (B, T, C) tokens, so
    batch norm takes its statistics per channel over the batch and the tokens (B·T values)."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.norm(x.transpose(1, -1))  # (B, T, C) → (B, C, T)
        return y.transpose(1, -1)  # → (B, T, C)
