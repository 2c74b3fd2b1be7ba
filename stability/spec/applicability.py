"""Which cases an invariant applies to: stated by the spec, never guessed.

An invariant applies to a case when both hold:

- the family's own rule: on a built-in family `identity_at_init` applies to zero-branch inits only
  (`branch_init` in `ZERO_BRANCH_INITS`: with a branch at zero a residual block is the identity by
  construction, He et al. 2016); a custom factory decides what its `branch_init` means, so there
  it has no such rule;
- the spec's `applies_when` table on that invariant, when given: every key is a case key (`depth`,
  `width`, `batch`, `branch_init`, `init`, `dtype`, ...) and lists the values the invariant
  applies to, e.g. `applies_when = { branch_init = ["zero"] }`. Keys not named are unrestricted.

The search draws only applicable cases where it can (choice keys narrow the space) and skips the
rest; a `--case` replay of a case outside reports "not applicable", never a pass.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from stability.errors import SpecError, did_you_mean
from stability.spec.case import Case
from stability.spec.schema import ZERO_BRANCH_INITS, Spec

__all__ = ["not_applicable_reason", "narrow_for", "check_applies_when"]

_ALIASES = {"init": "weight_init"}
_SHOWN = {"weight_init": "init"}


def _rule(expectation: Any) -> dict[str, list[Any]]:
    """The spec's `applies_when` with aliases resolved ({} when none is given)."""
    table = getattr(expectation, "applies_when", None) or {}
    return {_ALIASES.get(k, k): list(v) for k, v in table.items()}


def not_applicable_reason(spec: Spec, name: str, case: Case) -> str | None:
    """Why invariant `name` of `spec` does not apply to `case`, or None when it applies."""
    if name == "identity_at_init" and spec.family != "custom" and case.branch_init not in ZERO_BRANCH_INITS:
        return f"branch_init={case.branch_init} is not a zero-branch init (identity_at_init applies to {', '.join(sorted(ZERO_BRANCH_INITS))})"
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
    rule = _rule(getattr(spec.expect, name))
    update: dict[str, Any] = {}
    for key, values in rule.items():
        current = getattr(spec.space, key, None)
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
            raise SpecError(spec.path, where, "is empty", value=table, fix='name at least one case key, e.g. { branch_init = ["zero"] }, or remove it')
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
                raise SpecError(spec.path, f"{where}.{raw_key}", "lists no value, so the invariant would apply to no case", value=values, fix="list at least one value or remove the key")
            space = getattr(spec.space, key, None)
            for v in values:
                if isinstance(space, list) and v not in space:
                    raise SpecError(spec.path, f"{where}.{raw_key}", f"{v!r} is not in space.{key} {space}{did_you_mean(v, space)}", value=values, fix=f"list values from {space}")
                if isinstance(space, tuple) and not (isinstance(v, int) and space[0] <= v <= space[1]):
                    raise SpecError(spec.path, f"{where}.{raw_key}", f"{v!r} is outside space.{key} [{space[0]}, {space[1]}]", value=values, fix=f"list integers in [{space[0]}, {space[1]}]")
                if space is None and v != getattr(corner, key):
                    raise SpecError(spec.path, f"{where}.{raw_key}", f"{v!r}: space.{key} is not set, so every case has {key}={getattr(corner, key)}", value=values, fix="remove the key")
        if name == "identity_at_init" and spec.family != "custom" and "branch_init" in table and not ZERO_BRANCH_INITS & set(table["branch_init"]):
            raise SpecError(
                spec.path,
                f"{where}.branch_init",
                "names no zero-branch init, and identity_at_init applies to zero-branch cases only on a built-in family",
                value=table["branch_init"],
                fix=f"list some of {sorted(ZERO_BRANCH_INITS)}",
            )
