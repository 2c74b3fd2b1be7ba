"""The value types of spec keys, below every table that uses them: the strict, frozen base of every
table (`StrictModel`: unknown keys forbidden), the choices a key takes (`Literal`s), integer ranges
(`IntSpace`: n, [lo, hi], { values }, { range, multiple_of }) with their JSON Schema and their
dump in the spec's own syntax, and the validators of the keys that take a number or a word.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer, PlainValidator, WithJsonSchema

from stability.errors import did_you_mean

LayerKind = Literal["linear", "conv2d", "tokens"]
Activation = Literal["relu", "gelu", "tanh", "sigmoid", "identity"]
Norm = Literal["batch", "layer", "rms", "group", "none"]
Skip = Literal["identity", "projection", "scaled", "norm", "none"]
BranchInit = Literal["default", "zero", "rezero", "skipinit"]
WeightInit = Literal[
    "default",
    "kaiming_normal",
    "kaiming_uniform",
    "xavier_normal",
    "xavier_uniform",
    "orthogonal",
    "normal",
    "identity",
]
DType = Literal["float32", "float64", "bfloat16", "float16"]
NormPosition = Literal["pre", "post", "sandwich"]
Residual = Literal["none", "deepnorm", "rezero", "skipinit", "layerscale", "gpt2"]
Device = Literal["cpu", "cuda"]
Growth = Literal["decaying", "bounded", "linear", "polynomial", "exponential"]
ExpectKind = Literal["holds", "violated"]

GROWTH_CLASSES: tuple[str, ...] = get_args(Growth)
#: Branch inits under which every branch of a built-in residual family outputs exactly zero at
#: initialisation (the built-in families' `zero_branch_inits`, stability.families.catalog).
ZERO_BRANCH_INITS: frozenset[str] = frozenset({"zero", "rezero", "skipinit"})
#: The spatial size of conv2d inputs and the token count of (B, T, C) inputs when `[space]` leaves them out.
DEFAULT_SIZE = 8


class IntSpace(tuple[int, int]):
    """The values an integer key of `[space]` may take: `(lo, hi)` as a tuple (the smallest and
    largest drawable value), plus `values` (an explicit sorted set) or `multiple_of` (a step from
    0), so a strategy draws only valid values and a replayed case is checked for membership."""

    values: tuple[int, ...] | None
    multiple_of: int

    def __new__(cls, lo: int, hi: int, *, values: tuple[int, ...] | None = None, multiple_of: int = 1) -> IntSpace:
        self = super().__new__(cls, (lo, hi))
        self.values = values
        self.multiple_of = multiple_of
        return self

    @property
    def constrained(self) -> bool:
        return self.values is not None or self.multiple_of > 1

    def admits(self, value: int) -> bool:
        """Whether `value` is one the space can draw."""
        if self.values is not None:
            return value in self.values
        return self[0] <= value <= self[1] and value % self.multiple_of == 0

    def describe(self) -> str:
        """The set in the spec's own syntax, for messages: `[lo, hi]`, `{ values = [...] }`, …"""
        if self.values is not None:
            return "{ values = [" + ", ".join(map(str, self.values)) + "] }"
        if self.multiple_of > 1:
            return f"{{ range = [{self[0]}, {self[1]}], multiple_of = {self.multiple_of} }}"
        return f"[{self[0]}, {self[1]}]"

    def __repr__(self) -> str:
        return self.describe() if self.constrained else tuple.__repr__(self)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles with its constraints (specs travel to worker processes)."""
        return (_int_space, (self[0], self[1], self.values, self.multiple_of))


def _int_space(lo: int, hi: int, values: tuple[int, ...] | None, multiple_of: int) -> IntSpace:
    return IntSpace(lo, hi, values=values, multiple_of=multiple_of)


_INT_FORMS = (
    "expected an integer or a [lo, hi] pair of integers, or a table { values = [...] } or { range = "
    "[lo, hi], multiple_of = m }"
)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_range(value: Any) -> Any:
    """`n`, `[lo, hi]` (inclusive), `{ values = [a, b, …] }` or `{ range = [lo, hi], multiple_of = m }`
    → an `IntSpace`. With `multiple_of`, lo and hi become the first and last multiple inside."""
    if isinstance(value, bool):
        raise ValueError(_INT_FORMS)
    if isinstance(value, int):
        return IntSpace(value, value)
    if isinstance(value, (list, tuple)):
        if len(value) != 2 or not all(_is_int(v) for v in value):
            raise ValueError(_INT_FORMS)
        lo, hi = value
        if lo > hi:
            raise ValueError(f"empty range: lo {lo} > hi {hi}; write [{hi}, {lo}]")
        return IntSpace(lo, hi)
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"values", "range", "multiple_of"})
        if unknown:
            raise ValueError(
                f"unknown key '{unknown[0]}' in the "
                f"table{did_you_mean(unknown[0], ['values', 'range', 'multiple_of'])}; "
                f"{_INT_FORMS}"
            )
        if "values" in value:
            if set(value) != {"values"}:
                raise ValueError("{ values = [...] } lists every value already; remove range/multiple_of")
            vals = value["values"]
            if not isinstance(vals, list) or not vals or not all(_is_int(v) for v in vals):
                raise ValueError("values must be a non-empty list of integers, e.g. { values = [64, 128, 256] }")
            ordered = tuple(sorted(set(vals)))
            return IntSpace(ordered[0], ordered[-1], values=ordered)
        if "range" not in value:
            raise ValueError("a table needs `values` or `range`, e.g. { range = [16, 256], multiple_of = 16 }")
        lo, hi = _int_range(value["range"])
        step = value.get("multiple_of", 1)
        if not _is_int(step) or step < 1:
            raise ValueError(f"multiple_of must be an integer ≥ 1 (got {step!r})")
        first, last = -(-lo // step) * step, (hi // step) * step
        if first > last:
            raise ValueError(
                f"no multiple of {step} lies in [{lo}, {hi}]; use e.g. range = [{max(step, first - step)}, {first}]"
            )
        return IntSpace(first, last, multiple_of=step)
    raise ValueError(_INT_FORMS)


def _positive_range(value: Any) -> Any:
    space = _int_range(value)
    lo, hi = space
    if lo < 1:
        if space.constrained:
            raise ValueError(f"must be at least 1 (got {lo}); drop {lo} from the set")
        raise ValueError(f"must be at least 1 (got {lo}); use a range like [1, {max(hi, 1)}]")
    return space


def _seed_range(value: Any) -> Any:
    space = _int_range(value)
    lo, hi = space
    if lo < 0 or hi >= 2**63:
        raise ValueError("seeds must lie in [0, 2**63 - 1]")
    return space


def nonempty_list(value: Any) -> Any:
    """One choice (a string) as a list of one; an empty list refused."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and not value:
        raise ValueError("must name at least one choice")
    return value


def _range_schema(minimum: int) -> WithJsonSchema:
    one = {"type": "integer", "minimum": minimum}
    pair = {"type": "array", "items": one, "minItems": 2, "maxItems": 2}
    values = {
        "type": "object",
        "properties": {"values": {"type": "array", "items": one, "minItems": 1}},
        "required": ["values"],
        "additionalProperties": False,
    }
    stepped = {
        "type": "object",
        "properties": {"range": {"anyOf": [one, pair]}, "multiple_of": {"type": "integer", "minimum": 1}},
        "required": ["range"],
        "additionalProperties": False,
    }
    return WithJsonSchema(
        {
            "anyOf": [one, pair, values, stepped],
            "description": "n, an inclusive [lo, hi] range, { values = [...] }, or { range = [lo, hi], "
            "multiple_of = m }",
        }
    )


def _dump_space(space: tuple[int, int]) -> Any:
    """An `IntSpace` (or a default plain pair) in the spec's own syntax, for `model_dump`."""
    if not isinstance(space, IntSpace):
        return [space[0], space[1]]
    if space.values is not None:
        return {"values": list(space.values)}
    if space.multiple_of > 1:
        return {"range": [space[0], space[1]], "multiple_of": space.multiple_of}
    return [space[0], space[1]]


IntRange = Annotated[IntSpace, PlainValidator(_positive_range), PlainSerializer(_dump_space), _range_schema(1)]
SeedRange = Annotated[IntSpace, PlainValidator(_seed_range), PlainSerializer(_dump_space), _range_schema(0)]


def choices(kind: Any) -> Any:
    """The type of a key that takes one of `kind`'s words or a list of them (at least one)."""
    one = {"enum": list(get_args(kind))}
    schema = {"anyOf": [one, {"type": "array", "items": one, "minItems": 1}], "description": "one choice or a list"}
    return Annotated[list[kind], BeforeValidator(nonempty_list), WithJsonSchema(schema)]


class StrictModel(BaseModel):
    """The base of every table of a spec: strict, frozen, unknown keys forbidden, no NaN or inf."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


def _branch_scale(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError('expected a number or "1/sqrt(depth)" or "1/depth"')
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return float(value)
    if value in ("1/sqrt(depth)", "1/depth"):
        return value
    raise ValueError(
        'expected a number or "1/sqrt(depth)" or "1/depth"' + did_you_mean(value, ["1/sqrt(depth)", "1/depth"])
    )


def _float_pair(value: Any) -> Any:
    """A TOML array `[a, b]` → (a, b): strict mode accepts only a tuple for a tuple field."""
    if isinstance(value, list) and len(value) == 2:
        return tuple(value)
    return value


def _bias_init(value: Any) -> Any:
    if value == "default":
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return float(value)
    raise ValueError('expected a number or "default"')


#: A `[a, b]` pair of numbers (`train.betas`, `block.projection_spectrum`).
FloatPair = Annotated[tuple[float, float], BeforeValidator(_float_pair)]
#: A residual branch's scale: a number, "1/sqrt(depth)" or "1/depth".
BranchScale = Annotated[float | str, BeforeValidator(_branch_scale)]
#: A bias's initial value: a number or "default" (the layer's own).
BiasInit = Annotated[float | str, BeforeValidator(_bias_init)]
