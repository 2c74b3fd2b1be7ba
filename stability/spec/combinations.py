"""The checks across a spec's keys, run once its tables validate (`stability.spec.load`): options
that validate alone but make no sense together or for the family (each family's and each
declared invariant's own `check` among them), the `[train]` table with the training invariants,
and the pinned cases (`space.examples`, `probe.ci_cases`) inside the space. Every problem is one
`SpecError` naming the key, the value and the fix.
"""

from __future__ import annotations

from typing import Any

from stability.errors import SpecError
from stability.spec.lm_keys import check_lm_keys
from stability.spec.registry import FAMILIES, INVARIANTS
from stability.spec.schema import DEFAULT_SIZE, Block, Spec

__all__ = ["check_combinations"]


def _set(data: dict[str, Any], table: str, key: str) -> bool:
    return isinstance(data.get(table), dict) and key in data[table]


def check_combinations(spec: Spec, data: dict[str, Any]) -> None:
    """Options that validate alone but make no sense together, or for this family."""
    f, fam, b, s = spec.path, spec.family, spec.block, spec.space

    family = FAMILIES.get(fam)
    block: dict[str, Any] = data["block"] if isinstance(data.get("block"), dict) else {}
    for key in block:
        if key in Block.model_fields and key not in family.block_keys:
            readers = [other.name for other in FAMILIES if key in other.block_keys]
            why = (
                " (a custom factory builds its own layers)"
                if family.user_code and key in ("activation", "norm", "norm_groups")
                else ""
            )
            raise SpecError(
                f,
                f"block.{key}",
                f"makes no sense for family '{fam}'",
                value=block[key],
                fix=f"remove it; it applies to {', '.join(readers)}{why}",
            )
    if b.layer not in family.layers:
        shown = " or ".join(f'"{layer}"' for layer in family.layers)
        raise SpecError(
            f, "block.layer", f"family '{fam}' builds {shown} layers", value=b.layer, fix=f"set block.layer = {shown}"
        )
    if family.check is not None:
        family.check(spec, data)

    if b.layer in ("linear", "tokens"):
        if _set(data, "block", "kernel_size"):
            raise SpecError(
                f,
                "block.kernel_size",
                f"is a conv2d option but block.layer is '{b.layer}'",
                value=b.kernel_size,
                fix='remove it or set block.layer = "conv2d"',
            )
        if _set(data, "space", "spatial"):
            raise SpecError(
                f,
                "space.spatial",
                f"is a conv2d option but block.layer is '{b.layer}'",
                value=list(s.spatial or ()),
                fix='remove it or set block.layer = "conv2d"',
            )
    elif b.kernel_size % 2 == 0:
        raise SpecError(
            f,
            "block.kernel_size",
            "must be odd so that 'same' padding keeps the spatial size",
            value=b.kernel_size,
            fix=f"use {b.kernel_size + 1}",
        )

    one_value_per_channel = b.layer == "linear" or (s.spatial[0] if s.spatial else DEFAULT_SIZE) == 1
    if b.layer == "tokens":  # (B, T, C): B·T values per channel
        one_value_per_channel = s.tokens is not None and min(s.tokens) == 1  # default 8 tokens
    if b.norm == "batch" and spec.probe.mode == "train" and s.batch[0] == 1 and one_value_per_channel:
        raise SpecError(
            f,
            "space.batch",
            "batch norm in train mode needs more than one value per channel, and a batch of 1 gives one",
            value=list(s.batch),
            fix=f'start the range at 2 ([2, {max(s.batch[1], 2)}]), or set probe.mode = "eval"',
        )
    for key, rng in (("width", s.width), ("input_width", s.input_width)):
        if b.norm == "group" and rng is not None and rng[0] == 1 and one_value_per_channel:
            raise SpecError(
                f,
                f"space.{key}",
                f"group norm needs more than one value per group, and a {key} of 1 gives one",
                value=list(rng),
                fix=f"start the range at 2 ([2, {max(rng[1], 2)}]), or use another norm",
            )
    if _set(data, "block", "norm_groups") and b.norm != "group":
        raise SpecError(
            f,
            "block.norm_groups",
            'only applies to norm = "group"',
            value=b.norm_groups,
            fix='remove it or set block.norm = "group"',
        )
    if b.skip == "scaled":
        if b.skip_scale is None:
            raise SpecError(
                f,
                "block.skip_scale",
                'is required with skip = "scaled"',
                fix="add skip_scale = 0.5 (the fixed λ on the route around)",
            )
    elif b.skip_scale is not None:
        raise SpecError(
            f,
            "block.skip_scale",
            'only applies to skip = "scaled"',
            value=b.skip_scale,
            fix='remove it or set block.skip = "scaled"',
        )
    if b.projection_spectrum is not None:
        if b.skip != "projection":
            raise SpecError(
                f,
                "block.projection_spectrum",
                'only applies to skip = "projection"',
                value=list(b.projection_spectrum),
                fix='remove it or set block.skip = "projection"',
            )
        lo, hi = b.projection_spectrum
        if not 0 < lo <= hi:
            raise SpecError(
                f,
                "block.projection_spectrum",
                "must be [s_min, s_max] with 0 < s_min <= s_max",
                value=list(b.projection_spectrum),
            )

    if family.branch_inits is not None:
        bad_inits = [i for i in s.branch_init if i not in family.branch_inits]
        if bad_inits:
            verb = "zeroes" if bad_inits[0] == "zero" else "scales"
            allowed = " or ".join(f'"{i}"' for i in sorted(family.branch_inits))
            raise SpecError(
                f,
                "space.branch_init",
                f"'{bad_inits[0]}' {verb} a residual branch; family '{fam}' has none",
                value=s.branch_init,
                fix=f"use {allowed}",
            )

    # A case draws input_width and width independently: they can differ unless both are one value.
    if s.input_width is not None and not (s.input_width == s.width and s.width[0] == s.width[1]):
        joins = (
            f"widths {list(s.input_width)} (space.input_width) and {list(s.width)} (space.width), drawn independently"
        )
        if "skip" in family.block_keys and b.skip in ("identity", "scaled", "norm"):
            raise SpecError(
                f,
                "block.skip",
                f"an identity skip cannot join {joins}",
                value=b.skip,
                fix='set block.skip = "projection" or remove space.input_width',
            )
        if b.projection_spectrum is not None:
            raise SpecError(
                f,
                "block.projection_spectrum",
                f"sets the singular values of a square projection, but the first block joins {joins}",
                value=list(b.projection_spectrum),
                fix="remove space.input_width or block.projection_spectrum",
            )
        if "identity" in s.weight_init:
            raise SpecError(
                f,
                "space.weight_init",
                f"'identity' needs square weights, but the first block joins {joins}",
                value=s.weight_init,
                fix="remove space.input_width",
            )

    if b.layer != "tokens" and _set(data, "space", "tokens"):
        raise SpecError(
            f,
            "space.tokens",
            f"is a token-input option but block.layer is '{b.layer}'",
            value=list(s.tokens or ()),
            fix='remove it or set block.layer = "tokens"',
        )
    if not spec.invariants():
        raise SpecError(
            f,
            "expect",
            "declares no invariant",
            fix=f"add at least one of {', '.join(f'[expect.{name}]' for name in INVARIANTS.names())} "
            "(`stability explain NAME` describes each)",
        )
    check_lm_keys(spec, data)
    _check_training(spec)
    for name, _ in spec.invariants():
        entry = INVARIANTS.get(name)
        if entry.check is not None:
            entry.check(spec)
        for need in sorted(entry.needs):
            if need in family.lacks:
                raise SpecError(
                    f,
                    f"expect.{name}",
                    f"is not measured on family '{fam}': {family.lacks[need]}",
                    fix="remove it (`stability explain " + name + "` lists where it is measured)",
                )
    from stability.spec.applicability import check_applies_when
    from stability.spec.case import parse_case_string

    check_applies_when(spec, data)
    for i, text in enumerate(s.examples):
        try:
            parse_case_string(text, spec)
        except Exception as exc:  # a UsageError for an unknown key or a value outside the space
            raise SpecError(f, f"space.examples[{i}]", str(exc), value=text) from None
    for i, text in enumerate(spec.probe.ci_cases):
        try:
            parse_case_string(text, spec)
        except Exception as exc:  # a UsageError for an unknown key or a value outside the space
            raise SpecError(f, f"probe.ci_cases[{i}]", str(exc), value=text) from None
    if spec.probe.ci_cases and "ci" not in spec.probe.profiles:
        raise SpecError(
            f,
            "probe.ci_cases",
            "has no effect: the ci profile is not in probe.profiles",
            value=spec.probe.ci_cases,
            fix='add "ci" to probe.profiles, or remove ci_cases',
        )


def _check_training(spec: Spec) -> None:
    """The `[train]` table and the training invariants come together."""
    f = spec.path
    training = [e.name for e in INVARIANTS if e.training]
    declared = [n for n, _ in spec.invariants() if n in training]
    if spec.train is not None and not declared:
        raise SpecError(
            f,
            "train",
            "applies only to the training invariants, and this spec declares none",
            fix=f"remove it or add one of {', '.join(f'[expect.{n}]' for n in training)}",
        )
    if spec.train is not None and spec.train.warmup >= spec.train.steps:
        raise SpecError(
            f,
            "train.warmup",
            f"must be below train.steps = {spec.train.steps}",
            value=spec.train.warmup,
            fix="shorten the warm-up or raise steps",
        )
