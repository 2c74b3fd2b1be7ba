"""The init each parameter actually received while its model was constructed and initialised:
what `init_conformance` reads the model's own intent from (`stability.judge.init_intent`),
recorded by `stability.measure.init_recorder` and carried with `InitRecord` across processes,
the store and the JSON report (`stability.measure.measurements.serializable`).

For each parameter (`ParameterTrace`): its final law, folded exactly from the writes it received
(`stability.measure.init_trace_law.RecordedLaw`); its value when it was registered; who wrote it
last — the **init function** (`torch.nn.init.normal_`), the **writer** (the model's code that
called it: `GPT2PreTrainedModel._init_weights`) and the line (`site`), the module whose code that
is (`scope`) — and whether that is **PyTorch's constructor default** (`phase = "default"`:
nn.Linear's kaiming_uniform_(a=√5), nn.LayerNorm's ones and zeros, nn.Embedding's N(0, 1)); its
owning module's class and the plain arguments its constructor was given (`init_values=1e-6`);
writes over part of it after its last whole write (an embedding's padding row); whether it is
trained (requires_grad). `InitTrace` adds the arguments the model's own constructor was given (a
registered timm or torchvision model's values) and the time the recorded construction took.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from stability.measure.init_trace_law import RecordedLaw
from stability.measure.measurements import serializable

__all__ = ["Partial", "ParameterTrace", "InitTrace", "Phase", "plain_arguments"]

Phase = Literal["created", "default", "init"]


@serializable
@dataclass(frozen=True, kw_only=True)
class Partial:
    """A write over part of a parameter after its last whole write: elements [start, start + numel)."""

    start: int
    numel: int
    law: RecordedLaw


@serializable
@dataclass(frozen=True, kw_only=True)
class ParameterTrace:
    """One parameter's recorded init: its final law and who wrote it (the module docstring)."""

    name: str
    law: RecordedLaw
    created: RecordedLaw  # its value when registered
    phase: Phase  # created: never written after; default: PyTorch's constructor default; init: any other writer
    writer: str  # "module:Qualname" of the last whole write ("" when nothing but its creation)
    function: str  # the init function that write happened in ("" for a bare in-place operation)
    site: str  # the writer and the line of that write ("" when none)
    scope: str | None  # the module (its name in the model, "" the model) whose code wrote it; None: not in the model
    owner: str  # its owning module's class, "module:Qualname"
    owner_leaf: bool  # its owning module holds no modules (a LayerScale, a norm, a Linear)
    owner_args: dict[str, Any]  # the plain arguments its owning module's constructor was given
    creator: str  # the code that registered it, "module:Qualname" (its owner's __init__, usually)
    requires_grad: bool
    recorded: bool = True  # False: created before the recording (its law is unknown)
    partial: tuple[Partial, ...] = ()
    history: tuple[str, ...] = ()
    scale: float = 1.0  # the scalar factor applied since its law was drawn (a depth scaling: 1/√N)
    #: Its last whole write came from code holding its owning module itself (`module.weight` in an
    #: `apply`, `m.weight` in a loop over modules), not a named part of another (`m.conv2[1].weight`).
    visited: bool = False
    #: For a vector its module created as one constant and its init left at another: whether the
    #: module's forward computes anything at the created constant (`init_trace_ops.live_at`).
    created_live: bool | None = None


@serializable
@dataclass(frozen=True, kw_only=True)
class InitTrace:
    """Every parameter's recorded init, the model's own constructor arguments and the time the
    recorded construction took (its overhead included)."""

    parameters: tuple[ParameterTrace, ...]
    model_args: dict[str, Any] = field(default_factory=dict)
    model_module: str = ""  # the module that defines the model's class
    seconds: float = 0.0

    def by_name(self) -> dict[str, ParameterTrace]:
        return {p.name: p for p in self.parameters}


def plain_arguments(values: Mapping[str, Any]) -> dict[str, Any]:
    """The numbers, booleans, strings, lists of numbers and Nones among `values` (what a rule or a
    message can read; None: passed as None, `ls_init_value=None`)."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        if v is None or isinstance(v, (bool, str)) or (isinstance(v, (int, float)) and math.isfinite(v)):
            out[k] = v
        elif (
            isinstance(v, (list, tuple))
            and v
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
        ):
            out[k] = list(v)
    return out
