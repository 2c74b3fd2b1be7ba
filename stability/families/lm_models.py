"""The language model a `train.task = "markov"` spec trains, for each kind of model a spec can name:

- `family = "transformer"`: `LanguageModel`, the case's blocks exactly as the builder makes them
  between a token embedding E (V → C) plus a learned position embedding and a final norm of the
  block's kind for pre- and sandwich-norm stacks (GPT-2's ln_f), and a readout: its own weights
  (untied, N(0, 1/C)) or the embedding's (tied, logits = h·Eᵀ/√C); with train.logit_softcap the
  logits are capped z → cap·tanh(z/cap) (Gemma 2). Its attention logits pass through the
  project's `AttentionProbs`.
- `family = "library"`: a transformers causal LM named as data (`transformers:GPT2LMHeadModel`,
  `LlamaForCausalLM`, … or a config class, built as `AutoModelForCausalLM.from_config` builds
  it), with the library's own init; its logits are `model(input_ids=…).logits`. Its attention
  runs through transformers' attention-function registry (`stability.measure.lm_capture`).
- `family = "custom"`: the spec's factory, called by name with the case's values and `vocab`
  (train.vocab), returning an `nn.Module` that maps token ids (B, T) int64 to logits (B, T, V)
  (a tensor, or an output with `.logits`); a transformers model it returns is treated as a
  library model.

Each is built inside `torch.random.fork_rng` under the seed `derive_seed(case.seed, 0)` (the
blocks' stream; for `LanguageModel` the embeddings and readout are drawn from stream 5 in float64),
on the case's device and dtype. `TokenModel` is what the run gets: the module whose parameters it
trains, its logits function, how its attention logits are captured and its parameter groups.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from stability.errors import CaseError, SpecError
from stability.families.build import build, derive_seed, torch_dtype
from stability.families.custom import call_factory
from stability.families.library_lookup import library_of
from stability.spec.case import Case
from stability.spec.schema import DEFAULT_SIZE, Spec

__all__ = [
    "LanguageModel",
    "TokenModel",
    "language_model",
    "token_model",
    "parameter_group",
    "library_parameter_group",
    "named_groups",
]

_HEAD_STREAM = 5


class LanguageModel(nn.Module):
    """tokens (B, T) → logits (B, T, V): embed + positions → blocks → final norm → readout."""

    def __init__(
        self,
        blocks: nn.Sequential,
        *,
        vocab: int,
        width: int,
        tokens: int,
        final_norm: nn.Module,
        tied: bool,
        softcap: float | None,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.zeros(tokens, width))
        self.blocks = blocks
        self.final_norm = final_norm
        self.readout = None if tied else nn.Linear(width, vocab, bias=False)
        self.softcap = softcap

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        h = self.embed(tokens) + self.pos[:t]  # (B, T, C)
        h = self.final_norm(self.blocks(h))  # (B, T, C)
        z: torch.Tensor
        if self.readout is None:
            z = h @ self.embed.weight.t() * (1.0 / math.sqrt(h.shape[-1]))  # (B, T, V), tied
        else:
            z = self.readout(h)  # (B, T, V)
        if self.softcap is not None:
            z = self.softcap * torch.tanh(z / self.softcap)
        return z


@dataclass(kw_only=True)
class TokenModel:
    """A language model as the run trains it: `module` holds every trained parameter, `logits`
    maps token ids (B, T) to logits (B, T, V), `attention` says how its attention logits are
    captured ("probs": the project's `AttentionProbs`; "transformers": the attention-function
    registry; "sdpa": calls of `F.scaled_dot_product_attention`), `group(name, module)` names a
    parameter's group (PARAMETER_GROUPS)."""

    module: nn.Module
    logits: Callable[[torch.Tensor], torch.Tensor]
    attention: Literal["probs", "transformers", "sdpa"]
    group: Callable[[str, nn.Module], str]
    kind: Literal["transformer", "library", "custom"]


def _final_norm(spec: Spec, width: int) -> nn.Module:
    """GPT-2's ln_f after a pre- or sandwich-norm stack of the norm's kind."""
    if spec.block.norm_position == "post":
        return nn.Identity()
    if spec.block.norm == "layer":
        return nn.LayerNorm(width)
    if spec.block.norm == "rms":
        return nn.RMSNorm(width, eps=1e-6)
    return nn.Identity()


def language_model(spec: Spec, case: Case) -> LanguageModel:
    """The case's blocks inside the language model; the embeddings N(0, 1) and the untied readout
    N(0, 1/C), drawn in float64 from stream 5 before the cast to the case's dtype."""
    assert spec.train is not None
    t = spec.train
    tokens = case.tokens or DEFAULT_SIZE
    blocks = build(spec, dataclasses.replace(case, input_width=None)).blocks
    with torch.random.fork_rng(
        devices=[]
    ):  # the layers' default init draws from the global RNG; it is overwritten below
        model = LanguageModel(
            blocks,
            vocab=t.vocab,
            width=case.width,
            tokens=tokens,
            final_norm=_final_norm(spec, case.width),
            tied=t.tied,
            softcap=t.logit_softcap,
        )
    gen = torch.Generator().manual_seed(derive_seed(case.seed, _HEAD_STREAM))
    with torch.no_grad():
        model.embed.weight.copy_(torch.randn(model.embed.weight.shape, generator=gen, dtype=torch.float64))
        model.pos.copy_(torch.randn(model.pos.shape, generator=gen, dtype=torch.float64))
        if model.readout is not None:
            model.readout.weight.copy_(
                torch.randn(model.readout.weight.shape, generator=gen, dtype=torch.float64) / math.sqrt(case.width)
            )
    dtype, device = torch_dtype(case.dtype), torch.device(case.device)
    model.embed.to(device=device, dtype=dtype)
    model.pos.data = model.pos.data.to(device=device, dtype=dtype)
    model.final_norm.to(device=device, dtype=dtype)
    if model.readout is not None:
        model.readout.to(device=device, dtype=dtype)
    return model


def parameter_group(name: str, module: nn.Module) -> str:
    """Which of PARAMETER_GROUPS a parameter of `LanguageModel` belongs to, from its name and the
    module that holds it (norms and gains anywhere are `norm`)."""
    if name.startswith(("embed.", "pos")):
        return "embedding"
    if name.startswith("readout."):
        return "readout"
    if isinstance(module, (nn.LayerNorm, nn.RMSNorm)) or name.startswith("final_norm."):
        return "norm"
    if ".attn.fn." in name and ".q_norm." not in name and ".k_norm." not in name:
        return "attention"
    if ".mlp.fn." in name:
        return "mlp"
    return "norm"  # ReZero, SkipInit and LayerScale gains


def _is_norm(module: nn.Module) -> bool:
    return isinstance(module, (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm)) or "norm" in type(module).__name__.lower()


def library_parameter_group(readout: nn.Module | None) -> Callable[[str, nn.Module], str]:
    """The groups of a library or factory model, by the module that holds a parameter: an
    `nn.Embedding` is `embedding`, the output embedding (`readout`, e.g. `lm_head`) `readout`, a
    norm (`nn.LayerNorm`, `nn.RMSNorm` or a class named …Norm…, such as Qwen3's q/k norms) `norm`,
    else by its path: `attention` under a module named …attn… or …attention…, `mlp` under
    …mlp…, …feed_forward… or …ffn…; the rest (gains, scalars) `norm`. A tied readout's weight is
    the embedding's and counts once, as `embedding`."""

    def group(name: str, module: nn.Module) -> str:
        if readout is not None and module is readout:
            return "readout"
        if isinstance(module, nn.Embedding):
            return "embedding"
        if _is_norm(module):
            return "norm"
        path = name.lower()
        if "attn" in path or "attention" in path:
            return "attention"
        if "mlp" in path or "feed_forward" in path or "ffn" in path:
            return "mlp"
        return "norm"

    return group


def named_groups(model: TokenModel, names: tuple[str, ...]) -> dict[str, list[tuple[str, nn.Parameter]]]:
    """Every trained parameter once (a tied one under its first name), by group (`names`: every
    group, `stability.measure.lm_records.PARAMETER_GROUPS`)."""
    groups: dict[str, list[tuple[str, nn.Parameter]]] = {g: [] for g in names}
    seen: set[int] = set()
    for mod_name, module in model.module.named_modules():
        for p_name, p in module.named_parameters(recurse=False):
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                name = f"{mod_name}.{p_name}" if mod_name else p_name
                groups[model.group(name, module)].append((name, p))
    return groups


def _hf_logits(model: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    def logits(tokens: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = model(input_ids=tokens, use_cache=False).logits  # (B, T, V)
        return out

    return logits


def _transformers_model(model: nn.Module, *, kind: Literal["library", "custom"]) -> TokenModel:
    get = getattr(model, "get_output_embeddings", None)
    readout = get() if callable(get) else None
    return TokenModel(
        module=model,
        logits=_hf_logits(model),
        attention="transformers",
        group=library_parameter_group(readout if isinstance(readout, nn.Module) else None),
        kind=kind,
    )


def _library(spec: Spec, case: Case) -> TokenModel:
    from stability.families.library_build import construct
    from stability.families.library_family import library_model
    from stability.families.library_values import fill

    assert spec.train is not None
    lib = library_model(spec)
    config = {"vocab_size": spec.train.vocab, **fill(lib.config, case.as_dict())}
    target = lib.target
    if target.kind == "config":  # the config class of a family: its causal LM, as AutoModelForCausalLM builds it
        target = dataclasses.replace(target, kind="causal_lm_config")
    try:
        model = construct(target, config)
    except CaseError:
        raise
    except Exception as exc:  # the library's own check on this case's config (heads not dividing the width, …)
        what = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise CaseError(f"{lib.target} could not be built from {config}: {what}") from None
    return _transformers_model(model, kind="library")


def _logits_of(output: Any) -> Any:
    """The logits a factory model's forward returned: the tensor itself, an output's `.logits` (a
    transformers ModelOutput), a dict's "logits", or a tuple's first element (`return_dict=False`)."""
    if hasattr(output, "logits"):
        return output.logits
    if isinstance(output, Mapping):
        return output.get("logits", output)
    if isinstance(output, tuple | list) and output:
        return output[0]
    return output


def _custom(spec: Spec, case: Case) -> TokenModel:
    assert spec.train is not None
    out = call_factory(spec, case, vocab=spec.train.vocab)
    if not isinstance(out, nn.Module):  # bad input, as for a probe spec's factory (families/custom.py): exit 2
        raise SpecError(
            spec.path,
            "block.factory",
            f"returned {type(out).__name__}, not an nn.Module",
            value=spec.block.factory,
            fix="a language-model spec's factory returns an nn.Module from token ids (B, T) to logits (B, T, vocab)",
        )
    if (
        library_of(out) is not None
        and hasattr(out, "get_output_embeddings")
        and getattr(out, "config", None) is not None
    ):
        return _transformers_model(out, kind="custom")
    vocab = spec.train.vocab

    def logits(tokens: torch.Tensor) -> torch.Tensor:
        z = _logits_of(out(tokens))
        if not isinstance(z, torch.Tensor) or z.shape != (*tokens.shape, vocab):
            shape = tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__
            raise CaseError(
                f"the factory {spec.block.factory}'s model returned {shape} for token ids "
                f"{tuple(tokens.shape)}; it must return logits of shape {(*tokens.shape, vocab)} "
                f"(train.vocab = {vocab}): a tensor, an output with .logits, a dict with 'logits' or a tuple "
                "whose first element is the logits"
            )
        return z

    from stability.families.transformer import AttentionProbs

    probs = any(isinstance(m, AttentionProbs) for m in out.modules())
    return TokenModel(
        module=out,
        logits=logits,
        attention="probs" if probs else "sdpa",
        group=library_parameter_group(None),
        kind="custom",
    )


def token_model(spec: Spec, case: Case) -> TokenModel:
    """The case's language model (the module docstring), on the case's device and dtype (whether it
    reads later tokens is `stability.families.lm_causal`'s question, asked by the run)."""
    if spec.family == "transformer":
        model = language_model(spec, case)
        return TokenModel(module=model, logits=model, attention="probs", group=parameter_group, kind="transformer")
    if spec.family not in ("library", "custom"):
        raise ValueError(f"{spec.path}: family {spec.family!r} builds no language model")  # the loader refuses it first
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(case.seed, 0))
        built = _library(spec, case) if spec.family == "library" else _custom(spec, case)
    built.module.to(device=torch.device(case.device), dtype=torch_dtype(case.dtype))
    return built
