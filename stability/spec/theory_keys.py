"""Spec-level checks of the theory invariants' keys (`mean_field`, `jacobian_spectrum`, `lesion`):
what a spec may declare, checked when it is loaded, before anything is built."""

from __future__ import annotations

from stability.errors import SpecError
from stability.spec.schema import Spec

__all__ = ["check_spec"]

_MEAN_FIELD_INITS = ("default", "kaiming_normal", "kaiming_uniform", "xavier_normal", "xavier_uniform", "normal")


def check_spec(spec: Spec) -> None:
    """Spec-level checks of the theory invariants (called from `stability.spec.load` when a spec is loaded)."""
    f, e, b, s = spec.path, spec.expect, spec.block, spec.space
    js = e.jacobian_spectrum
    if js is not None and js.mean_lo is not None and js.mean_hi is not None and js.mean_lo > js.mean_hi:
        raise SpecError(f, "expect.jacobian_spectrum.mean_lo", f"is above mean_hi = {js.mean_hi}", value=js.mean_lo, fix="swap mean_lo and mean_hi")
    if e.lesion is not None and spec.family == "dense":
        raise SpecError(f, "expect.lesion", "a dense layer adds channels, so it cannot be replaced by the identity", fix="remove it")
    if e.mean_field is None:
        return
    key = "expect.mean_field"
    residual_ok = spec.family == "preact" and b.branch_layers == 1 and b.skip == "identity"
    if spec.family != "plain" and not residual_ok:
        raise SpecError(
            f,
            key,
            f"the mean-field oracle covers plain stacks and one-layer pre-activation residual stacks, not family '{spec.family}'" + (" with this block" if spec.family == "preact" else ""),
            fix='use family = "plain", or "preact" with branch_layers = 1 and skip = "identity"',
        )
    if b.layer != "linear":
        raise SpecError(f, "block.layer", "the mean-field oracle covers linear layers (its width is the fan-in)", value=b.layer, fix='set block.layer = "linear"')
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
        raise SpecError(f, "space.bias_init", "a constant nonzero bias is not a random bias of variance sigma_b2", value=s.bias_init, fix='use "default" or 0.0')
    if s.input_width is not None and s.input_width != s.width:
        raise SpecError(f, "space.input_width", "the mean-field oracle needs one width throughout", value=list(s.input_width), fix="remove it")
