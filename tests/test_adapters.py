"""Library blocks as they are (stability/families/adapters.py): containers, call kwargs, tuple and
ModelOutput results, and the mode split between batch-statistics norms and dropout. Every number
is checked against a closed form: blocks that multiply by known constants."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest
import torch
from approx_support import approx
from torch import nn

from stability import Stack, probe
from stability.errors import BlockError
from stability.families.adapters import find_blocks, hidden_state, set_modes


class Mul(nn.Module):
    """y = c·x, returned in one of the shapes libraries use."""

    def __init__(self, c: float, shape: str = "tensor") -> None:
        super().__init__()
        self.c = nn.Parameter(torch.tensor(c, dtype=torch.float64))
        self.shape = shape

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> Any:
        y = self.c * x * scale
        if self.shape == "tuple":
            return (y, None)
        if self.shape == "dict":
            return {"attentions": None, "last_hidden_state": y}
        if self.shape == "hidden_states":
            return OrderedDict(hidden_states=y)
        return y


def x64() -> torch.Tensor:
    return torch.randn(3, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))  # (B, T, C)


@pytest.mark.parametrize("shape", ["tensor", "tuple", "dict", "hidden_states"])
def test_every_result_shape_gives_the_same_numbers(shape: str) -> None:
    # y = 2·3·x: gradient ratio ‖∂L/∂x‖/‖∂L/∂y‖ = 6 exactly, output variance 36× the input's
    m = probe(nn.ModuleList([Mul(2.0, shape), Mul(3.0, shape)]), x64(), loss="sum")
    assert m.gradient_ratio == approx(6.0, rel=1e-12)
    assert m.act_var[2] / m.act_var[0] == approx(36.0, rel=1e-12)
    assert set(m.param_grad_norm) == {"0.c", "1.c"}


def test_call_kwargs_reach_every_block_as_a_mapping_or_from_the_input() -> None:
    blocks = nn.ModuleList([Mul(1.0), Mul(1.0), Mul(1.0)])
    seen: list[tuple[int, ...]] = []

    def kwargs(h: torch.Tensor) -> dict[str, float]:
        seen.append(tuple(h.shape))
        assert not h.requires_grad
        return {"scale": 0.5}

    assert probe(Stack(blocks=blocks, call_kwargs={"scale": 2.0}), x64(), loss="sum").gradient_ratio == approx(
        8.0, rel=1e-12
    )
    assert probe(Stack(blocks=blocks, call_kwargs=kwargs), x64(), loss="sum").gradient_ratio == pytest.approx(
        0.125, rel=1e-12, abs=0.0
    )
    assert seen == [(3, 5, 4)]  # evaluated once per probe, on the stack's input


def test_a_stem_runs_before_block_0_without_gradient() -> None:
    # the stem (B, C) → (1, B, C) makes one sequence of B tokens; its output is the probe's input
    x = torch.randn(6, 4, dtype=torch.float64)
    m = probe(Stack(blocks=nn.ModuleList([Mul(2.0)]), stem=nn.Unflatten(0, (1, -1))), x, loss="sum")
    assert m.channels == [6, 6]  # dimension 1 of (1, 6, 4)
    assert m.act_var[0] == pytest.approx(float(x.var(unbiased=False)), rel=1e-12, abs=0.0)


class Holder(nn.Module):
    def __init__(self, attribute: str) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 4)  # not a block: never called, never in param_grad_norm
        setattr(self, attribute, nn.ModuleList([Mul(2.0), Mul(2.0)]))


@pytest.mark.parametrize("attribute", ["blocks", "layers", "layer", "h", "block"])
def test_the_block_list_is_found_by_its_library_name(attribute: str) -> None:
    model = Holder(attribute)
    found = find_blocks(model)
    assert found is not None and len(found) == 2
    m = probe(Stack(blocks=model), x64(), loss="sum")
    assert m.gradient_ratio == approx(4.0, rel=1e-12)
    assert set(m.param_grad_norm) == {"0.c", "1.c"}


def test_find_blocks_refuses_what_holds_no_blocks() -> None:
    assert find_blocks(nn.Linear(2, 2)) is None
    assert find_blocks(3) is None
    with pytest.raises(TypeError, match=r"\.layers"):
        probe(Stack(blocks=nn.Linear(4, 4)), x64())


def test_hidden_state_rule() -> None:
    t = torch.zeros(1)
    assert hidden_state(t) is t
    assert hidden_state((t, torch.ones(1))) is t
    assert hidden_state([t]) is t
    assert hidden_state({"last_hidden_state": t, "hidden_states": torch.ones(1)}) is t
    assert hidden_state({"hidden_states": t}) is t
    assert hidden_state({"hidden_states": (t,)}) is None  # a tuple of all layers is not the state
    assert hidden_state((None, t)) is None
    assert hidden_state("text") is None


def test_a_result_without_a_hidden_state_is_a_block_error() -> None:
    class Bad(nn.Module):
        def forward(self, x: torch.Tensor) -> dict[str, int]:
            return {"logits": 1}

    with pytest.raises(BlockError, match=r"block 0 \(Bad\) returned dict with no tensor hidden state"):
        probe([Bad()], x64())


def test_set_modes_splits_batch_statistics_norms_from_everything_else() -> None:
    net = nn.Sequential(
        nn.Linear(4, 4),
        nn.BatchNorm1d(4),
        nn.Dropout(0.5),
        nn.Sequential(nn.InstanceNorm1d(4, track_running_stats=True), nn.LayerNorm(4)),
    )
    set_modes(net, norm_train=True, dropout_train=False)
    assert [m.training for m in net.modules()] == [False, False, True, False, False, True, False]
    set_modes(net, norm_train=False, dropout_train=True)
    assert [m.training for m in net.modules()] == [True, True, False, True, True, False, True]


def test_probe_seeds_refuses_a_stack_it_would_call_wrongly() -> None:
    from stability import probe_seeds

    stack = Stack(blocks=nn.ModuleList([Mul(1.0)]), call_kwargs={"scale": 2.0})
    with pytest.raises(TypeError, match="probe a stability.Stack with call_kwargs or a stem with probe"):
        probe_seeds([stack], [x64()])
