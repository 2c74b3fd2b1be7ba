"""Stage 2: one drawn point of a spec's search space.

A `Case` holds every value the builder needs, so a case string printed in a failure message
(`depth=23,width=8,...`) rebuilds exactly the same network, input and loss on CPU. Hypothesis draws
cases in `stability.run.strategies`; this module only defines them, parses them and names corners.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass
from typing import Any

from stability.errors import UsageError, did_you_mean
from stability.spec.schema import DEFAULT_SIZE, IntSpace, Spec

__all__ = ["Case", "parse_case_string", "corner_case", "reproduce_command"]


@dataclass(frozen=True, order=True, kw_only=True)
class Case:
    """One network to build and probe. Field order is the shrink order (depth first)."""

    depth: int
    width: int
    batch: int
    spatial: int | None
    input_width: int | None
    weight_init: str
    branch_init: str
    dtype: str
    device: str
    seed: int
    tokens: int | None = None  # the sequence length T of (B, T, C) token inputs

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Case:
        """The inverse of `as_dict`, checking every field's type (data from another process)."""
        if not isinstance(data, dict) or set(data) - _FIELDS or _REQUIRED - set(data):
            raise ValueError(f"not a case: {data!r:.200}")
        for key, value in data.items():
            kind = _FIELD_TYPES[key]
            if value is None and key in _OPTIONAL:
                continue
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"not a case: {key}={value!r:.80}")
        return cls(**data)

    def varying(self, spec: Spec) -> str:
        """Only the values the spec's space lets vary (the rest are fixed by the spec)."""
        s = spec.space
        fixed = {
            "depth": s.depth[0] == s.depth[1],
            "width": s.width[0] == s.width[1],
            "batch": s.batch[0] == s.batch[1],
            "spatial": s.spatial is None or s.spatial[0] == s.spatial[1],
            "input_width": s.input_width is None or s.input_width[0] == s.input_width[1],
            "weight_init": len(s.weight_init) == 1,
            "branch_init": len(s.branch_init) == 1,
            "dtype": len(s.dtype) == 1,
            "device": self.device == "cpu",
            "seed": False,
            "tokens": s.tokens is None or s.tokens[0] == s.tokens[1],
        }
        parts = [f"{_SHORT.get(k, k)}={v}" for k, v in self.as_dict().items() if v is not None and not fixed[k]]
        return ",".join(parts)

    def __str__(self) -> str:
        parts = []
        for key, value in self.as_dict().items():
            if value is None:
                continue
            parts.append(f"{_SHORT.get(key, key)}={value}")
        return ",".join(parts)


_FIELDS = frozenset(f.name for f in dataclasses.fields(Case))
_OPTIONAL = frozenset({"spatial", "input_width", "tokens"})
_REQUIRED = _FIELDS - {"tokens"}
_FIELD_TYPES: dict[str, type] = {
    f: (int if f in ("depth", "width", "batch", "spatial", "input_width", "seed", "tokens") else str) for f in _FIELDS
}
_SHORT = {"weight_init": "init"}
_ALIASES = {"init": "weight_init"}
_INT_KEYS = ("depth", "width", "batch", "spatial", "input_width", "seed", "tokens")
_CHOICE_KEYS = ("weight_init", "branch_init", "dtype", "device")


def corner_case(spec: Spec, **overrides: Any) -> Case:
    """The smallest case of the space (each range's lo, each list's first choice), with overrides."""
    s = spec.space
    conv = spec.block.layer == "conv2d"
    values: dict[str, Any] = {
        "depth": s.depth[0],
        "width": s.width[0],
        "batch": s.batch[0],
        "spatial": (s.spatial or (DEFAULT_SIZE, DEFAULT_SIZE))[0] if conv else None,
        "input_width": s.input_width[0] if s.input_width else None,
        "weight_init": s.weight_init[0],
        "branch_init": s.branch_init[0],
        "dtype": s.dtype[0],
        "device": "cpu" if "cpu" in s.device else s.device[0],
        "seed": s.seed[0],
        "tokens": (s.tokens or (DEFAULT_SIZE, DEFAULT_SIZE))[0] if spec.block.layer == "tokens" else None,
    }
    values.update(overrides)
    return Case(**values)


def parse_case_string(text: str, spec: Spec, *, device: str | None = None) -> Case:
    """`depth=23,width=8,init=xavier_normal,seed=5` → a Case; keys left out take the corner value.

    Values must lie inside the spec's space (a replay of something the space cannot draw would
    not test the spec); an unknown key or a bad value raises `UsageError` naming it.
    """
    known = [f.name for f in dataclasses.fields(Case)]
    given: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        key = _ALIASES.get(key, key)
        if not sep or not raw:
            raise UsageError(f"--case {text!r}: '{item}' is not key=value; write e.g. depth=8,width=16")
        if key not in known:
            raise UsageError(
                f"--case: unknown key '{key}'{did_you_mean(key, known + list(_ALIASES))}; known keys: "
                f"{', '.join(['init', *known])}"
            )
        if key in given:
            raise UsageError(f"--case {text!r}: {_SHORT.get(key, key)} is given twice; give each key once")
        if key in _INT_KEYS:
            try:
                given[key] = int(raw)
            except ValueError:
                raise UsageError(f"--case: {key}={raw!r} is not an integer") from None
        else:
            given[key] = raw
    if device is not None and "device" not in given:
        given["device"] = device
    case = corner_case(spec, **given)
    _check_inside(case, spec)
    return case


def _check_inside(case: Case, spec: Spec) -> None:
    s = spec.space
    ranges: dict[str, tuple[int, int]] = {"depth": s.depth, "width": s.width, "batch": s.batch, "seed": s.seed}
    if spec.block.layer == "conv2d":
        ranges["spatial"] = s.spatial or (DEFAULT_SIZE, DEFAULT_SIZE)
    if s.input_width is not None:
        ranges["input_width"] = s.input_width
    if spec.block.layer == "tokens":
        ranges["tokens"] = s.tokens or (DEFAULT_SIZE, DEFAULT_SIZE)
    for key, (lo, hi) in ranges.items():
        value = getattr(case, key)
        if value is None or not lo <= value <= hi:
            raise UsageError(f"--case: {key}={value} is outside the spec's space [{lo}, {hi}]")
        space = ranges[key]
        if isinstance(space, IntSpace) and not space.admits(value):
            raise UsageError(f"--case: {key}={value} is not in the spec's space {space.describe()}")
    for key in _CHOICE_KEYS:
        choices = list(getattr(s, key))
        value = getattr(case, key)
        if value not in choices:
            raise UsageError(
                f"--case: {_SHORT.get(key, key)}={value} is not in the spec's space "
                f"{choices}{did_you_mean(value, choices)}"
            )


def reproduce_command(spec: Spec, case: Case, *, profile: str | None = None) -> str:
    """The one-line shell command that replays exactly this case."""
    cmd = f"stability check {shlex.quote(spec.path)} --case {shlex.quote(str(case))}"
    return cmd + (f" --profile {profile}" if profile else "")
