"""When each built-in invariant applies and what it asks of a spec (its registry entry's `applies`
and `check`): each check refuses, at load, a spec the invariant cannot be judged on, naming the
key and the fix (stability.judge.catalog).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stability.errors import SpecError
from stability.spec import schema as s
from stability.spec.registry import FAMILIES

__all__ = [
    "zero_branch",
    "check_arrival",
    "check_variance",
    "check_identity",
    "check_tokens",
    "check_jacobian",
    "check_mean_field",
    "check_init",
    "check_stream",
    "check_training",
]


def zero_branch(spec: s.Spec) -> Mapping[str, Sequence[Any]] | None:
    """identity_at_init applies to the family's zero-branch inits (with a branch at zero a residual
    block is the identity by construction, He et al. 2016); a family that decides what its
    branch_init means (a user's factory) has no such rule."""
    inits = FAMILIES.get(spec.family).zero_branch_inits
    return None if inits is None else {"branch_init": sorted(inits)}


def check_identity(spec: s.Spec) -> None:
    inits = FAMILIES.get(spec.family).zero_branch_inits
    if inits is None:
        return
    if not inits:
        raise SpecError(
            spec.path,
            "expect.identity_at_init",
            f"family '{spec.family}' has no branch to zero, so it is never the identity by construction",
            fix="remove it",
        )
    if not inits & set(spec.space.branch_init):
        raise SpecError(
            spec.path,
            "space.branch_init",
            "identity_at_init is checked on zero-branch cases, and this space has none",
            value=spec.space.branch_init,
            fix=f"add one of {', '.join(repr(i) for i in sorted(inits))}",
        )


def check_tokens(name: str) -> Any:
    def check(spec: s.Spec) -> None:
        if spec.block.layer != "tokens":
            raise SpecError(
                spec.path,
                f"expect.{name}",
                "is measured over tokens, and this spec has no token inputs",
                fix='set block.layer = "tokens" (with space.tokens), or remove it',
            )
        tokens = spec.space.tokens or (s.DEFAULT_SIZE, s.DEFAULT_SIZE)
        if tokens[0] < 2:
            raise SpecError(
                spec.path,
                "space.tokens",
                f"{name} compares tokens, so it needs at least 2",
                value=list(spec.space.tokens or ()),
                fix=f"start the range at 2 ([2, {max(tokens[1], 2)}])",
            )

    return check


def check_jacobian(spec: s.Spec) -> None:
    js = spec.expect.jacobian_spectrum
    if js is not None and js.mean_lo is not None and js.mean_hi is not None and js.mean_lo > js.mean_hi:
        raise SpecError(
            spec.path,
            "expect.jacobian_spectrum.mean_lo",
            f"is above mean_hi = {js.mean_hi}",
            value=js.mean_lo,
            fix="swap mean_lo and mean_hi",
        )


def check_mean_field(spec: s.Spec) -> None:
    from stability.spec.theory_keys import check_mean_field as check

    check(spec)


def check_init(spec: s.Spec) -> None:
    from stability.judge.init_conformance import check_table_name

    ic = spec.expect.init_conformance
    problem = check_table_name(ic.table)
    if problem:
        raise SpecError(spec.path, "expect.init_conformance.table", problem, value=ic.table)
    if spec.family != "library" and not FAMILIES.get(spec.family).user_code and not ic.rules:
        raise SpecError(
            spec.path,
            "expect.init_conformance",
            f"family '{spec.family}' draws its init from the spec's own [space] keys, and no rule table declares it",
            fix='add rows: rules = [{ module = "Linear", param = "weight", law = "normal", std = "...", '
            'source = "..." }]',
        )


def check_arrival(spec: s.Spec) -> None:
    ga = spec.expect.gradient_arrival
    if ga is not None and ga.lo > ga.hi:
        raise SpecError(
            spec.path, "expect.gradient_arrival.lo", f"is above hi = {ga.hi}", value=ga.lo, fix="swap lo and hi"
        )


def check_stream(spec: s.Spec) -> None:
    rs = spec.expect.residual_stream
    if rs is None:
        return
    for low, high in (("lo", "hi"), ("entry_lo", "entry_hi"), ("variance_lo", "variance_hi")):
        a, b = getattr(rs, low), getattr(rs, high)
        if a is not None and b is not None and a > b:
            raise SpecError(
                spec.path,
                f"expect.residual_stream.{low}",
                f"is above {high} = {b}",
                value=a,
                fix=f"swap {low} and {high}",
            )


def check_variance(spec: s.Spec) -> None:
    vg = spec.expect.variance_growth
    if vg is not None and vg.min_ratio is not None and vg.max_ratio is not None and vg.min_ratio > vg.max_ratio:
        raise SpecError(
            spec.path, "expect.variance_growth.min_ratio", f"is above max_ratio = {vg.max_ratio}", value=vg.min_ratio
        )


def check_training(spec: s.Spec) -> None:
    """Shared by the training invariants: the run needs `[train]` and a built-in family's blocks."""
    declared = [n for n, _ in spec.invariants() if _is_training(n)]
    if spec.train is None:
        raise SpecError(
            spec.path,
            "train",
            f"is required by expect.{declared[0]} (the optimizer run it judges)",
            fix="add [train] with steps = 100, lr = 0.01 (see docs/training.md)",
        )
    if FAMILIES.get(spec.family).user_code:
        raise SpecError(
            spec.path,
            f"expect.{declared[0]}",
            "is checked on the built-in families only (the run adds an input layer and a readout to the "
            "family's blocks)",
            fix="remove it, or describe the network with a built-in family",
        )


def _is_training(name: str) -> bool:
    from stability.spec.registry import INVARIANTS

    return name in INVARIANTS and INVARIANTS.get(name).training
