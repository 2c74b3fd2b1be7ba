"""A spec's config value of an init key against the registered model's own
(stability.measure.init_registered): read, never replaced, and reported with both values in
init_conformance's verdict and under `stability check`'s table."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from stability.cli import main
from stability.families.library import resolve
from stability.measure.init_registered import overrides, registered_values


def test_an_init_key_set_to_another_value_than_the_registered_models_is_an_override() -> None:
    pytest.importorskip("transformers")
    gpt2 = resolve("transformers:GPT2Model", file="t.toml")
    (o,) = overrides(gpt2, {"n_embd": 64, "n_layer": 2, "initializer_range": 0.01, "vocab_size": 64})
    assert o.describe() == "config sets initializer_range = 0.01; transformers:GPT2Model registers 0.02"
    assert overrides(gpt2, {"n_embd": 64, "initializer_range": 0.02}) == ()  # the registered value itself
    assert overrides(gpt2, {"n_embd": 64, "vocab_size": 64}) == ()  # not an init key: set on purpose


def test_a_registered_timm_models_own_value_is_read_from_its_constructor() -> None:
    pytest.importorskip("timm")
    deit3 = resolve("timm:deit3_small_patch16_224", file="t.toml")
    config = {"img_size": 32, "patch_size": 8, "embed_dim": 64, "depth": 1, "num_heads": 1, "init_values": 1e-5}
    assert registered_values(deit3, config) == {"init_values": 1e-6}  # its registry entry's, the spec's left out
    (o,) = overrides(deit3, config)
    assert o.describe() == "config sets init_values = 1e-05; timm:deit3_small_patch16_224 registers 1e-06"
    resnet = resolve("timm:resnet18", file="t.toml")
    assert registered_values(resnet, {"layers": [1, 1, 1, 1], "zero_init_last": False}) == {"zero_init_last": True}


SPEC = """
name = "deit3-copied"
description = "a layer-scale spec copied from a neighbour: init_values is not the registered model's"
family = "library"

[block]
layer = "tokens"
model = "timm:deit3_small_patch16_224"
config = { img_size = 32, patch_size = 8, embed_dim = "width", depth = "depth", num_heads = 1, init_values = 1e-5 }

[space]
depth = 1
width = 64
batch = 2

[expect.init_conformance]
"""


def test_check_prints_the_override_under_its_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("timm")
    path = tmp_path / "deit3.toml"
    path.write_text(textwrap.dedent(SPEC), encoding="utf-8")
    assert main(["check", str(path), "--profile", "ci", "--in-process", "--case", "depth=1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "note deit3-copied: init_conformance: config sets init_values = 1e-05; timm:deit3_small_patch16_224 "
        "registers 1e-06"
    ) in out
