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

The memory model builds the case's model at depths 1 and 2 on the CPU (once per width and
inputs) and counts its parameters and the tensors autograd saves in one forward:
bytes(depth) = fixed + depth · (bytes(2) − bytes(1)), with a 1.5× margin.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stability.errors import SpecError
from stability.spec.registry import Family, register_family

__all__ = ["LibraryOptions"]

#: Lower bound of the memory one block takes (module objects, parameters, autograd nodes): a
#: transformers decoder layer at width 8 measures ~40 KiB.
_BLOCK_BYTES = 32 * 2**10


class LibraryOptions(BaseModel):
    """The `[block]` keys of `family = "library"` (the module docstring)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    model: str = Field(description='"LIBRARY:NAME": a transformers model or config class, a timm or torchvision registered model or model class')
    config: dict[str, Any] = Field(default_factory=dict, description='the config\'s keyword arguments; "width", "depth", "2*width", "width/64" … are filled from the case')
    inputs: Literal["tokens", "images", "embeddings"] | None = Field(default=None, description="the modality of the model's inputs (default: the model's own)")
    blocks: str | None = Field(default=None, description='the blocks to probe, e.g. "encoder.layer" or "layer3[1:]" (default: discovered)')
    shipped: dict[str, Any] = Field(default_factory=dict, description="the shipped config's values, for the init rule at a reduced width")


def _options(spec: Any) -> LibraryOptions:
    opts = spec.options
    if not isinstance(opts, LibraryOptions):  # the loader validated them; a hand-made Spec may not have
        raise SpecError(spec.path, "block.model", "is required for family 'library'", fix='add model = "transformers:LlamaModel" (or another LIBRARY:NAME)')
    return opts


def library_model(spec: Any) -> Any:
    """The spec's `stability.families.library.LibraryModel`, checked (a SpecError otherwise)."""
    from stability.families.library import parse_library

    o = _options(spec)
    return parse_library(o.model, config=o.config, inputs=o.inputs, blocks=o.blocks, shipped=o.shipped, file=spec.path, prefix="block.")


def _set(data: Mapping[str, Any], table: str, key: str) -> bool:
    return isinstance(data.get(table), dict) and key in data[table]


def _check(spec: Any, data: Mapping[str, Any]) -> None:
    from stability.families.library import placeholders

    f, s = spec.path, spec.space
    if not _set(data, "block", "model"):
        raise SpecError(f, "block.model", "is required for family 'library'", fix='add model = "transformers:LlamaModel" (or another LIBRARY:NAME)')
    lib = library_model(spec)
    named = placeholders(lib.config)
    for key in ("depth", "width"):
        rng = getattr(s, key)
        if rng[0] != rng[1] and key not in named:
            raise SpecError(
                f,
                f"space.{key}",
                f"varies, but no key of block.config is filled from the case's {key}, so every value builds the same model",
                value=list(rng),
                fix=f'map it (e.g. a config value "{key}") or fix it to one value',
            )
    for key in ("weight_init", "init_std", "init_gain", "bias_init", "input_width"):
        if _set(data, "space", key):
            raise SpecError(
                f,
                f"space.{key}",
                "is not read by family 'library': the library initialises its model (and the init rule rescales it, with block.shipped)",
                fix="remove it; set the library's own init keys in block.config",
            )
    _check_ineffective(spec, data, lib)
    if spec.probe.checkpoint_every:
        raise SpecError(f, "probe.checkpoint_every", "is not supported by family 'library': the model's own forward runs its blocks", value=spec.probe.checkpoint_every, fix="remove it")


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
            f"has no effect: {lib.target} reads images, and the tokens that reach its blocks are its patches (set by the config's image and patch sizes)",
            value=data["space"]["tokens"],
            fix="remove it, and say in the spec how many tokens the image and patch sizes give",
        )
    if _set(data, "space", "spatial") and image_size is not None:
        raise SpecError(f, "space.spatial", f"has no effect: block.config.{image_size} sets the image size", value=data["space"]["spatial"], fix=f"remove it, or drop block.config.{image_size}")


def _build(spec: Any, case: Any, gen: Any) -> Any:
    import torch
    from torch import nn

    from stability.families.build import Network, derive_seed, torch_dtype
    from stability.families.discover import ModelRun
    from stability.families.library_build import build_model

    built = build_model(library_model(spec), case.as_dict(), input_seed=derive_seed(case.seed, 1), device=torch.device(case.device), dtype=torch_dtype(case.dtype))
    return Network(nn.Sequential(*built.blocks.modules), model=ModelRun(built.model, built.inputs, built.blocks, rescaled=built.scaled))


_MEASURED: dict[str, tuple[int, int] | None] = {}  # (fixed, per block) by the case without its depth


def _measure(spec: Any, case: Any, depth: int) -> int:
    """Parameter bytes plus the bytes autograd saves in one forward of the case's model at `depth`, in float32."""
    import torch

    from stability.families.discover import run_model
    from stability.families.library_build import build_model

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        built = build_model(library_model(spec), {**case.as_dict(), "depth": depth}, input_seed=0)
    saved = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[0] += t.numel() * t.element_size()
        return t

    def stop(module: Any, args: Any, output: Any) -> None:
        raise _Stop

    handle = built.blocks.modules[-1].register_forward_hook(stop)  # nothing after the last probed block runs in the probe
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            run_model(built.model, built.inputs)
    except _Stop:
        pass
    finally:
        handle.remove()
    return saved[0] + sum(p.numel() * p.element_size() for p in built.model.parameters())


class _Stop(BaseException):
    """Ends the memory model's forward at the last probed block."""


def _estimate(spec: Any, case: Any) -> int | None:
    """bytes(depth) = fixed + depth · per block, from the case's model at depths 1 and 2 (the module
    docstring); None when those do not build or run (the case then fails on its own)."""
    from stability.families.build import torch_dtype

    probe_case = dataclasses.replace(case, depth=1, dtype="float32", device="cpu", seed=0)
    key = repr((spec.path, spec.options, dataclasses.replace(probe_case, depth=0)))
    if key not in _MEASURED:
        try:
            one, two = _measure(spec, probe_case, 1), _measure(spec, probe_case, 2)
            _MEASURED[key] = (one, max(two - one, 0))
        except Exception:  # a config that does not build at this width, or a forward that fails: no estimate
            _MEASURED[key] = None
    found = _MEASURED[key]
    if found is None:
        return None
    fixed, per_block = found
    scale: float = torch_dtype(case.dtype).itemsize / 4
    depth: int = case.depth
    return int(1.5 * scale * (fixed + depth * per_block)) + depth * _BLOCK_BYTES


def _preload(block: Mapping[str, Any]) -> Sequence[str]:
    """The modules a worker imports once per run for a spec of this family (from its raw `[block]`)."""
    library = str(block.get("model", "")).partition(":")[0]
    return {"transformers": ["transformers", "transformers.modeling_utils"], "timm": ["timm", "timm.models"], "torchvision": ["torchvision.models"]}.get(library, [])


register_family(
    Family(
        name="library",
        description="a transformers, timm or torchvision model named as data (block.model, block.config), probed through its own forward",
        build=_build,
        block_keys=frozenset({"layer"}),
        options=LibraryOptions,
        layers=("tokens", "conv2d"),
        estimate=_estimate,
        block_bytes=_BLOCK_BYTES,
        zero_branch_inits=None,
        branch_inits=frozenset({"default"}),
        check=_check,
        preload=_preload,
        lacks={
            "blocks_alone": "runs its blocks only inside the model's own forward, on the model's own inputs (the Jacobian's torch.func transforms and the optimizer runs call the blocks on their own)",
            "attention": "computes its attention inside the library's modules, where the harness reads no probabilities yet",
        },
    )
)
