"""The transformer's training-stability options (stability/families/transformer.py) against hand
computations: qk-layernorm on a two-channel head makes every logit ±√2·u_q·u_k, qk-RMSNorm
divides by the root mean square, the soft-cap is cap·tanh(s/cap) at the softmax's input, and
σReparam's effective weight has spectral norm γ (exactly at initialisation, and after power
iteration on a hand-set matrix)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from stability.families.build import build
from stability.families.transformer import SelfAttention, SigmaReparamLinear, softcap
from stability.spec.case import corner_case
from stability.spec.load import parse_spec


def _logits(attn: SelfAttention, x: torch.Tensor) -> torch.Tensor:
    seen: list[torch.Tensor] = []
    handle = attn.probs.register_forward_pre_hook(lambda m, args: seen.append(args[0].detach()))
    attn(x)
    handle.remove()
    return seen[0]


def _set(layer: nn.Linear, weight: list[list[float]]) -> None:
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(weight, dtype=torch.float64))
        if layer.bias is not None:
            layer.bias.zero_()


def test_qk_layernorm_on_a_two_channel_head_by_hand() -> None:
    """LayerNorm of (a, b) is ±(u, −u), u = (a − b)/2 / sqrt(((a − b)/2)² + ε): every logit is
    q̂·k̂/√2 = ±√2·u_q·u_k, whatever the scale of W_q and W_k."""
    attn = SelfAttention(2, 1, causal=False, qk_norm="layer").double()
    _set(attn.q, [[300.0, 0.0], [0.0, -100.0]])
    _set(attn.k, [[1.0, 2.0], [-3.0, 0.5]])
    x = torch.tensor([[[1.0, 0.2], [-0.5, 0.7], [0.3, -1.1]]], dtype=torch.float64)  # (B, T, C)
    eps = attn.q_norm.eps

    def u(v: torch.Tensor) -> torch.Tensor:
        half = (v[..., 0] - v[..., 1]) / 2
        return half / torch.sqrt(half**2 + eps)

    uq, uk = u(attn.q(x)[0]), u(attn.k(x)[0])  # (T,)
    expected = math.sqrt(2) * uq[:, None] * uk[None, :]  # (T, T)
    torch.testing.assert_close(_logits(attn, x)[0, 0], expected, rtol=0, atol=1e-13)
    assert float(_logits(attn, x).abs().max()) <= math.sqrt(2)


def test_qk_rmsnorm_divides_by_the_root_mean_square() -> None:
    attn = SelfAttention(4, 2, causal=True, qk_norm="rms").double()
    x = torch.randn(2, 3, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    q = attn.q(x).view(2, 3, 2, 2).transpose(1, 2)  # (B, H, T, d)
    k = attn.k(x).view(2, 3, 2, 2).transpose(1, 2)
    qn = q / torch.sqrt(q.pow(2).mean(-1, keepdim=True) + 1e-6)
    kn = k / torch.sqrt(k.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(_logits(attn, x), qn @ kn.transpose(-2, -1) / math.sqrt(2), rtol=0, atol=1e-13)


def test_the_softcap_is_applied_before_the_softmax() -> None:
    with torch.random.fork_rng():  # the weights drawn from a seed, not from whatever tests ran before in this process
        torch.manual_seed(0)
        plain = SelfAttention(4, 1, causal=True).double()
    capped = SelfAttention(4, 1, causal=True, attn_softcap=0.3).double()
    capped.load_state_dict(plain.state_dict())
    x = torch.randn(1, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    raw = _logits(plain, x)
    torch.testing.assert_close(_logits(capped, x), 0.3 * torch.tanh(raw / 0.3), rtol=0, atol=1e-15)
    assert float(raw.abs().max()) < 0.3 * 18  # below tanh's saturation in float64: the cap is strict
    assert float(_logits(capped, x).abs().max()) < 0.3 < float(raw.abs().max())
    assert softcap(torch.tensor([0.0, 1e9, -1e9]), 2.0).tolist() == [0.0, 2.0, -2.0]


def test_sigma_reparam_has_spectral_norm_gamma() -> None:
    """W = diag(3, 1): σ = 3 exactly after `reset_sigma`, the effective weight is W/3; a changed W is
    tracked by the power iteration of training-mode forwards; the gradient flows into γ."""
    layer = SigmaReparamLinear(2, 2).double()
    _set(layer, [[3.0, 0.0], [0.0, 1.0]])
    layer.reset_sigma()
    assert float(layer.sigma().detach()) == pytest.approx(3.0, abs=1e-15)
    x = torch.tensor([[1.0, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(layer(x), torch.tensor([[1.0, 1 / 3]], dtype=torch.float64), rtol=0, atol=1e-15)
    _set(layer, [[1.0, 0.0], [0.0, 5.0]])  # the leading direction moves to the second axis
    with torch.no_grad():
        layer.u.copy_(torch.tensor([0.6, 0.8], dtype=torch.float64))
    layer.train()
    for _ in range(60):
        layer(x)
    assert float(layer.sigma().detach()) == pytest.approx(5.0, abs=1e-12)
    with torch.no_grad():
        layer.gamma.fill_(2.0)
    eff = layer.weight * (layer.gamma / layer.sigma())
    assert float(torch.linalg.matrix_norm(eff.detach(), ord=2)) == pytest.approx(2.0, abs=1e-12)
    layer(x).sum().backward()
    assert layer.gamma.grad is not None and float(layer.gamma.grad) != 0.0


SPEC = """
name = "t"
description = "d"
family = "transformer"
[block]
layer = "tokens"
norm = "layer"
head_dim = 4
{block}
[space]
depth = 2
width = 8
tokens = 3
batch = 2
dtype = ["float64"]
[expect.gradient_arrival]
"""


def test_the_builder_applies_the_options_to_every_layer() -> None:
    spec = parse_spec(SPEC.format(block='qk_norm = "rms"\nattn_softcap = 50.0\nsigma_reparam = true'))
    blocks = build(spec, corner_case(spec, dtype="float64")).blocks
    layers = [m for m in blocks.modules() if isinstance(m, nn.Linear)]
    assert len(layers) == 2 * 6 and all(isinstance(m, SigmaReparamLinear) for m in layers)
    for m in layers:  # exact at initialisation: every effective weight has spectral norm γ = 1
        assert float(torch.linalg.matrix_norm((m.weight * (m.gamma / m.sigma())).detach(), ord=2)) == pytest.approx(
            1.0, abs=1e-12
        )
    attn = blocks[0].attn.fn
    assert isinstance(attn.q_norm, nn.RMSNorm) and attn.attn_softcap == 50.0
    plain = build(parse_spec(SPEC.format(block="")), corner_case(spec, dtype="float64")).blocks
    assert isinstance(plain[0].attn.fn.q_norm, nn.Identity) and plain[0].attn.fn.attn_softcap is None
    assert not any(isinstance(m, SigmaReparamLinear) for m in plain.modules())
