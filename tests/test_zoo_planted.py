"""The zoo's calibrated bands catch the init bugs they are there for: each bug is planted in the
model the library builds (the init the spec names, then one rule broken), and the spec's own
`residual_stream` fails on it at a ci case while it holds on the healthy model at the same case.

- GPT-2 without the depth scale of its residual projections (c_proj drawn at N(0, 0.02²) instead of
  N(0, 0.02²/(2N)), Radford et al. 2019): the output variance grows with the depth;
- Llama with its token embedding at std 1 instead of initializer_range 0.02: the entry factor;
- ConvNeXt (transformers and timm) with its layer scale at 1 instead of 1e-6: the block change;
- Gemma with its (1 + w) RMSNorm weights at w = 1 instead of 0: every branch doubled.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch
from shipped_support import require_shipped_libraries
from spec_support import ZOO
from torch import nn

from stability.spec.load import load_spec

warnings.filterwarnings("ignore", message="Failed to load image Python extension")


def _c_proj_unscaled(model: nn.Module) -> None:
    std = model.config.initializer_range  # type: ignore[union-attr]
    for name, p in model.named_parameters():
        if name.endswith("c_proj.weight"):
            p.data.normal_(0.0, std)


def _embedding_std_one(model: nn.Module) -> None:
    model.get_input_embeddings().weight.data.normal_(0.0, 1.0)  # type: ignore[operator]


def _layer_scale_one(model: nn.Module) -> None:
    for name, p in model.named_parameters():
        if name.endswith(("layer_scale_parameter", "gamma")):
            p.data.fill_(1.0)


def _offset_norms_at_one(model: nn.Module) -> None:
    for m in model.modules():
        if type(m).__name__.endswith("RMSNorm"):
            m.weight.data.fill_(1.0)  # type: ignore[operator]


PLANTED: list[tuple[str, str, Callable[[nn.Module], None]]] = [
    ("gpt2", "depth=4", _c_proj_unscaled),
    ("gpt2", "depth=2", _c_proj_unscaled),
    ("llama", "depth=2", _embedding_std_one),
    ("convnext", "depth=2", _layer_scale_one),
    ("timm_convnext", "depth=2", _layer_scale_one),
    ("gemma", "depth=2", _offset_norms_at_one),
]
#: Judged nightly only: the slowest model of the list (its planted bug is caught in the default suite by
#: tests/test_corpus_planted.py's gemma entry).
SLOW = {("gemma", "depth=2"), ("llama", "depth=2")}  # the longest builds; gpt2 and both ConvNeXts stay


def _judge(spec_name: str, case_text: str) -> object:
    from stability.run.probing import measure_case
    from stability.spec.case import parse_case_string
    from stability.spec.registry import INVARIANTS

    spec = load_spec(ZOO / f"{spec_name}.toml")
    m = measure_case(spec, parse_case_string(case_text, spec))
    return INVARIANTS.get("residual_stream").judge(m, spec.expect.residual_stream)


@pytest.mark.parametrize(
    ("spec_name", "case_text", "plant"),
    [pytest.param(*row, marks=[pytest.mark.slow] if row[:2] in SLOW else []) for row in PLANTED],
    ids=[f"{s}-{c}-{p.__name__.strip('_')}" for s, c, p in PLANTED],
)
def test_the_calibrated_spec_fails_on_the_planted_bug_and_holds_without_it(
    monkeypatch: pytest.MonkeyPatch, spec_name: str, case_text: str, plant: Callable[[nn.Module], None]
) -> None:
    require_shipped_libraries()
    from stability.families import library_build

    healthy = _judge(spec_name, case_text)
    assert healthy.passed, healthy.detail  # type: ignore[attr-defined]
    construct = library_build.construct

    def planted(target: object, config: object) -> nn.Module:
        model = construct(target, config)  # type: ignore[arg-type]
        with torch.no_grad():
            plant(model)
        return model

    monkeypatch.setattr(library_build, "construct", planted)
    library_build._FACTORS.clear()  # the init rule reads the planted init too, as it would a shipped bug
    broken = _judge(spec_name, case_text)
    library_build._FACTORS.clear()
    assert not broken.passed, broken.detail  # type: ignore[attr-defined]
