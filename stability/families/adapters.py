"""Library blocks as they are: how the harness finds the blocks in what a factory returns, how it
calls each block, and which module flags the probe's `mode` and `dropout` keys set.

The call convention, in full (docs/custom-architectures.md tells it to users):

- **Blocks.** A factory (or a caller of `probe`) may hand over an `nn.Sequential` (its children are
  the blocks), an `nn.ModuleList`, a `Stack`, or any module with one of the attributes in
  `BLOCK_ATTRIBUTES` holding a `Sequential` or a `ModuleList` (the first one present wins:
  timm's `VisionTransformer.blocks`, Llama's `LlamaModel.layers`, BERT's `encoder.layer`,
  GPT-2's `GPT2Model.h`, T5's `stack.block`). A module with `blocks` may also carry `stem` and
  `head`, as before.
- **Extra arguments.** Block l is called as `block(h, **kwargs)`, where `kwargs` is
  `Stack.call_kwargs`: a mapping, or a callable evaluated once per probe on the stack's input
  (after the stem, detached, without gradient) that returns the mapping: attention masks, rotary
  `position_embeddings`, `position_ids`, `use_cache=False`. Every block gets the same mapping.
- **Results.** The hidden state passed on is `hidden_state(result)`: the result itself when it is
  a tensor; else its `last_hidden_state`, else its `hidden_states` when that is a tensor (a
  Hugging Face `ModelOutput` or a dict with those keys); else element 0 of a tuple or list
  (`nn.GRU`'s output, older Hugging Face decoder layers' `(hidden_states, ...)`).
- **Modes.** `set_modes` puts batch-statistics norms in training mode when `probe.mode = "train"`
  and every other module in training mode when `probe.dropout = "on"` (what else reads `training`
  in PyTorch and the libraries is training-time randomness: dropout, attention-probability dropout,
  stochastic depth, RReLU).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = [
    "Stack",
    "CallKwargs",
    "BLOCK_ATTRIBUTES",
    "find_blocks",
    "hidden_state",
    "resolve_call_kwargs",
    "set_modes",
    "is_batch_norm",
    "modes_while_called",
]

#: Attributes that name a model's list of blocks, tried in this order.
BLOCK_ATTRIBUTES: tuple[str, ...] = ("blocks", "layers", "layer", "h", "block")

#: Extra keyword arguments for every block call: a mapping, or (h) -> mapping evaluated once per probe.
CallKwargs = Mapping[str, Any] | Callable[[torch.Tensor], Mapping[str, Any]]


@dataclass(kw_only=True)
class Stack:
    """Blocks as a library builds them, plus how to call them. What a `custom` factory may return,
    and what `probe` accepts besides a plain container.

    `blocks`: an `nn.Sequential`, an `nn.ModuleList`, or a module with a `BLOCK_ATTRIBUTES`
    attribute. `call_kwargs`: extra keyword arguments for every block call (a mapping, or a
    callable of the stack's input returning one; see the module docstring). `stem`: applied to the
    drawn input, without gradient, before block 0 (e.g. (B, C) → (B, T, C)); `head`: carried for
    reports, never run by the probe. `embedding`: the model's own token embedding, a module or a
    function mapping token ids (B, T) to block 0's input (B, T, C) (token and position embeddings
    summed, as the model's forward sums them); with it the probe's input is that embedding of
    token ids drawn from the vocabulary of the `nn.Embedding` that reads them, instead of N(0, 1)
    (`stability.families.embedding`), and the stem, if any, is applied after it.
    """

    blocks: nn.Module | Iterable[nn.Module]
    call_kwargs: CallKwargs | None = None
    stem: nn.Module | None = None
    head: nn.Module | None = None
    embedding: nn.Module | Callable[[torch.Tensor], torch.Tensor] | None = None


def find_blocks(obj: Any) -> list[nn.Module] | None:
    """The blocks of a container as a list, following the rules above; None when `obj` has none."""
    if isinstance(obj, Stack):
        return find_blocks(obj.blocks)
    if isinstance(obj, (nn.Sequential, nn.ModuleList)):
        return list(obj)
    if isinstance(obj, nn.Module):
        for name in BLOCK_ATTRIBUTES:
            inner = getattr(obj, name, None)
            if isinstance(inner, (nn.Sequential, nn.ModuleList)):
                return list(inner)
            if name == "blocks" and isinstance(inner, nn.Module):
                return list(inner.children())
        return None
    if isinstance(obj, Iterable) and not isinstance(obj, (str, bytes, torch.Tensor)):
        items = list(obj)
        return items if all(isinstance(m, nn.Module) for m in items) else None
    return None


def hidden_state(result: Any) -> torch.Tensor | None:
    """The hidden state in what a block returned (the rule in the module docstring), or None."""
    if isinstance(result, torch.Tensor):
        return result
    for key in ("last_hidden_state", "hidden_states"):
        value = result.get(key) if isinstance(result, Mapping) else getattr(result, key, None)
        if isinstance(value, torch.Tensor):
            return value
    if isinstance(result, (tuple, list)) and result and isinstance(result[0], torch.Tensor):
        return result[0]
    return None


def resolve_call_kwargs(call_kwargs: CallKwargs | None, h: torch.Tensor) -> dict[str, Any]:
    """The keyword arguments every block is called with, given the stack's input `h`."""
    if call_kwargs is None:
        return {}
    if callable(call_kwargs):
        with torch.no_grad():
            out = call_kwargs(h.detach())
    else:
        out = call_kwargs
    if not isinstance(out, Mapping):
        raise TypeError(f"call_kwargs must be a mapping or return one, got {type(out).__name__}")
    return dict(out)


def is_batch_norm(module: nn.Module) -> bool:
    """A norm whose training flag chooses batch statistics over running ones (BatchNorm*d,
    SyncBatchNorm, InstanceNorm*d with `track_running_stats`)."""
    return isinstance(module, nn.modules.batchnorm._NormBase)


def set_modes(root: nn.Module, *, norm_train: bool, dropout_train: bool) -> None:
    """Batch-statistics norms train iff `norm_train`; every other module iff `dropout_train`."""
    for m in root.modules():
        m.training = norm_train if is_batch_norm(m) else dropout_train


@contextlib.contextmanager
def modes_while_called(*, norm_train: bool, dropout_train: bool) -> Iterator[None]:
    """Every module called inside the block set as `set_modes` sets the blocks', as it is called: for
    a function whose modules the harness cannot reach (a factory's `Stack.embedding`)."""

    def pre(module: nn.Module, args: tuple[Any, ...]) -> None:
        module.training = norm_train if is_batch_norm(module) else dropout_train

    handle = nn.modules.module.register_module_forward_pre_hook(pre)
    try:
        yield
    finally:
        handle.remove()
