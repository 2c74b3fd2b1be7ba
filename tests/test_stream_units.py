"""The streamer's bookkeeping on a three-block toy model with a library-style `_init_weights`, and
the streamed estimate's closed form (stability/families/library_stream.py): unit-sized, beside
tests/test_library_stream.py, which probes real transformers models streamed and whole."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from stability.families.library_stream import Streamer, block_seed, estimate_bytes, init_whole


class Toy(nn.Module):
    """Three linear blocks, initialised as a transformers model is: `_init_weights` per module."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

    def _init_weights(self, m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            m.weight.normal_(0.0, 0.5)
            m.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return x


def _streamer() -> tuple[Toy, Streamer]:
    model = Toy()
    return model, Streamer(model, list(model.blocks), seed=7, device=torch.device("cpu"))


def _held(block: nn.Module) -> int:
    return sum(p.untyped_storage().nbytes() for p in block.parameters())


def test_each_block_and_the_rest_have_seeds_of_their_own_so_blocks_differ() -> None:
    seeds = {block_seed(7, i) for i in (0, 1, 2, "rest")}
    assert len(seeds) == 4 and block_seed(7, 1) == block_seed(7, 1) and block_seed(8, 1) != block_seed(7, 1)
    model, streamer = _streamer()
    streamer.materialise(0)
    first = model.blocks[0].weight.detach().clone()
    streamer.materialise(1)
    assert not torch.equal(first, model.blocks[1].weight)


def test_a_block_is_visited_once_and_the_peak_counts_the_most_blocks_held_at_once() -> None:
    model, streamer = _streamer()
    visits: list[int] = []
    streamer.first_visit.append(lambda params: visits.append(len(params)))
    streamer.materialise(0)
    streamer.materialise(1, keep=(0,))
    assert streamer.live == {0, 1} and streamer.peak_live == 2
    streamer.materialise(2)  # releases 0 and 1
    assert streamer.live == {2} and _held(model.blocks[0]) == 0 and streamer.peak_live == 2
    streamer.materialise(0)
    assert visits == [2, 2, 2] and streamer.materialisations == 4  # block 0 made twice, visited once


def test_reading_every_parameter_leaves_no_block_held() -> None:
    model, streamer = _streamer()
    names = [n for n, _ in streamer.named_parameters()]
    assert names == [n for n, _ in model.named_parameters()]
    assert streamer.live == set() and all(_held(b) == 0 for b in model.blocks)


def test_a_block_discovery_cannot_trace_on_meta_runs_for_real() -> None:
    class ReadsBack(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = super().forward(x)
            return y if float(y.abs().sum()) >= 0 else -y  # a number read back: no meta tensor gives it

    model = Toy()
    model.blocks[1] = ReadsBack(4, 4)
    streamer = Streamer(model, list(model.blocks), seed=7, device=torch.device("cpu"))
    with streamer.tracing_shapes(), torch.no_grad():
        out = model(torch.ones(2, 4))
    assert isinstance(out, torch.Tensor) and out.shape == (2, 4) and streamer.live == set()


def test_the_streamed_model_is_the_whole_model_init_whole_draws() -> None:
    model, streamer = _streamer()
    whole = Toy()
    init_whole(whole, list(whole.blocks), 7)
    for i in range(3):
        streamer.materialise(i)
        assert torch.equal(model.blocks[i].weight, whole.blocks[i].weight)


def test_the_streamed_estimate_is_its_closed_form() -> None:
    """The parts outside the blocks, two blocks, each block's input, the larger of one block's
    saved tensors and the first depth's (the embedding's with them), and the backward's largest
    gradient and activation each with its norm's copy."""
    one = SimpleNamespace(params=1000, saved=300, largest_param=40, largest_saved=30)
    two = SimpleNamespace(params=1600, saved=500, largest_param=50, largest_saved=20)
    block, rest, saved, work = 600, 400, max(500 - 300, 300), 2 * 50 + 2 * 30
    assert estimate_bytes(one, two, depth=8, hidden_bytes=16) == rest + 2 * block + 8 * 16 + saved + work
    # a model that builds from depth 2 (`least`): its first footprint holds two blocks
    assert estimate_bytes(one, two, depth=8, hidden_bytes=16, least=2) == 0 + 2 * block + 8 * 16 + saved + work


def test_the_streamed_blocks_are_every_marked_run_or_the_named_container_s_children() -> None:
    transformers = pytest.importorskip("transformers")
    from stability.families.library_stream import _streamed_blocks

    bart = transformers.BartModel(
        transformers.BartConfig(
            d_model=8,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=8,
            decoder_ffn_dim=8,
            vocab_size=16,
            max_position_embeddings=8,
        )
    )
    got = _streamed_blocks(bart, None, "transformers:BartModel")
    assert got == [*bart.encoder.layers, *bart.decoder.layers]  # the encoder's and the decoder's runs
    assert _streamed_blocks(bart, "encoder.layers[0:1]", "x") == list(bart.encoder.layers)  # the slice aside
