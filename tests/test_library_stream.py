"""`scale = "shipped"`: a transformers model streamed block by block (stability/families/library_stream.py).

The streamed probe is the ordinary probe of the model's own forward with each block's storage
allocated while it runs: where the whole model fits, the same model materialised whole
(`init_whole`) and probed the ordinary way gives the same numbers (to 1e-5 relative; on the CPU
they are bit-identical), at every depth, for decoders with rotary tables and causal masks and for an
encoder with learned positions.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
import torch

pytest.importorskip("transformers")

from stability.errors import CaseError, SpecError  # noqa: E402
from stability.families.discover import discover  # noqa: E402
from stability.families.library import parse_library  # noqa: E402
from stability.families.library_build import construct  # noqa: E402
from stability.families.library_stream import _streamed_blocks, build_streamed, init_whole, streamer_of  # noqa: E402
from stability.measure.block_form import BlockFormObserver  # noqa: E402
from stability.measure.forward import probe_model  # noqa: E402
from stability.measure.init_stats import init_record  # noqa: E402

MODELS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "llama": (
        "transformers:LlamaModel",
        {
            "hidden_size": "width",
            "intermediate_size": 160,
            "num_hidden_layers": "depth",
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 64,
        },
        {"hidden_size": 64},
    ),
    "gpt2": (
        "transformers:GPT2Model",
        {"n_embd": "width", "n_layer": "depth", "n_head": 4, "vocab_size": 64},
        {"n_embd": 48},
    ),
    "bert": (
        "transformers:BertModel",
        {
            "hidden_size": "width",
            "intermediate_size": 96,
            "num_hidden_layers": "depth",
            "num_attention_heads": 4,
            "vocab_size": 64,
            "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0,
        },
        {"hidden_size": 32},
    ),
    # An encoder and a decoder of one depth, both streamed (the library marks both layer classes):
    # discovery picks the encoder, as it does on the whole model.
    "bart": (
        "transformers:BartModel",
        {
            "d_model": "width",
            "encoder_ffn_dim": 64,
            "decoder_ffn_dim": 64,
            "encoder_layers": "depth",
            "decoder_layers": "depth",
            "encoder_attention_heads": 4,
            "decoder_attention_heads": 4,
            "vocab_size": 64,
            "max_position_embeddings": 32,
            "dropout": 0.0,
            "attention_dropout": 0.0,
            "activation_dropout": 0.0,
        },
        {"d_model": 32},
    ),
}


def _lib(name: str) -> Any:
    model, config, shipped = MODELS[name]
    return parse_library(model, config=config, shipped=shipped, scale="shipped", file="s.toml", prefix="block.")


def _close(a: Any, b: Any, path: str) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float) and math.isfinite(a):
        assert b == pytest.approx(a, rel=1e-5, abs=0.0), path
    else:
        assert a == b, path


def _pair(name: str, depth: int) -> tuple[Any, Any, Any, Any]:
    """(streamed measurements, whole measurements, streamed init record, whole init record)."""
    lib = _lib(name)
    values = {"depth": depth, "width": 16, "batch": 2, "tokens": 6}
    torch.manual_seed(11)
    built = build_streamed(lib, values, input_seed=5)
    streamer = streamer_of(built.model)
    assert streamer is not None
    streamed = probe_model(
        built.model, built.inputs, blocks=built.blocks, seed=3, rng_seed=4, observers=[BlockFormObserver()]
    )
    # each probed block once forward, once when the backward recomputes it (the probe's forward ends at
    # the last probed block: BART's decoder is never materialised)
    assert streamer.materialisations == 2 * depth
    assert streamer.peak_live <= 2
    config = {**lib.config, **lib.shipped}
    whole = construct(lib.target, {k: (depth if v == "depth" else v) for k, v in config.items()})
    found = discover(whole, built.inputs)
    assert found.blocks.names == built.blocks.names
    init_whole(whole, _streamed_blocks(whole, None, str(lib.target)), streamer.seed)
    reference = probe_model(
        whole, built.inputs, blocks=found.blocks, seed=3, rng_seed=4, observers=[BlockFormObserver()]
    )
    # the init statistics read each block where the probe first made it: only the blocks the probe
    # never ran (BART's decoder) are made for them
    never = len(streamer.blocks) - len(streamer.checked)
    streamed_init = init_record(built.model, {})
    assert streamer.materialisations == 2 * depth + never
    return streamed, reference, streamed_init, init_record(whole, {})


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("depth", [2, 4])
def test_streamed_probe_measures_what_the_whole_model_measures(name: str, depth: int) -> None:
    streamed, whole, streamed_init, whole_init = _pair(name, depth)
    for f in dataclasses.fields(streamed):
        _close(getattr(streamed, f.name), getattr(whole, f.name), f.name)
    assert len(streamed.grad_norm) == depth + 1
    assert streamed_init == whole_init
    # where block 0's norms sit, read during the streamed pass (its checkpointed block recomputed)
    assert streamed.extra["block_form"]["position"] == ("pre" if name in ("gpt2", "llama") else "post")


def test_a_block_is_the_same_tensor_every_time_it_is_materialised() -> None:
    torch.manual_seed(0)
    built = build_streamed(_lib("llama"), {"depth": 3, "width": 16, "batch": 1, "tokens": 4}, input_seed=1)
    streamer = streamer_of(built.model)
    assert streamer is not None
    streamer.materialise(1)
    first = [p.detach().clone() for _, p in streamer.params[1]]
    streamer.release_all()
    assert all(p.untyped_storage().nbytes() == 0 for _, p in streamer.params[1])
    streamer.materialise(1)
    assert all(torch.equal(a, p) for a, (_, p) in zip(first, streamer.params[1], strict=True))
    streamer.materialise(2)  # another block: block 1 released
    assert streamer.live == {2}


def _held_bytes(model: torch.nn.Module) -> int:
    """The bytes of the parameters and buffers whose storage is allocated now (each tensor once)."""
    tensors = {id(t): t for t in [*model.parameters(), *model.buffers()]}.values()
    return sum(t.untyped_storage().nbytes() for t in tensors)


def _recorded(name: str, depth: int) -> tuple[Any, list[tuple[bool, int, list[int], int]]]:
    """A streamed probe at `depth` with each materialisation recorded: (recomputing, the block,
    the blocks live after it, the parameter and buffer bytes held then)."""
    lib = _lib(name)
    torch.manual_seed(11)
    built = build_streamed(lib, {"depth": depth, "width": 16, "batch": 2, "tokens": 6}, input_seed=5)
    streamer = streamer_of(built.model)
    assert streamer is not None
    seen: list[tuple[bool, int, list[int], int]] = []
    materialise = streamer.materialise

    def recording(i: int, *, keep: Any = ()) -> None:
        materialise(i, keep=keep)
        seen.append((streamer.recomputing, i, sorted(streamer.live), _held_bytes(built.model)))

    streamer.materialise = recording  # type: ignore[method-assign]
    probe_model(built.model, built.inputs, blocks=built.blocks, seed=3, rng_seed=4)
    return lib, seen


def test_the_backward_keeps_the_block_after_the_one_it_recomputes_and_no_other() -> None:
    """The forward holds one block at a time; the backward recomputes the blocks last to first and,
    while it recomputes block i, keeps block i + 1 (its backward may still be finishing) and
    releases every other: at depth 4 the live blocks are {3}, {2, 3}, {1, 2}, {0, 1}."""
    _, seen = _recorded("gpt2", 4)
    assert [(i, live) for back, i, live, _ in seen if not back] == [(0, [0]), (1, [1]), (2, [2]), (3, [3])]
    assert [(i, live) for back, i, live, _ in seen if back] == [(3, [3]), (2, [2, 3]), (1, [1, 2]), (0, [0, 1])]


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_the_streamed_estimate_holds_the_parameters_the_streamed_probe_holds_at_once(name: str) -> None:
    """`estimate_bytes`'s parameter part (the parts outside the blocks and two blocks, from the
    footprints at depths 1 and 2) is exactly the most parameter and buffer bytes the streamed
    probe held at once, measured on the model's storages at every materialisation."""
    from stability.families.library_memory import footprint
    from stability.families.library_stream import estimate_bytes

    lib, seen = _recorded(name, 4)
    whole = dataclasses.replace(lib, config={**lib.config, **lib.shipped}, shipped={})
    values = {"width": 16, "batch": 2, "tokens": 6}
    one, two = (
        dataclasses.replace(
            footprint(whole, {**values, "depth": d}, torch.float32), saved=0, largest_param=0, largest_saved=0
        )
        for d in (1, 2)
    )
    held = max(b for *_, b in seen)
    assert two.params > one.params > two.params - one.params > 0
    assert estimate_bytes(one, two, depth=4, hidden_bytes=0) == held
    assert estimate_bytes(one, two, depth=4, hidden_bytes=10) == held + 40  # one hidden state per block's input


def test_discovery_runs_no_block_arithmetic() -> None:
    torch.manual_seed(0)
    built = build_streamed(_lib("gpt2"), {"depth": 4, "width": 16, "batch": 1, "tokens": 4}, input_seed=1)
    streamer = streamer_of(built.model)
    assert streamer is not None and streamer.materialisations == 0
    assert built.blocks.names == ("h.0", "h.1", "h.2", "h.3")


def test_a_parameter_the_library_init_leaves_unset_fails_the_case() -> None:
    torch.manual_seed(0)
    built = build_streamed(_lib("llama"), {"depth": 2, "width": 16, "batch": 1, "tokens": 4}, input_seed=1)
    streamer = streamer_of(built.model)
    assert streamer is not None
    init = built.model._init_weights
    built.model._init_weights = lambda m: None if isinstance(m, torch.nn.Linear) else init(m)
    with pytest.raises(
        CaseError,
        match=r"LlamaModel._init_weights leaves self_attn.q_proj.weight, .* of block 0 unset .*scale = \"probed\"",
    ):
        streamer.materialise(0)


def test_scale_shipped_is_refused_where_it_cannot_stream() -> None:
    with pytest.raises(SpecError, match=r"block.scale.*transformers model.*timm"):
        parse_library("timm:resnet18", config={}, scale="shipped", file="s.toml", prefix="block.")
    with pytest.raises(SpecError, match=r"block.scale.*block.shipped"):
        parse_library(
            "transformers:GPT2Model",
            config={"n_embd": 32, "n_layer": 2, "n_head": 4},
            scale="shipped",
            file="s.toml",
            prefix="block.",
        )


SPEC = """
name = "tiny-streamed"
description = "a tiny Llama at scale = shipped"
family = "library"

[block]
layer = "tokens"
model = "transformers:LlamaModel"
shipped = { hidden_size = 32 }
scale = "shipped"

[block.config]
hidden_size = "width"
intermediate_size = 96
num_hidden_layers = "depth"
num_attention_heads = 4
num_key_value_heads = 2
vocab_size = 64

[space]
depth = [2, 3]
width = 16
batch = 1
tokens = 6

[probe]
ensemble = 1
ci_cases = ["depth=3"]

[expect.rank_collapse]

[expect.init_conformance]
table = "transformers"
"""


def test_a_spec_at_scale_shipped_is_judged_through_check(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from stability.cli import main

    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    (tmp_path / "s.toml").write_text(SPEC)
    monkeypatch.chdir(tmp_path)
    assert main(["check", "s.toml", "--profile", "ci", "--in-process", "--json", "out.json"]) == 0
    report = json.loads((tmp_path / "out.json").read_text())
    spec = report["specs"][0]
    assert {(i["name"], i["verdict"], i["measured"]) for i in spec["invariants"]} == {
        ("rank_collapse", "holds", True),
        ("init_conformance", "holds", True),
    }
    (record,) = spec["cases"]
    assert (
        len(record["measurements"]["grad_norm"]) == 4
    )  # the case at depth 3, at the shipped width 32 (the case's own 16 is not what is built)
    assert record["measurements"]["channels"][0] == 32
