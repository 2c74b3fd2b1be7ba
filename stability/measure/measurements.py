"""Stage 4's product, as data: `Measurements` (what one probe measured) and its one serialisation.

Every process boundary and every file carries measurements the same way: `Measurements.to_dict`
and `Measurements.from_dict` (pytest's `reports.py` `_to_json` / `_from_json` is the model). The
worker processes of `stability check` stream them to the parent, the sweep's points return them
from Dask workers, the results store keeps them, and the JSON and HTML reports write them, so an
invariant judged in any of those places sees the same numbers, `extra` and the per-parameter
gradient norms included.

`extra` holds what the opt-in measurements of the declared invariants returned (observers,
ensembles, the Jacobian spectrum, lesions, …): plain values (numbers, strings, lists, dicts) and
frozen dataclasses of them whose classes are registered with `serializable`; a dict from
`to_dict` names such a value's class by its registered name, and `from_dict` rebuilds only
registered classes (a store file or a worker cannot make the parent build anything else).

Floats round-trip exactly (Python's `repr`), NaN and ±inf included: `to_dict` keeps them as
floats, and `to_json`/`from_json` write them as JSON's non-standard `NaN`/`Infinity`, which
Python's `json` reads back (the JSON *report* spells them as strings instead, for other readers:
`stability.report.formats`). This module imports neither torch nor Hypothesis.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

__all__ = ["Measurements", "serializable", "encode", "decode", "SERIALIZABLE", "BUILTIN_VALUE_MODULES"]

T = TypeVar("T")

#: Registered classes of `extra` values, by name (`serializable`).
SERIALIZABLE: dict[str, type] = {}
#: The modules that register the built-in invariants' value classes (they import torch, so they are
#: imported only when a stored or streamed value names a class not registered yet);
#: tests/test_measurements.py checks that this lists every module that registers one.
BUILTIN_VALUE_MODULES = (
    "stability.measure.ensemble",
    "stability.measure.channels",
    "stability.measure.jacobian",
    "stability.judge.theory_checks",
    "stability.measure.init_stats",
    "stability.measure.init_trace",
    "stability.measure.init_trace_law",
)

_TYPE = "__type__"
_TUPLE = "__tuple__"


def serializable(cls: type[T] | None = None, *, name: str | None = None) -> Any:
    """Register a dataclass as a value `Measurements.extra` may hold (as a decorator, or called
    with the class). Its fields must themselves be encodable. A second class under one name is
    refused: the name is what a stored row says."""

    def register(c: type[T]) -> type[T]:
        if not dataclasses.is_dataclass(c):
            raise TypeError(f"serializable: {c.__qualname__} is not a dataclass")
        key = name or c.__name__
        known = SERIALIZABLE.get(key)
        if known is not None and known is not c:
            raise ValueError(
                f"serializable: the name {key!r} is already registered for {known.__module__}.{known.__qualname__}"
            )
        SERIALIZABLE[key] = c
        c.__stability_name__ = key  # type: ignore[attr-defined]
        return c

    return register(cls) if cls is not None else register


def encode(value: Any) -> Any:
    """`value` as plain data: numbers, strings, None, lists, dicts with string keys; a tuple as
    {"__tuple__": [...]}, a registered dataclass as {"__type__": name, **fields}."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, (list,)):
        return [encode(v) for v in value]
    if isinstance(value, tuple):
        return {_TUPLE: [encode(v) for v in value]}
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"Measurements.extra: dict keys must be strings, got {type(k).__name__} {k!r}")
            if k in (_TYPE, _TUPLE):
                raise TypeError(f"Measurements.extra: the key {k!r} is reserved")
            out[k] = encode(v)
        return out
    name = getattr(type(value), "__stability_name__", None)
    if (
        name is not None
        and SERIALIZABLE.get(name) is type(value)
        and dataclasses.is_dataclass(value)
        and not isinstance(value, type)
    ):
        return {_TYPE: name, **{f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", None) == 0:  # a NumPy or torch scalar
        return encode(value.item())
    raise TypeError(
        f"Measurements.extra: cannot serialise a {type(value).__module__}.{type(value).__qualname__}; "
        "register it with stability.measure.measurements.serializable"
    )


def decode(data: Any) -> Any:
    """The inverse of `encode`; only registered classes are rebuilt."""
    if isinstance(data, list):
        return [decode(v) for v in data]
    if isinstance(data, dict):
        if _TUPLE in data:
            return tuple(decode(v) for v in data[_TUPLE])
        if _TYPE in data:
            name = data[_TYPE]
            cls = SERIALIZABLE.get(name)
            if cls is None:
                import importlib

                for module in BUILTIN_VALUE_MODULES:
                    importlib.import_module(module)
                cls = SERIALIZABLE.get(name)
            if cls is None:
                raise ValueError(
                    f"Measurements: unknown value type {name!r} (known: {', '.join(sorted(SERIALIZABLE)) or 'none'})"
                )
            return cls(**{k: decode(v) for k, v in data.items() if k != _TYPE})
        return {k: decode(v) for k, v in data.items()}
    return data


@dataclass(kw_only=True)
class Measurements:
    """What one probe measured. Lists have one entry per boundary (n_blocks + 1)."""

    grad_norm: list[float]
    act_var: list[float]
    act_sq_mean: list[float]
    param_grad_norm: dict[str, float]
    identity_error: float | None
    input_grad_error: float | None
    nonfinite_at: int | None
    nonfinite_kind: Literal["activation", "gradient"] | None = None
    channels: list[int] = field(default_factory=list)
    #: What each opt-in measurement returned, by its name (empty when none ran).
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n_blocks(self) -> int:
        return len(self.grad_norm) - 1

    @property
    def gradient_ratio(self) -> float:
        """grad_norm[0] / grad_norm[-1]: how much of the output gradient reaches the input."""
        top = self.grad_norm[-1]
        return self.grad_norm[0] / top if top else math.nan

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain data (see the module docstring); `from_dict` inverts it exactly."""
        return {
            "grad_norm": [float(v) for v in self.grad_norm],
            "act_var": [float(v) for v in self.act_var],
            "act_sq_mean": [float(v) for v in self.act_sq_mean],
            "param_grad_norm": {str(k): float(v) for k, v in self.param_grad_norm.items()},
            "identity_error": None if self.identity_error is None else float(self.identity_error),
            "input_grad_error": None if self.input_grad_error is None else float(self.input_grad_error),
            "nonfinite_at": self.nonfinite_at,
            "nonfinite_kind": self.nonfinite_kind,
            "channels": [int(c) for c in self.channels],
            "extra": encode(self.extra),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurements:
        unknown = sorted(set(data) - _FIELDS)
        if unknown:
            raise ValueError(f"Measurements.from_dict: unknown field(s) {', '.join(unknown)}")
        return cls(
            grad_norm=list(data["grad_norm"]),
            act_var=list(data["act_var"]),
            act_sq_mean=list(data["act_sq_mean"]),
            param_grad_norm=dict(data.get("param_grad_norm", {})),
            identity_error=data.get("identity_error"),
            input_grad_error=data.get("input_grad_error"),
            nonfinite_at=data.get("nonfinite_at"),
            nonfinite_kind=data.get("nonfinite_kind"),
            channels=list(data.get("channels", [])),
            extra=decode(data.get("extra", {})),
        )

    def to_json(self) -> str:
        """One line of JSON (floats exact; NaN and ±inf as JSON's NaN/Infinity)."""
        return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=True)

    @classmethod
    def from_json(cls, text: str) -> Measurements:
        return cls.from_dict(json.loads(text))


_FIELDS = {f.name for f in dataclasses.fields(Measurements)}
