"""The declared intent's edges (stability/judge/init_intent.py) on tiny nn.Modules, beside
tests/test_init_intent.py: what a rule must leave alone (a vector, a zero std, one named part, a
parameter outside an init loop's scope) as much as what it flags."""

from __future__ import annotations

import math
import types
from typing import Any

import torch
from torch import nn

from stability.judge.init_intent import deviations, group_of
from stability.measure.init_recorder import InitRecorder
from stability.measure.init_stats import InitRecord, declared_config, init_record


def _record(make: Any, variables: dict[str, Any] | None = None) -> InitRecord:
    torch.manual_seed(0)
    recorder = InitRecorder()
    with recorder.recording():
        model = make()
    trace = recorder.trace(model)
    return init_record(model, {**declared_config(model, {}, trace.model_args), **(variables or {})}, trace=trace)


def _found(make: Any, variables: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    return [(d.rule, d.name) for d in deviations(_record(make, variables))]


def test_a_group_is_the_name_with_every_layer_index_as_a_star() -> None:
    assert group_of("h.12.mlp.c_proj.weight") == "h.*.mlp.c_proj.weight"
    assert group_of("0.weight") == "*.weight" and group_of("layers.3.experts[7]") == "layers.*.experts[7]"
    assert group_of("conv1.weight") == "conv1.weight"


class _Drawn(nn.Module):
    """Its init draws the weight matrix and leaves the bias at its default."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        nn.init.normal_(self.proj.weight, std=0.1)
        self.out = nn.Linear(8, 8)  # left at PyTorch's default


def test_the_declared_std_of_weight_matrices_judges_matrices_only_and_only_when_positive() -> None:
    assert _found(_Drawn, {"initializer_range": 0.1}) == [("left_at_default", "out.weight")]  # not the biases
    assert _found(_Drawn, {"initializer_range": 0.0}) == []  # a std of 0 declares no law to keep


class _OnePart(nn.Module):
    """A loop over the modules that writes one named module's weight: one group, no blanket."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        for m in self.modules():
            if m is self.a:
                nn.init.zeros_(m.weight)


def test_a_loop_that_writes_one_named_part_declares_nothing_for_the_others() -> None:
    assert _found(_OnePart) == []


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(2, 2), nn.Linear(2, 2)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.5)


class _Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.extra = nn.Linear(2, 2)  # its class's own default: no loop of its scope covers it


def test_an_init_loop_judges_the_parameters_of_its_own_scope_only() -> None:
    """Blocks h.0 … h.9 each initialise their Linears; h.10 is another class that does not, and
    "h.10" begins with "h.1" without being inside it."""
    model = lambda: nn.ModuleDict({"h": nn.ModuleList([*(_Block() for _ in range(10)), _Plain()])})  # noqa: E731
    assert _found(model) == []


class _GivenMatrix(nn.Module):
    """A module given init_values whose matrix is created from it and then drawn: not a layer scale
    (a layer scale is a vector)."""

    def __init__(self, init_values: float = 1e-5) -> None:
        super().__init__()
        self.w = nn.Parameter(init_values * torch.empty(4, 4))
        nn.init.normal_(self.w, std=0.02)


class _HalfScale(nn.Module):
    """A bfloat16 layer scale set to its value as the dtype holds it: equal up to its rounding."""

    def __init__(self, init_values: float = 1e-5) -> None:
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.empty(8, dtype=torch.bfloat16))
        nn.init.constant_(self.gamma, float(torch.tensor(init_values, dtype=torch.bfloat16)))  # 1.0014e-05


def test_a_layer_scale_is_a_vector_held_at_its_value_up_to_its_dtype() -> None:
    assert _found(_GivenMatrix) == []
    assert _found(_HalfScale) == []


_OTHER = types.ModuleType("other_init")  # generic code, in a module of its own
exec(  # noqa: S102 -- a fixed source: a function whose frames belong to another module
    "def fill_norms(model, value):\n"
    "    for m in model.modules():\n"
    "        if 'Norm' in type(m).__name__:\n"
    "            m.weight.data.fill_(value)\n",
    _OTHER.__dict__,
)


class _MaskedNorm(nn.Module):
    """A (1 + w) norm whose forward needs a mask too: whether its created 0 means anything cannot be
    told by running it alone."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x * mask * (1 + self.weight)


class _Masked(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = _MaskedNorm(4)
        _OTHER.fill_norms(self, 1.0)


def test_a_created_constant_whose_meaning_cannot_be_told_is_no_norm_offset() -> None:
    record = _record(_Masked)
    assert record.trace is not None and record.trace.by_name()["norm.weight"].created_live is None
    assert _found(_Masked) == []


_NORMS = types.ModuleType("norm_library")  # a norm defined in a library module of its own
exec(  # noqa: S102 -- a fixed source: a class whose module is not the model's
    "import torch\n"
    "from torch import nn\n"
    "class OffsetNorm(nn.Module):\n"
    "    def __init__(self, dim):\n"
    "        super().__init__()\n"
    "        self.weight = nn.Parameter(torch.zeros(dim))\n"
    "    def forward(self, x):\n"
    "        return x * (1 + self.weight)\n",
    _NORMS.__dict__,
)


class _OwnInit(nn.Module):
    """The model's own init (beside the model's class, not the norm's) sets the norm to 1: the
    model's intent, however the norm's library created it."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = _NORMS.OffsetNorm(4)
        self.norm.weight.data.fill_(1.0)


def test_the_model_s_own_init_writing_a_library_norm_is_its_intent() -> None:
    record = _record(_OwnInit)
    assert record.trace is not None and record.trace.by_name()["norm.weight"].created_live is True
    assert _found(_OwnInit) == []


class _GPT2Scaled(nn.Module):
    """GPT-2's scheme: the residual output weights ÷ √(2N) after their draw (two residual branches
    per layer), or ÷ √N; a one-layer model's 1/√1 is no scaling at all."""

    def __init__(self, layers: int, factor: float) -> None:
        super().__init__()
        self.proj = nn.ModuleList(nn.Linear(8, 8) for _ in range(layers))
        for m in self.proj:
            nn.init.normal_(m.weight, std=0.02)
            with torch.no_grad():
                m.weight *= factor


def test_depth_scaling_by_one_over_root_two_n_is_gpt2_s_and_a_single_layer_needs_none() -> None:
    config = {"rescale_prenorm_residual": True, "n_layer": 4}
    assert _found(lambda: _GPT2Scaled(4, 1 / math.sqrt(8)), config) == []
    assert _found(lambda: _GPT2Scaled(4, 1 / math.sqrt(4)), config) == []
    assert _found(lambda: _GPT2Scaled(4, 1.0), config) == [("depth_scaling", "")]
    assert _found(lambda: _GPT2Scaled(1, 1.0), {**config, "n_layer": 1}) == []


class _OneScaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Linear(8, 8, bias=False)
        with torch.no_grad():
            self.w.weight *= 0.5  # every weight scaled, by no depth's factor


def test_a_one_layer_model_is_never_asked_for_depth_scaling() -> None:
    assert _found(_OneScaled, {"rescale_prenorm_residual": True, "n_layer": 1}) == []


class _NeverSet(nn.Module):
    """A layer scale created from its value as v·empty and never written: both a layer scale not at
    its value and uninitialised memory; the first rule's deviation is the one reported."""

    def __init__(self, init_values: float = 1e-5) -> None:
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.empty(4))


def test_a_parameter_two_rules_flag_is_reported_once_by_the_first() -> None:
    assert _found(_NeverSet) == [("layer_scale", "gamma")]
