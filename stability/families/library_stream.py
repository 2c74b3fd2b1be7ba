"""Shipped scale: a transformers model probed whole with only one or two of its blocks in memory.

`[block] scale = "shipped"` builds the spec's model at its shipped config (`block.config` with
`block.shipped` over it) and streams it: the probe is the ordinary one (`stability.measure.probe`,
through the model's own forward, so every block receives exactly the arguments the model passes it:
masks, rotary tables, position bias, cache off), and only the parameters' storage is managed here.

- **Construction**: every parameter is registered on the meta device (`library_memory.registered_on_meta`
  with buffers kept: rotary tables and masks are computed as the library computes them); the
  parts outside the blocks (embeddings, final norm) are then materialised for good.
- **Init**: a block's parameters are allocated when the block runs and set by the library's own
  init, `PreTrainedModel._init_weights` applied to each of its modules children first (what
  `post_init` does), from generators seeded for that block alone (`block_seed`; its normal and
  uniform draws a chunk at a time on the case's threads, `library_draws`), so the block is
  the same tensor every time it is materialised; the parts outside the blocks from a seed of their
  own. The first time a block is made its storage is filled with NaN first: a parameter the
  library's init leaves unset fails the case, naming it (the init is the same code every time,
  so a block that passed once is not filled again). That first time is also where a reader of
  every parameter (`Streamer.first_visit`: init_conformance's statistics) reads the block, so
  the statistics cost no block made once more. The whole-model build (`library_build.build_model`) draws the same
  model from one stream in construction order, which a block-by-block build cannot replay; a
  whole model initialised by `init_streamed` (as the tests do) is this model, bit for bit.
- **Forward**: each block runs under non-reentrant activation checkpointing (`torch.utils.checkpoint`),
  so the forward keeps only each block's inputs; the block's storage is released (back to the
  meta device) as soon as it has run.
- **Backward**: checkpointing recomputes each block when the backward reaches it (its
  `context_fn` marks the recomputation); the block is materialised again from its seed, and the
  block two places after it is released then (autograd's CPU engine runs every node of a later
  block before any of an earlier one, so one block of lag suffices).
- **Discovery** traces the model once without gradient: there each block runs on the meta device
  and hands the next a zero tensor of its output's shape (no arithmetic, no init), falling back to
  a real run where a block's forward cannot run on meta.

The memory held is the parts outside the blocks, two blocks' parameters, each block's input (what
checkpointing keeps) and one block's activations and largest gradients during its backward;
`estimate_bytes` is that sum (docs/library-models.md has it against measured peaks).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from stability.errors import CaseError
from stability.families.library_draws import chunked_draws

__all__ = [
    "Streamer",
    "build_streamed",
    "streamer_of",
    "init_streamed",
    "init_whole",
    "block_seed",
    "named_parameters_materialised",
]

#: The attribute a streamed model carries its `Streamer` under.
_ATTRIBUTE = "_stability_streamer"


def block_seed(seed: int, index: int | str) -> int:
    """The seed of one block's init (`index`: its place) or of the parts outside the blocks (`"rest"`)."""
    digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % 2**63


def _library_init(model: nn.Module) -> Callable[[nn.Module], None]:
    init = getattr(model, "_init_weights", None)
    if not callable(init):
        raise CaseError(
            'scale = "shipped" streams a transformers model, initialised by its _init_weights: '
            f"{type(model).__name__} has none"
        )
    return init  # type: ignore[no-any-return]


def _post_order(module: nn.Module, skip: set[int]) -> Iterator[nn.Module]:
    for child in module.children():
        if id(child) not in skip:
            yield from _post_order(child, skip)
    yield module


def init_streamed(model: nn.Module, part: nn.Module, seed: int, *, skip: set[int] | None = None) -> None:
    """Set `part`'s parameters by the library's init (`model._init_weights` on each of its modules,
    children first, leaving out the modules in `skip` and theirs), drawn from `seed` alone; the
    caller's generator is left as it was. Its normal and uniform draws are taken a chunk at a
    time on the case's threads (`library_draws.chunked_draws`): the same law, the same tensor
    whatever the thread count."""
    init = _library_init(model)
    with torch.random.fork_rng(devices=[]), torch.no_grad(), chunked_draws(seed):
        torch.manual_seed(seed)
        for m in _post_order(part, skip or set()):
            init(m)


def _storage_bytes(p: torch.Tensor) -> int:
    return (
        int(p.storage_offset() + sum((n - 1) * st for n, st in zip(p.shape, p.stride(), strict=True)) + 1)
        * p.element_size()
        if p.numel()
        else 0
    )


def _materialise(params: Sequence[tuple[str, nn.Parameter]], device: torch.device, *, poison: bool) -> None:
    """Storage for each parameter; with `poison`, filled with NaN (what the init must overwrite)."""
    for _, p in params:
        storage = p.untyped_storage()
        if storage.nbytes() == 0:
            storage.resize_(_storage_bytes(p))
        if poison and p.is_floating_point():
            with torch.no_grad():
                p.fill_(math.nan)


def _release(params: Sequence[tuple[str, nn.Parameter]]) -> None:
    for _, p in params:
        p.untyped_storage().resize_(0)


def _storageless(model: nn.Module, device: torch.device) -> None:
    """Every parameter of `model` (on the meta device) replaced by one on `device` without storage:
    same shape, dtype and flags, its storage resized to 0 until it is materialised (a tied
    parameter stays one parameter)."""
    done: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is None:
                continue
            if id(p) not in done:
                t = torch.empty(p.shape, dtype=p.dtype, device=device)  # (never touched: no memory before the resize)
                t.untyped_storage().resize_(0)
                done[id(p)] = nn.Parameter(t, requires_grad=p.requires_grad)
            module._parameters[name] = done[id(p)]


def _unset(params: Sequence[tuple[str, nn.Parameter]]) -> list[str]:
    return [n for n, p in params if p.is_floating_point() and bool(torch.isnan(p).any())]


def _map_tensors(value: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_map_tensors(v, fn) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    return value


class Streamer:
    """The streamed blocks of one model (the module docstring): `blocks` in the model's order,
    their parameters on the meta device until a block runs."""

    def __init__(
        self,
        model: nn.Module,
        blocks: Sequence[nn.Module],
        *,
        seed: int,
        device: torch.device,
        factors: Mapping[str, float] | None = None,
    ) -> None:
        self.model, self.blocks, self.seed, self.device = model, list(blocks), seed, device
        self.factors = dict(factors or {})
        self.params = [list(b.named_parameters()) for b in self.blocks]
        self.live: set[int] = set()
        self.checked: set[int] = set()
        #: Called with a block's parameters the first time it is materialised (after its init and
        #: the shipped-width factors): a reader of every parameter (`init_stats`) reads them there
        #: instead of making every block once more.
        self.first_visit: list[Callable[[Sequence[tuple[str, nn.Parameter]]], None]] = []
        self.tracing = False
        self.recomputing = False
        self.materialisations = 0
        self.peak_live = 0  # the most blocks materialised at once
        for i, block in enumerate(self.blocks):
            block.forward = self._forward(i, block.forward)  # the instance's forward: its hooks still run in __call__
        setattr(model, _ATTRIBUTE, self)

    # -- one block's storage --------------------------------------------------------------------

    def materialise(self, i: int, *, keep: Sequence[int] = ()) -> None:
        """Block i's parameters allocated and initialised (from `block_seed(seed, i)`); every other
        live block but `keep` released first."""
        for j in sorted(self.live - {i, *keep}):
            self.release(j)
        if i in self.live:
            return
        params, first = self.params[i], i not in self.checked
        _materialise(params, self.device, poison=first)  # (later: the init, checked then, sets every entry)
        self.live.add(i)
        self.peak_live = max(self.peak_live, len(self.live))
        self.materialisations += 1
        init_streamed(self.model, self.blocks[i], block_seed(self.seed, i))
        if first:
            unset = _unset(params)
            if unset:
                self.release(i)
                raise CaseError(
                    f"{type(self.model).__name__}._init_weights leaves {', '.join(unset[:3])} of block {i} unset "
                    '(set at construction only, which a streamed block does not run): probe it with scale = "probed"'
                )
        if self.factors:
            with torch.no_grad():
                for name, p in params:
                    if name in self.factors:
                        p.mul_(self.factors[name])
        if first:
            self.checked.add(i)
            for visit in self.first_visit:
                visit(params)

    def release(self, i: int) -> None:
        _release(self.params[i])
        self.live.discard(i)

    def release_all(self) -> None:
        for j in sorted(self.live):
            self.release(j)

    # -- the blocks' forward ----------------------------------------------------------------------

    def _forward(self, i: int, original: Callable[..., Any]) -> Callable[..., Any]:
        streamer = self

        def run(*args: Any, **kwargs: Any) -> Any:
            if (
                streamer.recomputing
            ):  # the backward reached block i: keep the block after it (its backward may still be finishing)
                streamer.materialise(i, keep=(i + 1,))
                return original(*args, **kwargs)
            return streamer._forward_real(i, original, args, kwargs)

        @contextlib.contextmanager
        def recompute() -> Iterator[None]:
            before, streamer.recomputing = streamer.recomputing, True
            try:
                yield
            finally:
                streamer.recomputing = before

        def contexts() -> tuple[Any, Any]:
            return contextlib.nullcontext(), recompute()

        def forward(*args: Any, **kwargs: Any) -> Any:
            if streamer.tracing and not torch.is_grad_enabled():
                return streamer._trace(i, original, args, kwargs)
            if not torch.is_grad_enabled():
                return run(*args, **kwargs)
            return checkpoint(run, *args, use_reentrant=False, context_fn=contexts, **kwargs)

        return forward

    def _trace(self, i: int, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Block i's output shapes without its arithmetic: run with its parameters and inputs on the
        meta device, zeros of the output's shapes handed on."""
        device = next((t.device for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor)), self.device)
        slots = [(m, name, p) for m in self.blocks[i].modules() for name, p in m._parameters.items() if p is not None]
        try:
            for m, name, p in slots:
                m._parameters[name] = nn.Parameter(
                    torch.empty(p.shape, dtype=p.dtype, device="meta"), requires_grad=p.requires_grad
                )
            out = original(*_map_tensors(args, lambda t: t.to("meta")), **_map_tensors(kwargs, lambda t: t.to("meta")))
        except Exception:  # a forward that reads numbers back: run it for real
            out = None
        finally:
            for m, name, p in slots:
                m._parameters[name] = p
        if out is None:
            return self._forward_real(i, original, args, kwargs)
        return _map_tensors(
            out, lambda t: torch.zeros(t.shape, dtype=t.dtype, device=device) if t.device.type == "meta" else t
        )

    def _forward_real(self, i: int, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Block i run for real: its parameters materialised for the call and released after."""
        self.materialise(i)
        try:
            return original(*args, **kwargs)
        finally:
            self.release(i)

    @contextlib.contextmanager
    def tracing_shapes(self) -> Iterator[None]:
        self.tracing = True
        try:
            yield
        finally:
            self.tracing = False

    # -- every parameter, for statistics ------------------------------------------------------------

    def named_parameters(self, known: Container[int] = ()) -> Iterator[tuple[str, torch.Tensor]]:
        """The model's `named_parameters()`, each block materialised while its parameters are read
        (one block at a time); a parameter whose id is in `known` (the caller read it before) does
        not make its block."""
        owner = {id(p): i for i, params in enumerate(self.params) for _, p in params}
        try:
            for name, p in self.model.named_parameters():
                i = owner.get(id(p))
                if i is not None and id(p) not in known:
                    self.materialise(i)
                yield name, p
        finally:
            self.release_all()


def streamer_of(model: nn.Module) -> Streamer | None:
    """The `Streamer` of a streamed model, else None."""
    found = getattr(model, _ATTRIBUTE, None)
    return found if isinstance(found, Streamer) else None


def named_parameters_materialised(model: nn.Module, known: Container[int] = ()) -> Iterator[tuple[str, torch.Tensor]]:
    """`model.named_parameters()`, a streamed model's blocks materialised one at a time (not for
    the parameters whose ids are in `known`: `Streamer.named_parameters`)."""
    streamer = streamer_of(model)
    return streamer.named_parameters(known) if streamer is not None else model.named_parameters()


def build_streamed(
    spec: Any,
    values: Mapping[str, Any],
    *,
    input_seed: int,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> Any:
    """`library_build.build_model` for `scale = "shipped"`: the model at its shipped config, its
    parameters on the meta device, the parts outside its blocks initialised for good, its blocks
    streamed (the module docstring). The init's seed is drawn from the caller's seeded generator."""
    from stability.allocator import tune_malloc
    from stability.families.discover import discover
    from stability.families.library_build import Built, construct, make_inputs
    from stability.families.library_memory import registered_on_meta
    from stability.families.library_values import fill

    tune_malloc()  # blocks' storage and activations come and go all through the pass: served by mmap, returned on free
    config = {**fill(spec.config, values), **fill(spec.shipped, values)}
    dev = torch.device(device)
    seed = int(torch.randint(0, 2**62, ()))
    try:
        with registered_on_meta(buffers=False):
            model = construct(spec.target, config)
    except CaseError:
        raise
    except Exception as exc:
        what = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise CaseError(f"{spec.target} could not be built from {config}: {what}") from None
    model.to(dtype=dtype)
    _storageless(model, dev)
    model.to(device=dev)  # (the buffers)
    candidates = _streamed_blocks(model, spec.blocks, str(spec.target))
    streamed = {id(m) for m in candidates}
    rest = [(n, p) for n, p in model.named_parameters() if not any(id(m) in streamed for m in _owners(model, n))]
    _materialise(rest, dev, poison=True)
    init_streamed(model, model, block_seed(seed, "rest"), skip=streamed)
    unset = _unset(rest)
    if unset:
        raise CaseError(
            f"{type(model).__name__}._init_weights leaves {', '.join(unset[:3])} unset (set at construction "
            'only, which a streamed model does not run): probe it with scale = "probed"'
        )
    inputs = make_inputs(  # after the parts outside the blocks: `inputs = "embeddings"` reads the embedding's scale
        model, spec.target, config, values, modality=spec.inputs, seed=input_seed, device=dev, dtype=dtype
    )
    streamer = Streamer(model, candidates, seed=seed, device=dev)
    with streamer.tracing_shapes():
        found = discover(
            model, inputs, blocks=spec.blocks
        )  # the blocks the whole model's discovery picks, among the streamed ones
    return Built(model, inputs, found.blocks, found.stages)


def _streamed_blocks(model: nn.Module, named: str | None, target: str) -> list[nn.Module]:
    """The modules streamed: the children of the container `named` names (block.blocks, its slice
    aside: the ones outside it are streamed too and never run), else every run of blocks the library
    marks (`_no_split_modules`: an encoder's and a decoder's), else the longest run."""
    from stability.families.discover import block_runs

    if named is not None:
        try:
            return list(model.get_submodule(named.split("[")[0].strip()).children())
        except AttributeError:
            return []  # (discovery names the missing module)
    runs = block_runs(model)
    marked = [m for r in runs if r.marked for m in r.modules]
    if marked:
        return marked
    if not runs:
        raise CaseError(f"{target} holds no run of blocks to stream: name them with block.blocks")
    return list(max(runs, key=lambda r: len(r.modules)).modules)


def _owners(model: nn.Module, name: str) -> Iterator[nn.Module]:
    """The modules enclosing parameter `name` of `model`, outermost first."""
    parts = name.split(".")[:-1]
    for k in range(1, len(parts) + 1):
        yield model.get_submodule(".".join(parts[:k]))


def init_whole(model: nn.Module, blocks: Sequence[nn.Module], seed: int) -> None:
    """A whole (materialised) model set to the streamed model of `seed`: the parts outside
    `blocks` and each block drawn as `build_streamed` and `Streamer.materialise` draw them."""
    init_streamed(model, model, block_seed(seed, "rest"), skip={id(b) for b in blocks})
    for i, block in enumerate(blocks):
        init_streamed(model, block, block_seed(seed, i))


def estimate_bytes(one: Any, two: Any, *, depth: int, hidden_bytes: int, least: int = 1) -> int:
    """The peak bytes a streamed probe adds to what the process holds, from the model's
    footprints at depths `least` and `least` + 1 (`library_memory.footprint`, at the config it is
    built at; `least` the smallest depth it builds at, `library_depth`): the parts
    outside the blocks, two blocks' parameters, each block's input (what checkpointing keeps, one
    hidden state of `hidden_bytes` each), one block's saved tensors while its backward runs, and
    the backward's gradient of the largest parameter and activation with their norms' copies."""
    block = max(two.params - one.params, 0)
    rest = max(one.params - least * block, 0)
    saved = max(two.saved - one.saved, one.saved)
    work = 2 * max(one.largest_param, two.largest_param) + 2 * max(one.largest_saved, two.largest_saved)
    return int(rest + 2 * block + depth * hidden_bytes + saved + work)
