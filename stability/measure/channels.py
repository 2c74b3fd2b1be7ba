"""Channel statistics at every boundary, as signal-propagation plots define them (Brock, De &
Smith 2021, "Characterizing signal propagation to close the performance gap in unnormalized
ResNets", ICLR 2021, section 3; the statistics timm's `extract_spp_stats` computes).

For a boundary tensor with channels c = 1 … C and N values per channel (batch × positions):

- the average squared channel mean  M = (1/C) Σ_c m_c²,  m_c = (1/N) Σ_n h_{n,c};
- the average channel variance      V = (1/C) Σ_c v_c,   v_c = (1/N) Σ_n (h_{n,c} − m_c)²;

beside the whole-tensor variance the probe already reports, which mixes the two:
Var(h) = V + M − m̄², m̄ = (1/C) Σ_c m_c (the law of total variance over channels). A ReLU branch
adds a positive mean to every channel that the next weight matrix turns into a fixed per-channel
offset; summed over blocks these offsets are the *mean shift* that grows inside "variance growth".

Layout: channels are dim 1 for (B, C) and (B, C, H, W) (and any rank other than 3), and the last
axis for (B, T, C) token tensors, where each of the B·T tokens is one value per channel. The
variances are population variances (divisor N, as the probe's whole-tensor variance); timm's
`avg_ch_var` uses `Tensor.var`, the unbiased estimator: timm's value = V · N/(N − 1).

`mean_shift_ratio` is what the `mean_shift` invariant judges (see its docstring).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from stability.measure.measurements import serializable

__all__ = ["ChannelStats", "ChannelProfile", "channel_moments", "mean_shift_ratio"]

Layout = Literal["auto", "channels_first", "channels_last"]


@serializable
@dataclass(frozen=True)
class ChannelProfile:
    """Per boundary l = 0 … L: M_l, V_l, the grand mean m̄_l and N_l (values per channel)."""

    sq_mean: list[float]  # M_l = mean_c m_c²
    var: list[float]  # V_l = mean_c v_c (population)
    grand_mean: list[float]  # m̄_l = mean_c m_c
    count: list[int]  # N_l

    def ratio(self, index: int = -1) -> float:
        """M/V at one boundary (the output by default), corrected for sampling (`mean_shift_ratio`)."""
        return mean_shift_ratio(self.sq_mean[index], self.var[index], self.count[index])


def _channel_dim(h: torch.Tensor, layout: Layout) -> int:
    if layout == "channels_first":
        return 1 if h.dim() > 1 else 0
    if layout == "channels_last":
        return h.dim() - 1
    return h.dim() - 1 if h.dim() == 3 else (1 if h.dim() > 1 else 0)  # (B, T, C): tokens; else (B, C, …)


def channel_moments(h: torch.Tensor, *, layout: Layout = "auto") -> torch.Tensor:
    """(M, V, m̄) of one boundary as a float64 (3,) tensor, without a host synchronisation."""
    dim = _channel_dim(h, layout)
    x = h.detach().movedim(dim, -1)  # (…, C)
    x = x.reshape(-1, x.shape[-1]).to(torch.float64)  # (N, C): float64 so that M − m̄² keeps its digits
    var, mean = torch.var_mean(x, dim=0, correction=0)  # (C,), (C,)
    return torch.stack([(mean * mean).mean(), var.mean(), mean.mean()])


def mean_shift_ratio(sq_mean: float, var: float, count: int) -> float:
    """ρ = (M − V/(N − 1)) / V: the average squared channel mean beyond what sampling alone gives,
    relative to the average channel variance.

    A channel mean taken over N values has sampling variance σ_c²/N even when the true mean is 0,
    so E[m_c²] = μ_c² + σ_c²/N, and with the population variance E[v_c] = σ_c²(N − 1)/N the
    unbiased estimate of mean_c μ_c² is M − V/(N − 1). Dividing by V makes ρ scale-free (a stack
    whose variance grows is not charged twice) and ρ/(1 + ρ) is the share of the second moment the
    per-channel offsets carry. A ReLU of a standard normal has ρ = (1/2π)/(1/2 − 1/2π) ≈ 0.466.
    """
    if count < 2 or not var > 0:
        return float("nan")
    return (sq_mean - var / (count - 1)) / var


class ChannelStats:
    """A `BoundaryObserver` recording (M, V, m̄) at every boundary; `finish` returns a `ChannelProfile`
    (stored as `Measurements.extra["channels"]`)."""

    name = "channels"

    def __init__(self, *, layout: Layout = "auto") -> None:
        self.layout: Layout = layout
        self._parts: list[torch.Tensor] = []
        self._counts: list[int] = []

    def start(self, blocks: Sequence[nn.Module]) -> None:
        self._parts, self._counts = [], []

    def observe(self, index: int, h: torch.Tensor) -> None:
        dim = _channel_dim(h, self.layout)
        self._parts.append(channel_moments(h, layout=self.layout))
        self._counts.append(h.numel() // max(h.shape[dim], 1) if h.dim() else 1)

    def finish(self) -> ChannelProfile:
        rows = torch.stack(self._parts).tolist() if self._parts else []  # (L+1, 3): one host transfer
        return ChannelProfile([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], list(self._counts))
