"""Spec files written by tests: one place that lays out a spec's text, so every test states only
what it varies (the family, its [block] keys, its [space], [probe], [train] and its expectations).

- `spec_text` / `make_spec`: any family's spec, from the TOML lines of each table;
- `library_text`: a `family = "library"` spec from the model and its config as a dict;
- `factory_block`: the [block] lines of a `family = "custom"` spec (its factory and arguments);
- `write_spec`: a spec file written into a folder, with the factory modules it imports beside it;
- `shipped_text`: a spec shipped in specs/, with some of its keys set to other values;
- `training_spec`: the shipped degradation spec with its trainability claim, profiles and depths set;
- `make_case`: a case, every field not given at a small float64 CPU default;
- `make_measurements`: a probe's measurements, the fields not given empty (no parameter gradient,
  no identity or input-gradient error, nothing non-finite)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tomlkit

from stability.measure.measurements import Measurements
from stability.spec.case import Case
from stability.spec.load import parse_spec
from stability.spec.schema import Spec

__all__ = [
    "ROOT",
    "SPECS",
    "ZOO",
    "factory_block",
    "library_text",
    "make_case",
    "make_measurements",
    "make_spec",
    "shipped_text",
    "spec_text",
    "toml_value",
    "training_spec",
    "write_spec",
]

#: The specs shipped with the project (specs/*.toml).
#: The repository's root, and the specs it ships (specs/, specs/zoo/).
ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"
ZOO = SPECS / "zoo"


def toml_value(value: object) -> str:
    """`value` as a TOML value on one line: a string, bool, int, float, list, or a dict as an inline table."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else "nan" if math.isnan(value) else repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }" if value else "{}"
    raise TypeError(f"no TOML value for {value!r}")


def spec_text(
    family: str,
    *,
    block: str = "",
    space: str = "",
    probe: str = "",
    train: str = "",
    expect: str = "[expect.gradient_arrival]\n",
    name: str = "t",
    description: str = "t",
) -> str:
    """A spec file's text: `block`, `space`, `probe` and `train` are TOML lines placed under their
    tables ([probe] and [train] only when given); `expect` holds its own `[expect.NAME]` headers."""
    tables = f"[block]\n{block}\n[space]\n{space}\n"
    tables += f"[probe]\n{probe}\n" if probe else ""
    tables += f"[train]\n{train}\n" if train else ""
    return f'name = "{name}"\ndescription = "{description}"\nfamily = "{family}"\n{tables}{expect}\n'


def make_spec(family: str, *, file: str = "<string>", **parts: Any) -> Any:
    """`spec_text`'s spec, validated as `stability check` would (`file` is where errors point)."""
    return parse_spec(spec_text(family, **parts), file=file)


def library_text(
    model: str, config: Mapping[str, object], *, layer: str = "tokens", block: str = "", **parts: str
) -> str:
    """A `family = "library"` spec's text: `model` ("transformers:GPT2Model") built from `config`
    (written as one inline table, in the dict's order), then any further `block` lines; `parts`
    are `spec_text`'s other tables."""
    head = f"layer = {toml_value(layer)}\nmodel = {toml_value(model)}\nconfig = {toml_value(config)}\n"
    return spec_text("library", block=head + block, **parts)


def factory_block(factory: str, args: Mapping[str, object] | None = None, *, layer: str | None = None) -> str:
    """A `family = "custom"` spec's [block] lines: the factory ("module:function"), its
    `factory_args` when given (an inline table) and the `layer` when given."""
    lines = [f"layer = {toml_value(layer)}"] if layer is not None else []
    lines.append(f"factory = {toml_value(factory)}")
    if args is not None:
        lines.append(f"factory_args = {toml_value(args)}")
    return "\n".join(lines) + "\n"


def write_spec(folder: Path, name: str, text: str, *, modules: Mapping[str, str] | None = None) -> Path:
    """Write `text` as folder/NAME.toml, and each of `modules` (module name → source) as
    folder/MODULE.py beside it, for a factory the spec names; returns the spec's path."""
    for module, source in (modules or {}).items():
        (folder / f"{module}.py").write_text(source, encoding="utf-8")
    path = folder / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def shipped_text(name: str, edit: Mapping[str, object], *, expect: str | None = None) -> str:
    """specs/NAME.toml's text with each dotted key of `edit` ("train.profiles") set to its value,
    every other line as shipped. A table the edit names must exist in the shipped spec. `expect`,
    when given, replaces the shipped expectations (its own `[expect.NAME]` headers)."""
    doc = tomlkit.parse((SPECS / f"{name}.toml").read_text(encoding="utf-8"))
    if expect is not None:
        doc.remove("expect")
    for dotted, value in edit.items():
        *tables, key = dotted.split(".")
        table: Any = doc
        for part in tables:
            if part not in table:
                raise KeyError(f"specs/{name}.toml has no table {dotted.rsplit('.', 1)[0]!r}")
            table = table[part]
        table[key] = value
    return tomlkit.dumps(doc) + ("" if expect is None else f"\n{expect}\n")


def training_spec(
    *,
    expect: str = "violated",
    profiles: Sequence[str] = ("thorough",),
    edit: Mapping[str, object] | None = None,
    file: str = "specs/t.toml",
) -> Spec:
    """specs/degradation_plain.toml (He et al. 2016's degradation problem: trainability compares
    depths 4 and 32) with its claim expected to `expect`, run in `profiles`, depth drawn from
    [2, 6] instead of fixed at 4, and every further key of `edit` set; validated, errors at `file`."""
    keys = {"expect.trainability.expect": expect, "train.profiles": list(profiles), "space.depth": [2, 6]}
    return parse_spec(shipped_text("degradation_plain", {**keys, **(edit or {})}), file=file)


#: `make_case`'s defaults: a depth-3, width-4, batch-2 float64 network on the CPU at seed 0.
CASE_DEFAULTS: dict[str, Any] = {
    "depth": 3,
    "width": 4,
    "batch": 2,
    "spatial": None,
    "input_width": None,
    "weight_init": "default",
    "branch_init": "default",
    "dtype": "float64",
    "device": "cpu",
    "seed": 0,
}


def make_case(**fields: Any) -> Case:
    """A `Case` with the given fields and `CASE_DEFAULTS` for the rest."""
    return Case(**{**CASE_DEFAULTS, **fields})


def make_measurements(**fields: Any) -> Measurements:
    """`Measurements` with the given fields; `param_grad_norm` empty and `identity_error`,
    `input_grad_error` and `nonfinite_at` None where not given."""
    empty: dict[str, Any] = {
        "param_grad_norm": {},
        "identity_error": None,
        "input_grad_error": None,
        "nonfinite_at": None,
    }
    return Measurements(**{**empty, **fields})
