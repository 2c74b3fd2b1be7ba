"""Stage 1: a spec file (TOML) → a validated `Spec`.

Specs are data: read with the standard library's `tomllib`, validated by pydantic models with
unknown keys forbidden, then checked for combinations that make no sense for the family. Every
problem becomes one `SpecError` line naming the file, the key path, the bad value and the fix.
Nothing here imports or runs user code; a `custom` factory is only named here and imported by the
builder.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, WithJsonSchema

from stability.errors import SpecError, did_you_mean

__all__ = [
    "Spec",
    "Block",
    "Space",
    "Expect",
    "GradientArrival",
    "VarianceGrowth",
    "IdentityAtInit",
    "MeanShift",
    "load_spec",
    "find_specs",
    "parse_spec",
    "validate_spec",
    "spec_schema",
    "describe_family",
    "FAMILIES",
    "INVARIANTS",
    "GROWTH_CLASSES",
    "ZERO_BRANCH_INITS",
]

Family = Literal["plain", "postnorm", "preact", "highway", "dense", "custom"]
LayerKind = Literal["linear", "conv2d"]
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
Device = Literal["cpu", "cuda"]
Growth = Literal["decaying", "bounded", "linear", "polynomial", "exponential"]
Expectation = Literal["holds", "violated"]

FAMILIES: tuple[str, ...] = get_args(Family)
GROWTH_CLASSES: tuple[str, ...] = get_args(Growth)
INVARIANTS: tuple[str, ...] = ("gradient_arrival", "variance_growth", "identity_at_init", "mean_shift")
#: Branch inits under which every branch outputs exactly zero at initialisation.
ZERO_BRANCH_INITS: frozenset[str] = frozenset({"zero", "rezero", "skipinit"})

_FAMILY_DESCRIPTIONS = {
    "plain": "x_{l+1} = act(norm(W x_l)): no route around, the gradient is a product of factors",
    "postnorm": "x_{l+1} = act(norm(x_l + F(x_l))): original ResNet ordering, norm/act on the route",
    "preact": "x_{l+1} = x_l + F(x_l): bare addition, nothing on the route around (He et al. 2016)",
    "highway": "x_{l+1} = T*H(x) + (1-T)*x, T = sigmoid(W_T x + b_T): a gated route around",
    "dense": "block l reads the concatenation of all earlier outputs, adds `growth` channels",
    "custom": "your own nn.Module from `factory = \"package.module:function\"`",
}


def _int_range(value: Any) -> Any:
    """`n` or `[lo, hi]` (inclusive) → (lo, hi)."""
    if isinstance(value, bool):
        raise ValueError("expected an integer or a [lo, hi] pair of integers")
    if isinstance(value, int):
        return (value, value)
    if isinstance(value, (list, tuple)):
        if len(value) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ValueError("expected an integer or a [lo, hi] pair of integers")
        lo, hi = value
        if lo > hi:
            raise ValueError(f"empty range: lo {lo} > hi {hi}; write [{hi}, {lo}]")
        return (lo, hi)
    raise ValueError("expected an integer or a [lo, hi] pair of integers")


def _positive_range(value: Any) -> Any:
    lo, hi = _int_range(value)
    if lo < 1:
        raise ValueError(f"must be at least 1 (got {lo}); use a range like [1, {max(hi, 1)}]")
    return (lo, hi)


def _seed_range(value: Any) -> Any:
    lo, hi = _int_range(value)
    if lo < 0 or hi >= 2**63:
        raise ValueError("seeds must lie in [0, 2**63 - 1]")
    return (lo, hi)


def _nonempty_list(value: Any) -> Any:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and not value:
        raise ValueError("must name at least one choice")
    return value


def _range_schema(minimum: int) -> WithJsonSchema:
    one = {"type": "integer", "minimum": minimum}
    pair = {"type": "array", "items": one, "minItems": 2, "maxItems": 2}
    return WithJsonSchema({"anyOf": [one, pair], "description": "n or an inclusive [lo, hi] range"})


IntRange = Annotated[tuple[int, int], BeforeValidator(_positive_range), _range_schema(1)]
SeedRange = Annotated[tuple[int, int], BeforeValidator(_seed_range), _range_schema(0)]


def _choices(kind: Any) -> Any:
    one = {"enum": list(get_args(kind))}
    schema = {"anyOf": [one, {"type": "array", "items": one, "minItems": 1}], "description": "one choice or a list"}
    return Annotated[list[kind], BeforeValidator(_nonempty_list), WithJsonSchema(schema)]


class _Model(BaseModel):
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
    raise ValueError('expected a number or "1/sqrt(depth)" or "1/depth"' + did_you_mean(value, ["1/sqrt(depth)", "1/depth"]))


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


class Block(_Model):
    """The block's structure and options. Which keys apply depends on the family."""

    layer: LayerKind = "linear"
    activation: Activation = "relu"
    norm: Norm = "none"
    norm_groups: int = Field(8, ge=1)
    skip: Skip = "identity"
    skip_scale: float | None = None
    projection_spectrum: Annotated[tuple[float, float], BeforeValidator(_float_pair)] | None = None
    branch_layers: int = Field(2, ge=1, le=2)
    branch_scale: Annotated[float | str, BeforeValidator(_branch_scale)] = 1.0
    gate_bias: float = -2.0
    growth: int = Field(8, ge=1)
    transition_every: int = Field(0, ge=0)
    compression: float = Field(1.0, gt=0.0, le=1.0)
    kernel_size: int = Field(3, ge=1)
    factory: str | None = None
    factory_args: dict[str, Any] = Field(default_factory=dict)


class Space(_Model):
    """The search space cases are drawn from. Ranges are inclusive `[lo, hi]` or a single value."""

    depth: IntRange
    width: IntRange
    batch: IntRange = (8, 8)
    spatial: IntRange | None = None
    input_width: IntRange | None = None
    weight_init: _choices(WeightInit) = ["default"]  # type: ignore[valid-type]
    init_std: float = Field(0.02, gt=0.0)
    init_gain: float = 1.0
    bias_init: Annotated[float | str, BeforeValidator(_bias_init)] = "default"
    branch_init: _choices(BranchInit) = ["default"]  # type: ignore[valid-type]
    dtype: _choices(DType) = ["float32"]  # type: ignore[valid-type]
    device: _choices(Device) = ["cpu", "cuda"]  # type: ignore[valid-type]
    seed: SeedRange = (0, 2**16 - 1)
    examples: list[str] = Field(default_factory=list)


class _Invariant(_Model):
    expect: Expectation = "holds"


class GradientArrival(_Invariant):
    """grad_norm[0] / grad_norm[-1] must lie in [lo, hi]."""

    lo: float = Field(0.1, gt=0.0)
    hi: float = Field(10.0, gt=0.0)


class VarianceGrowth(_Invariant):
    """Growth of the activation variance (or second moment) over depth."""

    statistic: Literal["variance", "second_moment"] = "variance"
    max_growth: Growth = "linear"
    max_ratio: float | None = Field(None, gt=0.0)
    min_ratio: float | None = Field(None, gt=0.0)
    bounded_ratio: float = Field(4.0, gt=1.0)


class IdentityAtInit(_Invariant):
    """‖f(x) − x‖/‖x‖ ≤ atol and ‖g_in − g_out‖/‖g_out‖ ≤ atol for zero-branch cases."""

    atol: float = Field(0.0, ge=0.0)


class MeanShift(_Invariant):
    """At the output, the average squared channel mean beyond sampling noise, relative to the
    average channel variance, ρ = (M − V/(N − 1)) / V, must be ≤ max_ratio (Brock, De & Smith 2021;
    stability/channels.py). 0.25 lets the per-channel offsets carry at most a fifth of the second
    moment (ρ/(1 + ρ)); one ReLU of a standard normal already gives ρ ≈ 0.47."""

    max_ratio: float = Field(0.25, gt=0.0)


class Expect(_Model):
    gradient_arrival: GradientArrival | None = None
    variance_growth: VarianceGrowth | None = None
    identity_at_init: IdentityAtInit | None = None
    mean_shift: MeanShift | None = None


class Probe(_Model):
    loss: Literal["projection", "sum"] = "projection"
    mode: Literal["train", "eval"] = "train"
    checkpoint_every: int = Field(0, ge=0)
    #: Seeds the variance-growth law is judged on (the case's and ensemble − 1 derived ones;
    #: stability/growth.py). 1 judges the case's own profile alone.
    ensemble: int = Field(8, ge=1, le=256)


class Spec(_Model):
    """A validated spec. `path` is where it was read from ('<string>' when parsed from text)."""

    name: str = Field(min_length=1)
    description: str
    family: Family
    block: Block = Block()
    space: Space
    expect: Expect
    probe: Probe = Probe()
    path: str = "<string>"

    def invariants(self) -> list[tuple[str, _Invariant]]:
        """(name, expectation) for every invariant the spec declares, in a fixed order."""
        return [(n, getattr(self.expect, n)) for n in INVARIANTS if getattr(self.expect, n) is not None]


# ----------------------------------------------------------------------------- loading


def find_specs(paths: list[str | Path]) -> list[Path]:
    """Expand files and folders into the sorted list of `*.toml` spec files they name."""
    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found.extend(sorted(p.rglob("*.toml")))
        elif p.is_file():
            found.append(p)
        else:
            from stability.errors import UsageError

            raise UsageError(f"{raw}: no such file or folder; pass a spec file or a folder of *.toml specs")
    return found


def load_spec(path: str | Path) -> Spec:
    """Read and validate one spec file. Raises `SpecError` with a one-line explanation."""
    path = Path(path)
    file = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SpecError(file, None, f"cannot be read ({exc.strerror})", fix="check the path") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(
            file, None, f"is not UTF-8 text (byte {exc.start}: {raw[exc.start:exc.start + 1]!r})",
            fix="save the spec as UTF-8",
        ) from None
    return parse_spec(text, file=file)


def parse_spec(text: str, *, file: str = "<string>") -> Spec:
    """Validate spec text (TOML). Raises `SpecError` with a one-line explanation."""
    if not text.strip():
        raise SpecError(file, None, "is empty", fix='a spec needs at least name, description, family, [space] and [expect]')
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(file, None, f"is not valid TOML: {exc}", fix="fix the TOML syntax at that line") from None
    return validate_spec(data, file=file)


def validate_spec(data: Any, *, file: str = "<string>") -> Spec:
    """Validate an already-parsed document (a dict) into a `Spec`."""
    if not isinstance(data, dict):
        raise SpecError(file, None, "must be a TOML table at the top level")
    if "path" in data:
        raise SpecError(file, "path", "is not a spec key", value=data["path"], fix="remove it")
    try:
        spec = Spec.model_validate({**data, "path": file})
    except ValidationError as exc:
        raise _spec_error(file, data, exc) from None
    _check_combinations(spec, data)
    return spec


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class that owns the last key of `loc` (for 'did you mean')."""
    model: Any = Spec
    for part in loc[:-1]:
        if not isinstance(part, str) or model is None:
            return None
        field = model.model_fields.get(part)
        if field is None:
            return None
        nxt = None
        for arg in (field.annotation, *get_args(field.annotation)):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                nxt = arg
        model = nxt
    return model


def _lookup(data: Any, loc: tuple[Any, ...]) -> Any:
    for part in loc:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return ...
    return data


_TYPE_WORDS = {
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "bool_type": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be a table",
    "model_type": "must be a table",
    "model_attributes_type": "must be a table",
    "tuple_type": "must be a [a, b] pair",
    "finite_number": "must be a finite number (no nan or inf)",
}


def _spec_error(file: str, data: dict[str, Any], exc: ValidationError) -> SpecError:
    errors = exc.errors(include_url=False)
    # An unknown key first: a misspelt required key also shows up as "missing", and the unknown
    # key's "did you mean" is the message that names the fix.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = tuple(err["loc"])
    key = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in loc).replace(".[", "[")
    kind = err["type"]
    value = err.get("input", ...)
    if kind == "extra_forbidden":
        model = _model_at(loc)
        known = sorted(model.model_fields) if model is not None else []
        known = [k for k in known if k != "path"]
        hint = did_you_mean(loc[-1], known)
        fix = f"remove it{hint}" if hint else "remove it"
        if known:
            fix += f"; known keys here: {', '.join(known)}"
        return SpecError(file, key, "unknown key", value=value, fix=fix)
    if kind == "missing":
        return SpecError(file, key, "is required but missing", fix=f"add `{loc[-1]} = ...`; see `stability schema`")
    if kind == "literal_error":
        expected = err["ctx"]["expected"]
        choices = [c.strip(" '") for c in expected.replace(" or ", ",").split(",")]
        return SpecError(file, key, f"is not one of {expected}{did_you_mean(value, choices)}", value=value)
    if kind in _TYPE_WORDS:
        if isinstance(value, float) and not math.isfinite(value):
            return SpecError(file, key, "must be a finite number (no nan or inf)", value=value)
        return SpecError(file, key, _TYPE_WORDS[kind], value=_lookup(data, loc) if value is ... else value)
    msg = str(err["msg"]).removeprefix("Value error, ")
    return SpecError(file, key, msg, value=value)


def _set(data: dict[str, Any], table: str, key: str) -> bool:
    return isinstance(data.get(table), dict) and key in data[table]


def _check_combinations(spec: Spec, data: dict[str, Any]) -> None:
    """Options that validate alone but make no sense together, or for this family."""
    f, fam, b, s = spec.path, spec.family, spec.block, spec.space

    def only(table: str, key: str, families: tuple[str, ...], why: str = "") -> None:
        if fam not in families and _set(data, table, key):
            fix = f"remove it; it applies to {', '.join(families)}" + (f" ({why})" if why else "")
            raise SpecError(f, f"{table}.{key}", f"makes no sense for family '{fam}'", value=data[table][key], fix=fix)

    only("block", "skip", ("postnorm", "preact"))
    only("block", "skip_scale", ("postnorm", "preact"))
    only("block", "projection_spectrum", ("postnorm", "preact"))
    only("block", "branch_layers", ("postnorm", "preact"))
    only("block", "branch_scale", ("postnorm", "preact"))
    only("block", "gate_bias", ("highway",))
    only("block", "growth", ("dense",))
    only("block", "transition_every", ("dense",))
    only("block", "compression", ("dense",))
    only("block", "factory", ("custom",))
    only("block", "factory_args", ("custom",))
    for key in ("activation", "norm", "norm_groups"):
        only("block", key, ("plain", "postnorm", "preact", "highway", "dense"), "a custom factory builds its own layers")

    if fam == "custom":
        if not b.factory:
            raise SpecError(f, "block.factory", "is required for family 'custom'", fix='add factory = "package.module:function"')
        mod, sep, fn = b.factory.partition(":")
        if not sep or not mod or not fn.isidentifier():
            raise SpecError(f, "block.factory", 'must look like "package.module:function"', value=b.factory)

    if b.layer == "linear":
        if _set(data, "block", "kernel_size"):
            raise SpecError(f, "block.kernel_size", "is a conv2d option but block.layer is 'linear'", value=b.kernel_size, fix='remove it or set block.layer = "conv2d"')
        if _set(data, "space", "spatial"):
            raise SpecError(f, "space.spatial", "is a conv2d option but block.layer is 'linear'", value=list(s.spatial or ()), fix='remove it or set block.layer = "conv2d"')
    elif b.kernel_size % 2 == 0:
        raise SpecError(f, "block.kernel_size", "must be odd so that 'same' padding keeps the spatial size", value=b.kernel_size, fix=f"use {b.kernel_size + 1}")

    one_value_per_channel = b.layer == "linear" or (s.spatial or (8, 8))[0] == 1
    if b.norm == "batch" and spec.probe.mode == "train" and s.batch[0] == 1 and one_value_per_channel:
        raise SpecError(
            f, "space.batch", "batch norm in train mode needs more than one value per channel, and a batch of 1 gives one",
            value=list(s.batch), fix=f"start the range at 2 ([2, {max(s.batch[1], 2)}]), or set probe.mode = \"eval\"",
        )
    for key, rng in (("width", s.width), ("input_width", s.input_width)):
        if b.norm == "group" and rng is not None and rng[0] == 1 and one_value_per_channel:
            raise SpecError(
                f, f"space.{key}", f"group norm needs more than one value per group, and a {key} of 1 gives one",
                value=list(rng), fix=f"start the range at 2 ([2, {max(rng[1], 2)}]), or use another norm",
            )
    if _set(data, "block", "norm_groups") and b.norm != "group":
        raise SpecError(f, "block.norm_groups", "only applies to norm = \"group\"", value=b.norm_groups, fix='remove it or set block.norm = "group"')
    if b.skip == "scaled":
        if b.skip_scale is None:
            raise SpecError(f, "block.skip_scale", 'is required with skip = "scaled"', fix="add skip_scale = 0.5 (the fixed λ on the route around)")
    elif b.skip_scale is not None:
        raise SpecError(f, "block.skip_scale", 'only applies to skip = "scaled"', value=b.skip_scale, fix='remove it or set block.skip = "scaled"')
    if b.projection_spectrum is not None:
        if b.skip != "projection":
            raise SpecError(f, "block.projection_spectrum", 'only applies to skip = "projection"', value=list(b.projection_spectrum), fix='remove it or set block.skip = "projection"')
        lo, hi = b.projection_spectrum
        if not 0 < lo <= hi:
            raise SpecError(f, "block.projection_spectrum", "must be [s_min, s_max] with 0 < s_min <= s_max", value=list(b.projection_spectrum))

    if fam in ("plain", "dense", "highway") and any(i in ("rezero", "skipinit") for i in s.branch_init):
        bad = next(i for i in s.branch_init if i in ("rezero", "skipinit"))
        raise SpecError(f, "space.branch_init", f"'{bad}' scales a residual branch; family '{fam}' has none", value=s.branch_init, fix='use "default" or "zero"')
    if fam == "plain" and "zero" in s.branch_init:
        raise SpecError(f, "space.branch_init", "'zero' zeroes a residual branch; family 'plain' has none", value=s.branch_init, fix='use "default"')

    # A case draws input_width and width independently: they can differ unless both are one value.
    if s.input_width is not None and not (s.input_width == s.width and s.width[0] == s.width[1]):
        joins = f"widths {list(s.input_width)} (space.input_width) and {list(s.width)} (space.width), drawn independently"
        if fam in ("postnorm", "preact") and b.skip in ("identity", "scaled", "norm"):
            raise SpecError(f, "block.skip", f"an identity skip cannot join {joins}", value=b.skip, fix='set block.skip = "projection" or remove space.input_width')
        if fam in ("highway", "dense", "custom"):
            raise SpecError(f, "space.input_width", f"family '{fam}' keeps one width throughout", value=list(s.input_width), fix="remove it")
        if b.projection_spectrum is not None:
            raise SpecError(f, "block.projection_spectrum", f"sets the singular values of a square projection, but the first block joins {joins}", value=list(b.projection_spectrum), fix="remove space.input_width or block.projection_spectrum")
        if "identity" in s.weight_init:
            raise SpecError(f, "space.weight_init", f"'identity' needs square weights, but the first block joins {joins}", value=s.weight_init, fix="remove space.input_width")

    if not spec.invariants():
        raise SpecError(f, "expect", "declares no invariant", fix=f"add at least one of [expect.{INVARIANTS[0]}], [expect.{INVARIANTS[1]}], [expect.{INVARIANTS[2]}]")
    ga = spec.expect.gradient_arrival
    if ga is not None and ga.lo > ga.hi:
        raise SpecError(f, "expect.gradient_arrival.lo", f"is above hi = {ga.hi}", value=ga.lo, fix="swap lo and hi")
    vg = spec.expect.variance_growth
    if vg is not None and vg.min_ratio is not None and vg.max_ratio is not None and vg.min_ratio > vg.max_ratio:
        raise SpecError(f, "expect.variance_growth.min_ratio", f"is above max_ratio = {vg.max_ratio}", value=vg.min_ratio)
    if spec.expect.identity_at_init is not None:
        if fam in ("plain", "dense"):
            raise SpecError(f, "expect.identity_at_init", f"family '{fam}' has no branch to zero, so it is never the identity by construction", fix="remove it")
        if fam != "custom" and not ZERO_BRANCH_INITS & set(s.branch_init):
            raise SpecError(f, "space.branch_init", "identity_at_init is checked on zero-branch cases, and this space has none", value=s.branch_init, fix='add "zero", "rezero" or "skipinit"')
    from stability.case import parse_case_string

    for i, text in enumerate(s.examples):
        try:
            parse_case_string(text, spec)
        except Exception as exc:  # a UsageError for an unknown key or a value outside the space
            raise SpecError(f, f"space.examples[{i}]", str(exc), value=text) from None


def describe_family(family: str) -> str:
    return _FAMILY_DESCRIPTIONS[family]


def spec_schema() -> dict[str, Any]:
    """The JSON Schema of the spec format (for editors and TOML language servers)."""
    schema = Spec.model_json_schema()
    schema["properties"].pop("path", None)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "stability spec"
    schema["description"] = "A stability spec file: the architecture, its search space and the invariants it must satisfy."
    return schema
