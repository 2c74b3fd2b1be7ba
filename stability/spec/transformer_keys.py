"""The transformer family's own checks across keys (its registry entry's `check`,
stability.families.catalog): token inputs, a per-token norm, the residual schemes and the heads
that must divide every drawn width; checked when a spec is loaded, before anything is built."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stability.errors import SpecError
from stability.spec.schema import Spec

__all__ = ["check_transformer"]


def _set(data: Mapping[str, Any], table: str, key: str) -> bool:
    return isinstance(data.get(table), dict) and key in data[table]


def check_transformer(spec: Spec, data: Mapping[str, Any]) -> None:
    f, b, s, e = spec.path, spec.block, spec.space, spec.expect
    if b.layer != "tokens":
        raise SpecError(
            f,
            "block.layer",
            "family 'transformer' works on (batch, tokens, channels) inputs",
            value=b.layer,
            fix='set block.layer = "tokens"',
        )
    if b.norm not in ("layer", "rms", "none"):
        raise SpecError(
            f,
            "block.norm",
            'family \'transformer\' normalises each token: choose "layer", "rms" or "none"',
            value=b.norm,
            fix='use norm = "layer"',
        )
    if b.skip not in ("identity", "none"):
        raise SpecError(
            f,
            "block.skip",
            "family 'transformer' has an identity skip or none",
            value=b.skip,
            fix='use skip = "identity" (or "none" for a negative control); scale the branches with block.residual',
        )
    if b.residual == "deepnorm" and b.norm_position != "post":
        raise SpecError(
            f,
            "block.residual",
            "DeepNorm (Wang et al. 2022) up-weights the skip of a post-norm block",
            value=b.residual,
            fix='set block.norm_position = "post"',
        )
    if b.residual in ("deepnorm", "rezero", "skipinit", "layerscale") and b.skip == "none":
        raise SpecError(
            f,
            "block.residual",
            f"'{b.residual}' scales a residual connection, and skip = \"none\" removes it",
            value=b.residual,
            fix='remove block.residual or set block.skip = "identity"',
        )
    if _set(data, "block", "layerscale_init") and b.residual != "layerscale":
        raise SpecError(
            f,
            "block.layerscale_init",
            'only applies to residual = "layerscale"',
            value=b.layerscale_init,
            fix='remove it or set block.residual = "layerscale"',
        )
    if _set(data, "block", "mlp_ratio") and not b.mlp:
        raise SpecError(
            f,
            "block.mlp_ratio",
            "sizes the MLP sublayer, and mlp = false removes it",
            value=b.mlp_ratio,
            fix="remove it or set mlp = true",
        )
    if b.heads is not None and b.head_dim is not None:
        raise SpecError(
            f,
            "block.head_dim",
            "is set together with block.heads; one of them follows from the width",
            value=b.head_dim,
            fix="keep one: head_dim (heads = width / head_dim) or heads (head_dim = width / heads)",
        )
    step = b.head_dim or b.heads or 1
    name = "block.head_dim" if b.head_dim else "block.heads"
    w = s.width
    fits = (
        all(v % step == 0 for v in w.values)
        if w.values is not None
        else (w.multiple_of % step == 0 or (w[0] == w[1] and w[0] % step == 0))
    )
    if not fits:
        lo, hi = max(step, -(-w[0] // step) * step), max(step, (w[1] // step) * step)
        raise SpecError(
            f,
            "space.width",
            f"must be a multiple of {name} = {step} for every drawn value, so the heads divide the width",
            value=w.describe(),
            fix=f"write width = {{ range = [{lo}, {max(lo, hi)}], multiple_of = {step} }}",
        )
    if any(i in ("rezero", "skipinit") for i in s.branch_init):
        raise SpecError(
            f,
            "space.branch_init",
            "family 'transformer' sets ReZero and SkipInit with block.residual",
            value=s.branch_init,
            fix='use "default" or "zero", and block.residual = "rezero" or "skipinit"',
        )
    if s.input_width is not None:
        raise SpecError(
            f,
            "space.input_width",
            "family 'transformer' keeps one width throughout",
            value=list(s.input_width),
            fix="remove it",
        )
    if e.identity_at_init is not None and b.norm_position == "post" and b.norm != "none":
        raise SpecError(
            f,
            "expect.identity_at_init",
            "a post-norm block normalises the sum, so it is never the identity",
            fix='remove it, or use norm_position = "pre" or "sandwich"',
        )
    if e.identity_at_init is not None and "zero" not in s.branch_init:
        raise SpecError(
            f,
            "space.branch_init",
            "identity_at_init is checked on zero-branch cases, and this space has none",
            value=s.branch_init,
            fix='add "zero" (it zeroes the last layer of every sublayer)',
        )
    if e.identity_at_init is not None and b.skip == "none":
        raise SpecError(
            f,
            "expect.identity_at_init",
            'a block without a skip (skip = "none") is never the identity',
            fix="remove it",
        )
