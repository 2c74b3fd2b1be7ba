"""The spec-level check of `mean_field` (its registry entry's `check`, stability.judge.catalog):
what a spec may declare, checked when it is loaded, before anything is built."""

from __future__ import annotations

from stability.errors import SpecError
from stability.spec.registry import FAMILIES
from stability.spec.schema import Spec

__all__ = ["check_mean_field"]

_MEAN_FIELD_INITS = ("default", "kaiming_normal", "kaiming_uniform", "xavier_normal", "xavier_uniform", "normal")


def check_mean_field(spec: Spec) -> None:
    """What `expect.mean_field` needs of a spec: a family with a mean-field law that covers its
    block, linear layers, an i.i.d. init and a random (or zero) bias, one width throughout."""
    f, b, s = spec.path, spec.block, spec.space
    key = "expect.mean_field"
    fam = FAMILIES.get(spec.family)
    has_law = [f.name for f in FAMILIES if f.mean_field is not None]
    if fam.mean_field is None:
        raise SpecError(
            f,
            key,
            f"the mean-field oracle covers the families with a law ({', '.join(has_law)}), not family '{spec.family}'",
            fix=f"use family = {' or '.join(repr(n) for n in has_law)}",
        )
    refusal = fam.mean_field_refusal(spec) if fam.mean_field_refusal is not None else None
    if refusal is not None:
        raise SpecError(
            f,
            key,
            f"{refusal} (family '{spec.family}')",
            fix="see `stability explain mean_field` for the stacks the oracle covers",
        )
    if b.layer != "linear":
        raise SpecError(
            f,
            "block.layer",
            "the mean-field oracle covers linear layers (its width is the fan-in)",
            value=b.layer,
            fix='set block.layer = "linear"',
        )
    bad = [w for w in s.weight_init if w not in _MEAN_FIELD_INITS]
    if bad:
        raise SpecError(
            f,
            "space.weight_init",
            f"'{bad[0]}' is not an i.i.d. init with a mean-field variance",
            value=s.weight_init,
            fix=f"use {', '.join(_MEAN_FIELD_INITS)}",
        )
    if s.bias_init not in ("default", 0.0):
        raise SpecError(
            f,
            "space.bias_init",
            "a constant nonzero bias is not a random bias of variance sigma_b2",
            value=s.bias_init,
            fix='use "default" or 0.0',
        )
    if s.input_width is not None and s.input_width != s.width:
        raise SpecError(
            f,
            "space.input_width",
            "the mean-field oracle needs one width throughout",
            value=list(s.input_width),
            fix="remove it",
        )
