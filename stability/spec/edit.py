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

__all__ = ["edited_text"]


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
