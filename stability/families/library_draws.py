"""A streamed block's random init drawn on every thread of the case: `chunked_draws(seed)`.

A 7B-sized block holds 200 million parameters, and torch's CPU `normal_` draws them from one
Mersenne Twister, one number at a time: a second of one core per block, twice per block in a
streamed probe (its forward and the backward's recomputation), a fifth of the whole probe at two
threads. Inside `chunked_draws`, every in-place `normal_` and `uniform_` on a contiguous CPU
tensor that names no generator of its own (what a library's `_init_weights` calls, directly or
through `torch.nn.init`) is split into chunks of `CHUNK` entries, each drawn with the same
arguments from a generator of its own, seeded from `seed`, the call's place in the init and the
chunk's place in the tensor; the chunks are drawn on the case's torch threads at once (the draws
release the GIL). Nothing else the init does changes: its laws, its arguments, which parameters
it sets and in what order; every other call goes to torch as it was made.

What is drawn depends on `seed` and the init's calls alone, never on the thread count: a block
is the same tensor every time it is made, on any machine. It is another draw of the same law
than the global generator would give, as a block seeded by `block_seed` already is (a whole
model built the usual way is one draw among these, from one stream). The split is a dispatch
mode (it sees the draw whatever Python function made it), and modes are per thread: nothing the
case runs on another thread is affected.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["CHUNK", "chunked_draws"]

#: Entries per chunk: each chunk is one generator's draw (a fixed size, so the draws do not depend
#: on the thread count). 4 Mi entries: 16 MiB of float32, ~20 ms of one core.
CHUNK = 1 << 22

#: The in-place draws split into chunks (aten level: whatever Python function called them,
#: `torch.nn.init.normal_`, `trunc_normal_`'s uniform, `Tensor.normal_`).
_DRAWS = {torch.ops.aten.normal_.default, torch.ops.aten.uniform_.default}


def _chunk_seed(seed: int, call: int, chunk: int) -> int:
    digest = hashlib.blake2b(f"{seed}:{call}:{chunk}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % 2**63


class _ChunkedDraws(TorchDispatchMode):  # type: ignore[no-untyped-call]  # (torch leaves the mode's hooks unannotated)
    def __init__(self, seed: int, pool: ThreadPoolExecutor | None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.seed, self.pool, self.calls = seed, pool, 0

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        target = args[0] if args else None
        if func not in _DRAWS or kwargs.get("generator") is not None or not isinstance(target, torch.Tensor):
            return func(*args, **kwargs)
        if target.device.type != "cpu" or not target.is_floating_point() or not target.is_contiguous():
            return func(*args, **kwargs)
        call, self.calls = self.calls, self.calls + 1
        chunks = torch.split(target.view(-1), CHUNK)

        def draw(j: int) -> None:
            generator = torch.Generator().manual_seed(_chunk_seed(self.seed, call, j))
            with torch.no_grad():  # (grad mode is per thread: the pool's threads start with it on)
                func(chunks[j], *args[1:], **{**kwargs, "generator": generator})

        if self.pool is None or len(chunks) == 1:
            for j in range(len(chunks)):
                draw(j)
        else:
            list(self.pool.map(draw, range(len(chunks))))
        return target


@contextmanager
def chunked_draws(seed: int) -> Iterator[None]:
    """Every `normal_`/`uniform_` of the body drawn in chunks on the case's threads (module docstring)."""
    threads = torch.get_num_threads()
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="stability-draws") if threads > 1 else None
    try:
        with _ChunkedDraws(seed, pool):
            yield
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
