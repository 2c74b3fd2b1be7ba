"""Stage 4, many seeds at once: S networks of one architecture → S `Measurements`, from one
vectorised forward and one backward pass.

`probe` measures one network; a seed sweep (one architecture drawn with 32 seeds) would call it 32
times, and on small networks each call is mostly per-operation overhead. `probe_seeds` stacks the
S networks' parameters and buffers along a new leading dimension and runs the whole stack once for
all seeds, under a single `torch.func.vmap` of `torch.func.functional_call`:

- activation moments are reduced per seed inside the vmapped forward (`reductions.moments_into`: var_mean
  for small boundaries, corrected two-pass sums for large ones, with no host read inside the
  pass; `probe` itself reads one-pass sums to the host as it goes and falls back to the same
  two-pass formula where they would cancel: the same values to ~5e-7 in float32);
- every boundary l > 0 gets a zero "probe perturbation" added, h_l + ε_l with ε_l = 0, so
  ∂L/∂ε_l = ∂L/∂h_l. The ε_l are stride-0 expansions of one scalar zero (no memory), and a hook on
  each reduces its gradient to one norm per seed as soon as the backward pass produces it;
- one `torch.autograd.grad` call runs the backward pass of all seeds together.

Same numbers as `probe`, up to float rounding: the batched kernels (a batched matmul, a grouped
convolution, reductions over rows of an (S, …) tensor instead of a whole tensor) may sum in a
different order. tests/test_batched.py pins the tolerance and explains it.
"""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Literal

import torch
from torch import nn
from torch.func import functional_call, vmap

from stability.errors import BlockError
from stability.families.adapters import Stack
from stability.measure.boundaries import LOW_PRECISION, first_nonfinite
from stability.measure.probe import Measurements, block_list, probe
from stability.measure.probe_pass import projection_vector
from stability.measure.reductions import (
    NORM_ROW,
    boundary_values,
    combine_moments,
    moments_into,
    row_norms,
    two_pass_count,
)

__all__ = ["probe_seeds"]

_State = tuple[list[tuple[str, torch.Tensor]], list[tuple[str, torch.Tensor]]]


def probe_seeds(
    networks: Sequence[nn.Module | Iterable[nn.Module]],
    inputs: Sequence[torch.Tensor] | torch.Tensor,
    *,
    seeds: Sequence[int] | None = None,
    loss: Literal["projection", "sum"] = "projection",
) -> list[Measurements]:
    """Probe S networks of one architecture (one per seed) in one vectorised fwd + one bwd.

    `networks[s]` is what `probe` takes as `blocks` (an `nn.Sequential` or an iterable of blocks);
    all S must have the same block types and parameter and buffer names, shapes and dtypes.
    `inputs` holds one input per network (a sequence, or one tensor stacked along dim 0).
    `seeds[s]` is the loss seed `probe` would get as `seed=` (default 0 for every network).
    Returns what `[probe(networks[s], inputs[s], loss=loss, seed=seeds[s]) for s in range(S)]`
    returns, computed together. Train-mode batch-norm running statistics are updated on stacked
    copies, not on the networks.
    """
    collecting = gc.isenabled()
    # as in `probe`: the stacking and the vmapped pass make many small objects and no garbage cycles (full collections
    # over S networks' modules otherwise)
    gc.disable()
    try:
        return _probe_seeds(networks, inputs, seeds=seeds, loss=loss)
    finally:
        if collecting:
            gc.enable()


def _probe_seeds(
    networks: Sequence[nn.Module | Iterable[nn.Module]],
    inputs: Sequence[torch.Tensor] | torch.Tensor,
    *,
    seeds: Sequence[int] | None,
    loss: Literal["projection", "sum"],
) -> list[Measurements]:
    """`probe_seeds` itself."""
    if loss not in ("projection", "sum"):
        raise ValueError(f'probe_seeds(loss={loss!r}): choose "projection" or "sum"')
    if any(isinstance(net, Stack) and (net.call_kwargs is not None or net.stem is not None) for net in networks):
        raise TypeError(
            "probe_seeds calls each block as block(h): probe a stability.Stack with call_kwargs or a stem with probe()"
        )
    stacks = [block_list(net) for net in networks]
    n_nets = len(stacks)
    if n_nets == 0:
        raise ValueError("probe_seeds: networks is empty; pass one network per seed")
    x = inputs if isinstance(inputs, torch.Tensor) else torch.stack(list(inputs))  # (S, B, …)
    if x.shape[0] != n_nets:
        raise ValueError(f"probe_seeds: {n_nets} networks but {x.shape[0]} inputs; pass one input per network")
    seeds = [0] * n_nets if seeds is None else list(seeds)
    if len(seeds) != n_nets:
        raise ValueError(f"probe_seeds: {n_nets} networks but {len(seeds)} seeds; pass one loss seed per network")
    blocks = stacks[0]
    n = len(blocks)
    states = _states(stacks)
    params, buffers, names = _stack_states(states, len(blocks))
    shapes = _boundary_shapes(blocks, x[0])  # per seed: input of block l, then the output

    low = x.dtype in LOW_PRECISION
    norm_dtype = torch.float32 if low else None
    grad_norms: list[torch.Tensor | None] = [None] * (n + 1)  # (S,) each

    def forward(
        p: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]], h: torch.Tensor, eps: list[torch.Tensor]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        # One seed (vmap adds the S dimension): h (B, …), eps[l − 1] shaped like boundary l.
        moments: list[torch.Tensor] = []
        for i, block in enumerate(blocks):
            moments_into(h.detach().float() if low else h.detach(), moments)
            if i > 0:
                h = h + eps[i - 1]  # + 0: ∂L/∂eps[i − 1] is the gradient at boundary i
            try:
                h = functional_call(block, (p[i], b[i]), (h,))
            except RuntimeError as exc:
                if "out of memory" in str(exc).lower():
                    raise
                raise BlockError(
                    f"block {i} ({type(block).__name__}) failed under vmap on an input of shape {tuple(h.shape)}: {exc}"
                ) from exc
        moments_into(h.detach().float() if low else h.detach(), moments)
        return h, moments

    counts = _moment_counts(shapes, x)
    with torch.enable_grad():
        x0 = x.detach().requires_grad_(True)  # (S, B, …)
        zero = torch.zeros((), dtype=x.dtype, device=x.device, requires_grad=True)
        eps = [zero.expand(n_nets, *shape) for shape in shapes[1:n]]  # (S, …) each, stride 0
        for i, e in enumerate(eps, start=1):

            def hook(g: torch.Tensor, i: int = i) -> None:
                grad_norms[i] = _rows_norm(g, n_nets, norm_dtype)

            e.register_hook(hook)  # type: ignore[no-untyped-call]  # torch leaves Tensor.register_hook unannotated
        y, moments = vmap(forward, in_dims=(0, 0, 0, 0))(params, buffers, x0, eps)  # y (S, B, …)
        if loss == "projection":
            out_grad = torch.stack([projection_vector(y.shape[1:], s, dtype=y.dtype, device=y.device) for s in seeds])
        else:
            out_grad = torch.ones_like(y)
        flat = [p for block in params for p in block.values() if p.requires_grad]
        inputs_ = [x0, *flat, zero] if eps else [x0, *flat]
        if y.requires_grad:
            grads = torch.autograd.grad(y, inputs_, grad_outputs=out_grad, allow_unused=True, materialize_grads=True)
        else:
            grads = tuple(torch.zeros_like(t) for t in inputs_)
    g0 = grads[0]
    grad_norms[0] = _rows_norm(g0, n_nets, norm_dtype)
    if n > 0:
        grad_norms[n] = _rows_norm(out_grad, n_nets, norm_dtype)
    norm_zero = torch.zeros(
        n_nets, device=x.device, dtype=torch.float64 if x.device.type == "cpu" else torch.float32 if low else x.dtype
    )  # CPU: float64 (`_rows_norm` may return it)
    norms = torch.stack([norm_zero if g is None else g.to(norm_zero.dtype) for g in grad_norms], dim=1)  # (S, n+1)
    pnorms = [_rows_norm(g, n_nets, None) for g in grads[1 : 1 + len(flat)]]  # (S,) each
    identity = _rows_rel_diff64(y, x0)
    input_grad = _rows_rel_diff64(g0, out_grad)
    nan = norms.new_full((n_nets, 1), torch.nan).double()
    host = torch.cat(
        [
            norms.double(),
            torch.stack([t.to(torch.float64) for t in moments], dim=1),
            torch.stack([p.double() for p in pnorms], dim=1) if pnorms else norms.new_zeros(n_nets, 0).double(),
            identity if identity is not None else nan,
            input_grad if input_grad is not None else nan,
        ],
        dim=1,
    ).tolist()  # (S, …): one host transfer for every seed
    k = len(moments)
    channels = [shape[1] if len(shape) > 1 else 1 for shape in shapes]
    out: list[Measurements] = []
    for s, row in enumerate(host):
        # float32 sums beyond its range: `probe` takes them again in float64 (rare: |h| beyond ~1e19 or below ~1e-19)
        if _sums_out_of_range(row[n + 1 : n + 1 + k], counts):
            out.append(probe(networks[s], x[s], loss=loss, seed=seeds[s]))
            continue
        grad_norm = row[: n + 1]
        var, mean = combine_moments(row[n + 1 : n + 1 + k], counts)
        nonfinite_at, kind = first_nonfinite(mean, grad_norm)
        out.append(
            Measurements(
                grad_norm=grad_norm,
                act_var=var,
                act_sq_mean=[v + m * m for v, m in zip(var, mean, strict=True)],
                param_grad_norm=dict(zip(names, row[n + 1 + k : n + 1 + k + len(names)], strict=True)),
                identity_error=row[-2] if identity is not None else None,
                input_grad_error=row[-1] if input_grad is not None else None,
                nonfinite_at=nonfinite_at,
                nonfinite_kind=kind,
                channels=list(channels),
            )
        )
    return out


def _sums_out_of_range(values: list[float], counts: list[int]) -> bool:
    """Whether a boundary's (m, Σd, Σd²) from `moments_into` (counts as `_moment_counts`) left float32's
    range on finite values: Σd² overflowed to inf, or underflowed to 0 around a non-zero mean (a
    constant non-zero boundary also reads so, and is merely measured again)."""
    for count, parts in boundary_values(values, counts):
        if count:
            m, s, q = parts
            if math.isfinite(m) and math.isfinite(s) and (q == math.inf or (q == 0.0 and m != 0.0)):
                return True
    return False


def _state(stack: list[nn.Module]) -> _State:
    """(parameters, buffers) of one network as ("<block>.<name>", tensor) lists, in block order.

    The same names and order as `named_parameters()` / `named_buffers()`, from a direct walk of
    `_modules` (several times faster than the generic generators).
    """
    params: list[tuple[str, torch.Tensor]] = []
    buffers: list[tuple[str, torch.Tensor]] = []
    seen: set[int] = set()

    def walk(module: nn.Module, prefix: str) -> None:
        if id(module) in seen:  # a shared submodule: its tensors are listed once, as named_parameters does
            return
        seen.add(id(module))
        params.extend((prefix + k, p) for k, p in module._parameters.items() if p is not None)
        buffers.extend((prefix + k, b) for k, b in module._buffers.items() if b is not None)
        for k, child in module._modules.items():
            if child is not None:
                walk(child, f"{prefix}{k}.")

    for i, block in enumerate(stack):
        walk(block, f"{i}.")
    return params, buffers


def _same_state(stack: list[nn.Module], template: _State, s: int) -> _State:
    """Network s's tensors at network 0's names (a dictionary lookup per tensor instead of a
    walk), checked to have network 0's shapes and dtypes."""
    out: _State = ([], [])
    for kind, table in ((0, "_parameters"), (1, "_buffers")):
        for name, first in template[kind]:
            *path, key = name.split(".")
            try:
                module = stack[int(path[0])]
                for part in path[1:]:
                    module = module._modules[part]  # type: ignore[assignment]
                t = getattr(module, table)[key]
            except (IndexError, KeyError, TypeError):
                t = None
            if t is None or t.shape != first.shape or t.dtype != first.dtype or t.device != first.device:
                found = "nothing" if t is None else f"{tuple(t.shape)} {t.dtype} on {t.device}"
                raise ValueError(
                    f"probe_seeds: network {s} differs from network 0 at {name}: {found} where network 0 has "
                    f"{tuple(first.shape)} {first.dtype} on {first.device}; every network must have the same "
                    "architecture"
                )
            out[kind].append((name, t))
    return out


def _stack_states(
    states: list[_State], n: int
) -> tuple[list[dict[str, torch.Tensor]], list[dict[str, torch.Tensor]], list[str]]:
    """Per block (n of them, those without parameters or buffers included), {name: (S, …) tensor}
    for parameters (autograd leaves) and buffers, and the names (as `probe` reports them) of the
    parameters that take a gradient, in order."""
    params: list[dict[str, torch.Tensor]] = [{} for _ in range(n)]
    buffers: list[dict[str, torch.Tensor]] = [{} for _ in range(n)]
    names: list[str] = []
    with torch.no_grad():
        for kind, target in ((0, params), (1, buffers)):
            for j, (name, first) in enumerate(states[0][kind]):
                block, _, rest = name.partition(".")
                t = torch.stack([state[kind][j][1] for state in states])  # (S, …)
                if kind == 0 and first.requires_grad:
                    t.requires_grad_(True)
                    names.append(name)
                target[int(block)][rest] = t
    return params, buffers, names


def _boundary_shapes(blocks: list[nn.Module], x: torch.Tensor) -> list[tuple[int, ...]]:
    """Per-seed shapes at every boundary, from one forward pass of network 0 without autograd.

    Needed before the vmapped pass to shape the zero perturbations. (The meta device would skip
    the arithmetic, but custom blocks need not run there; one unrecorded forward of one seed costs
    about 1/(2S) of a loop over the seeds.)
    """
    shapes = [tuple(x.shape)]
    h = x
    with torch.no_grad(), _frozen_buffers(blocks):
        for i, block in enumerate(blocks):
            try:
                h = block(h)
            except RuntimeError as exc:
                if "out of memory" in str(exc).lower():
                    raise
                raise BlockError(
                    f"block {i} ({type(block).__name__}) failed on an input of shape {tuple(h.shape)}: {exc}"
                ) from exc
            if not isinstance(h, torch.Tensor):
                raise BlockError(f"block {i} ({type(block).__name__}) returned {type(h).__name__}, not a tensor")
            shapes.append(tuple(h.shape))
    return shapes


@contextlib.contextmanager
def _frozen_buffers(blocks: list[nn.Module]) -> Iterator[None]:
    """Restores network 0's buffers (batch-norm running statistics) after the shape pass."""
    saved = [(b, b.clone()) for block in blocks for b in block.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for b, copy in saved:
                b.copy_(copy)


def _moment_counts(shapes: list[tuple[int, ...]], x: torch.Tensor) -> list[int]:
    """What `moments_into` returns per boundary (it depends only on size, device and dtype), so the
    vmapped forward need not return Python ints."""
    dtype = torch.float32 if x.dtype in LOW_PRECISION else x.dtype
    return [two_pass_count(math.prod(shape), x.device, dtype) for shape in shapes]


def _states(stacks: list[list[nn.Module]]) -> list[_State]:
    """Every network's (parameters, buffers), after checking they share network 0's architecture."""
    kinds = [type(m) for m in stacks[0]]
    for s, stack in enumerate(stacks[1:], start=1):
        other = [type(m) for m in stack]
        if other != kinds:
            raise ValueError(
                f"probe_seeds: network {s} differs from network 0: its blocks are "
                f"{[t.__name__ for t in other]}, not {[t.__name__ for t in kinds]}; every network "
                "must have the same architecture"
            )
    _refuse_shared(stacks[0])
    template = _state(stacks[0])
    return [template] + [_same_state(stack, template, s) for s, stack in enumerate(stacks[1:], start=1)]


def _refuse_shared(blocks: list[nn.Module]) -> None:
    """Raise ValueError when two blocks share a parameter or a buffer (a tied stack such as
    `nn.Sequential(*[block] * depth)`): the vectorised pass substitutes each block's own tensors,
    listed once under the first block that holds them, so a later block would run on network 0's
    weights. `probe` measures such networks exactly, one at a time (`stability.measure.ensemble` falls back
    to it)."""
    owner: dict[int, int] = {}
    for i, block in enumerate(blocks):
        seen: set[int] = set()
        mine: set[int] = set()  # the parameters and buffers reachable from block i (a shared ReLU holds none: harmless)
        stack = [block]
        while stack:
            m = stack.pop()
            if id(m) in seen:
                continue
            seen.add(id(m))
            mine.update(id(t) for t in (*m._parameters.values(), *m._buffers.values()) if t is not None)
            stack.extend(c for c in m._modules.values() if c is not None)
        for key in mine:
            first = owner.setdefault(key, i)
            if first != i:
                raise ValueError(
                    f"probe_seeds: blocks {first} and {i} share a parameter or buffer (a tied stack); probe() "
                    "measures such networks one at a time"
                )


def _rows_norm(t: torch.Tensor, n_nets: int, dtype: torch.dtype | None) -> torch.Tensor:
    """(S,) norms of t's S rows (t reshaped to (S, −1)), each the bits `reductions.norm_value`
    gives for that row alone: on the CPU above `NORM_ROW` elements per row by sub-rows of
    `NORM_ROW` combined in float64 (`reductions.row_norms`: torch's float32 vector_norm drifts to
    1e-5 relative at 2^16 elements), and a row whose float32 norm is 0 or inf (squares out of
    float32's range, beyond ~1e19 or below ~1e-19 per element) taken again in float64; the CPU
    result is then float64."""
    f = t.reshape(n_nets, -1)  # (S, N)
    cpu = f.device.type == "cpu" and dtype != torch.float64
    if f.shape[1] > NORM_ROW and cpu:
        out = torch.tensor(row_norms(f, dtype), dtype=torch.float64)
    else:
        out = torch.linalg.vector_norm(f, dim=1, dtype=dtype)
    if cpu and f.dtype != torch.float64:
        ok = (out > 0) & (out < math.inf)  # (S,)
        if not bool(ok.all()):  # (a host read: free on the CPU)
            out = torch.where(ok, out.to(torch.float64), torch.linalg.vector_norm(f, dim=1, dtype=torch.float64))
    return out


def _rows_rel_diff64(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor | None:
    """‖a_s − b_s‖ / ‖b_s‖ per seed in float64, (S, 1); None when the shapes differ."""
    if a.shape != b.shape:
        return None
    a64 = a.detach().to(torch.float64).reshape(a.shape[0], -1)
    b64 = b.detach().to(torch.float64).reshape(b.shape[0], -1)
    num = torch.linalg.vector_norm(a64 - b64, dim=1)
    den = torch.linalg.vector_norm(b64, dim=1)
    return torch.where(den > 0, num / torch.where(den > 0, den, 1.0), num).unsqueeze(1)
