"""The grid of a sweep: `--over KEY=VALUES` → axes → points, and a point applied to a spec.

A *point* is a dict of axis values (`{"depth": 64, "sigma_w2": 1.5}`); every key a point leaves
out takes the spec's corner value (`case.corner_case`). A point is a seed ensemble: the sweep
probes it with several seeds and judges each invariant on all of them.

Value syntax, one axis per `--over`:

- `depth=4,16,64`: a list;
- `depth=log:2:1024:10`: 10 values spaced evenly on a log scale from 2 to 1024 (both included);
- `sigma_w2=lin:0.5:3:11`: 11 values spaced evenly from 0.5 to 3;
- `weight_init=normal,orthogonal`: choices.

Integer keys (depth, width, batch) round to whole numbers and drop repeats.

Sizes are checked before anything is allocated: an axis has at most `MAX_AXIS_VALUES` values and a
grid at most `MAX_POINTS` points (`grid_size`), and every point is applied to the spec once before
a sweep starts (`check_points`), so a point that cannot be swept is refused up front, not mid-way.

Keys that set a case value: depth, width, batch, weight_init (alias init), branch_init, dtype.
Keys that change the spec for the point: init_std and init_gain (`space`), branch_scale,
skip_scale, gate_bias (`block`), and sigma_w2, the weight variance σ_w² of the mean-field
literature (Poole et al. 2016, Schoenholz et al. 2017): W_ij ~ N(0, σ_w²/fan_in), which sets
weight_init = "normal" and init_std = √(σ_w²/fan_in), fan_in = width (× kernel_size² for conv2d).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, get_args

from stability.errors import UsageError, did_you_mean
from stability.spec.case import Case, corner_case
from stability.spec.registry import FAMILIES
from stability.spec.schema import BranchInit, DType, Spec, WeightInit

__all__ = [
    "Axis",
    "parse_axis",
    "grid_points",
    "grid_size",
    "check_points",
    "apply_point",
    "point_key",
    "fixed_values",
    "fixed_text",
    "INT_KEYS",
    "KEYS",
    "MAX_AXIS_VALUES",
    "MAX_POINTS",
]

INT_KEYS = ("depth", "width", "batch")
_CHOICE_KEYS = ("weight_init", "branch_init", "dtype")
#: The values a choice key can take: the spec format's own (a sweep may leave the spec's space, never the format).
_CHOICES: dict[str, tuple[str, ...]] = {
    "weight_init": get_args(WeightInit),
    "branch_init": get_args(BranchInit),
    "dtype": get_args(DType),
}
_SPACE_FLOATS = ("init_std", "init_gain")
_BLOCK_FLOATS = ("branch_scale", "skip_scale", "gate_bias")
KEYS = (*INT_KEYS, *_CHOICE_KEYS, *_SPACE_FLOATS, *_BLOCK_FLOATS, "sigma_w2")
_ALIASES = {"init": "weight_init", "σ_w²": "sigma_w2"}

Value = int | float | str

#: The most values one `--over` axis may have.
MAX_AXIS_VALUES = 10_000
#: The most points a grid may have (each is a seed ensemble of probes).
MAX_POINTS = 100_000
#: The largest depth, width or batch an axis may name.
MAX_INT = 2**31 - 1


@dataclass(frozen=True)
class Axis:
    """One swept key and its values, in the order given."""

    key: str
    values: tuple[Value, ...]

    @property
    def numeric(self) -> bool:
        return all(isinstance(v, (int, float)) for v in self.values)


def _number(text: str, key: str, raw: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise UsageError(
            f"--over {key}={raw}: {text!r} is not a number; write e.g. {key}=log:2:1024:10 or {key}=1,2,4"
        ) from None
    if not math.isfinite(x):
        raise UsageError(f"--over {key}={raw}: {text!r} is not a finite number")
    return x


def parse_axis(text: str) -> Axis:
    """`KEY=VALUES` → an Axis. Raises `UsageError` (one line naming the key, value and fix)."""
    key, sep, raw = text.partition("=")
    key, raw = key.strip(), raw.strip()
    key = _ALIASES.get(key, key)
    if not sep or not key or not raw:
        raise UsageError(f"--over {text!r}: write KEY=VALUES, e.g. depth=log:2:1024:10 or sigma_w2=0.5,1,2")
    if key not in KEYS:
        raise UsageError(f"--over: unknown key '{key}'{did_you_mean(key, KEYS)}; known keys: {', '.join(KEYS)}")
    if key in _CHOICE_KEYS:
        values: list[Value] = [v.strip() for v in raw.split(",") if v.strip()]
        _bounded(key, raw, len(values))
        if not values:
            raise UsageError(f"--over {key}={raw}: name at least one value")
        known = _CHOICES[key]
        for v in values:
            if v not in known:
                raise UsageError(f"--over {key}={raw}: {v!r} is not one of {', '.join(known)}{did_you_mean(v, known)}")
        return Axis(key, tuple(dict.fromkeys(values)))
    kind, _, rest = raw.partition(":")
    if kind in ("log", "lin"):
        parts = rest.split(":")
        if len(parts) != 3:
            raise UsageError(f"--over {key}={raw}: write {kind}:LO:HI:N, e.g. {key}={kind}:2:1024:10")
        lo, hi = _number(parts[0], key, raw), _number(parts[1], key, raw)
        try:
            n = int(parts[2])
        except ValueError:
            raise UsageError(f"--over {key}={raw}: N = {parts[2]!r} must be a whole number of values") from None
        if n < 1 or lo > hi or (kind == "log" and lo <= 0):
            need = "0 < LO <= HI" if kind == "log" else "LO <= HI"
            raise UsageError(f"--over {key}={raw}: need {need} and N >= 1")
        _bounded(key, raw, n)
        if n == 1:
            floats = [lo]
        elif kind == "log":
            floats = [math.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * i / (n - 1)) for i in range(n)]
        else:
            floats = [lo + (hi - lo) * i / (n - 1) for i in range(n)]
        floats = [float(f"{x:.6g}") for x in floats]  # readable keys: 0.5,0.75,… not 0.7500000000000001
    else:
        items = [v.strip() for v in raw.split(",") if v.strip()]
        _bounded(key, raw, len(items))
        floats = [_number(v, key, raw) for v in items]
        if not floats:
            raise UsageError(f"--over {key}={raw}: name at least one value")
    if key in INT_KEYS:
        ints = [round(x) for x in floats]
        if min(ints) < 1:
            raise UsageError(f"--over {key}={raw}: {key} must be at least 1")
        if max(ints) > MAX_INT:
            raise UsageError(f"--over {key}={raw}: {max(ints):.3g} is more than {key} can be (at most {MAX_INT:,})")
        return Axis(key, tuple(dict.fromkeys(ints)))
    if key in ("init_std", "sigma_w2") and min(floats) <= 0:
        raise UsageError(f"--over {key}={raw}: {key} must be positive")
    return Axis(key, tuple(dict.fromkeys(floats)))


def _bounded(key: str, raw: str, n: int) -> None:
    if n > MAX_AXIS_VALUES:
        shown = raw if len(raw) <= 40 else raw[:37] + "..."
        raise UsageError(
            f"--over {key}={shown}: {n} values; an axis has at most {MAX_AXIS_VALUES:,} (a sweep probes every "
            "one with every seed): give fewer"
        )


def grid_size(axes: list[Axis]) -> int:
    """How many points the axes make, checked against the repeated-key rules and `MAX_POINTS`
    before any point is built (raises UsageError)."""
    keys = [a.key for a in axes]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise UsageError(f"--over {dup} is given twice; give each key once, with all its values")
    if "sigma_w2" in keys and ("init_std" in keys or "weight_init" in keys):
        raise UsageError("--over sigma_w2 sets weight_init and init_std itself; drop --over init_std / weight_init")
    size = math.prod(len(a.values) for a in axes)
    if size > MAX_POINTS:
        shape = " × ".join(str(len(a.values)) for a in axes)
        raise UsageError(
            f"--over: the grid has {shape} = {size:,} points; a sweep takes at most {MAX_POINTS:,}: give "
            "fewer values, or sweep in parts"
        )
    return size


def grid_points(axes: list[Axis]) -> list[dict[str, Value]]:
    """Every combination of the axes' values (the first axis varies slowest); its size is checked
    first (`grid_size`)."""
    grid_size(axes)
    points: list[dict[str, Value]] = [{}]
    for axis in axes:
        points = [{**p, axis.key: v} for p in points for v in axis.values]
    return points


def check_points(spec: Spec, points: list[dict[str, Value]], *, seed: int, device: str = "cpu") -> None:
    """Apply every point to the spec once (`apply_point`), so that a point the sweep cannot run
    (an axis that changes nothing there, a key the family lacks) is refused before anything runs."""
    for point in points:
        apply_point(spec, point, seed=seed, device=device)


def point_key(point: dict[str, Value]) -> str:
    """The canonical text of a point (sorted JSON): the store's key and the report's label."""
    return json.dumps(point, sort_keys=True, separators=(",", ":"))


def _fan_in(spec: Spec, width: int) -> int:
    return width * (spec.block.kernel_size**2 if spec.block.layer == "conv2d" else 1)


def apply_point(spec: Spec, point: dict[str, Value], *, seed: int, device: str = "cpu") -> tuple[Spec, Case]:
    """The spec as this point changes it, and the case of one seed at this point.

    Case values outside the spec's space are allowed here (a sweep goes past the space on
    purpose, e.g. to depth 1024); everything else about the spec stays as written.
    """
    space: dict[str, Any] = {}
    block: dict[str, Any] = {}
    case: dict[str, Any] = {"seed": seed, "device": device}
    for key, value in point.items():
        if key in INT_KEYS or key in _CHOICE_KEYS:
            case[key] = value
        elif key in _SPACE_FLOATS:
            space[key] = float(value)
        elif key in _BLOCK_FLOATS:
            if key not in FAMILIES.get(spec.family).block_keys:
                readers = [f.name for f in FAMILIES if key in f.block_keys]
                raise UsageError(
                    f"--over {key}: {spec.path} is family '{spec.family}', and {key} applies to {', '.join(readers)}"
                )
            block[key] = float(value)
        elif key != "sigma_w2":
            raise UsageError(f"--over: unknown key '{key}'")
    if "skip_scale" in block and spec.block.skip != "scaled":
        raise UsageError(
            f'--over skip_scale: {spec.path} has block.skip = "{spec.block.skip}"; it applies to skip = "scaled"'
        )
    own_init = FAMILIES.get(spec.family).user_code  # a factory draws its own weights
    if own_init and ({"sigma_w2", *_SPACE_FLOATS} & set(point)):
        key = next(k for k in ("sigma_w2", *_SPACE_FLOATS) if k in point)
        raise UsageError(
            f"--over {key}: {spec.path} is a custom factory, which builds its own init, so {key} changes "
            "nothing; sweep a factory_args value instead"
        )
    init = case.get("weight_init", spec.space.weight_init[0])
    for key, needs, fix in (("init_std", "normal", "or sweep sigma_w2"), ("init_gain", "identity", "")):
        if key in point and init != needs:
            raise UsageError(
                f'--over {key}: it applies to weight_init = "{needs}", and this point\'s init is {init!r}, so '
                f"it changes nothing; add --over weight_init={needs}{' ' + fix if fix else ''}"
            )
    if "sigma_w2" in point:
        width = int(case.get("width", spec.space.width[0]))
        case["weight_init"] = "normal"
        space["init_std"] = math.sqrt(float(point["sigma_w2"]) / _fan_in(spec, width))
    if space:
        spec = spec.model_copy(update={"space": spec.space.model_copy(update=space)})
    if block:
        spec = spec.model_copy(update={"block": spec.block.model_copy(update=block)})
    return spec, corner_case(spec, **case)


def fixed_values(spec: Spec, axes: list[Axis]) -> dict[str, Value]:
    """What a sweep of `spec` over `axes` holds at one value at every point, key by key: what
    `apply_point` gives each key no axis sets. The case keys take the corner case's values
    (depth, width, batch, weight_init, branch_init, dtype, and spatial / tokens / input_width where
    the spec has them); `init_std` and `init_gain` the spec's own where the init reads them; the
    block's scales where the family (and `skip = "scaled"`) has them. The reports print these, so a
    sweep's numbers are read with the network they were measured on."""
    swept = {a.key for a in axes}
    if "sigma_w2" in swept:
        swept |= {"weight_init", "init_std"}
    corner = corner_case(spec)
    out: dict[str, Value] = {}
    one_branch_init = (
        FAMILIES.get(spec.family).branch_inits is not None and len(FAMILIES.get(spec.family).branch_inits or ()) == 1
    )
    for key in (*INT_KEYS, *_CHOICE_KEYS):
        if key not in swept and not (
            key == "branch_init" and one_branch_init
        ):  # a family with one branch init has nothing to hold
            out[key] = getattr(corner, key)
    for key in ("spatial", "tokens", "input_width"):
        value = getattr(corner, key)
        if value is not None:
            out[key] = value
    inits = {str(v) for a in axes if a.key == "weight_init" for v in a.values} or {corner.weight_init}
    if FAMILIES.get(spec.family).user_code:
        inits = set()  # a factory draws its own weights
    for key, needs in (("init_std", "normal"), ("init_gain", "identity")):
        if key not in swept and needs in inits:
            out[key] = getattr(spec.space, key)
    block_keys = FAMILIES.get(spec.family).block_keys
    for key in _BLOCK_FLOATS:
        if key in swept or key not in block_keys or (key == "skip_scale" and spec.block.skip != "scaled"):
            continue
        value = getattr(spec.block, key)
        out[key] = "default" if value is None else value
    return out


def fixed_text(spec: Spec, axes: list[Axis]) -> str:
    """`fixed_values` as the reports print it: "width=16, batch=4, weight_init=kaiming_normal"."""
    return ", ".join(f"{k}={v}" for k, v in fixed_values(spec, axes).items()) or "nothing"
