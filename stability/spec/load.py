"""Stage 1: a spec file (TOML) → a validated `Spec`.

Specs are data: read with the standard library's `tomllib`, validated by the pydantic models of
`stability.spec.schema` with unknown keys forbidden, then checked for combinations that make no
sense for the family (`stability.spec.combinations`). Every problem becomes one `SpecError` line
naming the file, the key path, the bad value and the fix. Nothing here imports or runs user code;
a `custom` factory is only named here and imported by the builder.
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
from stability.spec.combinations import check_combinations
from stability.spec.registry import FAMILIES
from stability.spec.schema import Spec

__all__ = ["load_spec", "find_specs", "parse_spec", "validate_spec", "preload_modules", "CASE_ARGUMENTS"]


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


def preload_modules(paths: list[str | Path]) -> list[str]:
    """The modules the worker processes of a run over `paths` should import once (each spec's
    family's `preload`, from its raw `[block]` table), read before anything is validated: a file
    that is missing, unreadable or not a spec adds nothing (loading it reports the problem)."""
    modules: list[str] = []
    try:
        files = find_specs(paths)
    except Exception:  # a missing path: the run reports it
        return modules
    for path in files:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8-sig")) if path.is_file() else {}
            name, block = data.get("family"), data.get("block")
            entry = FAMILIES.get(name) if isinstance(name, str) and name in FAMILIES else None
            if entry is not None and entry.preload is not None and isinstance(block, dict):
                modules += [m for m in entry.preload(block) if m not in modules]
        except Exception:  # not TOML, not UTF-8, a family's preload that fails: nothing to preload
            continue
    return modules


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
            kind = (
                "a FIFO"
                if stat.S_ISFIFO(mode)
                else "a device"
                if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket"
                if stat.S_ISSOCK(mode)
                else "not a file"
            )
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
        raise SpecError(
            file, None, "is empty", fix="a spec needs at least name, description, family, [space] and [expect]"
        )
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(file, None, f"is not valid TOML: {exc}", fix="fix the TOML syntax at that line") from None
    except RecursionError:
        raise SpecError(
            file, None, "nests arrays or tables too deeply to read", fix="a spec needs only a few levels of nesting"
        ) from None
    try:
        return validate_spec(data, file=file)
    except RecursionError:
        raise SpecError(
            file, None, "nests arrays or tables too deeply to validate", fix="a spec needs only a few levels of nesting"
        ) from None


def validate_spec(data: Any, *, file: str = "<string>") -> Spec:
    """Validate an already-parsed document (a dict) into a `Spec`."""
    if not isinstance(data, dict):
        raise SpecError(file, None, "must be a TOML table at the top level")
    for reserved in ("path", "options"):
        if reserved in data:
            raise SpecError(file, reserved, "is not a spec key", value=data[reserved], fix="remove it")
    shared, options = _family_options(file, data)
    try:
        spec = Spec.model_validate({**shared, "path": file, "options": options})
    except ValidationError as exc:
        raise _spec_error(file, shared, exc) from None
    check_combinations(spec, data)
    _check_factory_args(spec)
    return spec


def _family_options(file: str, data: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """`data` without the `[block]` keys the spec's family declares as its own (its registry
    entry's `options` model), and those keys validated by that model (None when it has none)."""
    name, block = data.get("family"), data.get("block")
    if not isinstance(name, str) or name not in FAMILIES or not isinstance(block, dict):
        return data, None
    model = FAMILIES.get(name).options
    if model is None:
        return data, None
    own = {k: v for k, v in block.items() if k in model.model_fields}
    try:
        options = model.model_validate(own)
    except ValidationError as exc:
        raise _spec_error(file, {"block": own}, exc, models={("block",): model}) from None
    return {**data, "block": {k: v for k, v in block.items() if k not in model.model_fields}}, options


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


#: pydantic's bound errors, as the words of the rule they state (their ctx holds the bound).
_BOUNDS = {
    "greater_than": ("greater than {}", "use a value above {}"),
    "greater_than_equal": ("at least {}", "use {} or more"),
    "less_than": ("less than {}", "use a value below {}"),
    "less_than_equal": ("at most {}", "use {} or less"),
}
#: What to write instead of a value of the wrong type.
_TYPE_FIXES = {
    "int_type": "a whole number",
    "float_type": "a number",
    "bool_type": "true or false",
    "string_type": "a quoted string",
    "list_type": "a list [...]",
    "tuple_type": "[a, b]",
}


def _type_fix(kind: str, loc: tuple[Any, ...], value: Any) -> str | None:
    """The fix of a value of the wrong type: a number written as a string loses its quotes."""
    if kind in ("int_type", "float_type") and isinstance(value, str):
        try:
            float(value)
        except ValueError:
            pass
        else:
            return f"write it without quotes: {loc[-1]} = {value}"
    what = _TYPE_FIXES.get(kind)
    return f"write {what}" if what else None


def _spec_error(
    file: str,
    data: dict[str, Any],
    exc: ValidationError,
    *,
    models: dict[tuple[str, ...], type[BaseModel]] | None = None,
) -> SpecError:
    """One SpecError line for a pydantic error; `models` maps a key path to the model validated
    there when it is not the spec's own (a family's options, validated apart, under "block")."""
    errors = exc.errors(include_url=False)
    if models:  # the errors of a model validated apart: give them the key path they have in the spec
        prefix = next(iter(models))
        errors = [{**e, "loc": (*prefix, *e["loc"])} for e in errors]
    # An unknown key first: a misspelt required key also shows up as "missing", and the unknown
    # key's "did you mean" is the message that names the fix.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = tuple(err["loc"])
    key = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in loc).replace(".[", "[")
    kind = err["type"]
    value = err.get("input", ...)
    if kind == "extra_forbidden":
        model = (models or {}).get(tuple(str(p) for p in loc[:-1])) or _model_at(loc)
        known = sorted(model.model_fields) if model is not None else []
        known = [k for k in known if k not in ("path", "options")]
        if loc[:-1] == ("block",) and isinstance(data.get("family"), str) and data["family"] in FAMILIES:
            fam = FAMILIES.get(data["family"])  # the keys this family reads, not every family's
            known = sorted(k for k in {*fam.block_keys, *(fam.options.model_fields if fam.options else ())})
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
            return SpecError(
                file, key, "must be a finite number (no nan or inf)", value=value, fix="write a finite number"
            )
        value = _lookup(data, loc) if value is ... else value
        return SpecError(file, key, _TYPE_WORDS[kind], value=value, fix=_type_fix(kind, loc, value))
    if kind in _BOUNDS:
        (rule, fix), ctx = _BOUNDS[kind], err.get("ctx", {})
        bound = next(iter(ctx.values())) if ctx else None
        if bound is not None:
            return SpecError(file, key, "must be " + rule.format(bound), value=value, fix=fix.format(bound))
    msg = str(err["msg"]).removeprefix("Value error, ")
    return SpecError(file, key, msg, value=value)
