"""A model whose init needs depth >= 2 (stability/families/library_depth.py): found from the model,
built at its smallest depth wherever the harness picks a depth itself, and never drawn below it.

transformers' RWKV is the closed form: `RwkvPreTrainedModel._init_weights` computes
`layer_id / (num_hidden_layers - 1)`, which divides by zero at one layer and at no other depth."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from spec_support import library_text, make_case

pytest.importorskip("transformers")

from stability import parse_spec  # noqa: E402
from stability.errors import SpecError  # noqa: E402
from stability.families import library_build, library_depth, library_memory  # noqa: E402
from stability.families.library import parse_library  # noqa: E402
from stability.families.library_build import init_factors  # noqa: E402
from stability.families.library_depth import least_depth, narrowed  # noqa: E402
from stability.run.engine import RunOptions, run_spec  # noqa: E402
from stability.spec.registry import FAMILIES  # noqa: E402

RWKV = {
    "hidden_size": "width",
    "num_hidden_layers": "depth",
    "attention_hidden_size": "width",
    "intermediate_size": "4*width",
    "vocab_size": 64,
    "context_length": 32,
}
VALUES = {"depth": 3, "width": 16, "batch": 2, "tokens": 4}


def _spec(depth: str, *, model: str = "transformers:RwkvModel", config: dict[str, Any] | None = None) -> Any:
    text = library_text(
        model,
        config or RWKV,
        space=f"depth = {depth}\nwidth = 16\nbatch = 2\ntokens = 4",
        probe="ensemble = 1",
        name="r",
        description="d",
    )
    return parse_spec(text, file="r.toml")


def test_rwkv_builds_from_depth_2_and_gpt2_from_depth_1() -> None:
    rwkv = least_depth(parse_library("transformers:RwkvModel", config=RWKV, file="s"), VALUES)
    assert rwkv.depth == 2 and rwkv.why == "ZeroDivisionError: division by zero"
    gpt2 = parse_library(
        "transformers:GPT2Model", config={"n_embd": "width", "n_layer": "depth", "n_head": 2}, file="s"
    )
    assert least_depth(gpt2, VALUES) == library_depth.LeastDepth(depth=1)


def test_an_init_that_leaves_a_tensor_non_finite_at_depth_1_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real build's check: at depth 1 the (stand-in) library divides a tensor by depth - 1."""

    def construct(target: Any, config: dict[str, Any]) -> torch.nn.Module:
        model = torch.nn.Linear(2, 2)
        with torch.no_grad():
            model.weight.div_(config["n_layer"] - 1)  # 0/0 and x/0: NaN and inf at one layer
        return model

    monkeypatch.setattr(library_build, "construct", construct)
    monkeypatch.setattr(library_memory, "meta_model", lambda lib, config: torch.nn.Linear(2, 2, device="meta"))
    lib = parse_library("transformers:GPT2Model", config={"n_embd": 8, "n_layer": "depth", "n_head": 2}, file="s")
    monkeypatch.setattr(library_depth, "_CACHE", {})
    assert least_depth(lib, VALUES) == library_depth.LeastDepth(depth=2, why="its init leaves weight non-finite")


def test_the_space_starts_at_the_smallest_depth_and_a_space_below_it_is_refused_in_one_line() -> None:
    assert narrowed(_spec("[1, 3]")).space.depth == (2, 3)
    assert narrowed(_spec("[2, 3]")).space.depth == (2, 3)
    gpt2 = {"n_embd": "width", "n_layer": "depth", "n_head": 2, "vocab_size": 64}
    assert narrowed(_spec("[1, 3]", model="transformers:GPT2Model", config=gpt2)).space.depth == (1, 3)
    with pytest.raises(SpecError) as info:
        narrowed(_spec("1"))
    text = str(info.value)
    assert "\n" not in text and text == (
        "r.toml: space.depth = 1: allows only depths below 2, the smallest transformers:RwkvModel builds at "
        "(at depth 1: ZeroDivisionError: division by zero); start space.depth at 2, e.g. space.depth = [2, 8]"
    )


def test_no_case_below_the_smallest_depth_is_drawn_and_each_one_runs() -> None:
    result = run_spec(_spec("[1, 3]"), RunOptions(profile="ci"))
    assert result.cases and {c.depth for c in result.cases} <= {2, 3}
    assert all(r.error is None for r in result.cases.values()), [r.error for r in result.cases.values()]


def test_the_init_rule_and_the_memory_model_build_at_the_smallest_depth() -> None:
    lib = parse_library(
        "transformers:RwkvModel",
        config=RWKV,
        shipped={"hidden_size": 64, "attention_hidden_size": 64, "intermediate_size": 256},
        file="s",
    )
    from transformers.models.rwkv.modeling_rwkv import RwkvBlock

    least = least_depth(lib, VALUES).depth
    factors = init_factors(lib, VALUES, RwkvBlock, least=least)  # at depth 1 its init raises ZeroDivisionError
    assert factors and all(math.isfinite(k) and k > 0 for k in factors.values()), factors
    case = make_case(width=16, dtype="float32", tokens=4)
    estimate = FAMILIES.get("library").estimate(_spec("[2, 3]"), case)
    assert estimate is not None and math.isfinite(estimate) and estimate > 0
