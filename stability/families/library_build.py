"""A library model built from a spec's data (`stability.families.library`), its inputs by modality,
its blocks found (`stability.families.discover`), and the init rule for reduced widths.

**Inputs by modality** (`make_inputs`, drawn on the CPU from the case's input stream):

- `"tokens"`: `input_ids` of shape (batch, tokens), uniform over the config's `vocab_size` less its
  `pad_token_id` (whose embedding row transformers zeroes at init: a norm of 0 measures its eps);
- `"images"`: `pixel_values` (transformers; one positional tensor for timm and torchvision) of
  shape (batch, channels, size, size), N(0, 1), channels from the config (`num_channels`,
  `in_chans`; else 3) and size from the config (`image_size`, `img_size`), else the case's
  `spatial`, else 32;
- `"embeddings"`: `inputs_embeds` of shape (batch, tokens, hidden), N(0, s²), hidden the width of
  the model's input embedding and s the root mean square of its rows (`embedding.embedding_rms`):
  the stream enters block 0 at the scale the model's own token embedding gives it.

The default is the model's own (`main_input_name` of a transformers model: `input_ids` → tokens,
`pixel_values` → images; timm and torchvision: images). tokens defaults to 8 when the case draws
none (`DEFAULT_SIZE`). A transformers model whose forward takes `use_cache` gets `use_cache=False`.

**Reduced widths at the shipped scale** (`init_factors`, `rescale_init`). A small config answers
another question than the shipped model: with the library's init range σ the branches of a
width-W block are about W·σ² per element (a norm's output is O(1), each matrix multiplies by
√(fan-in·σ²)), so at W = 32 they are 24× smaller relative to the skip than at W = 768. With
`shipped` set (the shipped config's values, e.g. `{ hidden_size = 768, intermediate_size = 3072 }`)
the rule is: **every weight matrix inside the probed blocks gets the σ²·fan-in it has in the
shipped model**, so every branch's gain √(fan-in·σ²), and its size relative to the skip, is the
shipped model's. Concretely each such matrix is multiplied by

    k = (σ_shipped / σ_reduced) · √(fan-in_shipped / fan-in_reduced),

σ being the root mean square of the library's own init of that parameter at each width, read
off one block of the model built at depth 1 (or at its smallest depth, `library_depth`) at both
widths (the shipped one on the CPU: one block's memory, once per width and process). A ratio
σ_shipped/σ_reduced within 4 standard errors of 1 (an init that ignores the width), of
√(fan-in_reduced/fan-in_shipped) or of √(fan-out_reduced/fan-out_shipped) (an init scaled by either)
is taken as exactly that, so that sampling noise does not enter: for the init of transformers
(N(0, σ²) whatever the width) k = √(W_shipped / W) exactly, **σ²·width stays fixed**; for a
fan-in-aware init (Kaiming in torchvision and timm CNNs, Mamba's `dt_proj`) k = 1: the library
already keeps the gains; torchvision's ResNets scale by the fan-out, so a 1×1 conv that widens the
bottleneck gets k = √(fan-out_reduced/fan-out_shipped). Any other init gets the measured k.
A weight matrix is a parameter of two or more dimensions outside an `nn.Embedding` (T5's relative
bias table is no branch weight); its fan-in is a Linear's or a conv's input size (transformers'
`Conv1D` keeps its weight as (in, out)), else the last dimension (F.linear's layout: fused
experts, routers). A parameter whose shape is the same at both widths (a depthwise conv), or
whose init is 0, is left as it is, and so are norms, biases, embeddings and everything outside
the blocks. The rule is exact for the gains when the head dimension is kept as shipped (fewer
heads, not smaller ones): attention logits scale with √(head_dim)·W·σ².
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from stability.errors import CaseError
from stability.families.construction import constructing
from stability.families.discover import Blocks, discover
from stability.families.embedding import embedding_rms, token_ids
from stability.families.library import LibraryModel, quiet_imports
from stability.families.library_lookup import Target, registry
from stability.families.library_values import fill
from stability.spec.schema import DEFAULT_SIZE

__all__ = [
    "Built",
    "construct",
    "make_inputs",
    "build_model",
    "factors_between",
    "init_factors",
    "rescale_init",
    "weight_fans",
    "weight_matrices",
]


@contextlib.contextmanager
def _quiet_library(library: str) -> Iterator[None]:
    """transformers logs warnings about configs at construction (token ids outside a small
    vocabulary, …): kept to errors while the harness builds."""
    with quiet_imports():
        if library != "transformers":
            yield
            return
        logging: Any = importlib.import_module("transformers.utils.logging")
        level = logging.get_verbosity()
        logging.set_verbosity_error()
        try:
            yield
        finally:
            logging.set_verbosity(level)


def _is_model_class(cls: Any, base: type) -> bool:
    return isinstance(cls, type) and issubclass(cls, base)


def construct(target: Target, config: Mapping[str, Any]) -> nn.Module:
    """The target built from a filled config, with random init drawn from the global generator
    (the caller seeds it); nothing is downloaded."""
    with _quiet_library(target.library):
        lib: Any = importlib.import_module(target.library)
        if target.library == "transformers":
            cls: Any = getattr(lib, target.name)
            if target.kind == "config":
                model = lib.AutoModel.from_config(cls(**config))
            elif target.kind == "causal_lm_config":  # a config class named by a language-model spec: its causal LM
                model = lib.AutoModelForCausalLM.from_config(cls(**config))
            elif _is_model_class(cls, lib.PreTrainedModel):
                model = cls(cls.config_class(**config))
            else:
                raise CaseError(
                    f"{target} is not a model (a PreTrainedModel): name a model class such as "
                    f"{target.name.replace('Layer', 'Model')}"
                )
        elif target.kind == "registered":
            model = (
                lib.create_model(target.name, pretrained=False, **config)
                if target.library == "timm"
                else lib.models.get_model(target.name, weights=None, **_no_backbone_weights(lib, target.name, config))
            )
        else:
            model = registry(target.library)[1][target.name](**config)
    if not isinstance(model, nn.Module):
        raise CaseError(f"{target} built a {type(model).__name__}, not a torch module")
    return model


def _no_backbone_weights(lib: Any, name: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """A torchvision builder's arguments with `weights_backbone=None` where it takes one: its detection
    and segmentation builders default to an ImageNet backbone, which they download (nothing is)."""
    takes = "weights_backbone" in inspect.signature(lib.models.get_model_builder(name)).parameters
    return {"weights_backbone": None, **config} if takes else dict(config)


def _modality(model: nn.Module, target: Target, chosen: str | None) -> str:
    if chosen is not None:
        return chosen
    if target.library != "transformers":
        return "images"
    main = getattr(model, "main_input_name", "input_ids")
    if main in ("input_ids", "pixel_values"):
        return "tokens" if main == "input_ids" else "images"
    raise CaseError(
        f'{target} takes {main}, not token ids or images: set inputs = "embeddings" if its forward takes inputs_embeds'
    )


def _image_size(model: nn.Module, config: Mapping[str, Any], values: Mapping[str, Any]) -> tuple[int, int]:
    size = config.get("image_size", config.get("img_size"))
    hf = getattr(model, "config", None)
    if size is None and hf is not None:
        size = getattr(hf, "image_size", None)
    if size is None:
        size = values.get("spatial") or 32
    if isinstance(size, (list, tuple)):
        return int(size[-2]), int(size[-1])
    return int(size), int(size)


def make_inputs(
    model: nn.Module,
    target: Target,
    config: Mapping[str, Any],
    values: Mapping[str, Any],
    *,
    modality: str | None,
    seed: int,
    device: torch.device,
    dtype: torch.dtype,
) -> dict[str, Any] | torch.Tensor:
    """The model's inputs for one case (the module docstring), drawn from `seed` on the CPU."""
    gen = torch.Generator().manual_seed(seed)
    kind = _modality(model, target, modality)
    batch, tokens = int(values.get("batch") or 2), int(values.get("tokens") or DEFAULT_SIZE)
    hf = getattr(model, "config", None) if target.library == "transformers" else None
    extra: dict[str, Any] = (
        {"use_cache": False} if hf is not None and "use_cache" in inspect.signature(model.forward).parameters else {}
    )
    if kind == "tokens":
        vocab = getattr(hf, "vocab_size", None) or config.get("vocab_size")
        if not vocab:
            raise CaseError(f"{target} has no vocab_size to draw token ids from: set config.vocab_size")
        ids = token_ids(int(vocab), getattr(hf, "pad_token_id", None), (batch, tokens), generator=gen)  # (B, T)
        return {"input_ids": ids.to(device), **extra}
    if kind == "embeddings":
        get = getattr(model, "get_input_embeddings", None)
        embedding = get() if callable(get) else None
        hidden = getattr(embedding, "embedding_dim", None) or getattr(hf, "hidden_size", None)
        if not hidden:
            raise CaseError(f"{target} has no input embedding to take the width of embeddings from")
        x = torch.randn(batch, tokens, int(hidden), generator=gen, dtype=torch.float64)  # (B, T, C)
        x *= embedding_rms(embedding)  # at the scale of the model's own token embedding
        return {"inputs_embeds": x.to(device=device, dtype=dtype), **extra}
    channels = int(getattr(hf, "num_channels", None) or config.get("num_channels") or config.get("in_chans") or 3)
    x = torch.randn(batch, channels, *_image_size(model, config, values), generator=gen, dtype=torch.float64).to(
        device=device, dtype=dtype
    )
    return {"pixel_values": x, **extra} if hf is not None else x


def weight_fans(owner: nn.Module, p: torch.Tensor) -> tuple[int, int]:
    """A weight's (fan-in, fan-out): a Linear's or conv's, (in, out) for transformers' Conv1D, else
    the last two dimensions (F.linear's (…, out, in))."""
    if type(owner).__name__ == "Conv1D":
        return int(p.shape[0]), int(p.shape[1])
    if isinstance(owner, (nn.Linear, nn.modules.conv._ConvNd)):
        field_size = math.prod(p.shape[2:])
        return int(p.shape[1]) * field_size, int(p.shape[0]) * field_size
    return int(p.shape[-1]), int(p.shape[-2])


def weight_matrices(block: nn.Module) -> dict[str, tuple[nn.Module, nn.Parameter]]:
    """A block's weight matrices (two or more dimensions, outside an embedding), by name, with their owner."""
    out: dict[str, tuple[nn.Module, nn.Parameter]] = {}
    for owner_path, owner in block.named_modules():
        if isinstance(owner, nn.Embedding):
            continue
        for name, p in owner.named_parameters(recurse=False):
            if p.dim() >= 2:
                out[f"{owner_path}.{name}" if owner_path else name] = (owner, p)
    return out


#: `_rms` reduces rows of this many entries in the tensor's own precision (float32 at least), then sums
#: the rows' squares in float64: a rounding error of ~1e-9 relative at 58M entries, against 5e-3
#: for one float32 norm over all of them, at the cost of one float32 norm (a float64 norm of the
#: whole tensor converts every entry first, 30 times slower: seconds per shipped-width expert).
_RMS_ROW = 1024


def _rms(t: torch.Tensor) -> float:
    """The root mean square, accurate to float64's rounding (see `_RMS_ROW`; a float32 norm of a
    58M-entry matrix is off by half a percent, more than the standard error `_snap` allows)."""
    flat = t.detach().reshape(-1)
    n = flat.numel()
    if n == 0:
        return 0.0
    whole = n // _RMS_ROW * _RMS_ROW
    precision = torch.float64 if flat.dtype == torch.float64 else torch.float32
    rows = torch.linalg.vector_norm(flat[:whole].view(-1, _RMS_ROW), dim=1, dtype=precision).double()
    total = float(rows.square().sum()) + float(flat[whole:].double().square().sum())
    return math.sqrt(total / n)


def factors_between(reduced: nn.Module, shipped: nn.Module) -> dict[str, float]:
    """k for each weight matrix of a block (the rule in the module docstring): `reduced` and
    `shipped` are the same block class at the two widths, with the library's init."""
    out: dict[str, float] = {}
    twin = weight_matrices(shipped)
    for name, (owner, p) in weight_matrices(reduced).items():
        if name not in twin or twin[name][1].shape == p.shape:
            continue
        s_reduced, s_shipped = _rms(p), _rms(twin[name][1])
        if s_reduced > 0:
            (in_s, out_s), (in_r, out_r) = weight_fans(*twin[name]), weight_fans(owner, p)
            candidates = (
                1.0,
                math.sqrt(in_r / in_s),
                math.sqrt(out_r / out_s),
            )  # an init that ignores the width, or scales with the fan-in or the fan-out
            out[name] = _snap(
                s_shipped / s_reduced, candidates, error=math.sqrt(0.5 / p.numel() + 0.5 / twin[name][1].numel())
            ) * math.sqrt(in_s / in_r)
    return out


def _snap(ratio: float, candidates: tuple[float, ...], *, error: float) -> float:
    """The candidate nearest `ratio` when within 4 relative standard errors of it, else `ratio`
    (the relative standard error of a root mean square of n normal draws is √(1/2n))."""
    best = min(candidates, key=lambda c: abs(ratio / c - 1))
    return best if abs(ratio / best - 1) <= 4 * error else ratio


_FACTORS: dict[str, dict[str, float]] = {}


def init_factors(
    spec: LibraryModel, values: Mapping[str, Any], block_class: type, *, least: int = 1
) -> dict[str, float]:
    """k for each weight matrix of the spec's block class at this case's width, from the model
    built at its smallest depth `least` (1 but for a model whose init needs more:
    `library_depth.least_depth`) at both widths (seed 0, outside the caller's generator; cached per
    process)."""
    one = {**values, "depth": least}
    reduced_config, shipped_config = fill(spec.config, one), {**fill(spec.config, one), **fill(spec.shipped, one)}
    # The block class is part of the key: discovery may pick another class at another depth (a
    # ResNet at depth 1 has no run of two bottlenecks), and its factors are no other class's.
    key = repr(
        (
            str(spec.target),
            f"{block_class.__module__}.{block_class.__qualname__}",
            sorted(reduced_config.items()),
            sorted(shipped_config.items()),
        )
    )
    if key not in _FACTORS:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            pair = [construct(spec.target, c) for c in (reduced_config, shipped_config)]
        blocks = [next((m for m in model.modules() if type(m) is block_class), None) for model in pair]
        if blocks[0] is None or blocks[1] is None:
            raise CaseError(
                f"{spec.target} built at depth {one['depth']} has no {block_class.__name__} to read the "
                "shipped init from"
            )
        _FACTORS[key] = factors_between(blocks[0], blocks[1])
    return _FACTORS[key]


def rescale_init(blocks: Blocks, factors: Mapping[str, float]) -> dict[str, float]:
    """Multiply each block's weight matrices by their factor; the scaled parameters' names (in the
    model) and their factors."""
    scaled: dict[str, float] = {}
    with torch.no_grad():
        for path, block in zip(blocks.names, blocks.modules, strict=True):
            for name, p in block.named_parameters():
                if name in factors:
                    p.mul_(factors[name])
                    scaled[f"{path}.{name}"] = factors[name]
    return scaled


@dataclass
class Built:
    """A built library model: the model on its device, its inputs, the blocks to probe, every
    stage of their class, and the init rule's factors (by parameter name in a block) and the
    parameters it scaled (by name in the model, with their factors)."""

    model: nn.Module
    inputs: dict[str, Any] | torch.Tensor
    blocks: Blocks
    stages: tuple[Blocks, ...]
    factors: dict[str, float] = field(default_factory=dict)
    scaled: dict[str, float] = field(default_factory=dict)


def build_model(
    spec: LibraryModel,
    values: Mapping[str, Any],
    *,
    input_seed: int,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    least: int = 1,
) -> Built:
    """Build the model of one case (`values`: the case's keys, `Case.as_dict()`), under the
    caller's seeded global generator; its inputs from `input_seed`; its blocks discovered on those
    inputs; the init rule applied when the spec gives the shipped config (its pair of models built
    at depth `least`, the smallest the model builds at: `library_depth.least_depth`)."""
    config = fill(spec.config, values)
    try:
        with constructing():  # (a watcher, e.g. init_conformance's recorder, sees the construction and init)
            model = construct(spec.target, config)
    except CaseError:
        raise
    except Exception as exc:  # the library's own check on this case's config (heads not dividing the width, …)
        what = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise CaseError(f"{spec.target} could not be built from {config}: {what}") from None
    model.to(device=torch.device(device), dtype=dtype)
    inputs = make_inputs(
        model,
        spec.target,
        config,
        values,
        modality=spec.inputs,
        seed=input_seed,
        device=torch.device(device),
        dtype=dtype,
    )
    found = discover(model, inputs, blocks=spec.blocks)
    built = Built(model, inputs, found.blocks, found.stages)
    if spec.shipped:
        built.factors = init_factors(spec, values, type(found.blocks.modules[0]), least=least)
        built.scaled = rescale_init(found.blocks, built.factors)
    return built
