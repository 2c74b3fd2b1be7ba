"""Every parameter's statistics at initialisation, and the config its model declares: what
`init_conformance` judges (`stability.judge.init_conformance`). No forward pass: one reduction
per parameter (in float64), on the model as built.

`init_record(model, declared, rescaled)` returns an `InitRecord`, registered with
`stability.measure.measurements.serializable`, so it crosses process boundaries and the store
like every measurement:

- one `ParameterStats` per parameter (`named_parameters`: a tied weight once), with its owning
  module's class and bases (what a rule's `module` matches) and the enclosing modules' (`within`),
  its shape and fans (the init rule's, `stability.families.library_build.weight_fans`), n, mean,
  unbiased variance, min and max; an `nn.Embedding` with a `padding_idx` gives its padding row apart
  (`name[padding_idx=K]`), since the library zeroes that row: the rest of the table is then a sample
  of the declared law;
- the statistics are of the **library's init**: a parameter the harness rescaled to the shipped
  width (`stability.families.library_build`, k > 0 per parameter) is read with k divided out;
- `variables`: the model's declared config — a transformers model's `config` (its numbers and
  booleans), else the keyword defaults of its class's constructor overridden by the arguments its
  constructor was given (recorded, `InitTrace.model_args`: a registered timm or torchvision
  model's own values) and by the config the spec built it with; `model`: "library:Class" for
  the class and each base;
- `trace`: the init each parameter received, recorded while the model was constructed
  (`stability.measure.init_trace`; None, with `unrecorded` saying why, where it was not);
- `overrides`: the init-relevant keys the spec's config sets to another value than the registered
  model's own (`stability.measure.init_registered`).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from stability.families.library_build import weight_fans
from stability.families.library_stream import named_parameters_materialised, streamer_of
from stability.measure.init_trace import InitTrace
from stability.measure.measurements import serializable

__all__ = ["ParameterStats", "InitRecord", "Override", "init_record", "declared_config", "class_names"]


@serializable
@dataclass(frozen=True)
class ParameterStats:
    """One parameter's (or an embedding's padding row's) statistics at init."""

    name: str
    module: tuple[str, ...]  # the owning module's class, then its bases up to nn.Module
    within: tuple[str, ...]  # the classes (and bases) of the modules enclosing the owner, nearest first
    shape: tuple[int, ...]
    fan_in: int
    fan_out: int
    n: int
    mean: float
    var: float  # unbiased (n − 1); 0 for n = 1
    min: float
    max: float
    eps: float  # the dtype's machine epsilon
    rescaled: float = 1.0  # the harness's factor, divided out of the numbers above


@serializable
@dataclass(frozen=True, kw_only=True)
class Override:
    """A key of the init the spec's config sets to another value than the registered model's."""

    key: str
    given: Any
    registered: Any
    target: str  # the registered model ("timm:deit3_small_patch16_224")

    def describe(self) -> str:
        return f"config sets {self.key} = {self.given!r}; {self.target} registers {self.registered!r}"


@serializable
@dataclass(frozen=True)
class InitRecord:
    """What init_conformance judges: the model's classes, its declared config and every parameter."""

    model: tuple[str, ...]
    variables: dict[str, Any]
    parameters: tuple[ParameterStats, ...]
    trace: InitTrace | None = None
    unrecorded: str = ""  # why there is no trace
    overrides: tuple[Override, ...] = ()
    #: The model's classes (as in `model`) that define an init method of their own (`INIT_METHODS`).
    init_defined_by: tuple[str, ...] = ()


#: The methods a library model's class defines its init in (transformers' `_init_weights`, timm's `init_weights`).
INIT_METHODS = ("_init_weights", "init_weights")


def class_names(cls: type, library: str | None = None) -> tuple[str, ...]:
    """The class's name then its bases' (MRO order, up to nn.Module and object excluded), each as
    "library:Name" when `library` is given."""
    names = [c.__name__ for c in cls.__mro__ if c not in (nn.Module, object) and issubclass(c, nn.Module)]
    return tuple(f"{library}:{n}" if library else n for n in names)


def _fans(owner: nn.Module, p: torch.Tensor) -> tuple[int, int]:
    """A weight's (fan-in, fan-out) as the init rule reads them (transformers' Conv1D keeps (in,
    out)); a vector's, its length."""
    return weight_fans(owner, p) if p.dim() >= 2 else (p.numel(), p.numel())


#: `_stats` converts this many entries to float64 at a time, into one reused buffer: a parameter's
#: statistics never hold a float64 copy of it (1 GB for a 4096-wide, 32000-row embedding), and a
#: chunk stays in cache between its conversion and its two reductions.
_CHUNK = 1 << 18


@dataclass(frozen=True)
class _Moments:
    """The float64 moments of some entries: count, mean, M2 (the sum of squared deviations from
    the mean), min and max."""

    n: int
    mean: float
    m2: float
    lo: float
    hi: float


def _moments(pieces: list[torch.Tensor]) -> _Moments:
    """The moments of the entries of `pieces` in float64: each chunk is converted into one float64
    buffer, shifted by its first entry (so a constant chunk gives exactly 0 and no digits cancel),
    and reduced to its sum and sum of squares; the chunks' means are kept as offsets from the first
    entry of all, and the chunks combined exactly as Chan, Golub & LeVeque (1983) combine partial
    moments, with `math.fsum`, so a spread ten orders below the values' size loses no digits. The
    same numbers as the two-pass float64 statistics of the whole to ~1e-15 relative, in one pass
    and without a copy of the parameter."""
    flat = [c for t in pieces for c in torch.split(t.detach().reshape(-1), _CHUNK) if c.numel()]
    if not flat:
        return _Moments(0, math.nan, math.nan, math.nan, math.nan)
    buf = torch.empty(max(c.numel() for c in flat), dtype=torch.float64, device=flat[0].device)
    origin: float | None = None  # the first entry of all: every chunk's mean is an offset from it
    parts: list[tuple[int, float, float]] = []  # (count, mean − origin, M2) of each chunk
    for c in flat:
        b = buf[: c.numel()]
        b.copy_(c)
        shift = float(b[0])
        if not math.isfinite(shift):
            shift = 0.0
        elif shift:
            b.sub_(shift)
        origin = shift if origin is None else origin
        s, q, m = float(b.sum()), float(torch.dot(b, b)), c.numel()
        parts.append((m, (shift - origin) + s / m, q - s * s / m))
    assert origin is not None  # (`flat` is not empty)
    n = sum(m for m, _, _ in parts)
    offset = math.fsum(m * mu for m, mu, _ in parts) / n
    m2 = math.fsum(q + m * (mu - offset) ** 2 for m, mu, q in parts) if math.isfinite(offset) else math.nan
    ends = [float(x) for c in pieces if c.numel() for x in torch.aminmax(c.detach())]
    return _Moments(n, origin + offset, max(m2, 0.0) if math.isfinite(m2) else m2, min(ends), max(ends))


def _stats(
    name: str,
    module: tuple[str, ...],
    within: tuple[str, ...],
    moments: _Moments,
    shape: tuple[int, ...],
    fans: tuple[int, int],
    k: float,
    dtype: torch.dtype,
) -> ParameterStats:
    """The statistics of the entries `moments` describes (one parameter, or its rows but the
    padding row) divided by `k` (> 0: dividing by it keeps min and max in order)."""
    n = moments.n
    var = moments.m2 / (n - 1) / (k * k) if n >= 2 else 0.0
    lo, hi = (moments.lo / k, moments.hi / k) if n else (math.nan, math.nan)
    eps = float(torch.finfo(dtype).eps) if dtype.is_floating_point else 0.0
    return ParameterStats(name, module, within, shape, fans[0], fans[1], n, moments.mean / k, var, lo, hi, eps, k)


class _Remembered:
    """The moments of a streamed model's block parameters, taken the first time each block is
    materialised (`Streamer.first_visit`), by parameter id."""

    def __init__(self) -> None:
        self.moments: dict[int, _Moments] = {}

    def __call__(self, params: Sequence[tuple[str, nn.Parameter]]) -> None:
        for _, p in params:
            self.moments[id(p)] = _moments([p])


def remember_moments(model: nn.Module) -> None:
    """For a streamed model: read each block's parameters as the probe first makes them, so
    `init_record` after the probe makes no block again (a 7B-sized block's init is a second of
    one core). Nothing for a whole model."""
    streamer = streamer_of(model)
    if streamer is not None and not any(isinstance(v, _Remembered) for v in streamer.first_visit):
        streamer.first_visit.append(_Remembered())


def _remembered(model: nn.Module) -> dict[int, _Moments]:
    streamer = streamer_of(model)
    found = [v for v in streamer.first_visit if isinstance(v, _Remembered)] if streamer is not None else []
    return found[0].moments if found else {}


def init_record(
    model: nn.Module,
    declared: Mapping[str, Any],
    rescaled: Mapping[str, float] | None = None,
    *,
    trace: InitTrace | None = None,
    unrecorded: str = "",
    overrides: Sequence[Override] = (),
) -> InitRecord:
    """The statistics of every parameter of `model` (module docstring), with its recorded `trace`."""
    rescaled = rescaled or {}
    modules = dict(model.named_modules())
    remembered = _remembered(model)

    def padding(name: str, p: torch.Tensor) -> int | None:
        owner_name, _, leaf = name.rpartition(".")
        owner = modules.get(owner_name, model)
        pad = getattr(owner, "padding_idx", None) if isinstance(owner, nn.Embedding) and leaf == "weight" else None
        return pad if pad is not None and 0 <= pad < p.shape[0] and p.shape[0] > 1 else None

    known = {id(p) for name, p in model.named_parameters() if id(p) in remembered and padding(name, p) is None}
    out: list[ParameterStats] = []
    for name, p in named_parameters_materialised(
        model, known
    ):  # (a streamed model's blocks one at a time, where not read before)
        owner_name = name.rpartition(".")[0]
        owner = modules.get(owner_name, model)
        classes = class_names(type(owner))
        parts = owner_name.split(".") if owner_name else []
        within = tuple(
            c for i in range(len(parts) - 1, -1, -1) for c in class_names(type(modules.get(".".join(parts[:i]), model)))
        )
        weight = getattr(owner, "weight", None)
        fans = _fans(
            owner, weight if p.dim() < 2 and isinstance(weight, torch.Tensor) and weight.dim() >= 2 else p
        )  # a bias: its layer's fans
        k = float(rescaled.get(name, 1.0))
        pad = padding(name, p)
        if pad is not None:
            rest = [p[:pad], p[pad + 1 :]]  # (views: no copy of the table)
            out.append(_stats(name, classes, within, _moments(rest), (p.shape[0] - 1, *p.shape[1:]), fans, k, p.dtype))
            out.append(
                _stats(
                    f"{name}[padding_idx={pad}]",
                    classes,
                    within,
                    _moments([p[pad]]),
                    tuple(p[pad].shape),
                    fans,
                    k,
                    p.dtype,
                )
            )
        else:
            moments = remembered[id(p)] if id(p) in known else _moments([p])
            out.append(_stats(name, classes, within, moments, tuple(p.shape), fans, k, p.dtype))
    library = type(model).__module__.split(".", 1)[0]
    bases = [c for c in type(model).__mro__ if c not in (nn.Module, object) and issubclass(c, nn.Module)]
    own_init = tuple(f"{library}:{c.__name__}" for c in bases if any(m in vars(c) for m in INIT_METHODS))
    return InitRecord(
        class_names(type(model), library),
        dict(declared),
        tuple(out),
        trace,
        unrecorded if trace is None else "",
        tuple(overrides),
        own_init,
    )


def _plain(value: Any) -> Any:
    """A config value as a number, a boolean, a string or a list of numbers (a class: its name);
    None when it is none of these."""
    if isinstance(value, (bool, str)) or (isinstance(value, (int, float)) and math.isfinite(value)):
        return value
    if isinstance(value, type):
        return value.__name__
    if (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        return list(value)
    return None


def declared_config(
    model: nn.Module, config: Mapping[str, Any], constructed: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The config the model declares (module docstring): numbers, booleans, strings and lists of
    numbers; `constructed`, the arguments its constructor was given, where they were recorded."""
    raw: dict[str, Any] = {}
    hf = getattr(model, "config", None)
    if hf is not None and hasattr(hf, "to_dict"):
        raw.update(hf.to_dict())
    else:
        try:
            params = inspect.signature(type(model)).parameters
        except (TypeError, ValueError):  # a builtin or C-defined signature: only the spec's config
            params = {}  # type: ignore[assignment]
        raw.update({k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty})
        raw.update(constructed or {})  # what was passed: a registered model's own values (None where it passed None)
        raw.update(config)
    return {k: v for k, v in ((k, _plain(v)) for k, v in raw.items()) if v is not None}
