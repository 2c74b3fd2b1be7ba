"""`family = "library"`: a transformers, timm or torchvision model named as data, probed through
its own forward. Its registry entry (stability.spec.registry) is registered here; its `[block]`
keys of its own are `LibraryOptions`:

```toml
family = "library"

[block]
layer = "tokens"                       # the blocks' hidden state: (B, T, C) "tokens" or (B, C, H, W) "conv2d"
model = "transformers:LlamaModel"      # or its config class, a timm/torchvision registered name or class
config = { hidden_size = "width", num_hidden_layers = "depth", num_attention_heads = 4 }
inputs = "tokens"                      # optional: "tokens", "images" or "embeddings" (default: the model's own)
blocks = "layers"                      # optional: the blocks to probe (default: discovered)
shipped = { hidden_size = 4096 }       # optional: the shipped config's values, for the init rule
```

Config values that name a case key (`"width"`, `"depth"`, `"2*width"`, `"width/64"`, …) are
filled from the drawn case (`stability.families.library`). At load, the name and every config
key are checked (exit 2 with the close names) before any model module is imported; a `[space]`
key that varies but fills no config key, and the keys a library model ignores (the weight init
keys, `input_width`, `probe.checkpoint_every`), are refused. Building (`_build`) constructs the
model under the case's seeded generator, draws its inputs by modality from the case's input
stream, discovers its blocks (`stability.families.discover`) and applies the init rule when
`shipped` is given (`stability.families.library_build`); the `Network` it returns carries the
model and its inputs (`discover.ModelRun`), so every measurement runs the model's own forward.

The memory model (`stability.families.library_memory`) builds the case's model at depths 1 and 2
on the meta device (once per case without its depth and seed), counts its parameters exactly and
the tensors autograd saves in the probe's forward on fake tensors, allocating nothing the size of
the model, and extends both linearly to the case's depth: the peak is the resident set already
held, the model (two while a seed ensemble is probed), the saved tensors and the backward's
working set (docs/library-models.md has it against measured peaks).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stability.errors import SpecError
from stability.spec.lm_keys import check_library_lm
from stability.spec.registry import Family, register_family

__all__ = ["LibraryOptions"]

#: Lower bound of the memory one block takes (module objects, parameters, autograd nodes): a
#: transformers decoder layer at width 8 measures ~40 KiB.
_BLOCK_BYTES = 32 * 2**10


class LibraryOptions(BaseModel):
    """The `[block]` keys of `family = "library"` (the module docstring)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    model: str = Field(
        description='"LIBRARY:NAME": a transformers model or config class, a timm or torchvision registered '
        "model or model class"
    )
    config: dict[str, Any] = Field(
        default_factory=dict,
        description='the config\'s keyword arguments; "width", "depth", "2*width", "width/64" … are filled '
        "from the case",
    )
    inputs: Literal["tokens", "images", "embeddings"] | None = Field(
        default=None, description="the modality of the model's inputs (default: the model's own)"
    )
    blocks: str | None = Field(
        default=None, description='the blocks to probe, e.g. "encoder.layer" or "layer3[1:]" (default: discovered)'
    )
    shipped: dict[str, Any] = Field(
        default_factory=dict, description="the shipped config's values, for the init rule at a reduced width"
    )
    scale: Literal["probed", "shipped", "streamed"] = Field(
        default="probed",
        description='"shipped": the shipped config (block.shipped over block.config), blocks streamed one at a time '
        '(transformers); "streamed": block.config as the case fills it, blocks streamed (a case over the memory '
        "budget is streamed so where it can be)",
    )


def _options(spec: Any) -> LibraryOptions:
    opts = spec.options
    if not isinstance(opts, LibraryOptions):  # the loader validated them; a hand-made Spec may not have
        raise SpecError(
            spec.path,
            "block.model",
            "is required for family 'library'",
            fix='add model = "transformers:LlamaModel" (or another LIBRARY:NAME)',
        )
    return opts


def library_model(spec: Any) -> Any:
    """The spec's `stability.families.library.LibraryModel`, checked (a SpecError otherwise)."""
    from stability.families.library import parse_library

    o = _options(spec)
    return parse_library(
        o.model,
        config=o.config,
        inputs=o.inputs,
        blocks=o.blocks,
        shipped=o.shipped,
        scale=o.scale,
        file=spec.path,
        prefix="block.",
    )


def _set(data: Mapping[str, Any], table: str, key: str) -> bool:
    return isinstance(data.get(table), dict) and key in data[table]


def _check(spec: Any, data: Mapping[str, Any]) -> None:
    from stability.families.library_values import placeholders

    f, s = spec.path, spec.space
    if not _set(data, "block", "model"):
        raise SpecError(
            f,
            "block.model",
            "is required for family 'library'",
            fix='add model = "transformers:LlamaModel" (or another LIBRARY:NAME)',
        )
    lib = library_model(spec)
    named = placeholders(lib.config)
    for key in ("depth", "width"):
        rng = getattr(s, key)
        if rng[0] != rng[1] and key not in named:
            raise SpecError(
                f,
                f"space.{key}",
                f"varies, but no key of block.config is filled from the case's {key}, so every value builds "
                "the same model",
                value=list(rng),
                fix=f'map it (e.g. a config value "{key}") or fix it to one value',
            )
    for key in ("weight_init", "init_std", "init_gain", "bias_init", "input_width"):
        if _set(data, "space", key):
            raise SpecError(
                f,
                f"space.{key}",
                "is not read by family 'library': the library initialises its model (and the init rule "
                "rescales it, with block.shipped)",
                fix="remove it; set the library's own init keys in block.config",
            )
    _check_ineffective(spec, data, lib)
    if spec.probe.checkpoint_every:
        raise SpecError(
            f,
            "probe.checkpoint_every",
            "is not supported by family 'library': the model's own forward runs its blocks",
            value=spec.probe.checkpoint_every,
            fix="remove it",
        )


def _check_ineffective(spec: Any, data: Mapping[str, Any], lib: Any) -> None:
    """A `[space]` key the model's inputs do not read is refused (`stability.families.library_build.make_inputs`):
    `tokens` where the inputs are images (the tokens that reach the blocks are the model's patches,
    set by its image and patch sizes), `spatial` where the config fixes the image size."""
    from stability.families.library import input_modality

    f = spec.path
    image_size = next((k for k in ("image_size", "img_size") if k in lib.config), None)
    if _set(data, "space", "tokens") and input_modality(lib) == "images":
        raise SpecError(
            f,
            "space.tokens",
            f"has no effect: {lib.target} reads images, and the tokens that reach its blocks are its patches "
            "(set by the config's image and patch sizes)",
            value=data["space"]["tokens"],
            fix="remove it, and say in the spec how many tokens the image and patch sizes give",
        )
    if _set(data, "space", "spatial") and image_size is not None:
        raise SpecError(
            f,
            "space.spatial",
            f"has no effect: block.config.{image_size} sets the image size",
            value=data["space"]["spatial"],
            fix=f"remove it, or drop block.config.{image_size}",
        )


def _build(spec: Any, case: Any, gen: Any) -> Any:
    import torch
    from torch import nn

    from stability.families.build import Network, derive_seed, torch_dtype
    from stability.families.discover import ModelRun
    from stability.families.library_build import build_model
    from stability.families.library_depth import least_depth
    from stability.families.library_stream import build_streamed

    lib = library_model(spec)
    seed, device, dtype = derive_seed(case.seed, 1), torch.device(case.device), torch_dtype(case.dtype)
    if lib.scale in ("shipped", "streamed"):
        built = build_streamed(lib, case.as_dict(), input_seed=seed, device=device, dtype=dtype)
    else:
        least = least_depth(lib, case.as_dict()).depth if lib.shipped else 1  # where the init rule's pair is built
        built = build_model(lib, case.as_dict(), input_seed=seed, device=device, dtype=dtype, least=least)
    return Network(
        blocks=nn.Sequential(*built.blocks.modules),
        model=ModelRun(model=built.model, inputs=built.inputs, blocks=built.blocks, rescaled=built.scaled),
    )


#: The case without its depth → (the smallest depth d, its footprints at depths d and d + 1); None: no estimate.
_FOOTPRINTS: dict[str, Any] = {}


def _footprints(spec: Any, case: Any) -> Any:
    """(d, footprint at d, footprint at d + 1) of the case's model (`library_memory.footprint`), d
    its smallest depth (`library_depth.least_depth`: 1 but for a model whose init needs more),
    cached per case without its depth and seed; None when the meta build or the fake pass fails."""
    import torch

    from stability.families.build import torch_dtype
    from stability.families.library_depth import least_depth
    from stability.families.library_memory import footprint

    key = repr((spec.path, spec.options, dataclasses.replace(case, depth=0, seed=0, device="cpu")))
    if key not in _FOOTPRINTS:
        lib = _as_built(library_model(spec))
        try:
            least = least_depth(lib, case.as_dict()).depth
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                _FOOTPRINTS[key] = (
                    least,
                    *(
                        footprint(lib, {**case.as_dict(), "depth": d}, torch_dtype(case.dtype))
                        for d in (least, least + 1)
                    ),
                )
        except (
            Exception
        ):  # a config that does not build, a forward fake tensors cannot run: no estimate (the case runs as it is)
            _FOOTPRINTS[key] = None
    return _FOOTPRINTS[key]


def _least_depth(spec: Any) -> Any:
    """The registry's `least_depth`: the smallest depth the spec's model builds at, at its corner case."""
    from stability.families.library_depth import least_depth
    from stability.spec.case import corner_case

    return least_depth(_as_built(library_model(spec)), corner_case(spec).as_dict())


def _as_built(lib: Any) -> Any:
    """The library model as it is built: at `scale = "shipped"` its config with the shipped values over it."""
    return dataclasses.replace(lib, config={**lib.config, **lib.shipped}, shipped={}) if lib.scale == "shipped" else lib


def _streamed_estimate(spec: Any, case: Any, least: int, one: Any, two: Any) -> int:
    """`library_stream.estimate_bytes` for the case (`one`, `two`: its footprints at depths `least`
    and `least` + 1): its hidden state is (batch, tokens, hidden_size)."""
    import torch

    from stability.families.build import torch_dtype
    from stability.families.library_memory import meta_model
    from stability.families.library_stream import estimate_bytes
    from stability.families.library_values import fill
    from stability.spec.schema import DEFAULT_SIZE

    lib = _as_built(library_model(spec))
    values = {**case.as_dict(), "depth": least}
    hidden = int(getattr(getattr(meta_model(lib, fill(lib.config, values)), "config", None), "hidden_size", 0) or 0)
    batch, tokens = int(values.get("batch") or 2), int(values.get("tokens") or DEFAULT_SIZE)
    itemsize = torch.empty((), dtype=torch_dtype(case.dtype)).element_size()
    return estimate_bytes(one, two, depth=case.depth, hidden_bytes=batch * tokens * hidden * itemsize, least=least)


def _shipped_params(spec: Any, case: Any, least: int) -> int:
    """Bytes (float32) of the init rule's two models at the smallest depth (`library_build.init_factors`),
    0 without `block.shipped`."""
    import torch

    from stability.families.library_memory import count_bytes, meta_model
    from stability.families.library_values import fill

    lib = library_model(spec)
    if not lib.shipped:
        return 0
    one = {**case.as_dict(), "depth": least}
    reduced = fill(lib.config, one)
    return sum(
        count_bytes(meta_model(lib, c), torch.float32)[0] for c in (reduced, {**reduced, **fill(lib.shipped, one)})
    )


def _ensemble_runs(spec: Any) -> bool:
    """Whether a seed ensemble is probed besides the case (a declared
    probe invariant whose registry entry has `ensemble`)."""
    from stability.spec.registry import INVARIANTS

    return int(getattr(spec.probe, "ensemble", 1)) > 1 and any(
        (e := INVARIANTS.get(n)).ensemble is not None and not e.training for n, _ in spec.invariants()
    )


def _estimate(spec: Any, case: Any) -> int | None:
    """The peak resident bytes of the process probing the case (`stability.families.library_memory`,
    its docstring): the footprint at depths 1 and 2 from the config on meta and fake tensors,
    extended linearly to the case's depth; None when that does not build or run."""
    from stability.families.library_memory import resident_bytes

    found = _footprints(spec, case)
    if found is None:
        return None
    least, one, two = found
    if library_model(spec).scale in ("shipped", "streamed"):
        return int(resident_bytes() + _streamed_estimate(spec, case, least, one, two))
    depth = case.depth

    def at(x: int, y: int) -> int:  # x at the smallest depth, y one deeper, extended linearly
        return x if depth <= least else y + (depth - least - 1) * max(y - x, 0)

    params, saved = at(one.params, two.params), at(one.saved, two.saved)
    largest_param, largest_saved = max(one.largest_param, two.largest_param), max(one.largest_saved, two.largest_saved)
    work = (
        2 * largest_param + 2 * largest_saved
    )  # the backward's gradients of the largest parameter and activation, and their norms' copies
    probe = (2 if _ensemble_runs(spec) else 1) * params + saved + work
    build = (
        at(one.params_float32, two.params_float32) + largest_param + _shipped_params(spec, case, least)
    )  # constructed in float32, then cast; the init rule's models
    return int(resident_bytes() + max(probe, build))


def _over_budget(spec: Any, case: Any, budget: int) -> Any:
    """The registry's `over_budget` (stability.families.library_fit.over_budget)."""
    from stability.families.library_fit import over_budget

    return over_budget(spec, library_model(spec), case, budget)


def _check_lm(spec: Any, data: Any) -> None:
    """A language-model spec's model (`check_library_lm`); a config class is built as
    AutoModelForCausalLM builds it, so its model type must have a causal LM: a config of an
    encoder-decoder (T5) or encoder-only family (ViT) has none."""
    check_library_lm(spec, data)
    library, _, name = str(spec.options.model).partition(":")
    if not name.endswith("Config"):
        return
    from stability.families.library_support import import_library

    model_type = getattr(getattr(import_library(library), name, None), "model_type", None)
    causal = import_library("transformers.models.auto.modeling_auto").MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    if model_type not in causal:
        raise SpecError(
            spec.path,
            "block.model",
            f"has no causal language model: AutoModelForCausalLM builds none for model type {model_type!r}, "
            "and the language-model run trains a model from token ids to next-token logits",
            value=spec.options.model,
            fix='name a decoder family\'s config or causal LM (e.g. "transformers:GPT2Config", '
            '"transformers:LlamaForCausalLM")',
        )


def _preload(block: Mapping[str, Any]) -> Sequence[str]:
    """The modules a worker imports once per run for a spec of this family (from its raw `[block]`)."""
    library = str(block.get("model", "")).partition(":")[0]
    return {
        "transformers": ["transformers", "transformers.modeling_utils"],
        "timm": ["timm", "timm.models"],
        "torchvision": ["torchvision.models"],
    }.get(library, [])


register_family(
    Family(
        name="library",
        description="a transformers, timm or torchvision model named as data (block.model, block.config), "
        "probed through its own forward",
        build=_build,
        block_keys=frozenset({"layer"}),
        options=LibraryOptions,
        layers=("tokens", "conv2d"),
        estimate=_estimate,
        block_bytes=_BLOCK_BYTES,
        zero_branch_inits=None,
        branch_inits=frozenset({"default"}),
        check=_check,
        lm_check=_check_lm,
        preload=_preload,
        least_depth=_least_depth,
        over_budget=_over_budget,
        lacks={
            "blocks_alone": "runs its blocks only inside the model's own forward, on the model's own inputs "
            "(the Jacobian's torch.func transforms and the optimizer runs call the blocks on "
            "their own)",
            "attention": "computes its attention inside the library's modules, where the harness reads no "
            "probabilities yet",
        },
    )
)
