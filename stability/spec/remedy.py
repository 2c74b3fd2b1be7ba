"""Remedies: the registry of spec changes that fix a failing expectation, and the one way a change
is applied to a spec's data.

A `Remedy` is one registered object, declared whole, like an invariant or a family
(`stability.spec.registry`): its name, a summary, the invariants whose failure it is meant for
(`fixes`), when it applies to a spec (`applies`), the spec transformation (`edit`: dotted key →
new value, read from the spec and the data the user wrote), and its references. `stability
suggest` (`stability.run.suggest`) tries every remedy that applies to a failing spec and keeps the
ones under which every expectation holds; the built-in ones are registered by
`stability.judge.remedies`, a plugin registers its own with `register_remedy`. A second entry under
a registered name is refused, an incomplete one fails when it is registered, and a name that is not
registered gets the closest registered names.

An edit is data: `{"space.branch_init": ["zero"], "block.config.init_values": 1e-5}`. A key path
names a TOML table's key (`family` at the top level, `block.norm_position`, `train.z_loss`);
`REMOVE` deletes the key. `apply_edit` applies it to the parsed document (what the loader then
validates) and `stability.spec.edit` to the file's text (what `--out` writes, comments kept): one
change, two appliers, the same keys.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from stability.spec.registry import Registry, RegistryError

__all__ = [
    "Remedy",
    "RemedyKind",
    "REMEDIES",
    "register_remedy",
    "remedy",
    "REMOVE",
    "MISSING",
    "Change",
    "changes_of",
    "apply_edit",
    "lookup",
]


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: The value of an edit that deletes its key.
REMOVE: Any = _Marker("REMOVE")
#: What `lookup` returns for a key the document does not set.
MISSING: Any = _Marker("MISSING")

Edit = Mapping[str, Any]

#: What a remedy changes: "structure", the shape of the network (a route around every layer, where
#: the norm sits); "init", the values it starts from (the weights, a branch's gain or scale, a
#: gate's bias); "other", anything else (the loss, the readout, the attention logits). `suggest`
#: composes each structural remedy with each initialisation that applies to the network it makes.
RemedyKind = Literal["structure", "init", "other"]


@dataclass(frozen=True, kw_only=True)
class Remedy:
    """One remedy (see the module docstring).

    - `fixes`: the invariants whose failure it is meant for; it is tried only on a spec where one
      of them is unmet.
    - `applies(spec, data) -> bool`: whether it applies to this spec (its family, what the spec
      already has: ReZero is not proposed for a stack that already starts at zero). `data` is the
      parsed TOML document the user wrote.
    - `edit(spec, data) -> {dotted key: new value or REMOVE}`: the spec transformation; it changes
      no `[expect]` table (`suggest` keeps the expectations the user wrote), nor which cases are
      drawn and how they are judged (`stability.run.suggest_candidates.judged_changes`: `suggest` refuses it).
    - `references`: where the remedy comes from, as a citation.
    - `kind` (`RemedyKind`): a "structure" remedy is also tried composed with every "init" remedy
      that applies to the network it makes (the residual route with its branches at zero: He et
      al. 2016); "other" (the default) is only tried alone, or paired when no remedy holds alone.
    """

    name: str
    summary: str
    fixes: frozenset[str]
    applies: Callable[[Any, Mapping[str, Any]], bool]
    edit: Callable[[Any, Mapping[str, Any]], Edit]
    references: tuple[str, ...]
    kind: RemedyKind = "other"

    def __post_init__(self) -> None:
        problems = []
        if not self.name.isidentifier():
            problems.append(f"name {self.name!r} is not an identifier")
        if not self.summary.strip():
            problems.append("summary is empty")
        if not self.fixes or not all(isinstance(f, str) and f for f in self.fixes):
            problems.append("fixes must name at least one invariant whose failure it is meant for")
        for key in ("applies", "edit"):
            if not callable(getattr(self, key)):
                problems.append(f"{key} must be callable")
        if not self.references or not all(isinstance(r, str) and r.strip() for r in self.references):
            problems.append("references must cite at least one source")
        if self.kind not in get_args(RemedyKind):
            problems.append(f"kind {self.kind!r} is not one of {', '.join(get_args(RemedyKind))}")
        if problems:
            raise RegistryError(f"remedy {self.name!r} cannot be registered: " + "; ".join(problems))


REMEDIES: Registry[Remedy] = Registry("remedy", lambda: None)


def register_remedy(entry: Remedy) -> Remedy:
    return REMEDIES.register(entry)


def remedy(name: str) -> Remedy:
    return REMEDIES.get(name)


@dataclass(frozen=True)
class Change:
    """One key a remedy changes: its dotted path, the value the user wrote (MISSING: not set) and
    the new one (REMOVE: deleted)."""

    key: str
    before: Any
    after: Any

    def to_dict(self) -> dict[str, Any]:
        before, after = None if self.before is MISSING else self.before, None if self.after is REMOVE else self.after
        return {
            "key": self.key,
            "before": before,
            "after": after,
            "set": self.before is not MISSING,
            "removed": self.after is REMOVE,
        }


def lookup(data: Mapping[str, Any], key: str) -> Any:
    """The value at a dotted key of a parsed document, or MISSING."""
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


def changes_of(data: Mapping[str, Any], edit: Edit) -> list[Change]:
    """The keys an edit really changes in `data` (a key set to the value it has is no change)."""
    out = []
    for key, after in edit.items():
        before = lookup(data, key)
        if (after is REMOVE and before is MISSING) or (
            after is not REMOVE and before is not MISSING and before == after
        ):
            continue
        out.append(Change(key, before, after))
    return out


def apply_edit(data: Mapping[str, Any], edit: Edit) -> dict[str, Any]:
    """A copy of the parsed document `data` with the edit applied (tables created as needed)."""
    out: dict[str, Any] = copy.deepcopy(dict(data))
    for key, after in edit.items():
        *tables, last = key.split(".")
        node = out
        for part in tables:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise RegistryError(f"edit {key!r}: {part} is not a table")
        if after is REMOVE:
            node.pop(last, None)
        else:
            node[last] = copy.deepcopy(after)
    return out
