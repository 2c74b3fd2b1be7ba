"""The smallest depth a model builds at, and a search space that never draws below it.

Some models cannot be built at depth 1: RWKV's own init (transformers' `RwkvPreTrainedModel.
_init_weights`) computes `layer_id / (num_hidden_layers - 1)`, which divides by zero at one layer.
Wherever the harness builds a model at a depth of its own choosing (the init rule's pair of models,
`library_build.init_factors`; the memory model's footprints, `library_family`), it builds at the
model's smallest depth instead of 1, and the search draws no depth below it (`narrowed`):

- `least_depth(lib, values)` tries depths 1, 2, … up to `MAX_TRIED`: the model is constructed on
  the meta device (shapes only: a constructor or an init that raises fails there), and where its
  parameters at that depth take at most `REAL_BYTES`, constructed for real as well (seed 0, the
  caller's generator put back) with every parameter and buffer checked finite (an init that
  divides tensors by zero). The first depth that passes; cached per process. A model that builds
  at no depth up to `MAX_TRIED` gets 1: its cases fail with the library's own error.
- `narrowed(spec)` raises `space.depth`'s lower end to the family's smallest depth (its registry
  entry's `least_depth`), and refuses, in one line naming why, a space that allows only depths
  below it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from stability.errors import SpecError

__all__ = ["LeastDepth", "least_depth", "narrowed", "MAX_TRIED", "REAL_BYTES"]

#: The deepest depth tried: an init that needs more layers than this is not one this rule names.
MAX_TRIED = 4
#: A model whose parameters take at most this at a tried depth is also built for real, its tensors
#: checked finite; a larger one (a shipped-width config) only on the meta device.
REAL_BYTES = 256 * 2**20


@dataclass(frozen=True, kw_only=True)
class LeastDepth:
    """The smallest depth a model builds at, and why each depth below it fails ("" at depth 1)."""

    depth: int
    why: str = ""


_CACHE: dict[str, LeastDepth] = {}


def _fails(lib: Any, config: dict[str, Any]) -> str | None:
    """Why the model of `config` cannot be built (None: it can)."""
    from stability.families.library_build import construct
    from stability.families.library_memory import count_bytes, meta_model

    try:
        model = meta_model(lib, config)
    except Exception as exc:
        return " ".join(f"{type(exc).__name__}: {exc}".split())
    if count_bytes(model, torch.float32)[0] > REAL_BYTES:
        return None
    del model
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = construct(lib.target, config)
    except Exception as exc:
        return " ".join(f"{type(exc).__name__}: {exc}".split())
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            return f"its init leaves {name} non-finite"
    return None


def least_depth(lib: Any, values: dict[str, Any]) -> LeastDepth:
    """The smallest depth `lib` (a `LibraryModel`, its config as built) builds at, with the case's
    other `values` (the module docstring)."""
    from stability.families.library_values import fill

    key = repr((str(lib.target), sorted(fill(lib.config, {**values, "depth": 1}).items())))
    if key not in _CACHE:
        found = LeastDepth(depth=1)
        for depth in range(1, MAX_TRIED + 1):
            why = _fails(lib, fill(lib.config, {**values, "depth": depth}))
            if why is None:
                first = "" if depth == 1 else _fails(lib, fill(lib.config, {**values, "depth": 1})) or ""
                found = LeastDepth(depth=depth, why=first)
                break
        _CACHE[key] = found
    return _CACHE[key]


def narrowed(spec: Any) -> Any:
    """`spec` with `space.depth` starting at its family's smallest depth (unchanged where that is 1
    or the family has no `least_depth`); a SpecError when the space allows only smaller depths."""
    from stability.spec.registry import FAMILIES

    rule = FAMILIES.get(spec.family).least_depth
    if rule is None:
        return spec
    lo, hi = spec.space.depth
    least = rule(spec)
    if least.depth <= lo:
        return spec
    what = getattr(getattr(spec, "options", None), "model", spec.family)
    if hi < least.depth:
        raise SpecError(
            spec.path,
            "space.depth",
            f"allows only depths below {least.depth}, the smallest {what} builds at (at depth 1: {least.why})",
            value=[lo, hi] if lo != hi else lo,
            fix=f"start space.depth at {least.depth}, e.g. space.depth = [{least.depth}, 8]",
        )
    return spec.model_copy(update={"space": spec.space.model_copy(update={"depth": (least.depth, hi)})})
