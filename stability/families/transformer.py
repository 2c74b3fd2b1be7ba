"""The transformer family: self-attention and MLP sublayers inside residual connections, on
(B, T, C) token inputs.

Each block is an attention sublayer followed by an MLP sublayer (or attention only, `mlp = false`).
A sublayer F sits in its residual connection according to `block.norm_position`:

    pre       x + g·F(norm(x))                  (Xiong et al. 2020; GPT-2, ViT)
    post      norm(α·x + g·F(x))                (Vaswani et al. 2017; DeepNorm: Wang et al. 2022)
    sandwich  x + g·norm₂(F(norm₁(x)))          (Ding et al. 2021, CogView)

With `skip = "none"` the `x` term is dropped (a negative control: Dong et al. 2021 show that pure
attention then loses rank doubly exponentially with depth). `block.residual` picks the scheme:

    none        α = 1, g = 1
    deepnorm    α = (2N)^(1/4) on the skip, and the value, output and MLP weights multiplied by
                β = (8N)^(-1/4) after their init (Wang et al. 2022, encoder of N layers; post-norm)
    gpt2        the attention output projection and the MLP's second layer multiplied by
                1/sqrt(2·depth) after their init (Radford et al. 2019, "GPT-2", § 2.3)
    rezero      g = a learnable scalar started at 0 (Bachlechner et al. 2020)
    skipinit    g = a learnable per-channel gain started at 0 (De & Smith 2020)
    layerscale  g = diag(λ), λ learnable per channel, started at `layerscale_init` (Touvron et al. 2021, CaiT)

Attention is written out here (not `nn.MultiheadAttention`) so the attention probabilities pass
through one named module, `AttentionProbs`, whose output an observer can hook
(`stability.judge.token_invariants.AttentionEntropyObserver`). A custom factory that computes its
attention probabilities with `AttentionProbs` gets the `attention_entropy` invariant too.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from stability.families.blocks import Scale
from stability.families.init import activation, init_all, zero_parameters
from stability.spec.case import Case
from stability.spec.schema import Spec

__all__ = ["AttentionProbs", "SelfAttention", "MLP", "Sublayer", "TransformerBlock", "build_transformer", "head_count"]


class AttentionProbs(nn.Module):
    """softmax(scores) over the keys, after the causal mask: (B, H, T, T) → (B, H, T, T).

    Row i of a causal attention can only see keys 0 … i. The output is the attention probability
    matrix that `AttentionEntropyObserver` reads through a forward hook.
    """

    def __init__(self, *, causal: bool) -> None:
        super().__init__()
        self.causal = causal

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        if self.causal:
            t = scores.shape[-1]
            future = torch.ones(t, t, dtype=torch.bool, device=scores.device).triu(1)  # (T, T): key j > query i
            scores = scores.masked_fill(future, float("-inf"))
        return torch.softmax(scores, dim=-1)  # (B, H, T, T)


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention (Vaswani et al. 2017, eq. 1):
    softmax(Q Kᵀ / sqrt(d)) V per head, heads concatenated and projected by W_O."""

    def __init__(self, width: int, heads: int, *, causal: bool) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"{heads} heads do not divide the width {width}")
        self.heads = heads
        self.q = nn.Linear(width, width)
        self.k = nn.Linear(width, width)
        self.v = nn.Linear(width, width)
        self.out = nn.Linear(width, width)
        self.probs = AttentionProbs(causal=causal)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape  # (B, T, C)
        h, d = self.heads, c // self.heads
        q = self.q(x).view(b, t, h, d).transpose(1, 2)  # (B, H, T, d)
        k = self.k(x).view(b, t, h, d).transpose(1, 2)  # (B, H, T, d)
        v = self.v(x).view(b, t, h, d).transpose(1, 2)  # (B, H, T, d)
        p = self.probs(q @ k.transpose(-2, -1) * (1.0 / math.sqrt(d)))  # (B, H, T, T)
        y = (p @ v).transpose(1, 2).reshape(b, t, c)  # (B, T, C)
        out: torch.Tensor = self.out(y)  # (B, T, C)
        return out


class MLP(nn.Module):
    """W₂·act(W₁x + b₁) + b₂ on each token: C → ratio·C → C."""

    def __init__(self, width: int, hidden: int, act: nn.Module) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.act = act
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.fc2(self.act(self.fc1(x)))  # (B, T, C) → (B, T, hidden) → (B, T, C)
        return y


class Sublayer(nn.Module):
    """One sublayer F in its residual connection; see the module docstring for the three orders."""

    def __init__(
        self,
        fn: nn.Module,
        *,
        position: str,
        norm_in: nn.Module,
        norm_out: nn.Module,
        skip: bool,
        alpha: float,
        gain: nn.Module,
    ) -> None:
        super().__init__()
        self.fn, self.norm_in, self.norm_out, self.gain = fn, norm_in, norm_out, gain
        self.position, self.skip, self.alpha = position, skip, alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.position == "post":
            p: torch.Tensor = self.gain(self.fn(x))
            if self.skip:
                p = (x if self.alpha == 1.0 else self.alpha * x) + p
            out: torch.Tensor = self.norm_out(p)
            return out
        if self.position == "pre":
            h: torch.Tensor = self.gain(self.fn(self.norm_in(x)))
        else:  # sandwich
            h = self.gain(self.norm_out(self.fn(self.norm_in(x))))
        return x + h if self.skip else h


class TransformerBlock(nn.Module):
    """x → attn(x) → mlp(·): two residual sublayers (one with `mlp = false`)."""

    def __init__(self, attn: Sublayer, mlp: Sublayer | None) -> None:
        super().__init__()
        self.attn, self.mlp = attn, mlp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.attn(x)
        return y if self.mlp is None else self.mlp(y)


def head_count(spec: Spec, width: int) -> int:
    """heads = width / head_dim, or block.heads, or 1. The spec's loader (stability/spec/load.py)
    makes the width a multiple of either, so this always divides."""
    b = spec.block
    if b.head_dim is not None:
        return width // b.head_dim
    return b.heads or 1


def _norm(spec: Spec, width: int) -> nn.Module:
    if spec.block.norm == "layer":
        return nn.LayerNorm(width)
    if spec.block.norm == "rms":
        return nn.RMSNorm(width, eps=1e-6)
    return nn.Identity()


def _gain(spec: Spec, width: int) -> nn.Module:
    residual = spec.block.residual
    if residual == "rezero":
        return Scale(torch.tensor(0.0), learnable=True)
    if residual == "skipinit":
        return Scale(torch.zeros(width), learnable=True, channel_dim=-1)
    if residual == "layerscale":
        return Scale(torch.full((width,), spec.block.layerscale_init), learnable=True, channel_dim=-1)
    return nn.Identity()


def _scale_weights(layers: list[nn.Linear], factor: float) -> None:
    with torch.no_grad():
        for layer in layers:
            layer.weight.mul_(factor)


def build_transformer(spec: Spec, case: Case, gen: torch.Generator) -> nn.Sequential:
    """`case.depth` transformer blocks of width `case.width`, initialised from `gen`."""
    b, w, n = spec.block, case.width, case.depth
    heads = head_count(spec, w)
    alpha = (2.0 * n) ** 0.25 if b.residual == "deepnorm" else 1.0
    beta = (8.0 * n) ** -0.25  # DeepNorm's branch factor (Wang et al. 2022, encoder-only)
    gpt2 = 1.0 / math.sqrt(2.0 * n)  # GPT-2's output-projection factor (Radford et al. 2019)
    skip = b.skip != "none"
    blocks = []
    for _ in range(n):
        attn = SelfAttention(w, heads, causal=b.causal)
        init_all(spec, case, attn, gen)
        last: list[nn.Linear] = [attn.out]
        branch: list[nn.Linear] = [attn.v, attn.out]
        mlp = None
        if b.mlp:
            mlp = MLP(w, max(1, round(b.mlp_ratio * w)), activation(spec))
            init_all(spec, case, mlp, gen)
            last.append(mlp.fc2)
            branch += [mlp.fc1, mlp.fc2]
        if b.residual == "deepnorm":
            _scale_weights(branch, beta)
        elif b.residual == "gpt2":
            _scale_weights(last, gpt2)
        if case.branch_init == "zero":  # every branch outputs exactly 0: pre/sandwich blocks are the identity
            for layer in last:
                zero_parameters(layer)

        def sub(fn: nn.Module) -> Sublayer:
            norm_in = _norm(spec, w) if b.norm_position in ("pre", "sandwich") else nn.Identity()
            norm_out = _norm(spec, w) if b.norm_position in ("post", "sandwich") else nn.Identity()
            return Sublayer(fn, position=b.norm_position, norm_in=norm_in, norm_out=norm_out, skip=skip, alpha=alpha, gain=_gain(spec, w))

        blocks.append(TransformerBlock(sub(attn), None if mlp is None else sub(mlp)))
    return nn.Sequential(*blocks)
