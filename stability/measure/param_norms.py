"""Every parameter gradient's norm in a probe's pass: the large ones by hooks as autograd
produces them (`LargeParamNorms`), the rest grouped by shape afterwards (`param_grad_norms`), each as
accurate as `stability.measure.reductions.norm_tensor` takes it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from stability.measure.reductions import NORM_ROW, norm_value, row_norms, to_device

#: The probe's internals (stability.measure.probe_pass takes the norms with them), tested against float64
#: references; free to change.
__all__ = ["LargeParamNorms", "param_grad_norms"]

#: Parameter gradients up to this many elements have their norms taken together (`param_grad_norms`).
_SMALL_PARAM = 4096
#: Parameters of at least this many elements have their gradients' norms taken by a hook (`LargeParamNorms`).
_HOOK_PARAM = 16384


class LargeParamNorms:
    """The norms of the large parameters' gradients, each taken by a hook as autograd produces it.

    The hook reads the gradient while it is still in cache and hands autograd a stride-0 zero in
    its place, so the gradient's memory is freed at once and reused for the next one, instead of
    every gradient being held to the end of the pass and read back cold (64 MiB for the depth-256
    width-256 MLP of docs/performance.md, and as many fresh pages to fault in on every probe).
    Only parameters of at least `_HOOK_PARAM` elements get one: a Python hook costs ~5 µs, more
    than the norm of a small gradient; small ones are reduced together afterwards
    (`param_grad_norms`). A leaf's hook sees its whole gradient once (autograd sums the
    contributions of a parameter used twice before it). The hooks are removed on exit, whatever
    happened in between. `norm(g, norm_dtype)` takes the norm: `norm_value` (a host float, read
    at once: free on the CPU) by default, a 0-dim tensor on a device (no synchronisation).
    """

    def __init__(
        self,
        params: list[nn.Parameter],
        norm_dtype: torch.dtype | None,
        *,
        norm: Callable[[torch.Tensor, torch.dtype | None], float | torch.Tensor] | None = None,
    ) -> None:
        self.params = params
        self.norm_dtype = norm_dtype
        self.norm = norm_value if norm is None else norm
        self._by_id: dict[int, float | torch.Tensor] = {}  # id(parameter) → its norm
        self._handles: list[Any] = []
        self._zeros: dict[
            tuple[torch.Size, torch.dtype, torch.device], torch.Tensor
        ] = {}  # one stride-0 zero per kind and shape
        self._slots: dict[int, list[tuple[list[Any], int]]] = {}  # id(parameter) → the boundaries it is (`boundary`)

    @property
    def norms(self) -> dict[int, float | torch.Tensor]:
        """Parameter index → norm, for every index of a hooked parameter (a parameter listed
        twice, shared by two blocks of a list, has one hook and the same norm at both indices)."""
        return {j: self._by_id[id(p)] for j, p in enumerate(self.params) if id(p) in self._by_id}

    def __enter__(self) -> LargeParamNorms:
        seen: set[int] = set()
        for p in self.params:
            if p.numel() >= _HOOK_PARAM and id(p) not in seen:
                seen.add(id(p))
                self._slots[id(p)] = []
                self._handles.append(p.register_hook(self._hook(id(p))))  # type: ignore[no-untyped-call]  # torch leaves Tensor.register_hook unannotated
        return self

    def boundary(self, t: torch.Tensor) -> list[tuple[list[Any], int]] | None:
        """Where `t` is a hooked parameter (a block returned it as a boundary), the list of (norm
        list, index) slots its hook also fills with its norm; else None."""
        return self._slots.get(id(t))

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _hook(self, key: int) -> Any:
        slots = self._slots[key]

        def hook(g: torch.Tensor) -> torch.Tensor:
            value = self._by_id[key] = self.norm(g, self.norm_dtype)
            for norms, i in slots:  # (the boundaries this parameter is: `boundary`)
                norms[i] = value
            kind = (g.shape, g.dtype, g.device)
            zero = self._zeros.get(kind)
            if zero is None:
                zero = self._zeros[kind] = g.new_zeros(()).expand(g.shape)
            return zero  # what autograd returns for this parameter: no memory (read by nobody: its norm is taken)

        return hook


def param_grad_norms(
    grads: list[torch.Tensor], norm_dtype: torch.dtype | None, *, given: dict[int, float | torch.Tensor] | None = None
) -> torch.Tensor:
    """‖g‖ for every parameter gradient, as one float64 (P,) tensor in the order given.

    `given` holds norms already taken (by `LargeParamNorms`: host floats or 0-dim tensors); their
    gradients are not read. With `norm_dtype=torch.float64` (the device design) every norm is
    accumulated in float64, and nothing is read to the host.
    Gradients of up to `_SMALL_PARAM` elements (biases, norm gains, small weights) are stacked by
    shape and reduced in one call each (by rows of `NORM_ROW` on the CPU above that size): one
    norm call per bias costs more in dispatch than in arithmetic. Larger CPU gradients are each
    taken by `norm_value`; on a device, or in float64, by one `torch._foreach_norm` or
    `vector_norm` each.
    """
    if not grads:
        return torch.zeros(0, dtype=torch.float64)
    device = grads[0].device
    given = given or {}
    groups: dict[tuple[object, ...], list[int]] = {}  # small gradients by (shape, dtype, device)
    host: list[int] = []  # larger CPU gradients, not in float64: `norm_value` each
    middle: list[int] = []  # larger gradients on a device, or in float64: one _foreach_norm / vector_norm each
    for j, g in enumerate(grads):  # one pass: this loop is the function's cost for ~1,000 parameters
        if j in given:
            continue
        if g.numel() <= _SMALL_PARAM:
            groups.setdefault((g.shape, g.dtype, g.device), []).append(j)
        elif g.is_cpu and norm_dtype != torch.float64:
            host.append(j)
        else:
            middle.append(j)
    order: list[int] = []
    pieces: list[torch.Tensor] = []
    if middle:
        big = [grads[j] for j in middle]
        if norm_dtype is None:
            pieces.append(torch.stack(torch._foreach_norm(big)).to(torch.float64))
        else:
            pieces.append(torch.stack([torch.linalg.vector_norm(g, dtype=norm_dtype) for g in big]).to(torch.float64))
        order += middle
    if host:
        pieces.append(torch.tensor([norm_value(grads[j], norm_dtype) for j in host], dtype=torch.float64))
        order += host
    if given:
        done = sorted(given)
        values = [given[j] for j in done]
        if all(isinstance(v, float) for v in values):
            pieces.append(to_device(torch.tensor(values, dtype=torch.float64), device))
        else:
            pieces.append(
                torch.stack(
                    [v if isinstance(v, torch.Tensor) else torch.tensor(v, dtype=torch.float64) for v in values]
                ).to(device=device, dtype=torch.float64)
            )
        order += done
    for idx in groups.values():
        stacked = torch.stack([grads[j] for j in idx]).reshape(
            len(idx), -1
        )  # (k, numel): one reshape, not one per gradient
        pieces.append(_stacked_norms(stacked, norm_dtype))
        order += idx
    flat = torch.cat(pieces) if len(pieces) > 1 else pieces[0]  # (P,), in `order`
    if order != list(range(len(order))):
        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[torch.tensor(order)] = torch.arange(len(order))
        flat = flat.index_select(0, to_device(inverse, flat.device))
    return flat


def _stacked_norms(stacked: torch.Tensor, norm_dtype: torch.dtype | None) -> torch.Tensor:
    """(k,) float64 norms of the k rows of `stacked` (k, N), each as `_norm` takes it: on the CPU
    by rows of `NORM_ROW` above that many elements, a row whose float32 norm is 0 or inf (squares
    out of float32's range) again in float64 (the whole group, one call)."""
    norms: torch.Tensor
    if not stacked.is_cpu or norm_dtype == torch.float64:
        norms = torch.linalg.vector_norm(stacked, dim=1, dtype=norm_dtype)
        return norms.to(torch.float64)
    if stacked.shape[1] > NORM_ROW:
        norms = torch.tensor(row_norms(stacked, norm_dtype), dtype=torch.float64)
    else:
        norms = torch.linalg.vector_norm(stacked, dim=1, dtype=norm_dtype)
    if stacked.dtype != torch.float64 and not bool(((norms > 0) & (norms < math.inf)).all()):
        norms = torch.linalg.vector_norm(
            stacked, dim=1, dtype=torch.float64
        )  # squares out of float32's range: the group again in float64
    return norms.to(torch.float64)
