"""Where a block's norms sit (stability/measure/block_form.py), read in the probe's own pass, and
`gradient_arrival` with the embedding boundary apart (stability/judge/entry.py): each position
on a block whose form is known by construction, and the ratios against hand-set gradient norms."""

from __future__ import annotations

import pytest
import torch
from approx_support import approx
from spec_support import make_measurements
from torch import nn

from stability.judge.invariants import gradient_arrival
from stability.measure.block_form import BlockFormObserver, NormPosition
from stability.measure.measurements import Measurements
from stability.measure.probe import probe


class Form(nn.Module):
    def __init__(self, kind: str, width: int = 8) -> None:
        super().__init__()
        self.kind, self.norm, self.f = kind, nn.LayerNorm(width), nn.Linear(width, width)
        self.post_norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "pre":  # x + F(norm(x)): Xiong et al. 2020
            return x + self.f(self.norm(x))
        if self.kind == "post":  # norm(x + F(x)): the original Transformer, BERT
            return self.norm(x + self.f(x))
        if self.kind == "pre + post":  # norm(x + F(norm(x)))
            return self.post_norm(x + self.f(self.norm(x)))
        if self.kind == "in branch":  # x + norm(F(x)): ConvNeXt's order
            return x + self.norm(self.f(x))
        return x + self.f(x)


@pytest.mark.parametrize("kind", ["pre", "post", "pre + post", "in branch"])
def test_the_probe_reads_each_position_off_block_0(kind: str) -> None:
    torch.manual_seed(0)
    blocks = nn.Sequential(Form(kind), Form("post"))  # only block 0 is read
    m = probe(blocks, torch.randn(4, 3, 8), observers=[BlockFormObserver()])
    form = m.extra["block_form"]
    assert form == {"position": kind, "pre_norm": kind == "pre", "norms": ["LayerNorm"]}


def test_a_block_without_norms_and_its_hooks_removed() -> None:
    block = Form("none")
    del block.norm, block.post_norm
    reader = NormPosition(block)
    block(torch.randn(2, 8))
    assert reader.position() == "none" and reader.norms == []
    reader.close()
    assert not block._forward_hooks and not block._forward_pre_hooks


def test_only_the_first_call_counts_and_an_unrun_block_has_no_position() -> None:
    block = Form("pre")
    reader = NormPosition(block)
    assert reader.position() is None
    block(torch.randn(2, 8))
    block.kind = "post"
    block(torch.randn(2, 8))
    assert reader.position() == "pre"
    reader.close()


def _m(grad: list[float], *, embedded: bool, position: str | None) -> Measurements:
    extra: dict[str, object] = {"embedded": embedded}
    if position is not None:
        extra["block_form"] = {"position": position, "pre_norm": position == "pre", "norms": ["LayerNorm"]}
    n = len(grad)
    return make_measurements(grad_norm=grad, act_var=[1.0] * n, act_sq_mean=[1.0] * n, extra=extra)


GRAD = [100.0, 2.0, 1.5, 1.0]  # entry factor 50, g₁/g_L 2, g₀/g_L 100


def test_a_pre_norm_token_model_is_judged_from_block_0s_output_with_the_entry_beside() -> None:
    v = gradient_arrival(_m(GRAD, embedded=True, position="pre"))
    assert v.passed and v.observed == 2.0 and v.extra == {"entry": 50.0, "judged": "g1/gL"}
    assert "entry factor g₀/g₁ 50 is reported" in v.detail and v.block == 1


def test_include_entry_bounds_the_whole_ratio_and_false_leaves_the_entry_out_anywhere() -> None:
    v = gradient_arrival(_m(GRAD, embedded=True, position="pre"), include_entry=True)
    assert not v.passed and v.observed == 100.0 and "explodes" in v.detail and v.extra == {}
    v = gradient_arrival(_m(GRAD, embedded=False, position=None), include_entry=False)
    assert v.passed and v.observed == 2.0


@pytest.mark.parametrize(("embedded", "position"), [(True, "post"), (True, "pre + post"), (False, "pre"), (True, None)])
def test_anything_else_keeps_the_whole_ratio(embedded: bool, position: str | None) -> None:
    v = gradient_arrival(_m(GRAD, embedded=embedded, position=position))
    assert not v.passed and v.observed == 100.0 and "entry" not in v.detail


def test_apart_a_failure_names_blocks_in_the_models_own_numbering() -> None:
    """g₁/g_L = 40 > 10, crossing at boundary 2 (g₂/g_L = 20): block numbers count from x₀ still,
    and the average per block is over the L - 1 blocks after the entry."""
    v = gradient_arrival(_m([1000.0, 40.0, 20.0, 5.0, 1.0], embedded=True, position="pre"))
    assert not v.passed and v.observed == 40.0 and v.block == 2
    assert f"{40 ** (1 / 3):.4g} per block" in v.detail and "input of block 2" in v.detail


def test_apart_at_depth_1_the_stream_after_the_entry_is_the_output() -> None:
    v = gradient_arrival(_m([80.0, 1.0], embedded=True, position="pre"))
    assert v.passed and v.observed == 1.0 and v.extra["entry"] == 80.0


def test_probe_embeds_token_ids_through_a_stacks_declared_embedding() -> None:
    from stability import Stack

    torch.manual_seed(0)
    wte, blocks = nn.Embedding(10, 8), nn.Sequential(Form("pre"), Form("pre"))
    ids = torch.randint(0, 10, (2, 5))
    m = probe(Stack(blocks=blocks, embedding=wte), ids, observers=[BlockFormObserver()])
    assert m.act_var[0] == approx(float(wte(ids).detach().double().var(correction=0)), rel=1e-6)
    assert m.extra["block_form"]["position"] == "pre"
