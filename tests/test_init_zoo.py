"""`stability init` on zoo families against their hand-calibrated specs (specs/zoo/, docs/zoo.md):
the bands it measures on the library's default or registered config overlap the zoo's and are of
the same order of magnitude, and it picks the zoo's variance exponent. Slow (a full init each, in
worker processes, as a user runs it); the lead extends it to the release corpus.

Llama is compared on what does not depend on the shipped width: `LlamaConfig()`'s default is
Llama-2-7B's (width 4096, heads of 128, SwiGLU 11008) where zoo-llama states Llama-3.2-1B's (2048,
heads of 64, 8192); the init rule gives every branch its shipped σ²·fan-in, so the entry factor and
the output's variance are larger by the wider branches (same order of magnitude, not overlapping)."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest
from spec_support import ZOO

from stability.cli import main

PAIRS = (("lo", "hi"), ("entry_lo", "entry_hi"), ("variance_lo", "variance_hi"))

FAMILIES = [
    ("transformers:GPT2Model", "gpt2.toml", "transformers", {"lo", "entry_lo", "variance_lo"}),
    ("transformers:LlamaModel", "llama.toml", "transformers", {"lo"}),
    ("timm:convnext_atto", "timm_convnext.toml", "timm", {"lo", "entry_lo", "variance_lo"}),
    ("transformers:ResNetModel", "resnet.toml", "transformers", {"lo", "entry_lo", "variance_lo"}),
]


def _middle(lo: float, hi: float) -> float:
    return math.sqrt(lo * hi)


@pytest.mark.slow
@pytest.mark.parametrize(("target", "zoo", "library", "overlapping"), FAMILIES, ids=[f[1] for f in FAMILIES])
def test_init_agrees_with_the_hand_calibrated_zoo_spec(
    target: str, zoo: str, library: str, overlapping: set[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip(library)
    out = tmp_path / zoo
    assert main(["init", target, "--out", str(out), "-q"]) == 0, capsys.readouterr()
    made = tomllib.loads(out.read_text())["expect"]["residual_stream"]
    hand = tomllib.loads((ZOO / zoo).read_text())["expect"]["residual_stream"]
    assert made["variance_exponent"] == hand.get("variance_exponent", 0.0)
    for lo, hi in PAIRS:
        a, b = (made[lo], made[hi]), (hand[lo], hand[hi])
        if lo in overlapping:
            assert a[0] <= b[1] and b[0] <= a[1], (lo, a, b)  # the two bands overlap
        ratio = _middle(*a) / _middle(*b)
        assert 0.1 < ratio < 10, (lo, a, b)  # and are of the same order of magnitude
