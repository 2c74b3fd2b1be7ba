"""The mechanisms of the shipped initialisation bugs (benchmarks/corpus.toml), planted into the
installed release's model: each family's zoo spec, judged on one case, holds on the model as the
library builds it and fails once the same bug is planted (the init method patched as the buggy
release had it, nothing downloaded). tests/test_corpus.py judges the real releases (`-m slow`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

from stability import load_spec
from stability.families import library_build
from stability.run.engine import RunOptions, run_spec
from tests.shipped_support import require_shipped_libraries


@dataclass(frozen=True)
class Plant:
    """A corpus bug's mechanism: the zoo spec it belongs to, the case it is judged on, and how to plant it."""

    bug: str  # the corpus entry (benchmarks/corpus.toml) whose mechanism this is
    spec: str
    case: str
    plant: Callable[[pytest.MonkeyPatch], None]


def _gpt2_unscaled_c_proj(mp: pytest.MonkeyPatch) -> None:
    """transformers 5.0-5.14: the 1/√(2N) init of every c_proj never ran, leaving N(0, initializer_range²)."""
    from transformers.models.gpt2 import modeling_gpt2 as m

    shipped = m.GPT2PreTrainedModel._init_weights

    def buggy(self: m.GPT2PreTrainedModel, module: torch.nn.Module) -> None:
        shipped(self, module)
        if isinstance(module, (m.GPT2Attention, m.GPT2MLP)):
            with torch.no_grad():
                module.c_proj.weight.normal_(0.0, self.config.initializer_range)

    mp.setattr(m.GPT2PreTrainedModel, "_init_weights", buggy)


def _gemma_norms_at_one(module_name: str, class_name: str) -> Callable[[pytest.MonkeyPatch], None]:
    """transformers 4.5x-4.56: every (1 + w) RMSNorm weight filled with 1 (a scale of 2) instead of 0."""

    def plant(mp: pytest.MonkeyPatch) -> None:
        import importlib

        cls = getattr(importlib.import_module(module_name), class_name)
        shipped = cls._init_weights

        def buggy(self: torch.nn.Module, module: torch.nn.Module) -> None:
            shipped(self, module)
            if "RMSNorm" in type(module).__name__:
                with torch.no_grad():
                    module.weight.fill_(1.0)

        mp.setattr(cls, "_init_weights", buggy)

    return plant


def _timm_layer_scale_at_one(mp: pytest.MonkeyPatch) -> None:
    """timm 1.0.21: LayerScale.reset_parameters set gamma to ones, ignoring init_values."""
    from timm.layers import layer_scale

    for cls in (layer_scale.LayerScale, layer_scale.LayerScale2d):
        mp.setattr(cls, "reset_parameters", lambda self: torch.nn.init.ones_(self.gamma))


def _mamba_linears_at_torch_default(mp: pytest.MonkeyPatch) -> None:
    """transformers before 4.54: the mixer's in_proj and x_proj never initialised by _init_weights,
    left at PyTorch's U(±1/√fan-in) instead of N(0, initializer_range²)."""
    from transformers.models.mamba import modeling_mamba as m

    built = m.MambaMixer.__init__
    shipped = m.MambaPreTrainedModel._init_weights

    def mixer(self: torch.nn.Module, *args: object, **kwargs: object) -> None:
        built(self, *args, **kwargs)
        for linear in (self.in_proj, self.x_proj):
            linear.stability_left_at_default = True  # type: ignore[union-attr]

    def buggy(self: torch.nn.Module, module: torch.nn.Module) -> None:
        shipped(self, module)
        for linear in (module, *module.children()):  # whichever of the mixer and its linears comes last
            if isinstance(linear, torch.nn.Linear) and getattr(linear, "stability_left_at_default", False):
                with torch.no_grad():
                    linear.reset_parameters()

    mp.setattr(m.MambaMixer, "__init__", mixer)
    mp.setattr(m.MambaPreTrainedModel, "_init_weights", buggy)


PLANTS = [
    Plant(
        "gpt2-c-proj-depth-scaling",
        "specs/zoo/gpt2.toml",
        "depth=2,width=128,batch=2,seed=0,tokens=8",
        _gpt2_unscaled_c_proj,
    ),
    Plant(
        "gemma-rmsnorm-offset",
        "specs/zoo/gemma.toml",
        "depth=2,width=256,batch=2,seed=0,tokens=8",
        _gemma_norms_at_one("transformers.models.gemma.modeling_gemma", "GemmaPreTrainedModel"),
    ),
    Plant(
        "gemma2-rmsnorm-offset",
        "specs/zoo/gemma2.toml",
        "depth=2,width=256,batch=2,seed=0,tokens=8",
        _gemma_norms_at_one("transformers.models.gemma2.modeling_gemma2", "Gemma2PreTrainedModel"),
    ),
    Plant(
        "timm-layerscale-init-values",
        "specs/zoo/timm_deit3.toml",
        "depth=2,width=128,batch=2,seed=0",
        _timm_layer_scale_at_one,
    ),
    Plant(
        "mamba-missing-linear-init",
        "specs/zoo/mamba.toml",
        "depth=2,width=128,batch=2,seed=0,tokens=8",
        _mamba_linears_at_torch_default,
    ),
]

#: Planted bugs the zoo spec does not catch yet, each with why
#: (a strict xfail: it fails the day the spec catches the bug).
NOT_YET_CAUGHT: dict[str, str] = {}


def _judge(path: str, case: str) -> dict[str, str]:
    """Every expectation of the spec judged on `case`: the message of each one not met, by name."""
    result = run_spec(load_spec(path), RunOptions(profile="ci"), case=case)
    return {r.name: r.message for r in result.results if not r.met}


#: Planted bugs judged nightly only (a gemma2 model is as slow as gemma's and plants the same bug).
SLOW_PLANTS = {"gemma2-rmsnorm-offset", "gemma-rmsnorm-offset"}  # the two Gemma models: the longest builds


def _params(plants: list[Plant]) -> list[object]:
    return [
        pytest.param(
            p,
            id=p.bug,
            marks=(
                [pytest.mark.xfail(strict=True, raises=AssertionError, reason=NOT_YET_CAUGHT[p.bug])]
                if p.bug in NOT_YET_CAUGHT
                else []
            )
            + ([pytest.mark.slow] if p.bug in SLOW_PLANTS else []),
        )
        for p in plants
    ]


@pytest.mark.parametrize("plant", _params(PLANTS))
def test_the_zoo_spec_holds_as_shipped_and_fails_with_the_bug_planted(
    plant: Plant, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_shipped_libraries()
    monkeypatch.setattr(library_build, "_FACTORS", {})  # the init rule's factors read off the model as built
    healthy = _judge(plant.spec, plant.case)
    # not an AssertionError: a strict xfail of a plant the spec misses must not hide a spec failing the healthy model
    if healthy:
        pytest.fail(f"{plant.spec} at {plant.case}, as the library builds it: {healthy}")
    monkeypatch.setattr(library_build, "_FACTORS", {})
    plant.plant(monkeypatch)
    planted = _judge(plant.spec, plant.case)
    assert planted, f"{plant.spec} at {plant.case} with {plant.bug} planted: every expectation still met"


def test_every_plant_is_a_corpus_bug() -> None:
    from benchmarks.corpus import load_bugs

    bugs = {b.id: b.spec for b in load_bugs()}
    assert {p.bug: p.spec for p in PLANTS} == bugs  # one plant per corpus bug, on that bug's spec
