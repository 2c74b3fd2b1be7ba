"""The zoo at shipped size (benchmarks/shipped_scale.py, docs/zoo.md "At shipped size"): every zoo
spec has its checkpoint's size, the spec written at that size loads, and the model it builds is the
checkpoint's, parameter for parameter (counts of the released models, each from its model card or
a fresh `AutoModel` of its config)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from shipped_support import require_shipped_libraries
from spec_support import ROOT

from benchmarks.shipped_scale import BEGIN, END, SHIPPED, _merge, _parameters, shipped_spec
from stability.families.library_family import library_model
from stability.spec.load import load_spec

ZOO = sorted(p.stem for p in (ROOT / "specs" / "zoo").glob("*.toml"))

#: Parameters of the released model the spec names (its base model class, no head; tied weights once).
RELEASED = {
    "bert": 109_482_240,  # bert-base-uncased, BertModel with its pooler
    "gpt2": 124_439_808,  # gpt2
    "roberta": 124_645_632,  # roberta-base, RobertaModel with its pooler
    "llama": 1_235_814_400,  # Llama-3.2-1B (1.24 B, embeddings tied)
    "qwen2": 494_032_768,  # Qwen2-0.5B (0.49 B, embeddings tied)
    "mistral": 7_241_732_096 - 32000 * 4096,  # Mistral-7B-v0.1 (7.24 B) less its untied lm_head
}


def test_every_zoo_spec_has_its_checkpoints_size_and_a_row_in_docs_zoo_md() -> None:
    assert sorted(SHIPPED) == ZOO
    text = (ROOT / "docs" / "zoo.md").read_text()
    table = text.split(BEGIN, 1)[1].split(END, 1)[0]
    rows = re.findall(r"^\| \[[^\]]+\]\(\.\./specs/zoo/(\w+)\.toml\)", table, flags=re.M)
    assert sorted(rows) == ZOO


def test_a_spec_value_keeps_its_placeholders_and_takes_the_checkpoints_numbers() -> None:
    assert _merge("depth", 12) == "depth"
    assert _merge(64, 30522) == 30522
    assert _merge(None, 512) == 512
    assert _merge(["depth", 1], [3, 3, 9, 3]) == ["depth", 3, 9, 3]
    assert _merge(["width", "2*width"], [96, 192, 384, 768]) == ["width", "2*width", 384, 768]


@pytest.mark.parametrize("stem", ZOO)
def test_the_spec_at_shipped_size_loads(stem: str, tmp_path: Path) -> None:
    require_shipped_libraries()
    text, row = shipped_spec(stem)
    path = tmp_path / f"{stem}.toml"
    path.write_text(text)
    spec = load_spec(path)
    assert spec.space.batch[0] == 1 and spec.space.depth[0] == SHIPPED[stem][2]
    declared = {name for name, value in spec.expect if value is not None}
    assert declared and declared <= {"init_conformance", "rank_collapse"}
    assert spec.probe.ensemble == 1
    lib = library_model(spec)
    assert (lib.scale == "shipped") == row["streamed"] == (lib.target.library == "transformers")


@pytest.mark.parametrize("stem", sorted(RELEASED))
def test_the_model_at_shipped_size_is_the_released_one(stem: str, tmp_path: Path) -> None:
    require_shipped_libraries()
    path = tmp_path / f"{stem}.toml"
    path.write_text(shipped_spec(stem)[0])
    assert _parameters(path) == RELEASED[stem]
