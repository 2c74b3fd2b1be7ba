"""Which cases an invariant applies to: stated by the spec, never guessed.

An invariant applies to a case when both hold:

- the invariant's own rule, its registry entry's `applies` (stability.spec.registry): e.g.
  `identity_at_init` applies to the family's zero-branch inits only (with a branch at zero a
  residual block is the identity by construction, He et al. 2016; a custom factory decides what
  its `branch_init` means, so there it has no such rule);
- the spec's `applies_when` table on that invariant, when given: every key is a case key (`depth`,
  `width`, `batch`, `branch_init`, `init`, `dtype`, ...) and lists the values the invariant
  applies to, e.g. `applies_when = { branch_init = ["zero"] }`. Keys not named are unrestricted.

The search draws only applicable cases where it can (choice keys narrow the space) and skips the
rest; a `--case` replay of a case outside reports "not applicable", never a pass. Every path asks
`not_applicable_reason`: check, pytest, the sweep and the reports.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from stability.errors import SpecError, did_you_mean
from stability.spec.case import Case
from stability.spec.registry import INVARIANTS
from stability.spec.schema import IntSpace, Spec

__all__ = ["not_applicable_reason", "narrow_for", "check_applies_when"]

_ALIASES = {"init": "weight_init"}
_SHOWN = {"weight_init": "init"}


def _rule(expectation: Any) -> dict[str, list[Any]]:
    """The spec's `applies_when` with aliases resolved ({} when none is given)."""
    table = getattr(expectation, "applies_when", None) or {}
    return {_ALIASES.get(k, k): list(v) for k, v in table.items()}


def _implicit(spec: Spec, name: str) -> dict[str, list[Any]]:
    """The invariant's own rule (its registry entry's `applies`), {} when it has none."""
    entry = INVARIANTS.get(name)
    found = entry.applies(spec) if entry.applies is not None else None
    return {k: list(v) for k, v in (found or {}).items()}


def not_applicable_reason(spec: Spec, name: str, case: Case) -> str | None:
    """Why invariant `name` of `spec` does not apply to `case`, or None when it applies."""
    for key, values in _implicit(spec, name).items():
        value = getattr(case, key, None)
        if value not in values:
            return (
                f"{_SHOWN.get(key, key)}={value} {INVARIANTS.get(name).applies_reason} ({name} applies to "
                f"{', '.join(map(str, values))})"
            )
    for key, values in _rule(getattr(spec.expect, name)).items():
        value = getattr(case, key, None)
        if value not in values:
            shown = _SHOWN.get(key, key)
            return f"{shown}={value} is outside expect.{name}.applies_when {shown} = {values}"
    return None


def narrow_for(spec: Spec, name: str) -> Spec:
    """`spec` with its space narrowed toward the cases invariant `name` applies to: choice keys
    (init, branch_init, dtype, device) to the values listed, integer ranges to the smallest range
    holding the values listed (the search skips the values in between that are not listed)."""
    update: dict[str, Any] = {}
    for rule in (_implicit(spec, name), _rule(getattr(spec.expect, name))):
        for key, values in rule.items():
            current = update.get(key, getattr(spec.space, key, None))
            if isinstance(current, list):
                update[key] = [c for c in current if c in values]
            elif isinstance(current, tuple) and values and all(isinstance(v, int) for v in values):
                update[key] = (min(values), max(values))
    if not update:
        return spec
    return spec.model_copy(update={"space": spec.space.model_copy(update=update)})


def check_applies_when(spec: Spec, data: dict[str, Any]) -> None:
    """Validate every `applies_when` table of `spec` against its space; one-line `SpecError`s."""
    from stability.spec.case import corner_case

    keys = [f.name for f in dataclasses.fields(Case)]
    corner = corner_case(spec)
    for name, expectation in spec.invariants():
        table = getattr(expectation, "applies_when", None)
        if table is None:
            continue
        where = f"expect.{name}.applies_when"
        if not table:
            raise SpecError(
                spec.path,
                where,
                "is empty",
                value=table,
                fix='name at least one case key, e.g. { branch_init = ["zero"] }, or remove it',
            )
        for raw_key, values in table.items():
            key = _ALIASES.get(raw_key, raw_key)
            if key not in keys:
                known = ["init", *keys]
                raise SpecError(
                    spec.path,
                    f"{where}.{raw_key}",
                    f"is not a case key{did_you_mean(raw_key, known)}",
                    value=values,
                    fix=f"use one of {', '.join(known)}",
                )
            if not values:
                raise SpecError(
                    spec.path,
                    f"{where}.{raw_key}",
                    "lists no value, so the invariant would apply to no case",
                    value=values,
                    fix="list at least one value or remove the key",
                )
            space = getattr(spec.space, key, None)
            for v in values:
                if isinstance(space, list) and v not in space:
                    raise SpecError(
                        spec.path,
                        f"{where}.{raw_key}",
                        f"{v!r} is not in space.{key} {space}{did_you_mean(v, space)}",
                        value=values,
                        fix=f"list values from {space}",
                    )
                if isinstance(space, tuple) and not (
                    isinstance(v, int)
                    and not isinstance(v, bool)
                    and (space.admits(v) if isinstance(space, IntSpace) else space[0] <= v <= space[1])
                ):
                    shown = space.describe() if isinstance(space, IntSpace) else f"[{space[0]}, {space[1]}]"
                    raise SpecError(
                        spec.path,
                        f"{where}.{raw_key}",
                        f"{v!r} is not a value space.{key} {shown} can draw",
                        value=values,
                        fix=f"list values space.{key} draws, or widen space.{key}",
                    )
                if space is None and v != getattr(corner, key):
                    raise SpecError(
                        spec.path,
                        f"{where}.{raw_key}",
                        f"{v!r}: space.{key} is not set, so every case has {key}={getattr(corner, key)}",
                        value=values,
                        fix="remove the key",
                    )
        for key, allowed in _implicit(spec, name).items():
            raw = next((k for k in table if _ALIASES.get(k, k) == key), None)
            if raw is not None and not set(allowed) & set(table[raw]):
                reason = INVARIANTS.get(name).applies_reason
                raise SpecError(
                    spec.path,
                    f"{where}.{raw}",
                    f"names no value {name} applies to (any other {key} {reason})",
                    value=table[raw],
                    fix=f"list some of {allowed}",
                )
