"""A library config's values filled from the case: `"width"`, `"4*width"`, `"width/64"`, `"depth"`
name a case key (an integer field of `Case`), scaled by a factor or an exact divisor, and are
replaced by the case's value when the model is built (docs/library-models.md, section 2)."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping
from typing import Any

from stability.errors import CaseError, SpecError
from stability.spec.case import Case

__all__ = ["CASE_KEYS", "check_placeholders", "placeholders", "fill"]

#: The case's keys a config value may name: `Case`'s integer fields (depth, width, batch, spatial, …).
CASE_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Case) if str(f.type).startswith("int"))

_PLACEHOLDER = re.compile(r"\s*(?:(\d+(?:\.\d+)?)\s*\*\s*)?([a-z_]+)(?:\s*/\s*(\d+))?\s*")


def check_placeholders(value: Any, *, file: str, key: str) -> None:
    """Refuse a config value that scales a name that is not a case key (`"2*widht"`)."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            check_placeholders(v, file=file, key=f"{key}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_placeholders(v, file=file, key=f"{key}[{i}]")
    elif isinstance(value, str):
        match = _PLACEHOLDER.fullmatch(value)
        if match and (match.group(1) or match.group(3)) and match.group(2) not in CASE_KEYS:
            close = difflib.get_close_matches(match.group(2), CASE_KEYS, n=3, cutoff=0.6)
            fix = f"close names: {', '.join(close)}" if close else f"use one of {', '.join(CASE_KEYS)}"
            raise SpecError(file, key, f"names {match.group(2)!r}, which is not a case key", value=value, fix=fix)


def placeholders(value: Any) -> set[str]:
    """The case keys a config value names (`["width", "2*width", 3]` → {"width"})."""
    if isinstance(value, Mapping):
        return set().union(*(placeholders(v) for v in value.values()))
    if isinstance(value, (list, tuple)):
        return set().union(*(placeholders(v) for v in value))
    match = _PLACEHOLDER.fullmatch(value) if isinstance(value, str) else None
    return {match.group(2)} if match and match.group(2) in CASE_KEYS else set()


def fill(value: Any, values: Mapping[str, Any]) -> Any:
    """`value` with every placeholder (`"width"`, `"4*width"`, `"width/8"`) replaced by the case's
    value; `"key/N"` must divide exactly (a CaseError otherwise: that case cannot be built)."""
    if isinstance(value, Mapping):
        return {k: fill(v, values) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [fill(v, values) for v in value]
    if not isinstance(value, str):
        return value
    match = _PLACEHOLDER.fullmatch(value)
    if not match or match.group(2) not in CASE_KEYS:
        return value
    base = values.get(match.group(2))
    if base is None:
        raise CaseError(f"{value!r} names the case's {match.group(2)}, which this case does not set")
    factor, divisor = match.group(1), match.group(3)
    out = base if factor is None else (int(factor) if factor.isdigit() else float(factor)) * base
    if isinstance(out, float):  # "3.5*width": a size, so an integer
        if not out.is_integer():
            raise CaseError(f"{value!r} is {out:g}, not an integer")
        out = int(out)
    if divisor is not None:
        if out % int(divisor):
            raise CaseError(f"{value!r} is {out}/{divisor}, not an integer")
        out = out // int(divisor)
    return out
