"""Token models at their embedding's scale: which `nn.Embedding` reads a model's token ids, the ids
drawn for a case, and the scale of an embedding's output.

A token model's stream enters its first block at the scale of its own embedding (N(0, 0.02²) per
element in GPT-2, Llama, nanoGPT; GPT-2 and nanoGPT add a learned position of the same scale), not
at N(0, 1): a probe on N(0, 1) input measures another stream, in which every branch is small beside
the skip and the numbers that depend on the branches' size relative to the stream (the variance
growth, a depth-scaled init) barely move. So wherever the harness can, x₀ is the model's own
embedding of token ids:

- a library model (`family = "library"`) and a whole model from a factory run their own forward
  from token ids (`reading_embedding` finds the embedding that reads them, whose vocabulary the
  ids are drawn from);
- a factory that returns blocks declares its embedding, `stability.Stack(blocks=..., embedding=...)`,
  which maps the ids to block 0's input;
- `inputs = "embeddings"` draws `inputs_embeds` at the root mean square of the input embedding's
  rows (`embedding_rms`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = ["TokenEmbedding", "reading_embedding", "token_ids", "embedding_rms"]


@dataclass(frozen=True, kw_only=True)
class TokenEmbedding:
    """The `nn.Embedding` that reads a model's token ids: its vocabulary and padding row."""

    vocab: int
    padding: int | None
    name: str  # its class and shape, for messages: "Embedding(64, 32)"


def reading_embedding(call: Callable[[torch.Tensor], Any], shape: tuple[int, int]) -> TokenEmbedding | None:
    """Call `call(ids)` once without gradient on token ids of `shape` (all 0: a valid id of every
    vocabulary) and return the first `nn.Embedding` whose input is those very ids; None when none
    reads them or the call raises (then `call` is no token model). The global generator and every
    module's training flag are put back."""
    ids = torch.zeros(shape, dtype=torch.long)
    found: list[nn.Embedding] = []

    def pre(module: nn.Module, args: tuple[Any, ...]) -> None:
        if found or not isinstance(module, nn.Embedding) or not args:
            return
        a = args[0]
        if isinstance(a, torch.Tensor) and a.dtype == ids.dtype and a.data_ptr() == ids.data_ptr():
            found.append(module)

    handle = nn.modules.module.register_module_forward_pre_hook(pre)
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            call(ids)
    except Exception:  # not a token model's forward: the caller probes it another way
        return None
    finally:
        handle.remove()
    if not found:
        return None
    e = found[0]
    pad = e.padding_idx if e.padding_idx is not None and 0 <= e.padding_idx < e.num_embeddings else None
    return TokenEmbedding(
        vocab=int(e.num_embeddings), padding=pad, name=f"Embedding({e.num_embeddings}, {e.embedding_dim})"
    )


def token_ids(vocab: int, padding: Any, shape: tuple[int, ...], *, generator: torch.Generator) -> torch.Tensor:
    """Token ids of `shape` (batch, tokens), uniform over the vocabulary less its padding id (an int
    inside it; anything else is no padding id), whose embedding row is 0 at init in transformers and
    PyTorch (a norm of 0 measures only its eps)."""
    pad = padding if isinstance(padding, int) and 0 <= padding < vocab and vocab > 1 else None
    ids = torch.randint(0, vocab - (pad is not None), shape, generator=generator)  # (B, T)
    if pad is not None:
        ids += (ids >= pad).long()
    return ids


def embedding_rms(embedding: nn.Module | None) -> float:
    """The root mean square of an `nn.Embedding`'s rows (its padding row left out): the scale of its
    output per element for uniform token ids. 1.0 for anything else (no embedding to read)."""
    if not isinstance(embedding, nn.Embedding):
        return 1.0
    w = embedding.weight.detach()
    if (
        w.is_meta or w.untyped_storage().nbytes() == 0
    ):  # shapes only (the memory model), or a streamed model's storage not made yet
        return 1.0
    if embedding.padding_idx is not None and w.shape[0] > 1:
        keep = torch.ones(w.shape[0], dtype=torch.bool)
        keep[embedding.padding_idx] = False
        w = w[keep]
    rms = math.sqrt(float(w.double().square().mean())) if w.numel() else 0.0
    return rms if rms > 0 and math.isfinite(rms) else 1.0
