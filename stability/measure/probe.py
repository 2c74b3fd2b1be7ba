"""Stage 4: blocks and an input → `Measurements`, from one forward and one backward pass.

Boundary l is the input of block l (l = 0 … L−1) and boundary L is the output of the stack.
During the forward pass each boundary tensor gets its statistics reduced to a few scalars and a
gradient hook that reduces its gradient to one norm; nothing else about it is kept, so the probe
holds no activation beyond what autograd saves anyway. A single `torch.autograd.grad` call then runs the
one backward pass and returns the parameter gradients, reduced to norms a group at a time
(`reductions._param_norms`), the large ones by hooks as autograd produces them.

What happens at each boundary, and when the scalars reach the host, is
`stability.measure.boundaries`: on the CPU they are read as they come (free there), which lets
each accuracy fallback be decided while its tensor is at hand; on a device everything stays there
in float64 until the pass's one read at the end (no synchronisation inside the pass). docs/performance.md has the
measurements behind both.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from stability.errors import BlockError, CaseError
from stability.families.adapters import CallKwargs, Stack, find_blocks, hidden_state, resolve_call_kwargs
from stability.families.discover import holds_blocks
from stability.measure.allocator import tune_malloc
from stability.measure.boundaries import BoundaryObserver, _Pass
from stability.measure.boundaries import _rel_diff as _rel_diff  # (re-exported: the identity error is the probe's, tests and benchmarks import it from here)
from stability.measure.measurements import Measurements
from stability.measure.reductions import _LargeParamNorms, _param_norms
from stability.seeding import seeded

__all__ = ["Measurements", "BoundaryObserver", "Forward", "probe", "prepared", "blocks_forward", "measure_pass", "projection_vector"]


def projection_vector(shape: Sequence[int], seed: int, *, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """r ~ N(0, 1) drawn on the CPU from `seed`, so L = Σ y⊙r has ∂L/∂y = r on every device.

    Drawn in float32 whatever `dtype` is (so r is the same vector for every dtype, up to the
    rounding of half precision): the CPU's float64 `randn` is ~6× slower, 1.9 ms for a 16×32×16×16
    output, 4% of a probe of the conv stack in docs/performance.md."""
    gen = torch.Generator().manual_seed(seed)
    pinned = torch.device(device).type == "cuda"  # copied from pinned memory without waiting: no synchronisation inside a pass
    r = torch.randn(tuple(shape), generator=gen, dtype=torch.float32, pin_memory=pinned)
    return r.to(device=device, dtype=dtype, non_blocking=pinned)


def _as_list(blocks: nn.Module | Iterable[nn.Module] | Stack) -> list[nn.Module]:
    if isinstance(blocks, Stack):
        found = find_blocks(blocks)
        if found is None:
            raise TypeError(f"Stack.blocks is a {type(blocks.blocks).__name__}: give an nn.Sequential, an nn.ModuleList or a module with .blocks/.layers/.layer/.h/.block")
        return found
    if isinstance(blocks, nn.Sequential):
        return list(blocks)
    if isinstance(blocks, nn.ModuleList):
        return list(blocks)
    if isinstance(blocks, nn.Module):
        return [blocks]
    return list(blocks)


def _naming_root(blocks: nn.Module | Iterable[nn.Module] | Stack) -> nn.Module | None:
    """The module whose `named_parameters()` names the probe's parameters (an `nn.Sequential`, an
    `nn.ModuleList`, a single module, or a `Stack`'s blocks when they are one of those), or None
    when `blocks` is a plain iterable of modules (their parameters are named `"{i}.{name}"`)."""
    if isinstance(blocks, Stack):
        return blocks.blocks if isinstance(blocks.blocks, (nn.Sequential, nn.ModuleList)) else None
    return blocks if isinstance(blocks, nn.Module) else None


def _named_parameters(modules: list[nn.Module], state: _ModuleState, named_root: nn.Module | None) -> list[tuple[str, nn.Parameter]]:
    """What `named_root.named_parameters()` yields (trainable ones only), from the walk `state`
    made (a direct walk of `_modules`: the generic generator took ~3% of a probe of a depth-256
    MLP). Without a naming root (a plain iterable of modules) each module's parameters are named
    `"{i}.{name}"` by its place, a module listed twice at both places."""
    if named_root is not None:
        return [(n, p) for n, p in state.named if p.requires_grad]
    return [(f"{i}.{n}", p) for i, m in enumerate(modules) for n, p in _walk([], m)[2] if p.requires_grad]


#: Module classes by whether they are torch's or this package's own (cached: one lookup a module).
_HARNESS_CLASS: dict[type, bool] = {}


def _harness_code_only(modules: Sequence[nn.Module]) -> bool:
    """Whether every module is an instance of a torch or `stability` class: then no code of the
    user's runs in the pass and nothing draws from Python's or NumPy's global generators, so the
    probe need not seed them (`stability.seeding`: ~65 µs, mostly NumPy's get/set_state)."""
    known = _HARNESS_CLASS
    for m in modules:
        cls = type(m)
        ours = known.get(cls)
        if ours is None:
            ours = known[cls] = cls.__module__.startswith(("torch.", "stability."))
        if not ours:
            return False
    return True


def _walk(roots: Sequence[nn.Module], named: nn.Module | None) -> tuple[list[nn.Module], list[tuple[nn.Module, str, torch.Tensor]], list[tuple[str, nn.Parameter]]]:
    """(modules, buffers, named parameters) of `named` and `roots` and their submodules, each module
    once: `named` first, its parameters listed as `named.named_parameters()` lists them (same
    names, order and de-duplication); then the `roots` not reached from it (no parameters listed)."""
    modules: list[nn.Module] = []
    buffers: list[tuple[nn.Module, str, torch.Tensor]] = []
    params: list[tuple[str, nn.Parameter]] = []
    seen: set[int] = set()
    seen_params: set[int] = set()

    def walk(m: nn.Module, prefix: str | None) -> None:  # (the emptiness tests skip most modules' loops: a quarter of the walk)
        seen.add(id(m))
        modules.append(m)
        if m._buffers:
            for name, t in m._buffers.items():
                if t is not None:
                    buffers.append((m, name, t))
        if prefix is not None and m._parameters:
            for name, p in m._parameters.items():
                if p is not None and id(p) not in seen_params:
                    seen_params.add(id(p))
                    params.append((prefix + name, p))
        if m._modules:
            for key, c in m._modules.items():
                if c is not None and id(c) not in seen:
                    walk(c, None if prefix is None else f"{prefix}{key}.")

    if named is not None:
        walk(named, "")
    for root in roots:
        if id(root) not in seen:
            walk(root, None)
    return modules, buffers, params


def probe(
    blocks: nn.Module | Iterable[nn.Module] | Stack,
    x: torch.Tensor | Mapping[str, Any] | tuple[Any, ...],
    *,
    loss: Literal["projection", "sum", "mse"] = "projection",
    seed: int = 0,
    target: torch.Tensor | None = None,
    checkpoint_every: int = 0,
    observers: Sequence[BoundaryObserver] = (),
    call_kwargs: CallKwargs | None = None,
    rng_seed: int | None = None,
) -> Measurements:
    """Measure gradient arrival, activation statistics and identity error in one fwd + one bwd.

    `blocks` is an `nn.Sequential` (its children are the blocks), an `nn.ModuleList`, any iterable
    of modules, or a `stability.Stack` (its `stem` is applied to `x` without gradient first and its
    `call_kwargs` are used). A whole model (a module holding a run of blocks,
    `stability.families.discover.holds_blocks`: GPT2Model, LlamaModel, a timm or torchvision
    network) is probed through its own forward, `x` being what it is called with (a tensor, or a
    mapping of keyword arguments such as `{"input_ids": ids}`): its blocks are discovered and
    measured at their boundaries with hooks (`stability.measure.forward.probe_model`); any other
    module is one block. Each block is called as `block(h, **call_kwargs)` and the hidden state
    taken from its result by `stability.families.adapters.hidden_state` (a tensor; else `last_hidden_state`
    or `hidden_states`; else element 0 of a tuple or list). `loss="projection"` backpropagates
    L = Σ y⊙r with r ~ N(0, 1) from `seed`; `"sum"` uses L = Σ y; `"mse"` uses
    L = mean((y − target)²). `grad_norm[l]` is the norm of the gradient that flows back through
    boundary l to the blocks before it: the sum over every use of the boundary, after any hook a
    block set on that tensor (a block that clips the gradient through its input reports the
    clipped one), and 0 where no gradient reaches it. With `checkpoint_every = N > 0`, blocks run in checkpointed segments
    of N (recomputed during the backward pass): same numbers, less memory. `observers` add opt-in
    measurements (`BoundaryObserver`); their results land in `.extra`.

    Determinism and side effects: both passes run under `torch.random.fork_rng` with the global
    generator seeded from `rng_seed` (default: a stream derived from `seed`), and, when a module of
    a class outside torch and this package runs (a user's code, which may draw from them), Python's
    `random` and `numpy.random` seeded from it too (`stability.seeding`), so dropout masks are a
    function of the seeds and the caller's RNG state is left as it was. Every buffer of the blocks
    and the stem (BatchNorm running statistics, `num_batches_tracked`) and every training flag is
    put back afterwards; cost: one copy of the buffers (2C + 1 numbers per BatchNorm of C channels;
    nothing for a stack without buffers), never of the parameters. Block 0 receives its own copy
    of the input (one extra input-sized tensor), so a block that modifies its input in place works
    at position 0 and never touches `x`, and the identity error compares the output with the input
    as it was before any block ran.
    """
    if isinstance(blocks, nn.Module) and holds_blocks(blocks):  # a whole model: probed through its own forward, `x` its inputs
        from stability.measure.forward import probe_model

        if call_kwargs is not None or checkpoint_every:
            raise ValueError(f"probe({type(blocks).__name__}, …) runs the model's own forward, which passes its blocks what they need: call_kwargs and checkpoint_every do not apply")
        return probe_model(blocks, x, loss=loss, seed=seed, target=target, observers=observers, rng_seed=rng_seed)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"probe(blocks, x): x is a {type(x).__name__}; blocks called one after another take a tensor (a whole model takes a mapping of its inputs)")
    stem: nn.Module | None = None
    if isinstance(blocks, Stack):
        stem = blocks.stem
        call_kwargs = blocks.call_kwargs if call_kwargs is None else call_kwargs
    modules = _as_list(blocks)

    def body(named: list[tuple[str, nn.Parameter]]) -> Measurements:
        h = x
        if stem is not None:
            with torch.no_grad():
                h = stem(h)
        kwargs = resolve_call_kwargs(call_kwargs, h)
        return measure_pass(blocks_forward(modules, h, kwargs, checkpoint_every=checkpoint_every), modules, named, loss=loss, seed=seed, target=target, observers=observers)

    return prepared(modules, body, named_root=_naming_root(blocks), also=[stem] if stem is not None else [], device=x.device, seed=seed, rng_seed=rng_seed)


#: A pass's forward, `forward(enter, observe) -> y`: it runs the network once; `enter(h)` is called
#: with the tensor that reaches block 0 and returns the tensor block 0 must receive instead (the
#: pass makes `h` its gradient leaf and hands back a copy), `observe(i, h)` with the tensor that
#: reaches block i, for i = 1 … L − 1, before block i runs (`observe` returns nothing and never
#: replaces the tensor); it returns the output of block L − 1. `blocks_forward` calls a list of
#: blocks one after another; a driver that runs a model's own forward with hooks at its blocks'
#: boundaries calls the same two functions from the hooks.
Forward = Callable[[Callable[[torch.Tensor], torch.Tensor], Callable[[int, torch.Tensor], None]], torch.Tensor]


def prepared(
    modules: list[nn.Module],
    body: Callable[[list[tuple[str, nn.Parameter]]], Measurements],
    *,
    named_root: nn.Module | None,
    also: Sequence[nn.Module] = (),
    device: torch.device,
    seed: int,
    rng_seed: int | None,
) -> Measurements:
    """Run `body(named parameters)` the way `probe` runs its pass: garbage collection off, the
    modules' buffers and training flags saved and put back afterwards (`modules` and `also`, e.g.
    a stem), the global generators forked and seeded (see `probe`'s docstring). The parameters are
    those of `named_root` when given (named as its `named_parameters()` names them), else each
    module's as `"{i}.{name}"`; trainable ones only."""
    collecting = gc.isenabled()
    gc.disable()  # the walk and the pass make thousands of small objects (tuples, hooks, handles) and no garbage cycles: up to ~1 ms of collections otherwise
    try:
        state = _ModuleState([*modules, *also], named=named_root)  # one walk: buffers, flags and (under `named_root`) parameters
        named = _named_parameters(modules, state, named_root)
        try:
            stream = _DROPOUT_STREAM ^ seed if rng_seed is None else rng_seed
            python_rngs = contextlib.nullcontext() if _harness_code_only(state.modules) else seeded(stream)
            with torch.random.fork_rng(devices=_rng_devices(device)), python_rngs:
                _seed_global_rng(stream, device)
                return body(named)
        finally:
            state.restore()
    finally:
        if collecting:
            gc.enable()


def blocks_forward(modules: list[nn.Module], x: torch.Tensor, kwargs: dict[str, Any], *, checkpoint_every: int = 0) -> Forward:
    """The forward of a stack of blocks called one after another, `block(h, **kwargs)`, on `x`;
    with `checkpoint_every = N > 0` in checkpointed segments of N blocks (recomputed during the
    backward pass, when `observe` ignores them)."""
    n = len(modules)

    def forward(enter: Callable[[torch.Tensor], torch.Tensor], observe: Callable[[int, torch.Tensor], None]) -> torch.Tensor:
        recomputing = [False]

        def run(h: torch.Tensor, start: int, stop: int) -> torch.Tensor:
            for i in range(start, stop):
                if i > 0:
                    observe(i, h)
                try:
                    out = modules[i](h, **kwargs) if kwargs else modules[i](h)
                except (CaseError, torch.OutOfMemoryError):  # the time limit, or a device out of memory
                    raise
                except Exception as exc:
                    if recomputing[0]:  # checkpoint's recomputation signals its early stop this way
                        raise
                    what = " ".join(f"{type(exc).__name__}: {exc}".split())
                    raise BlockError(f"block {i} ({type(modules[i]).__name__}) failed on an input of shape {tuple(h.shape)}: {what}") from exc
                found = out if isinstance(out, torch.Tensor) else hidden_state(out)
                if found is None:
                    raise BlockError(
                        f"block {i} ({type(modules[i]).__name__}) returned {type(out).__name__} with no tensor hidden state "
                        "(a tensor; else last_hidden_state or hidden_states; else element 0 of a tuple or list)"
                    )
                h = found
            return h

        h = enter(x)
        if checkpoint_every and checkpoint_every < n:
            tune_malloc()  # deep checkpointed stacks: keep freed activations from piling up (stability/measure/allocator.py)

            for start in range(0, n, checkpoint_every):
                h = checkpoint(run, h, start, min(start + checkpoint_every, n), use_reentrant=False)
            recomputing[0] = True  # the backward pass recomputes the segments: errors there are checkpoint's own
            return h
        return run(h, 0, n)

    return forward


def measure_pass(
    forward: Forward,
    modules: Sequence[nn.Module],
    named: list[tuple[str, nn.Parameter]],
    *,
    loss: str,
    seed: int,
    target: torch.Tensor | None = None,
    observers: Sequence[BoundaryObserver] = (),
) -> Measurements:
    """The forward and backward pass itself (run it inside `prepared`): `forward` runs the network
    (`Forward`), the boundaries are reduced as they arrive (`stability.measure.boundaries`: on the
    CPU read as they go, on a device kept there), one `torch.autograd.grad` call runs the backward
    pass from the loss on the last block's output, and the scalars are read to the host together
    at the end. `modules` are the blocks (for the observers), `named` the parameters whose
    gradient norms are reported."""
    if loss == "mse" and target is None:
        raise ValueError('probe(loss="mse") needs target=')
    if loss not in ("projection", "sum", "mse"):
        raise ValueError(f'probe(loss={loss!r}): choose "projection", "sum" or "mse"')
    params = [p for _, p in named]
    for o in observers:
        o.start(list(modules))
    large = _LargeParamNorms(params, None)
    state = _Pass(len(modules), observers, large)
    with torch.enable_grad(), large, contextlib.closing(state.hooks):
        y = forward(state.enter, state.observe)
        red = state.end_forward(y, large)  # the output observed; the backward pass may recompute checkpointed segments: observe once
        x0 = state.leaf
        assert x0 is not None  # (end_forward raised otherwise)
        if loss == "projection":
            out_grad = projection_vector(y.shape, seed, dtype=y.dtype, device=y.device)
            root, root_grad = y, out_grad
        elif loss == "sum":
            out_grad = torch.ones_like(y)
            root, root_grad = y, out_grad
        else:
            root, root_grad, out_grad = ((y - target) ** 2).mean(), None, None  # type: ignore[operator]  # target is set: checked at the top
        grads = (
            torch.autograd.grad(root, [x0, *params], grad_outputs=root_grad, allow_unused=True, materialize_grads=True)
            if (root.requires_grad)
            else [torch.zeros_like(x0), *[torch.zeros_like(p) for p in params]]
        )
    pnorms = _param_norms(list(grads[1:]), red.param_dtype, given=large.norms)
    return state.measurements(red.read(grads[0], pnorms, y, x0, out_grad), named)


#: Mixed into `seed` for the global-RNG stream when `probe` gets no `rng_seed` (an odd 63-bit
#: constant, so the dropout stream is not the projection vector's stream).
_DROPOUT_STREAM = 0x5851F42D4C957F2D


def _rng_devices(device: torch.device) -> list[int]:
    """The CUDA device whose generator `fork_rng` must save and restore (none for a CPU input)."""
    if device.type != "cuda":
        return []
    return [device.index if device.index is not None else torch.cuda.current_device()]


def _seed_global_rng(seed: int, device: torch.device) -> None:
    """Seed the CPU generator, and the input's CUDA device's generator (only those `fork_rng`
    restores: `torch.manual_seed` would also reseed every other GPU)."""
    torch.default_generator.manual_seed(seed % 2**63)
    if device.type == "cuda":
        with torch.cuda.device(device):
            torch.cuda.manual_seed(seed % 2**63)


class _ModuleState:
    """Every buffer and training flag of some modules (and their submodules), to put back after a
    probe: BatchNorm in training mode updates its running statistics and `num_batches_tracked` in
    place (without bumping the tensors' version counters, so every buffer is copied). The copy is
    one `stack` per (dtype, device, shape) group and the restore one `_foreach_copy_` per group;
    a stack without buffers costs one walk of its modules (~1 µs per module). Measured on one
    loaded core, CPU time, 30 interleaved repeats of a depth-256 width-64 MLP (768 modules plus
    the blocks): +1.1 ms on a 40 ms probe with LayerNorm, +2.8 ms on a 44 ms probe with BatchNorm
    (768 buffers copied and put back).

    The same walk (`_walk`) lists the parameters of `named` (walked first, with its own buffers
    and flag) as `named_parameters()` does, in `.named`, so a probe walks its modules once."""

    def __init__(self, roots: Sequence[nn.Module], *, named: nn.Module | None = None) -> None:
        modules, buffers, self.named = _walk(roots, named)
        self.modules, self.buffers = modules, buffers
        self.flags = [m.training for m in modules]
        self.groups: list[tuple[list[torch.Tensor], torch.Tensor]] = []  # (buffers of one kind, their saved copies stacked)
        by_kind: dict[tuple[torch.dtype, torch.device, torch.Size], list[torch.Tensor]] = {}
        for _, _, t in buffers:
            by_kind.setdefault((t.dtype, t.device, t.shape), []).append(t)
        with torch.no_grad():
            for tensors in by_kind.values():
                self.groups.append((tensors, torch.stack(tensors)))  # (k, *shape): one copy of them all

    def restore(self) -> None:
        for m, flag in zip(self.modules, self.flags, strict=True):
            if m.training is not flag:
                m.training = flag
        for m, name, t in self.buffers:
            if m._buffers.get(name) is not t:  # a module that replaced a buffer gets the original back
                m._buffers[name] = t
        with torch.no_grad():
            for tensors, saved in self.groups:
                torch._foreach_copy_(tensors, list(saved.unbind(0)))
