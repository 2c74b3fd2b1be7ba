"""The probe's pass: one forward and one backward, and the conditions it runs under.

`measure_pass` runs a `Forward` (the network once: a stack's blocks one after another,
`stability.measure.probe.blocks_forward`, or a model's own forward with hooks at its blocks'
boundaries, `stability.measure.forward.model_forward`), reduces each boundary as it arrives
(`stability.measure.boundaries`), runs the one backward pass from the loss on the last block's
output (`projection_vector` for the projection loss) and reads the scalars to the host together at
the end. `prepared` runs it the way every probe does: garbage collection off, the modules' buffers
and training flags saved and put back (`_ModuleState`, one walk of the modules, which also names
the parameters), and the global generators forked and seeded (`stability.measure.probe.probe`'s
docstring). Both drivers of a pass call these two, so a stack and a whole model are measured by
the same code.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Sequence

import torch
from torch import nn

from stability.measure.boundaries import BoundaryObserver, BoundaryPass
from stability.measure.measurements import Measurements
from stability.measure.param_norms import LargeParamNorms, param_grad_norms
from stability.seeding import seeded

__all__ = ["Forward", "prepared", "measure_pass", "projection_vector"]


def projection_vector(
    shape: Sequence[int], seed: int, *, dtype: torch.dtype, device: torch.device | str
) -> torch.Tensor:
    """r ~ N(0, 1) drawn on the CPU from `seed`, so L = Σ y⊙r has ∂L/∂y = r on every device.

    Drawn in float32 whatever `dtype` is (so r is the same vector for every dtype, up to the
    rounding of half precision): the CPU's float64 `randn` is ~6× slower, 1.9 ms for a 16×32×16×16
    output, 4% of a probe of the conv stack in docs/performance.md."""
    gen = torch.Generator().manual_seed(seed)
    pinned = (
        torch.device(device).type == "cuda"
    )  # copied from pinned memory without waiting: no synchronisation inside a pass
    r = torch.randn(tuple(shape), generator=gen, dtype=torch.float32, pin_memory=pinned)
    return r.to(device=device, dtype=dtype, non_blocking=pinned)


def _named_parameters(
    modules: list[nn.Module], state: _ModuleState, named_root: nn.Module | None
) -> list[tuple[str, nn.Parameter]]:
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


def _walk(
    roots: Sequence[nn.Module], named: nn.Module | None
) -> tuple[list[nn.Module], list[tuple[nn.Module, str, torch.Tensor]], list[tuple[str, nn.Parameter]]]:
    """(modules, buffers, named parameters) of `named` and `roots` and their submodules, each module
    once: `named` first, its parameters listed as `named.named_parameters()` lists them (same
    names, order and de-duplication); then the `roots` not reached from it (no parameters listed)."""
    modules: list[nn.Module] = []
    buffers: list[tuple[nn.Module, str, torch.Tensor]] = []
    params: list[tuple[str, nn.Parameter]] = []
    seen: set[int] = set()
    seen_params: set[int] = set()

    def walk(
        m: nn.Module, prefix: str | None
    ) -> None:  # (the emptiness tests skip most modules' loops: a quarter of the walk)
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
    # the walk and the pass make thousands of small objects (tuples, hooks, handles) and no garbage cycles: up to ~1 ms
    # of collections otherwise
    gc.disable()
    try:
        state = _ModuleState(
            [*modules, *also], named=named_root
        )  # one walk: buffers, flags and (under `named_root`) parameters
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
    large = LargeParamNorms(params, None)
    state = BoundaryPass(len(modules), observers, large)
    with torch.enable_grad(), large, contextlib.closing(state.hooks):
        y = forward(state.enter, state.observe)
        red = state.end_forward(
            y, large
        )  # the output observed; the backward pass may recompute checkpointed segments: observe once
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
    pnorms = param_grad_norms(list(grads[1:]), red.param_dtype, given=large.norms)
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
        self.groups: list[
            tuple[list[torch.Tensor], torch.Tensor]
        ] = []  # (buffers of one kind, their saved copies stacked)
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
