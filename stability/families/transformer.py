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
(`stability.judge.token_invariants.AttentionEntropyObserver`) and whose input is the attention
logits that enter the softmax (a forward pre-hook reads them). A custom factory that computes its
attention probabilities with `AttentionProbs` gets the `attention_entropy` invariant too.

Three options guard the attention logits s = q·k/√d against growing during training (Wortsman et
al. 2023 show that their growth makes attention one-hot and the loss diverge at high learning rates):

    qk_norm        q, k ← norm(q), norm(k) per head (LayerNorm or RMSNorm over the head's d
                   channels, one gain shared by the heads) before the dot product (Dehghani et al.
                   2023, ViT-22B): |s| ≤ ‖q̂‖‖k̂‖/√d = √d·g_q·g_k with unit gains
    attn_softcap   s ← cap·tanh(s/cap) before the mask and softmax (Gemma 2 team 2024): |s| < cap
    sigma_reparam  every linear layer of the block computes x ↦ (γ/σ(W))·W x + b, σ(W) the
                   spectral norm tracked by one power iteration per training forward from the exact
                   singular vectors at initialisation, γ a learnable scalar started at 1 (Zhai et
                   al. 2023, σReparam)
"""

from __future__ import annotations

import math

import torch
from torch import nn

from stability.families.blocks import Scale
from stability.families.init import activation, init_all, zero_parameters
from stability.spec.case import Case
from stability.spec.schema import Spec

__all__ = [
    "AttentionProbs",
    "SelfAttention",
    "SigmaReparamLinear",
    "softcap",
    "MLP",
    "Sublayer",
    "TransformerBlock",
    "build_transformer",
    "head_count",
]


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


def softcap(scores: torch.Tensor, cap: float) -> torch.Tensor:
    """cap·tanh(s/cap): ≈ s for |s| ≪ cap, and |s| < cap always (Gemma 2 team 2024)."""
    return cap * torch.tanh(scores / cap)


class SigmaReparamLinear(nn.Linear):
    """x ↦ (γ/σ(W))·W x + b (Zhai et al. 2023, σReparam, eq. 2): the effective weight has spectral
    norm γ. σ(W) = uᵀ W v with u, v the leading singular vectors, set exactly by `reset_sigma`
    (the builder calls it after the init) and then refreshed by one power iteration per forward
    in training mode (v ← Wᵀu/‖Wᵀu‖, u ← Wv/‖Wv‖, without gradient; the gradient flows through
    σ(W) = uᵀ W v with u, v held). γ is learnable and starts at 1."""

    u: torch.Tensor
    v: torch.Tensor

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features)
        self.gamma = nn.Parameter(torch.ones(()))
        self.register_buffer("u", torch.zeros(out_features))
        self.register_buffer("v", torch.zeros(in_features))

    def reset_sigma(self) -> None:
        """u, v ← the exact leading singular vectors of the current weight (SVD, in float64)."""
        with torch.no_grad():
            u, _, vh = torch.linalg.svd(self.weight.double(), full_matrices=False)
            self.u.copy_(u[:, 0])
            self.v.copy_(vh[0])

    def sigma(self) -> torch.Tensor:
        return self.u @ self.weight @ self.v  # 0-dim: uᵀ W v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            with torch.no_grad():
                v = nn.functional.normalize(self.weight.t() @ self.u, dim=0)  # (in,)
                self.u.copy_(nn.functional.normalize(self.weight @ v, dim=0))  # (out,)
                self.v.copy_(v)
        weight = self.weight * (self.gamma / self.sigma())  # (out, in), spectral norm γ
        return nn.functional.linear(x, weight, self.bias)


def _linear(width_in: int, width_out: int, *, sigma_reparam: bool) -> nn.Linear:
    return SigmaReparamLinear(width_in, width_out) if sigma_reparam else nn.Linear(width_in, width_out)


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention (Vaswani et al. 2017, eq. 1):
    softmax(Q Kᵀ / sqrt(d)) V per head, heads concatenated and projected by W_O; with the
    module docstring's qk_norm, attn_softcap and sigma_reparam options."""

    def __init__(
        self,
        width: int,
        heads: int,
        *,
        causal: bool,
        qk_norm: str = "none",
        attn_softcap: float | None = None,
        sigma_reparam: bool = False,
    ) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"{heads} heads do not divide the width {width}")
        self.heads = heads
        self.q = _linear(width, width, sigma_reparam=sigma_reparam)
        self.k = _linear(width, width, sigma_reparam=sigma_reparam)
        self.v = _linear(width, width, sigma_reparam=sigma_reparam)
        self.out = _linear(width, width, sigma_reparam=sigma_reparam)
        d = width // heads
        self.q_norm, self.k_norm = _head_norm(qk_norm, d), _head_norm(qk_norm, d)
        self.attn_softcap = attn_softcap
        self.probs = AttentionProbs(causal=causal)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape  # (B, T, C)
        h, d = self.heads, c // self.heads
        q = self.q_norm(self.q(x).view(b, t, h, d).transpose(1, 2))  # (B, H, T, d)
        k = self.k_norm(self.k(x).view(b, t, h, d).transpose(1, 2))  # (B, H, T, d)
        v = self.v(x).view(b, t, h, d).transpose(1, 2)  # (B, H, T, d)
        scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(d))  # (B, H, T, T): the attention logits
        if self.attn_softcap is not None:
            scores = softcap(scores, self.attn_softcap)
        p = self.probs(scores)  # (B, H, T, T)
        y = (p @ v).transpose(1, 2).reshape(b, t, c)  # (B, T, C)
        out: torch.Tensor = self.out(y)  # (B, T, C)
        return out


def _head_norm(kind: str, d: int) -> nn.Module:
    """The qk_norm of one head's d channels (one module, so its gain is shared by the heads)."""
    if kind == "layer":
        return nn.LayerNorm(d)
    if kind == "rms":
        return nn.RMSNorm(d, eps=1e-6)
    return nn.Identity()


class MLP(nn.Module):
    """W₂·act(W₁x + b₁) + b₂ on each token: C → ratio·C → C."""

    def __init__(self, width: int, hidden: int, act: nn.Module, *, sigma_reparam: bool = False) -> None:
        super().__init__()
        self.fc1 = _linear(width, hidden, sigma_reparam=sigma_reparam)
        self.act = act
        self.fc2 = _linear(hidden, width, sigma_reparam=sigma_reparam)

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
        attn = SelfAttention(
            w, heads, causal=b.causal, qk_norm=b.qk_norm, attn_softcap=b.attn_softcap, sigma_reparam=b.sigma_reparam
        )
        init_all(spec, case, attn, gen)
        last: list[nn.Linear] = [attn.out]
        branch: list[nn.Linear] = [attn.v, attn.out]
        mlp = None
        if b.mlp:
            mlp = MLP(w, max(1, round(b.mlp_ratio * w)), activation(spec), sigma_reparam=b.sigma_reparam)
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
        for layer in branch + [attn.q, attn.k]:
            if isinstance(layer, SigmaReparamLinear):
                layer.reset_sigma()

        def sub(fn: nn.Module) -> Sublayer:
            norm_in = _norm(spec, w) if b.norm_position in ("pre", "sandwich") else nn.Identity()
            norm_out = _norm(spec, w) if b.norm_position in ("post", "sandwich") else nn.Identity()
            return Sublayer(
                fn,
                position=b.norm_position,
                norm_in=norm_in,
                norm_out=norm_out,
                skip=skip,
                alpha=alpha,
                gain=_gain(spec, w),
            )

        blocks.append(TransformerBlock(sub(attn), None if mlp is None else sub(mlp)))
    return nn.Sequential(*blocks)
