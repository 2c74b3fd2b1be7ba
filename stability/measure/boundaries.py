"""Stage 4: what the probe's one pass does at each boundary, in one of two designs.

`stability.measure.probe_pass.measure_pass` runs the network once forward and once backward and hands
this module every boundary: `BoundaryPass.enter` gets the tensor that reaches block 0 (it becomes the
gradient leaf), `BoundaryPass.observe` every other boundary tensor, and each boundary gets one gradient
hook. Each boundary is reduced to its variance and mean, each gradient to its norm; where those
scalars wait until the end is the design (docs/performance.md has the measurements behind it):

- **host**, for CPU tensors. A CPU has no device to wait for, so sums are read to Python floats
  as they are produced, and every fallback is decided while its tensor is still at hand (the
  corrected two-pass variance; float64 where float32 sums or squares leave the range:
  `reductions.Moments`, `reductions.norm_value`); each gradient is reduced in its hook. Two
  variants, chosen by `CPU_DESIGN`: "tensor" reduces each boundary on its own as it arrives, in
  cache (Σh, Σh², two reads to the host); "grouped" copies boundaries of `TWO_PASS_MIN` to
  `_GROUP_MAX` elements into the rows of one buffer as they arrive and reduces a group of up to
  `_GROUP_ELEMENTS` elements at a time (one row-wise Σh and Σh² and one host read per group:
  fewer torch calls, and operations large enough for torch to split over its threads). The two
  give the same numbers bit for bit (a row's sum is the same float32 cascade as the boundary's own
  `sum` on one thread; grouped rows are never split over threads, so the grouped numbers are also
  those of one thread at any thread count). Measured on the development box, "tensor" was the
  faster at one thread and at two (the buffer's traffic through the cache, and on a loaded machine
  every extra parallel region waits for a descheduled thread), so it is the default;
  `benchmarks/profile_probe.py` compares them again.
- **device**, for CUDA and every other device. Nothing is read to the host before the end: each
  reduction accumulates in float64 on the device (`reductions.var_mean64`, `norm64`: float64
  holds the square of every float32 value, so there is no fallback to decide), the scalars stay
  0-dim device tensors, and the pass reads them all at once (`_read_host`: one synchronisation).
  `tests/test_gpu.py` runs it under `torch.cuda.set_sync_debug_mode("error")`; on the CPU,
  `tests/test_probe_designs.py` checks its numbers and that it reads nothing before the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

import torch
from torch import nn

from stability.errors import BlockError
from stability.measure.measurements import Measurements
from stability.measure.param_norms import LargeParamNorms
from stability.measure.reductions import (
    SQUARES_MAX,
    TWO_PASS_MIN,
    Moments,
    norm64,
    norm_tensor,
    norm_value,
    rel_parts64,
    stack64,
    to_device,
    var_mean64,
)

#: The probe's internals (stability.measure.probe_pass runs a `BoundaryPass`); free to change.
__all__ = [
    "CPU_DESIGN",
    "LOW_PRECISION",
    "BoundaryObserver",
    "BoundaryPass",
    "first_nonfinite",
    "rel_diff",
]

#: The half-precision dtypes, whose boundaries are reduced in float32 at least.
LOW_PRECISION = (torch.float16, torch.bfloat16)

#: CPU boundaries of at most this many elements are reduced in groups (`_HostReductions`).
_GROUP_MAX = SQUARES_MAX
#: A group holds up to this many elements (512 KiB of float32) and at most `_GROUP_ROWS` boundaries.
_GROUP_ELEMENTS = 1 << 17
_GROUP_ROWS = 32

Design = Literal["grouped", "tensor", "device"]
#: The design a CPU pass uses (module docstring): "tensor", "grouped" or "device". Changed only by
#: tests and benchmarks/profile_probe.py, which compare them; a pass on any other device is always "device".
CPU_DESIGN: Design = "tensor"


@runtime_checkable
class BoundaryObserver(Protocol):
    """An opt-in measurement taken during the probe's one forward pass (rank collapse, channel
    statistics, attention entropy, …). The probe calls `start` once with the blocks, `observe`
    once per boundary l = 0 … L with the detached boundary tensor (never again while a checkpointed
    segment is recomputed), and `finish` after the backward pass; what `finish` returns is stored in
    `Measurements.extra[name]`. An observer must not keep the tensors it is shown (reduce them to a
    few scalars), so the probe still holds no activation beyond what autograd saves. With no
    observers the probe does no extra work at all.
    """

    name: str

    def start(self, blocks: Sequence[nn.Module]) -> None: ...

    def observe(self, index: int, h: torch.Tensor) -> None: ...

    def finish(self) -> Any: ...


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float | None:
    """‖a − b‖ / ‖b‖, 0 exactly when a and b are bit-identical.

    Two CPU tensors of one float dtype are compared in that dtype: with gradual underflow a − b is 0
    only where a = b, and `norm_tensor` takes a norm whose squares leave float32's range again in
    float64, so no difference is lost at any scale. Tensors of two dtypes, or of half precision,
    are compared in float64 (a float64 copy of each: 0.5 ms on a 16×32×16×16 output, which the
    common case does without)."""
    if a.shape != b.shape:
        return None
    a, b = a.detach(), b.detach()
    if (
        a.dtype != b.dtype or a.dtype not in (torch.float32, torch.float64) or not a.is_cpu
    ):  # (`norm_tensor` re-checks the range on the CPU only)
        a, b = a.to(torch.float64), b.to(torch.float64)
    num, den = float(norm_tensor(a - b, None)), float(norm_tensor(b, None))
    return num / den if den > 0 else num


def first_nonfinite(
    mean: list[float], grad: list[float]
) -> tuple[int | None, Literal["activation", "gradient"] | None]:
    """The first boundary a non-finite value reached: in forward order for activations, in
    backward order (from the output down) for gradients. An activation is non-finite exactly when
    its mean is (a sum holding inf or NaN is inf or NaN); the variance alone can overflow on
    finite activations beyond ~1e19, which `variance_growth` reports as an overflow instead."""
    for i, m in enumerate(mean):
        if not math.isfinite(m):
            return i, "activation"
    for i in range(len(grad) - 1, -1, -1):
        if not math.isfinite(grad[i]):
            return i, "gradient"
    return None, None


class _GradientHooks:
    """Where a pass hooks each boundary's gradient (`on`), and the tensor hooks it removes after
    the pass (`close`).

    A boundary made by a node gets a pre-hook on that node, handed the node's output gradients:
    the gradient that flows back through the boundary to the blocks before it, the sum of every use
    of it, after any hook a block set on the tensor itself (a clipping or a scaling hook), and with
    respect to the boundary as it was when observed even where a later block changes it in place.
    It is registered in C++ (1.3 µs a boundary against `Tensor.register_hook`'s 2.3 µs in Python,
    measured on 256 fresh boundaries) and goes with the graph. The output gets a tensor hook, which sees the loss's own
    gradient even where autograd runs none of the output's graph (nothing trainable behind it), and
    so does a boundary without a node (a block that returns a parameter or a new leaf): those stay
    on the user's tensors, so `close` takes them off. A parameter of `LargeParamNorms` returned as
    a boundary gets no hook of its own: its parameter hook, which takes the same norm of the same
    gradient before handing autograd a zero, fills the boundary's slot too."""

    def __init__(self, n: int, large: LargeParamNorms) -> None:
        self.n = n
        self.large = large
        self.handles: list[Any] = []

    def on(self, i: int, h: torch.Tensor, fn: Callable[[torch.Tensor], None], grad: list[Any]) -> None:
        """Call `fn` with boundary i's gradient (`grad`: the list `fn` fills, for a large parameter's slot)."""
        node = h.grad_fn
        if node is not None and i < self.n:
            k = h.output_nr

            def pre(grads: tuple[torch.Tensor | None, ...]) -> None:
                g = grads[k]
                if g is not None:  # (None: no gradient reaches h: its norm stays unset, read as 0)
                    fn(g)

            node.register_prehook(pre)
            return
        slots = self.large.boundary(h) if node is None else None
        if slots is not None:
            slots.append((grad, i))
        else:
            self.handles.append(h.register_hook(fn))  # type: ignore[no-untyped-call]  # torch leaves Tensor.register_hook unannotated

    def close(self) -> None:
        """Remove the tensor hooks `on` set (the nodes' pre-hooks go with the graph)."""
        for handle in self.handles:
            handle.remove()
        self.handles.clear()


def _read_host(t: torch.Tensor) -> list[float]:
    """The pass's one read of its scalars to the host (on a device, its one synchronisation)."""
    values: list[float] = t.tolist()
    return values


class _HostReductions:
    """The host design (module docstring): floats as they come, boundaries one by one or grouped."""

    def __init__(self, n: int, low: bool, *, grouped: bool) -> None:
        self.low = low
        self.norm_dtype = torch.float32 if low else None
        self.grouped = grouped
        self.moments = Moments()
        self.grad: list[float | torch.Tensor | None] = [None] * (n + 1)  # a float where the gradient is on the CPU
        self._buf: torch.Tensor | None = None  # (rows, N): the group's boundaries, one per row
        self._rows: list[torch.Tensor] = []  # its rows, (N,) views made once
        self._squares: torch.Tensor | None = None  # (rows, N): their squares (reused by every group)
        self._slots: list[int] = []  # the moments' slot of each row in use

    def add(self, h: torch.Tensor) -> None:
        if self.low:
            h = h.float()
        n = h.numel()
        if not (self.grouped and TWO_PASS_MIN <= n <= _GROUP_MAX and h.is_cpu and h.dtype.is_floating_point):
            self.moments.add(h)
            return
        buf = self._buf
        if buf is None or self._rows[0].shape != h.shape or buf.dtype != h.dtype:
            self.flush()
            buf = self._buf = torch.empty(
                (max(1, min(_GROUP_ROWS, _GROUP_ELEMENTS // n)), n), dtype=h.dtype
            )  # (rows, N)
            self._rows = list(buf.view(-1, *h.shape).unbind(0))  # each shaped like h: copied into without a reshape
            self._squares = torch.empty_like(buf)
        slots = self._slots
        self._rows[len(slots)].copy_(h)  # a copy: the next block may modify its input in place
        slots.append(self.moments.slot())
        if len(slots) == len(self._rows):
            self.flush()

    def flush(self) -> None:
        """Reduce the boundaries waiting in the buffer: Σh and Σh² per row, one host read."""
        k = len(self._slots)
        if not k or self._buf is None or self._squares is None:
            return
        rows = self._buf[:k]  # (k, N)
        squares = torch.square(rows, out=self._squares[:k])  # (k, N)
        # a reduction to one number is split over torch's threads
        # (other rounding than one thread's); to two or more, never
        if k == 1:
            rows, squares = rows.expand(2, -1), squares.expand(2, -1)  # (2, N), stride 0: no copy
        values = torch.cat(
            (rows.sum(1)[:k], squares.sum(1)[:k])
        ).tolist()  # Σh, Σh² per row: the float32 cascade of `Tensor.sum` on one thread
        for j, slot in enumerate(self._slots):
            self.moments.add_sums(slot, self._rows[j], values[j], values[k + j])
        self._slots.clear()

    def grad_hook(self, i: int) -> Callable[[torch.Tensor], None]:
        grad, dtype = self.grad, self.norm_dtype

        def hook(g: torch.Tensor) -> None:
            grad[i] = norm_value(g, dtype) if g.is_cpu else norm_tensor(g, dtype)

        return hook

    def end_forward(self, large: LargeParamNorms) -> None:
        self.flush()
        self._buf = self._squares = None
        self._rows = []
        large.norm_dtype = self.norm_dtype  # its hooks run in the backward pass, once the input's dtype is known

    @property
    def param_dtype(self) -> torch.dtype | None:
        return self.norm_dtype

    def read(
        self, g0: torch.Tensor, pnorms: torch.Tensor, y: torch.Tensor, x0: torch.Tensor, out_grad: torch.Tensor | None
    ) -> _Values:
        grad = self.grad
        grad[0] = norm_value(g0, self.norm_dtype) if g0.is_cpu else norm_tensor(g0, self.norm_dtype)
        on_device = [i for i, g in enumerate(grad) if isinstance(g, torch.Tensor)]  # norms still on a device
        norms = stack64([g for g in grad if isinstance(g, torch.Tensor)])
        stats = stack64(self.moments.parts)
        d, k = len(on_device), stats.numel()
        host = _read_host(torch.cat([norms.to(pnorms.device), stats.to(pnorms.device), pnorms]))
        grad_norm = [
            g if isinstance(g, float) else 0.0 for g in grad
        ]  # None: the gradient never arrived (the boundary does not reach the loss)
        for j, i in enumerate(on_device):
            grad_norm[i] = host[j]
        var, mean = self.moments.result(host[d : d + k])
        identity = rel_diff(y, x0)
        input_grad = rel_diff(g0, out_grad) if out_grad is not None else None
        return _Values(grad_norm, var, mean, host[d + k :], identity, input_grad)


class _DeviceReductions:
    """The device design (module docstring): float64 on the device, one read at the end."""

    def __init__(self, n: int, device: torch.device) -> None:
        self.device = device
        self.stats: list[torch.Tensor] = []  # 0-dim (var, mean) per boundary, in order
        self.grad: list[torch.Tensor | None] = [None] * (n + 1)

    def add(self, h: torch.Tensor) -> None:
        self.stats += var_mean64(h)

    def grad_hook(self, i: int) -> Callable[[torch.Tensor], None]:
        grad = self.grad

        def hook(g: torch.Tensor) -> None:
            grad[i] = norm64(g)

        return hook

    def end_forward(self, large: LargeParamNorms) -> None:
        large.norm, large.norm_dtype = norm64, torch.float64

    @property
    def param_dtype(self) -> torch.dtype | None:
        return torch.float64

    def read(
        self, g0: torch.Tensor, pnorms: torch.Tensor, y: torch.Tensor, x0: torch.Tensor, out_grad: torch.Tensor | None
    ) -> _Values:
        dev = self.device
        self.grad[0] = norm64(g0)
        zero = torch.zeros((), dtype=torch.float64, device=dev)
        rel = [rel_parts64(y, x0), rel_parts64(g0, out_grad) if out_grad is not None else None]
        scalars = (
            [zero if g is None else g for g in self.grad] + self.stats + [t for r in rel if r is not None for t in r]
        )
        local = torch.stack([_on(t, dev) for t in scalars])
        host = _read_host(torch.cat([local, _on(pnorms, dev)]))
        n1, k = len(self.grad), len(self.stats)
        stats, tail = host[n1 : n1 + k], host[n1 + k :]
        extra = len(scalars) - n1 - k
        ratios = iter(_ratio(tail[j], tail[j + 1]) for j in range(0, extra, 2))
        identity = next(ratios) if rel[0] is not None else None
        input_grad = next(ratios) if rel[1] is not None else None
        return _Values(host[:n1], stats[0::2], stats[1::2], tail[extra:], identity, input_grad)


def _on(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """t on `device`, copied without synchronising (a model may span devices)."""
    if t.device == device:
        return t
    return to_device(t, device) if t.is_cpu else t.to(device, non_blocking=True)


def _ratio(num: float, den: float) -> float:
    """‖a − b‖ / ‖b‖ from its two norms, as `rel_diff` forms it."""
    return num / den if den > 0 else num


class _Values(NamedTuple):
    """What a pass read: per-boundary gradient norms, variances and means, the parameter-gradient
    norms in the order of `named`, and the identity errors."""

    grad_norm: list[float]
    var: list[float]
    mean: list[float]
    param: list[float]
    identity: float | None
    input_grad: float | None


class BoundaryPass:
    """The boundaries of one pass: `enter` and `observe` are what `Forward` calls."""

    def __init__(self, n: int, observers: Sequence[BoundaryObserver], large: LargeParamNorms) -> None:
        self.observers = tuple(observers)
        self.hooks = _GradientHooks(n, large)  # (`measure_pass` removes its tensor hooks after the backward pass)
        self.n = n
        self.recording = True  # False once the forward is done: the backward pass may recompute checkpointed segments
        self.leaf: torch.Tensor | None = None
        self.channels: list[int] = []
        self.red: _HostReductions | _DeviceReductions | None = None

    def enter(self, h: torch.Tensor) -> torch.Tensor:
        if self.leaf is not None:  # a checkpointed recomputation, or a model that runs its first block twice
            return h
        design = CPU_DESIGN if h.device.type == "cpu" else "device"
        self.red = (
            _DeviceReductions(self.n, h.device)
            if design == "device"
            else _HostReductions(self.n, h.dtype in LOW_PRECISION, grouped=design == "grouped")
        )
        x0 = h.detach().requires_grad_(True)  # the input as it was, and the gradient's leaf
        self.leaf = x0
        h0 = x0.clone()  # block 0's own copy: it may modify it in place without touching x0 (or the caller's tensor)
        self.observe(0, h0)
        return h0

    def observe(self, i: int, h: torch.Tensor) -> None:
        if not self.recording:
            return
        red = self.red
        if red is None:
            raise BlockError(f"the forward observed boundary {i} before block 0's input entered the pass")
        hd = h.detach()
        red.add(hd)
        for o in self.observers:
            o.observe(i, hd)
        self.channels.append(h.shape[1] if h.dim() > 1 else 1)
        if i > 0 and h.requires_grad:
            self.hooks.on(i, h, red.grad_hook(i), red.grad)

    def end_forward(self, y: torch.Tensor, large: LargeParamNorms) -> _HostReductions | _DeviceReductions:
        """Observe the output (boundary n) and stop recording; the reductions, for the backward pass."""
        red = self.red
        if red is None or self.leaf is None:
            raise BlockError("the forward never reached block 0 (nothing was probed)")
        if self.n > 0:  # (with no blocks, the output is the input `enter` observed)
            self.observe(self.n, y)
        self.recording = False
        red.end_forward(large)
        return red

    def measurements(self, values: _Values, named: list[tuple[str, nn.Parameter]]) -> Measurements:
        sq_mean = [v + m * m for v, m in zip(values.var, values.mean, strict=True)]
        nonfinite_at, kind = first_nonfinite(values.mean, values.grad_norm)
        return Measurements(
            grad_norm=values.grad_norm,
            act_var=values.var,
            act_sq_mean=sq_mean,
            param_grad_norm=dict(zip([name for name, _ in named], values.param, strict=True)),
            identity_error=values.identity,
            input_grad_error=values.input_grad,
            nonfinite_at=nonfinite_at,
            nonfinite_kind=kind,
            channels=self.channels,
            extra={o.name: o.finish() for o in self.observers},
        )
