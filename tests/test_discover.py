"""stability/families/discover.py on toy models whose answers are known by construction: the
longest chained run of shape-preserving blocks, transitions at shape changes, the refusals of
explicit blocks that are not one run (a shape change, a second call, something in between), and
the ties (a class the library marks, then the first to run); a block fed an earlier block's output
is not on the chain."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from stability.families.discover import DiscoveryError, discover, hidden_argument


class Res(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.f = nn.Linear(c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.f(x)


class Widen(nn.Module):
    """c → 2c: a stage's first block."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.f = nn.Linear(c, 2 * c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.f(x)


class Stage(nn.Module):
    def __init__(self, c: int, n: int, widen: bool) -> None:
        super().__init__()
        self.layers = nn.Sequential(*([Widen(c)] if widen else []), *[Res(2 * c if widen else c) for _ in range(n)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class Net(nn.Module):
    """A stem, then stages of 2 and 3 Res blocks (the second after a Widen), then a head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(4, 4)
        self.stages = nn.ModuleList([Stage(4, 2, False), Stage(4, 3, True)])
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for stage in self.stages:
            x = stage(x)
        return self.head(x)


X = torch.randn(3, 4)


def test_the_longest_shape_preserving_run_is_chosen_and_every_stage_of_its_class_is_listed() -> None:
    found = discover(Net(), X)
    assert found.blocks.names == ("stages.1.layers.1", "stages.1.layers.2", "stages.1.layers.3")
    assert found.blocks.shape == (3, 8) and found.blocks.describe() == "stages.1.layers.1..3 (3 x Res)"
    assert [s.names for s in found.stages] == [("stages.0.layers.0", "stages.0.layers.1"), found.blocks.names]
    assert "stages.1.layers.0 (Widen) maps (3, 4) to (3, 8)" in found.transitions
    assert (
        "stages.1 (Stage) maps (3, 4) to (3, 8)" in found.transitions
    )  # the stages themselves are a run of 2 with a shape change


def test_explicit_blocks_across_a_shape_change_are_refused_naming_it() -> None:
    with pytest.raises(
        DiscoveryError, match=r"stages.1 \(Stage\) maps \(3, 4\) to \(3, 8\).*probe one stage at a time, e.g. stages.0"
    ):
        discover(Net(), X, blocks="stages")
    with pytest.raises(DiscoveryError, match=r"Widen\) maps \(3, 4\) to \(3, 8\)"):
        discover(Net(), X, blocks="stages.1.layers")
    found = discover(Net(), X, blocks="stages.1.layers[1:]")  # the stage after its transition
    assert found.blocks.names == ("stages.1.layers.1", "stages.1.layers.2", "stages.1.layers.3")
    net = Net()
    assert discover(net, X, blocks=list(net.stages[0].layers)).blocks.names == (
        "stages.0.layers.0",
        "stages.0.layers.1",
    )


def test_explicit_blocks_that_are_not_a_container_or_not_in_the_model_are_refused() -> None:
    with pytest.raises(DiscoveryError, match="has no submodule 'stages.7'"):
        discover(Net(), X, blocks="stages.7")
    with pytest.raises(DiscoveryError, match="is a Linear, not an nn.ModuleList or nn.Sequential"):
        discover(Net(), X, blocks="stem")
    with pytest.raises(DiscoveryError, match="Res is not part of the model"):
        discover(Net(), X, blocks=[Res(4)])


class Shared(nn.Module):
    """ALBERT's way: one layer called three times, listed once."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.ModuleList([Res(4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(3):
            x = self.layer[0](x)
        return x


class Between(nn.Module):
    """Something runs between two blocks: they are not one chain."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Res(4) for _ in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers[0](x)
        x = self.layers[1](x * 2)
        return self.layers[2](x)


def test_a_block_run_twice_or_a_tensor_from_elsewhere_breaks_the_run() -> None:
    with pytest.raises(DiscoveryError, match=r"layer.0 \(Res\) ran 3 times in one forward"):
        discover(Shared(), X, blocks="layer")
    with pytest.raises(DiscoveryError, match=r"layers.1 \(Res\) does not take the tensor layers.0 returned"):
        discover(Between(), X, blocks="layers")
    assert discover(Between(), X).blocks.names == ("layers.1", "layers.2")  # the longest chained piece


def test_no_container_of_blocks_is_a_one_line_error() -> None:
    with pytest.raises(DiscoveryError, match="holds no nn.ModuleList or nn.Sequential of blocks; name its blocks"):
        discover(nn.Linear(4, 4), X)


class Marked(nn.Module):
    """Two runs of one block each: the class the library marks as a block wins the tie."""

    _no_split_modules = ["Res"]

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Sequential(nn.Tanh())
        self.h = nn.ModuleList([Res(4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.h[0](self.first(x))


def test_ties_go_to_the_marked_class_then_to_the_first_to_run() -> None:
    assert discover(Marked(), X).blocks.names == ("h.0",)
    Marked._no_split_modules = []
    try:
        assert discover(Marked(), X).blocks.names == ("h.0",)  # then the container named like one (h)
    finally:
        Marked._no_split_modules = ["Res"]
    two = nn.Sequential(nn.Sequential(Res(4), Res(4)), nn.Sequential(Res(4), Res(4)))
    assert discover(two, X).blocks.names == ("0.0", "0.1")  # encoder before decoder


def test_the_trace_puts_back_the_training_flags_and_the_generator() -> None:
    net = Net().train()
    net.stages[0].eval()
    state = torch.random.get_rng_state()
    discover(net, X)
    assert net.training and not net.stages[0].training and net.stages[1].training
    assert torch.equal(torch.random.get_rng_state(), state)


class Keyword(nn.Module):
    def forward(self, *, hidden_states: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return hidden_states * scale


def test_the_hidden_state_is_the_first_positional_tensor_or_the_first_parameters_keyword() -> None:
    t = torch.ones(2)
    assert hidden_argument(Res(2), (t,), {}) == 0
    assert hidden_argument(Keyword(), (), {"hidden_states": t, "scale": 2.0}) == "hidden_states"
    assert hidden_argument(Res(2), (), {"x": t}) == "x"  # Res.forward's first parameter
    assert hidden_argument(Res(2), (None,), {"mask": t}) is None


class FedFromEarlier(nn.Module):
    """layers.2 takes what layers.0 returned, not layers.1's output: 0 → 1 is a chain, 2 is not on it."""

    def __init__(self, n: int = 4) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Res(4) for _ in range(n)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.layers[0](x)
        b = self.layers[1](a)
        c = self.layers[2](a)  # an earlier block's output
        out: torch.Tensor = self.layers[3](c) + b
        return out


def test_a_block_fed_an_earlier_blocks_output_is_not_in_the_chain() -> None:
    x = torch.randn(3, 4)
    with pytest.raises(DiscoveryError, match=r"layers.2 \(Res\) does not take the tensor layers.1 returned"):
        discover(FedFromEarlier(), x, blocks="layers")
    found = discover(FedFromEarlier(), x)
    assert found.blocks.names in (
        ("layers.0", "layers.1"),
        ("layers.2", "layers.3"),
    )  # a chain of two, never three or four
    assert len(found.blocks.modules) == 2
    assert sorted(s.names for s in found.stages) == [("layers.0", "layers.1"), ("layers.2", "layers.3")]
