"""What the backward pass costs in memory: the activation bytes autograd keeps after one forward.

`saved_activation_bytes` runs the forward pass the way `probe` runs it (the input detached and
made to require grad; with `checkpoint_every = N > 0` the blocks run in non-reentrant checkpointed
segments of N) under `torch.autograd.graph.saved_tensors_hooks`. The pack hook sees every tensor
autograd saves for the backward pass; the function counts the bytes of the *distinct storages*
behind them, since one storage is often saved by several nodes (a ReLU saves its output and the
next `Linear` saves the same tensor as its input) and a view saves its base's storage. Storages of
the blocks' parameters and buffers are left out: a `Linear` also saves its weight, but the weights
are held whether or not a backward pass follows, so they are not activation memory.

Under non-reentrant checkpointing the segments' inner tensors go to the checkpoint's own hooks and
are recomputed in the backward pass; what stays saved is each segment's input (through
`torch.utils.checkpoint`'s input saver), so a checkpointed stack of L blocks of width w keeps
⌈L/N⌉ boundary tensors. The count is what is held between the forward and the backward pass; the
transient peak while one segment is recomputed is not included.

Nothing is kept after the call: the hooks record only (data pointer → bytes), and the output and
its graph are dropped before returning. All saved storages are alive together until then, so data
pointers cannot be reused within one call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

__all__ = ["saved_activation_bytes", "counting_saved_bytes"]


def _as_list(blocks: nn.Module | Iterable[nn.Module]) -> list[nn.Module]:
    if isinstance(blocks, (nn.Sequential, nn.ModuleList)):
        return list(blocks)
    if isinstance(blocks, nn.Module):
        return [blocks]
    return list(blocks)


def _storage_key(t: torch.Tensor) -> tuple[int, int]:
    """(key, bytes) of the storage behind `t`; tensors without one count their own bytes."""
    try:
        storage = t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # e.g. sparse or nested tensors
        return id(t), t.nelement() * t.element_size()
    return storage.data_ptr(), storage.nbytes()


def saved_activation_bytes(
    blocks: nn.Module | Iterable[nn.Module], x: torch.Tensor, *, checkpoint_every: int = 0
) -> int:
    """Bytes of the distinct activation storages autograd saves in one forward pass of `blocks`.

    `blocks` and `checkpoint_every` mean what they mean for `probe`. The input counts when a block
    saves it (it is kept alive for the backward pass); parameters and buffers do not. One forward
    pass runs (in train or eval mode, as the modules are set); no backward pass runs.
    """
    modules = _as_list(blocks)
    n = len(modules)

    def run(h: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        for i in range(start, stop):
            h = modules[i](h)
        return h

    with torch.enable_grad(), counting_saved_bytes(modules) as sizes:
        h = x.detach().requires_grad_(True)  # as in `probe`: a view of x, no copy
        if checkpoint_every and checkpoint_every < n:
            for start in range(0, n, checkpoint_every):
                h = checkpoint(run, h, start, min(start + checkpoint_every, n), use_reentrant=False)
        else:
            h = run(h, 0, n)
    del h  # frees the graph and with it every saved tensor
    return sum(sizes.values())


@contextlib.contextmanager
def counting_saved_bytes(modules: Iterable[nn.Module]) -> Iterator[dict[int, int]]:
    """Within the block, every tensor autograd saves is recorded as {storage: bytes}, counting
    each distinct storage once and leaving out the modules' own parameters and buffers. The
    tensors themselves are saved as usual (nothing is copied or kept beyond autograd's own)."""
    held = {_storage_key(t)[0] for m in modules for t in (*m.parameters(), *m.buffers())}
    sizes: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        key, nbytes = _storage_key(t)
        if key not in held:
            sizes[key] = nbytes
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield sizes
