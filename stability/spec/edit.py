"""A remedy's edit applied to a spec file's text, keeping what the user wrote: comments, the order
of tables and keys, the layout of every line the edit does not touch (tomlkit, a style-preserving
TOML reader and writer). `stability.spec.remedy.apply_edit` applies the same edit to the parsed
document; the text written here parses to exactly that document (checked before it is returned)."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from typing import Any

import tomlkit
from tomlkit.items import AoT, Table

from stability.spec.remedy import REMOVE, apply_edit

__all__ = ["edited_text", "commented_text", "generated_text", "COMMENT_MARK"]

#: How a comment the tool wrote beside a key begins (`commented_text`): a later run replaces it,
#: and keeps whatever the user wrote after `COMMENT_KEEP`.
COMMENT_MARK = "calibrated"
COMMENT_KEEP = " ‖ "


def _plain(value: Any) -> Any:
    """Python values tomlkit can write (tuples as arrays)."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _add_after_last_key(table: Table, key: str, value: Any) -> None:
    """`key = value` added to `table` after its last key: the comments and blank lines that close
    the table (a comment above the next table's header among them, which tomlkit reads as this
    table's) stay below it, on the header they describe; a sub-table (`[block.config]`) stays
    after the keys."""
    body = table.value.body
    last = max(
        (i for i, (k, item) in enumerate(body) if k is not None and not isinstance(item, Table | AoT)), default=-1
    )
    if last == len(body) - 1 or not hasattr(table.value, "_insert_at"):
        table[key] = value
    else:
        table.value._insert_at(last + 1, key, value)


def edited_text(text: str, edit: Mapping[str, Any]) -> str:
    """`text` (a spec file) with `edit` applied: a changed key keeps its place (and its comment),
    a new key goes after the last key of its table, a new table at the end of the file."""
    doc = tomlkit.parse(text)
    for key, after in edit.items():
        *tables, last = key.split(".")
        node: Any = doc
        for part in tables:
            if part not in node:
                node[part] = tomlkit.table()
            node = node[part]
        if after is REMOVE:
            if last in node:
                del node[last]
            continue
        value = _plain(after)
        if (
            last in node
            and isinstance(node, Table | dict)
            and hasattr(node[last], "trivia")
            and not isinstance(value, dict)
        ):
            trivia = node[last].trivia
            item = tomlkit.item(value)
            item.trivia.comment_ws, item.trivia.comment = trivia.comment_ws, trivia.comment
            node[last] = item
        elif last not in node and isinstance(node, Table):
            _add_after_last_key(node, last, value)
        else:
            node[last] = value
    out = tomlkit.dumps(doc)
    if tomllib.loads(out) != apply_edit(
        tomllib.loads(text), {k: _plain(v) if v is not REMOVE else v for k, v in edit.items()}
    ):
        raise ValueError("the edited text does not parse to the edited document")  # a tomlkit bug: never write it
    return out


def _merged(comment: str, old: str) -> str:
    """The tool's new comment beside a key that had `old` (tomlkit's text, with its "#"): the
    user's own comment is kept after `COMMENT_KEEP`; a comment the tool wrote is replaced."""
    old = old.lstrip("#").strip()
    if old.startswith(COMMENT_MARK):
        old = old.partition(COMMENT_KEEP.strip())[2].strip()
    return f"{comment}{COMMENT_KEEP}{old}" if old else comment


def commented_text(text: str, values: Mapping[str, tuple[Any, str]]) -> str:
    """`text` (a spec file) with each key `a.b.c` of `values` set to its value and the comment
    beside it (which should begin with `COMMENT_MARK`): a set key keeps its place, a new key goes
    after the last key of its table, every other line is left as it was. A comment the user wrote
    beside a set key is kept after the new one."""
    doc = tomlkit.parse(text)
    for key, (value, comment) in values.items():
        *tables, last = key.split(".")
        node: Any = doc
        for part in tables:
            if part not in node:
                node[part] = tomlkit.table()
            node = node[part]
        item = tomlkit.item(_plain(value))
        old = node[last].trivia.comment if last in node and hasattr(node[last], "trivia") else ""
        item.comment(_merged(comment, old))
        item.trivia.comment_ws = "  "
        if last not in node and isinstance(node, Table):
            _add_after_last_key(node, last, item)
        else:
            node[last] = item
    out = tomlkit.dumps(doc)
    expected = apply_edit(tomllib.loads(text), {k: _plain(v) for k, (v, _) in values.items()})
    if tomllib.loads(out) != expected:
        raise ValueError("the edited text does not parse to the edited document")  # a tomlkit bug: never write it
    return out


def generated_text(data: Mapping[str, Any], *, header: list[str], notes: Mapping[str, list[str]]) -> str:
    """A spec file written from `data` (its top-level keys, then a `[table]` for each mapping, and
    `[expect.NAME]` for each expectation, inline tables below them): the `header` lines as comments
    first, and `notes["table.path"]`'s lines as comments at the top of that table. What it writes
    parses back to `data` (checked)."""
    doc = tomlkit.document()
    for line in header:
        doc.add(tomlkit.comment(line) if line else tomlkit.nl())

    def fill(table: Any, path: str, values: Mapping[str, Any]) -> None:
        for line in notes.get(path, []):
            table.add(tomlkit.comment(line))
        for key, value in values.items():
            if not isinstance(value, Mapping):
                table.add(key, _plain(value))
        for key, value in values.items():
            if isinstance(value, Mapping) and path == "" and key != "expect":
                sub = tomlkit.table()
                fill(sub, key, value)
                table.add(key, sub)
            elif isinstance(value, Mapping) and key == "expect" and path == "":
                outer = tomlkit.table(is_super_table=True)
                for name, expectation in value.items():
                    inner = tomlkit.table()
                    fill(inner, f"expect.{name}", expectation)
                    outer.add(name, inner)
                table.add("expect", outer)
            elif isinstance(value, Mapping):
                inline = tomlkit.inline_table()
                inline.update(_plain(value))
                table.add(key, inline)

    fill(doc, "", data)
    out = tomlkit.dumps(doc)
    if tomllib.loads(out) != _plain(dict(data)):
        raise ValueError("the generated text does not parse to its data")  # a tomlkit bug: never write it
    return out
