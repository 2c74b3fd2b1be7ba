"""A library case over the memory budget (the registry's `over_budget`, asked by
`stability.run.guard.fit_budget`): streamed block by block where that builds the same model within
the budget, else refused with what would fit.

- **Streamed.** A transformers model probed at its config as the case fills it (`scale = "probed"`)
  whose init rule changes nothing at this case (no `block.shipped`, or `block.shipped` equal to
  the filled config: a Llama-7B-sized spec written with its widths) is the same model streamed:
  the case is built with `scale = "streamed"` (`library_stream.build_streamed`: the parts outside
  the blocks materialised, each block while it runs), when that estimate fits; the report says so
  (`Measurements.extra["streamed"]`).
- **Refused, naming what fits.** Where the init rule rescales a reduced width (`block.shipped`
  differs from the config), streaming would drop it; if the model at its shipped config streamed
  (`scale = "shipped"`) fits, the refusal names that key.
"""

from __future__ import annotations

from typing import Any

from stability.spec.registry import FAMILIES, OtherBuild

__all__ = ["over_budget"]


def _with_scale(spec: Any, scale: str, *, shipped: dict[str, Any] | None = None) -> Any:
    update: dict[str, Any] = {"scale": scale}
    if shipped is not None:
        update["shipped"] = shipped
    return spec.model_copy(update={"options": spec.options.model_copy(update=update)})


def over_budget(spec: Any, lib: Any, case: Any, budget: int) -> OtherBuild | None:
    """The streamed build of the case, or the shipped scale the refusal names (the module
    docstring); None when neither fits. `lib`: the spec's `LibraryModel`."""
    from stability.families.library_values import fill

    if lib.scale != "probed" or lib.target.library != "transformers":
        return None
    values = case.as_dict()
    config, shipped = fill(lib.config, values), fill(lib.shipped, values)
    family = FAMILIES.get(spec.family)
    if all(config.get(k) == v for k, v in shipped.items()):  # the init rule changes nothing here
        streamed = _with_scale(spec, "streamed", shipped={})
        need = family.estimate(streamed, case)
        if need is None or need > budget:
            return None
        how = 'with its blocks streamed one at a time, as block.scale = "streamed" does'
        return OtherBuild(spec=streamed, need=need, how=how)
    need = family.estimate(_with_scale(spec, "shipped"), case)
    if need is None or need > budget:
        return None
    how = 'set block.scale = "shipped" to probe the model at its shipped config with its blocks streamed one at a time'
    return OtherBuild(spec=None, need=need, how=how)
