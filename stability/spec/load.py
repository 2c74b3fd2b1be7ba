"""Stage 1: a spec file (TOML) → a validated `Spec`.

Specs are data: read with the standard library's `tomllib`, validated by the pydantic models of
`stability.spec.schema` with unknown keys forbidden, then checked for combinations that make no
sense for the family. Every problem becomes one `SpecError` line naming the file, the key path,
the bad value and the fix. Nothing here imports or runs user code; a `custom` factory is only
named here and imported by the builder.
"""

from __future__ import annotations

import math
import os
import stat
import tomllib
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from stability.errors import SpecError, did_you_mean
from stability.spec.schema import INVARIANTS, TRAINING_INVARIANTS, ZERO_BRANCH_INITS, Spec

__all__ = ["load_spec", "find_specs", "parse_spec", "validate_spec", "CASE_ARGUMENTS"]


def find_specs(paths: list[str | Path]) -> list[Path]:
    """Expand files and folders into the sorted list of `*.toml` spec files they name. A file
    named twice (`specs specs/a.toml`) is listed once; a path that exists but is not a regular file
    (a FIFO, a device) is listed so that loading it reports what it is."""
    found: list[Path] = []
    seen: set[Path] = set()

    def add(p: Path) -> None:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            found.append(p)

    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            for f in sorted(p.rglob("*.toml")):
                add(f)
        elif p.is_file() or os.path.lexists(p):
            add(p)
        else:
            from stability.errors import UsageError

            raise UsageError(f"{raw}: no such file or folder; pass a spec file or a folder of *.toml specs")
    return found


def load_spec(path: str | Path) -> Spec:
    """Read and validate one spec file. Raises `SpecError` with a one-line explanation. Only a
    regular file is read (a FIFO would block forever); a UTF-8 byte-order mark is accepted."""
    path = Path(path)
    file = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise SpecError(file, None, f"cannot be read ({exc.strerror})", fix="check the path") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file"
            raise SpecError(file, None, f"is not a regular file ({kind}); it was not read", fix="pass spec files only")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            raw = fh.read()
    except OSError as exc:
        raise SpecError(file, None, f"cannot be read ({exc.strerror})", fix="check the path") from None
    finally:
        os.close(fd)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SpecError(
            file,
            None,
            f"is not UTF-8 text (byte {exc.start}: {raw[exc.start : exc.start + 1]!r})",
            fix="save the spec as UTF-8",
        ) from None
    return parse_spec(text, file=file)


def parse_spec(text: str, *, file: str = "<string>") -> Spec:
    """Validate spec text (TOML). Raises `SpecError` with a one-line explanation."""
    if not text.strip():
        raise SpecError(file, None, "is empty", fix="a spec needs at least name, description, family, [space] and [expect]")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(file, None, f"is not valid TOML: {exc}", fix="fix the TOML syntax at that line") from None
    except RecursionError:
        raise SpecError(file, None, "nests arrays or tables too deeply to read", fix="a spec needs only a few levels of nesting") from None
    try:
        return validate_spec(data, file=file)
    except RecursionError:
        raise SpecError(file, None, "nests arrays or tables too deeply to validate", fix="a spec needs only a few levels of nesting") from None


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
    _check_factory_args(spec)
    return spec


#: What a custom factory receives from the drawn case; `factory_args` may not override these.
CASE_ARGUMENTS = (
    "depth",
    "width",
    "batch",
    "spatial",
    "input_width",
    "weight_init",
    "init",
    "branch_init",
    "dtype",
    "torch_dtype",
    "device",
    "seed",
    "layer",
    "tokens",
)


def _check_factory_args(spec: Spec) -> None:
    clash = sorted(set(spec.block.factory_args) & set(CASE_ARGUMENTS))
    if clash:
        raise SpecError(
            spec.path,
            f"block.factory_args.{clash[0]}",
            "would override the value drawn from [space]",
            value=spec.block.factory_args[clash[0]],
            fix=f"set it in [space] instead (e.g. {clash[0]} = ...), or rename the argument",
        )


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model class that owns the last key of `loc` (for 'did you mean')."""
    model: type[BaseModel] | None = Spec
    for part in loc[:-1]:
        if not isinstance(part, str) or model is None:
            return None
        field = model.model_fields.get(part)
        if field is None:
            return None
        nxt: type[BaseModel] | None = None
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

    only("block", "skip", ("postnorm", "preact", "transformer"))
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
        only("block", key, ("plain", "postnorm", "preact", "highway", "dense", "transformer"), "a custom factory builds its own layers")
    for key in ("norm_position", "causal", "heads", "head_dim", "mlp", "mlp_ratio", "residual", "layerscale_init"):
        only("block", key, ("transformer",))

    if fam == "custom":
        if not b.factory:
            raise SpecError(f, "block.factory", "is required for family 'custom'", fix='add factory = "package.module:function"')
        mod, sep, fn = b.factory.partition(":")
        if not sep or not mod or not fn.isidentifier():
            raise SpecError(f, "block.factory", 'must look like "package.module:function"', value=b.factory)

    if b.layer in ("linear", "tokens"):
        if _set(data, "block", "kernel_size"):
            raise SpecError(f, "block.kernel_size", f"is a conv2d option but block.layer is '{b.layer}'", value=b.kernel_size, fix='remove it or set block.layer = "conv2d"')
        if _set(data, "space", "spatial"):
            raise SpecError(f, "space.spatial", f"is a conv2d option but block.layer is '{b.layer}'", value=list(s.spatial or ()), fix='remove it or set block.layer = "conv2d"')
    elif b.kernel_size % 2 == 0:
        raise SpecError(f, "block.kernel_size", "must be odd so that 'same' padding keeps the spatial size", value=b.kernel_size, fix=f"use {b.kernel_size + 1}")

    one_value_per_channel = b.layer == "linear" or (s.spatial[0] if s.spatial else 8) == 1
    if b.layer == "tokens":  # (B, T, C): B·T values per channel
        one_value_per_channel = s.tokens is not None and min(s.tokens) == 1  # default 8 tokens
    if b.norm == "batch" and spec.probe.mode == "train" and s.batch[0] == 1 and one_value_per_channel:
        raise SpecError(
            f,
            "space.batch",
            "batch norm in train mode needs more than one value per channel, and a batch of 1 gives one",
            value=list(s.batch),
            fix=f'start the range at 2 ([2, {max(s.batch[1], 2)}]), or set probe.mode = "eval"',
        )
    for key, rng in (("width", s.width), ("input_width", s.input_width)):
        if b.norm == "group" and rng is not None and rng[0] == 1 and one_value_per_channel:
            raise SpecError(
                f,
                f"space.{key}",
                f"group norm needs more than one value per group, and a {key} of 1 gives one",
                value=list(rng),
                fix=f"start the range at 2 ([2, {max(rng[1], 2)}]), or use another norm",
            )
    if _set(data, "block", "norm_groups") and b.norm != "group":
        raise SpecError(f, "block.norm_groups", 'only applies to norm = "group"', value=b.norm_groups, fix='remove it or set block.norm = "group"')
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
            raise SpecError(
                f,
                "block.projection_spectrum",
                f"sets the singular values of a square projection, but the first block joins {joins}",
                value=list(b.projection_spectrum),
                fix="remove space.input_width or block.projection_spectrum",
            )
        if "identity" in s.weight_init:
            raise SpecError(f, "space.weight_init", f"'identity' needs square weights, but the first block joins {joins}", value=s.weight_init, fix="remove space.input_width")

    _check_tokens(spec, data)
    if not spec.invariants():
        raise SpecError(f, "expect", "declares no invariant", fix=f"add at least one of {', '.join(f'[expect.{name}]' for name in INVARIANTS)} (`stability explain NAME` describes each)")
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
    from stability.spec.theory_keys import check_spec

    check_spec(spec)
    from stability.spec.applicability import check_applies_when
    from stability.spec.case import parse_case_string

    check_applies_when(spec, data)
    for i, text in enumerate(s.examples):
        try:
            parse_case_string(text, spec)
        except Exception as exc:  # a UsageError for an unknown key or a value outside the space
            raise SpecError(f, f"space.examples[{i}]", str(exc), value=text) from None
    _check_training(spec)


def _check_training(spec: Spec) -> None:
    """The `[train]` table and the training invariants come together."""
    f = spec.path
    declared = [n for n in TRAINING_INVARIANTS if getattr(spec.expect, n) is not None]
    if declared and spec.train is None:
        raise SpecError(f, "train", f"is required by expect.{declared[0]} (the optimizer run it judges)", fix="add [train] with steps = 100, lr = 0.01 (see docs/training.md)")
    if spec.train is not None and not declared:
        raise SpecError(f, "train", "applies only to the training invariants, and this spec declares none", fix=f"remove it or add one of {', '.join(f'[expect.{n}]' for n in TRAINING_INVARIANTS)}")
    if declared and spec.family == "custom":
        raise SpecError(
            f,
            f"expect.{declared[0]}",
            "is checked on the built-in families only (the run adds an input layer and a readout to the family's blocks)",
            fix="remove it, or describe the network with a built-in family",
        )
    if spec.train is not None and spec.train.warmup >= spec.train.steps:
        raise SpecError(f, "train.warmup", f"must be below train.steps = {spec.train.steps}", value=spec.train.warmup, fix="shorten the warm-up or raise steps")


def _check_tokens(spec: Spec, data: dict[str, Any]) -> None:
    """Token inputs, the transformer family, and the invariants that need tokens or attention."""
    f, fam, b, s, e = spec.path, spec.family, spec.block, spec.space, spec.expect
    if b.layer != "tokens" and _set(data, "space", "tokens"):
        raise SpecError(f, "space.tokens", f"is a token-input option but block.layer is '{b.layer}'", value=list(s.tokens or ()), fix='remove it or set block.layer = "tokens"')
    if fam == "transformer":
        if b.layer != "tokens":
            raise SpecError(f, "block.layer", "family 'transformer' works on (batch, tokens, channels) inputs", value=b.layer, fix='set block.layer = "tokens"')
        if b.norm not in ("layer", "rms", "none"):
            raise SpecError(f, "block.norm", 'family \'transformer\' normalises each token: choose "layer", "rms" or "none"', value=b.norm, fix='use norm = "layer"')
        if b.skip not in ("identity", "none"):
            raise SpecError(
                f,
                "block.skip",
                "family 'transformer' has an identity skip or none",
                value=b.skip,
                fix='use skip = "identity" (or "none" for a negative control); scale the branches with block.residual',
            )
        if b.residual == "deepnorm" and b.norm_position != "post":
            raise SpecError(f, "block.residual", "DeepNorm (Wang et al. 2022) up-weights the skip of a post-norm block", value=b.residual, fix='set block.norm_position = "post"')
        if b.residual in ("deepnorm", "rezero", "skipinit", "layerscale") and b.skip == "none":
            raise SpecError(
                f,
                "block.residual",
                f"'{b.residual}' scales a residual connection, and skip = \"none\" removes it",
                value=b.residual,
                fix='remove block.residual or set block.skip = "identity"',
            )
        if _set(data, "block", "layerscale_init") and b.residual != "layerscale":
            raise SpecError(f, "block.layerscale_init", 'only applies to residual = "layerscale"', value=b.layerscale_init, fix='remove it or set block.residual = "layerscale"')
        if _set(data, "block", "mlp_ratio") and not b.mlp:
            raise SpecError(f, "block.mlp_ratio", "sizes the MLP sublayer, and mlp = false removes it", value=b.mlp_ratio, fix="remove it or set mlp = true")
        if b.heads is not None and b.head_dim is not None:
            raise SpecError(
                f,
                "block.head_dim",
                "is set together with block.heads; one of them follows from the width",
                value=b.head_dim,
                fix="keep one: head_dim (heads = width / head_dim) or heads (head_dim = width / heads)",
            )
        step = b.head_dim or b.heads or 1
        name = "block.head_dim" if b.head_dim else "block.heads"
        w = s.width
        fits = all(v % step == 0 for v in w.values) if w.values is not None else (w.multiple_of % step == 0 or (w[0] == w[1] and w[0] % step == 0))
        if not fits:
            lo, hi = max(step, -(-w[0] // step) * step), max(step, (w[1] // step) * step)
            raise SpecError(
                f,
                "space.width",
                f"must be a multiple of {name} = {step} for every drawn value, so the heads divide the width",
                value=w.describe(),
                fix=f"write width = {{ range = [{lo}, {max(lo, hi)}], multiple_of = {step} }}",
            )
        if any(i in ("rezero", "skipinit") for i in s.branch_init):
            raise SpecError(
                f,
                "space.branch_init",
                "family 'transformer' sets ReZero and SkipInit with block.residual",
                value=s.branch_init,
                fix='use "default" or "zero", and block.residual = "rezero" or "skipinit"',
            )
        if s.input_width is not None:
            raise SpecError(f, "space.input_width", "family 'transformer' keeps one width throughout", value=list(s.input_width), fix="remove it")
        if e.identity_at_init is not None and b.norm_position == "post" and b.norm != "none":
            raise SpecError(f, "expect.identity_at_init", "a post-norm block normalises the sum, so it is never the identity", fix='remove it, or use norm_position = "pre" or "sandwich"')
        if e.identity_at_init is not None and "zero" not in s.branch_init:
            raise SpecError(
                f,
                "space.branch_init",
                "identity_at_init is checked on zero-branch cases, and this space has none",
                value=s.branch_init,
                fix='add "zero" (it zeroes the last layer of every sublayer)',
            )
        if e.identity_at_init is not None and b.skip == "none":
            raise SpecError(f, "expect.identity_at_init", 'a block without a skip (skip = "none") is never the identity', fix="remove it")
    for key, inv in (("rank_collapse", e.rank_collapse), ("attention_entropy", e.attention_entropy)):
        if inv is None:
            continue
        if b.layer != "tokens":
            raise SpecError(f, f"expect.{key}", "is measured over tokens, and this spec has no token inputs", fix='set block.layer = "tokens" (with space.tokens), or remove it')
        if (s.tokens or (8, 8))[0] < 2:
            raise SpecError(f, "space.tokens", f"{key} compares tokens, so it needs at least 2", value=list(s.tokens or ()), fix=f"start the range at 2 ([2, {max((s.tokens or (8, 8))[1], 2)}])")
    if e.attention_entropy is not None and fam not in ("transformer", "custom"):
        raise SpecError(f, "expect.attention_entropy", f"family '{fam}' has no attention", fix='remove it, or use family = "transformer"')
