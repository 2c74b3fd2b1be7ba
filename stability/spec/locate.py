"""Where in a spec's text an expectation is written: the line a CI annotation points at.

TOML lets one expectation be written in several shapes, and every one of them is found:

    [expect.gradient_arrival]          # a table header (also [ expect . "gradient_arrival" ])
    lo = 0.5

    [expect]
    gradient_arrival = { lo = 0.5 }    # an inline table under [expect]
    variance_growth.max_growth = "linear"   # a dotted key under [expect]

    expect.identity_at_init.atol = 0.0 # a dotted key at the top level

The line is that of the first statement (a table header or a key) whose key path begins with
`expect.NAME`. An expectation written inside an inline `expect = { … }` points at that line, and
one that cannot be found (an unreadable file) at line 1. The text is read statement by statement:
strings (basic, literal and both multi-line forms), comments and values that span lines (arrays,
inline tables) are skipped, so `[expect.x]` inside a string or a comment is never taken for a
header. Key paths are decoded by `tomllib` itself, so quoting and escapes mean what TOML says.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

__all__ = ["expectation_line", "locate_expectation", "statements"]


def _skip_string(text: str, i: int) -> int:
    """`text[i]` opens a string: the index just after it closes."""
    quote = text[i]
    if text.startswith(quote * 3, i):
        end = text.find(quote * 3, i + 3)
        while quote == '"' and end != -1 and _escaped(text, end):
            end = text.find(quote * 3, end + 1)
        if end == -1:
            return len(text)
        end += 3
        while end < len(text) and text[end] == quote:  # up to two quotes may close the content
            end += 1
        return end
    j = i + 1
    while j < len(text) and text[j] not in (quote, "\n"):
        j += 2 if quote == '"' and text[j] == "\\" else 1
    return j + 1


def _escaped(text: str, i: int) -> bool:
    """Is `text[i]` preceded by an odd number of backslashes?"""
    n = 0
    while i - n - 1 >= 0 and text[i - n - 1] == "\\":
        n += 1
    return n % 2 == 1


def _scan_to(text: str, i: int, stop: str) -> int:
    """The index of the first `stop` character at or after `i` outside quoted keys."""
    while i < len(text) and text[i] not in stop:
        if text[i] in "\"'":
            i = _skip_string(text, i)
            continue
        i += 1
    return i


def _skip_value(text: str, i: int) -> int:
    """From the start of a value, the index of the newline that ends its statement."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c in "\"'":
            i = _skip_string(text, i)
            continue
        if c == "#":
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        if c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        elif c == "\n" and depth <= 0:
            return i
        i += 1
    return i


def _path(key: str) -> tuple[str, ...] | None:
    """The key path of a TOML key (`expect . "x"` → ("expect", "x")), decoded by tomllib."""
    try:
        node: Any = tomllib.loads(f"{key} = 0")
    except tomllib.TOMLDecodeError:
        return None
    parts = []
    while isinstance(node, dict) and len(node) == 1:
        name = next(iter(node))
        parts.append(name)
        node = node[name]
    return tuple(parts)


def statements(text: str) -> list[tuple[tuple[str, ...], int]]:
    """(full key path, 1-based line) of every table header and key/value statement, in order; a
    key's path includes the table it is under."""
    found: list[tuple[tuple[str, ...], int]] = []
    table: tuple[str, ...] = ()
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\r\n\ufeff":
            i += 1
            continue
        if c == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        line = text.count("\n", 0, i) + 1
        if c == "[":
            array = text.startswith("[[", i)
            start = i + (2 if array else 1)
            end = _scan_to(text, start, "]\n")
            path = _path(text[start:end])
            if path is not None:
                table = path
                found.append((path, line))
            i = _skip_value(text, end + (2 if array else 1))
            continue
        end = _scan_to(text, i, "=\n")
        path = _path(text[i:end])
        if path is not None:
            found.append((table + path, line))
        i = _skip_value(text, end + 1)
    return found


def expectation_line(text: str, name: str) -> int:
    """The line where expectation `name` is written in the spec text `text` (1 if not found)."""
    inline = None
    for path, line in statements(text):
        if path[:2] == ("expect", name):
            return line
        if path == ("expect",) and inline is None:
            inline = line  # expect = { name = { … } } on one line
    return inline or 1


def locate_expectation(spec_path: str | Path, name: str) -> int:
    """`expectation_line` of the spec file at `spec_path`; 1 when the file cannot be read (a path
    with a NUL in it names no file: ValueError)."""
    try:
        text = Path(spec_path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError):
        return 1
    return expectation_line(text, name)
