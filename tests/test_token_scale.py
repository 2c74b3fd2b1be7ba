"""Token models probed at their embedding's scale (stability/families/embedding.py, the token routes
of stability/families/custom.py, `network_input` in stability/families/build.py): a nanoGPT-style
factory, whole and as blocks with its declared embedding, measured as the model runs it, and a
spec whose bands were set on it catching its depth-scaled init dropped."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from approx_support import approx
from spec_support import factory_block, make_case, make_spec

from stability import Case
from stability.families.build import build, network_input
from stability.families.embedding import embedding_rms, reading_embedding, token_ids
from stability.run.engine import RunOptions, run_spec
from stability.run.probing import measure_case
from stability.spec.schema import Spec

MODULE = "stability_token_scale_nanogpt"
# Karpathy's nanoGPT model.py, cut to what the probe reads: token and learned position embeddings
# N(0, 0.02²), pre-LN blocks, every Linear N(0, 0.02²) and each block's c_proj N(0, 0.02²/(2N)).
NANOGPT = """
import math
import torch
from torch import nn
from torch.nn import functional as F
from stability import Stack


class Attention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads, self.c_attn, self.c_proj = heads, nn.Linear(width, 3 * width), nn.Linear(width, width)

    def forward(self, x):
        b, t, c = x.shape  # (B, T, C)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in self.c_attn(x).split(c, dim=2))
        return self.c_proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c))


class MLP(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.c_fc, self.gelu, self.c_proj = nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(width), Attention(width, heads)
        self.ln_2, self.mlp = nn.LayerNorm(width), MLP(width)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, depth, width, vocab=64, context=32, depth_scaled=True):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(wte=nn.Embedding(vocab, width), wpe=nn.Embedding(context, width),
            drop=nn.Dropout(0.1), h=nn.ModuleList(Block(width, 2) for _ in range(depth)), ln_f=nn.LayerNorm(width)))
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        for name, p in self.named_parameters():
            if depth_scaled and name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * depth))

    def embed(self, idx):
        t = self.transformer
        return t.drop(t.wte(idx) + t.wpe(torch.arange(idx.shape[1], device=idx.device)))  # (B, T, C)

    def forward(self, idx):
        x = self.embed(idx)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def whole(depth, width, depth_scaled=True):
    return GPT(depth, width, depth_scaled=depth_scaled)


def blocks(depth, width, depth_scaled=True):
    model = GPT(depth, width, depth_scaled=depth_scaled)
    return Stack(blocks=model.transformer.h, embedding=model.embed)


def bare(depth, width):
    return GPT(depth, width).transformer.h
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("nanogpt")
    (d / f"{MODULE}.py").write_text(NANOGPT, encoding="utf-8")
    return d


def _spec(
    folder: Path, fn: str, *, args: dict[str, object] | None = None, expect: str = "[expect.gradient_arrival]\n"
) -> Spec:
    return make_spec(
        "custom",
        block=factory_block(f"{MODULE}:{fn}", args or {}, layer="tokens"),
        space="depth = [1, 8]\nwidth = 64\nbatch = 2\ntokens = 8",
        probe="ensemble = 1",
        expect=expect,
        file=str(folder / f"{fn}.toml"),
        name="nano",
        description="nanoGPT-style decoder",
    )


def _case(depth: int, seed: int = 0) -> Case:
    return make_case(depth=depth, width=64, dtype="float32", seed=seed, tokens=8)


def _hidden_states(model: torch.nn.Module, ids: torch.Tensor) -> list[torch.Tensor]:
    """The model's own hidden states: its embedding's output, then each block's, by its own code."""
    with torch.no_grad():
        xs = [model.embed(ids)]
        for block in model.transformer.h:
            xs.append(block(xs[-1]))
    return xs


def test_a_whole_token_model_of_the_users_class_is_probed_through_its_own_forward(folder: Path) -> None:
    """The probe saw the model's own hidden states: its forward from token ids, each boundary's
    variance that of the stream the model computes, x₀ at its embedding's scale (2·0.02² for a
    token and a position row summed), not N(0, 1)."""
    spec, case = _spec(folder, "whole"), _case(3)
    net = build(spec, case)
    assert net.model is not None and net.embedded and network_input(spec, case, net) is None
    ids = net.model.inputs
    assert isinstance(ids, torch.Tensor) and ids.shape == (2, 8) and ids.dtype == torch.long
    m = measure_case(spec, case)
    own = [float(x.double().var(correction=0)) for x in _hidden_states(net.model.model, ids)]  # over all elements
    assert m.act_var == approx(own, rel=1e-6)
    assert 0.5 * 2 * 0.02**2 < m.act_var[0] < 2 * 2 * 0.02**2  # 1,250 times below N(0, 1)'s variance
    assert m.extra["embedded"] is True and m.extra["block_form"]["position"] == "pre"


def test_blocks_with_their_declared_embedding_measure_what_the_whole_model_does(folder: Path) -> None:
    case = _case(3)
    whole = measure_case(_spec(folder, "whole"), case)
    spec = _spec(folder, "blocks")
    net = build(spec, case)
    assert net.model is None and net.embedded and net.tokens is not None and net.tokens.vocab == 64
    x0 = network_input(spec, case, net)
    assert x0 is not None and x0.shape == (2, 8, 64)
    stacked = measure_case(spec, case)
    assert stacked.act_var == approx(whole.act_var, rel=1e-6)
    assert stacked.grad_norm == approx(whole.grad_norm, rel=1e-5)


def test_blocks_without_an_embedding_are_probed_on_n01_and_say_nothing_of_it(folder: Path) -> None:
    """What a factory that returns only blocks gets: N(0, 1) input, not a token model's entry."""
    m = measure_case(_spec(folder, "bare"), _case(2))
    assert 0.9 < m.act_var[0] < 1.1 and m.extra["embedded"] is False


def test_the_embedding_reading_the_ids_is_found_and_ids_skip_the_padding_row() -> None:
    wte, wpe = torch.nn.Embedding(50, 8, padding_idx=3), torch.nn.Embedding(4, 8)
    found = reading_embedding(lambda ids: wte(ids) + wpe(torch.arange(ids.shape[1])), (2, 4))
    assert found is not None and (found.vocab, found.padding, found.name) == (50, 3, "Embedding(50, 8)")
    assert reading_embedding(lambda ids: wpe(torch.arange(ids.shape[1])), (2, 4)) is None  # positions only
    assert reading_embedding(lambda ids: 1 / 0, (2, 4)) is None
    ids = token_ids(5, 2, (400,), generator=torch.Generator().manual_seed(0))
    assert set(ids.tolist()) == {0, 1, 3, 4}


def test_embedding_rms_is_the_rows_root_mean_square_without_the_padding_row() -> None:
    e = torch.nn.Embedding(3, 2, padding_idx=1)
    with torch.no_grad():
        e.weight.copy_(torch.tensor([[3.0, 4.0], [100.0, 100.0], [0.0, 0.0]]))
    assert embedding_rms(e) == pytest.approx((25 / 4) ** 0.5)  # rows 0 and 2: (9 + 16 + 0 + 0) / 4
    assert embedding_rms(torch.nn.Linear(2, 2)) == 1.0


# Bands: the extremes over 8 seeds at depths 1, 2, 4 and 8 (width 64, batch 2, 8 tokens, one
# network a case), widened by 1.25x. Measured: Var(x_L)/Var(x0) 1.36-1.78 and g1/gL 1-1.30; with
# c_proj's 1/sqrt(2N) dropped, Var(x_L)/Var(x0) 1.88-2.34 at depth 1 (2N = 2: inside the band on
# some seeds), 2.92-3.72 at 2, 5.2-6.8 at 4, 8.96-13.5 at 8.
STREAM = """\
[expect.residual_stream]
lo = 0.8
hi = 1.63
variance_lo = 1.09
variance_hi = 2.23
"""


@pytest.mark.parametrize("fn", ["whole", "blocks"])
def test_the_depth_scaled_init_passes_its_bands_and_fails_them_without_the_scale(folder: Path, fn: str) -> None:
    """Each block adds 2 branches of variance v/(2N) with the scale, v without it: the output's
    variance over the embedding's grows by about 2N times as much (closed form 2N = 8 at depth 4;
    the embedding's own share and the finite width move it by tens of percent)."""
    case = _case(4)
    healthy = run_spec(_spec(folder, fn, expect=STREAM), RunOptions(), case=case)
    dropped = run_spec(_spec(folder, fn, args={"depth_scaled": False}, expect=STREAM), RunOptions(), case=case)
    (ok,), (bad,) = healthy.results, dropped.results
    assert ok.met and not bad.met, (ok.verdict, bad.verdict)
    v_ok, v_bad = ok.verdict.extra["variance"], bad.verdict.extra["variance"]  # type: ignore[union-attr]
    assert 0.6 * 8 < (v_bad - 1) / (v_ok - 1) < 1.5 * 8
