"""stability/measure/forward.py on toy models whose numbers are known in closed form: the model's
own forward drives the pass (the hidden state replaced positionally or by keyword, the side
arguments of every block left as the model passes them), it stops at the last block, records no
graph before block 0, refuses a call out of order or a shape change with a one-line BlockError,
and puts back the model's buffers."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from stability.errors import BlockError
from stability.families.discover import Blocks, ModelRun, discover
from stability.measure.forward import lesion_changes_in_model, probe_model


class Scale(nn.Module):
    """h ↦ a·h + bias (the bias a side argument the model passes): Jacobian a·I."""

    def __init__(self, a: float) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.tensor(a))

    def forward(self, hidden_states: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return self.a * hidden_states + bias


class Model(nn.Module):
    """embed ↦ blocks (each gets the model's own `bias`, by keyword when `keyword`) ↦ a head that must never run."""

    def __init__(self, scales: list[float], *, keyword: bool = False) -> None:
        super().__init__()
        self.embed = nn.Linear(3, 4)
        self.layers = nn.ModuleList([Scale(a) for a in scales])
        self.keyword = keyword
        self.head_ran = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        bias = torch.full_like(h, 0.5)
        for layer in self.layers:
            h = layer(hidden_states=h, bias=bias) if self.keyword else layer(h, bias)
        self.head_ran = True
        return h.sum()


X = torch.randn(2, 3, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("keyword", [False, True])
def test_the_gradient_is_the_product_of_the_blocks_gains_and_nothing_after_the_last_block_runs(keyword: bool) -> None:
    model = Model([2.0, 0.5, 3.0], keyword=keyword)
    found = discover(model, X).blocks  # (its trace runs the whole model)
    model.head_ran = False
    m = probe_model(model, X, loss="sum", blocks=found)
    assert not model.head_ran  # the pass stopped at the last block's output
    # ∂(Σ y)/∂h_l = Π_{k ≥ l} a_k · 1, a (2, 4) tensor of ones: norm √8 · Π a_k.
    assert m.grad_norm == pytest.approx([math.sqrt(8) * g for g in (3.0, 1.5, 3.0, 1.0)], rel=1e-6, abs=0.0)
    h0 = model.embed(X).detach()
    expected = [h0, 2 * h0 + 0.5, (2 * h0 + 0.5) * 0.5 + 0.5, ((2 * h0 + 0.5) * 0.5 + 0.5) * 3 + 0.5]
    assert m.act_var == pytest.approx([float(h.var(unbiased=False)) for h in expected], rel=1e-5, abs=0.0)
    assert sorted(m.param_grad_norm) == ["0.a", "1.a", "2.a"]  # the blocks' parameters, by place; not the embedding's


def test_a_single_block_is_both_the_leaf_and_the_stop() -> None:
    model = Model([2.0])
    m = probe_model(model, X, loss="sum")
    assert m.grad_norm == pytest.approx([2 * math.sqrt(8), math.sqrt(8)], rel=1e-6, abs=0.0)


def test_a_forward_that_fails_in_the_trace_is_a_block_error_of_that_case() -> None:
    with pytest.raises(
        BlockError,
        match=r"^the forward of Model failed on its inputs: RuntimeError: mat1 and mat2 shapes cannot be multiplied",
    ):
        probe_model(Model([1.0]), torch.randn(2, 5))


def test_the_model_runs_without_a_graph_before_block_0() -> None:
    model = Model([1.0, 1.0])
    seen: list[bool] = []
    model.embed.register_forward_hook(lambda mod, a, out: seen.append(out.requires_grad))
    probe_model(model, X)
    assert seen == [False, False]  # the trace, then the pass: the embedding recorded no graph


def test_a_shape_change_between_probed_boundaries_is_a_block_error_naming_it() -> None:
    class Grow(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 6), nn.Linear(6, 6)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = layer(x)
            return x

    net, x = Grow(), torch.randn(2, 4)
    forged = Blocks(
        modules=tuple(net.layers), names=("layers.0", "layers.1", "layers.2"), shape=(2, 4)
    )  # as if discovery had missed the change
    with pytest.raises(
        BlockError, match=r"block 2 \(Linear, layers.2\) got a hidden state of shape \(2, 6\), block 0 got \(2, 4\)"
    ):
        probe_model(net, x, blocks=forged)
    found = discover(net, x)  # discovery itself never takes it
    assert found.blocks.names == ("layers.0",) and found.transitions == ("layers.1 (Linear) maps (2, 4) to (2, 6)",)


def test_a_block_out_of_order_or_a_forward_that_stops_early_is_a_block_error() -> None:
    model = Model([1.0, 1.0, 1.0])
    swapped = Blocks(modules=(model.layers[1], model.layers[0]), names=("layers.1", "layers.0"), shape=(2, 4))
    with pytest.raises(BlockError, match=r"block 1 \(Scale, layers.0\) was called when block 0 was due"):
        probe_model(model, X, blocks=swapped)
    extra = Blocks(
        modules=(*model.layers, nn.Identity()), names=("layers.0", "layers.1", "layers.2", "other"), shape=(2, 4)
    )
    with pytest.raises(BlockError, match=r"returned before block 3 of 4"):
        probe_model(model, X, blocks=extra)


def test_a_model_that_raises_is_a_block_error_with_its_message() -> None:
    class Broken(Model):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.layers[0](self.embed(x), torch.zeros(2, 4))
            raise ValueError("no  mask\nhere")

    found = discover(Model([1.0]), X).blocks
    model = Broken([1.0, 1.0])
    with pytest.raises(BlockError, match=r"^the forward of Broken failed: ValueError: no mask here$"):
        probe_model(
            model,
            X,
            blocks=Blocks(
                modules=(model.layers[0], model.layers[1]), names=("layers.0", "layers.1"), shape=found.shape
            ),
        )


def test_buffers_and_flags_of_the_whole_model_are_put_back() -> None:
    class Norms(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.BatchNorm1d(4)  # before block 0: updated by a training-mode pass too
            self.layers = nn.Sequential(nn.BatchNorm1d(4), nn.BatchNorm1d(4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layers(self.stem(x))

    net = Norms().train()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    probe_model(net, torch.randn(5, 4) * 3 + 1)
    assert net.training and all(torch.equal(before[k], v) for k, v in net.state_dict().items())


class Doubling(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        return 2 * x, None


class Twice(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Doubling() for _ in range(n)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)[0]
        return x + 1  # a head after the blocks: never runs in the probe


def test_the_lesion_of_a_doubling_block_is_one_half() -> None:
    model, x = Twice(3), torch.randn(2, 4)
    run = ModelRun(model=model, inputs=x, blocks=discover(model, x).blocks)
    # y = 8x; without block l, y = 4x: |8x - 4x| / |8x| = 1/2 for every block (the tuple's other elements are kept)
    assert lesion_changes_in_model(run) == pytest.approx([0.5, 0.5, 0.5], rel=1e-12, abs=0.0)
