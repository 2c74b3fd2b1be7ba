"""How the harness writes a number, in one place: in JSON, where NaN and ±inf have no literal (the
reports write them as the strings "nan", "inf" and "-inf", and read those strings back as floats;
`stability suggest --json` writes null instead), and for a person (`number_text`: three
significant digits). Used by every stage; imports nothing of the harness.
"""

from __future__ import annotations

import math
from typing import Any, Literal, overload

__all__ = [
    "NONFINITE_TEXT",
    "json_number",
    "json_safe",
    "from_json_number",
    "from_json_safe",
    "number_text",
]

#: The strings a JSON report writes for the floats JSON cannot hold (what `str(float)` gives).
NONFINITE_TEXT = frozenset({"nan", "inf", "-inf"})


@overload
def json_number(x: float, *, nonfinite: Literal["null"]) -> float | None: ...
@overload
def json_number(x: float | None, *, nonfinite: Literal["text", "null"] = "text") -> float | str | None: ...
def json_number(x: float | None, *, nonfinite: Literal["text", "null"] = "text") -> float | str | None:
    """`x` as JSON can hold it: a non-finite float as "nan", "inf" or "-inf" (`nonfinite="text"`)
    or as None (`"null"`); anything else as it is."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x) if nonfinite == "text" else None
    return x


def json_safe(value: Any, *, nonfinite: Literal["text", "null"] = "text") -> Any:
    """`value` (plain data: dicts, lists, numbers, strings) with every float through `json_number`,
    at any depth of its lists, tuples (as lists, which JSON writes alike) and dicts."""
    if isinstance(value, float):
        return json_number(value, nonfinite=nonfinite)
    if isinstance(value, list | tuple):
        return [json_safe(v, nonfinite=nonfinite) for v in value]
    if isinstance(value, dict):
        return {k: json_safe(v, nonfinite=nonfinite) for k, v in value.items()}
    return value


def from_json_number(x: Any) -> Any:
    """A number as a report writes it, back: "nan", "inf" and "-inf" as floats, the rest as it is."""
    return float(x) if isinstance(x, str) and x in NONFINITE_TEXT else x


def from_json_safe(value: Any) -> Any:
    """`json_safe`'s inverse, at any depth of lists and dicts."""
    if isinstance(value, list):
        return [from_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: from_json_safe(v) for k, v in value.items()}
    return from_json_number(value)


def number_text(
    x: float | None,
    *,
    missing: str = "—",
    nan: str = "—",
    infinity: str | None = None,
    trailing_zeros: bool = False,
) -> str:
    """A number for a person: three significant digits (`1.23`, `0.00169`, `4.5e+03`), zero as "0";
    `missing` for None and `nan` for NaN; ±inf as `infinity` ("∞" → "∞"/"−∞") where given, else as
    "inf"/"-inf". `trailing_zeros` keeps them (`1.00`, `0.00`), for columns of before → after."""
    if x is None:
        return missing
    if math.isnan(x):
        return nan
    if math.isinf(x) and infinity is not None:
        return infinity if x > 0 else f"−{infinity}"
    if trailing_zeros:
        return f"{x:#.3g}"
    return "0" if x == 0 else f"{x:.3g}"
