"""Stage 4: blocks and an input → `Measurements`, from one forward and one backward pass.

Boundary l is the input of block l (l = 0 … L−1) and boundary L is the output of the stack.
During the forward pass each boundary tensor gets its statistics reduced to two scalars
(`torch.var_mean`) and a gradient hook that reduces its gradient to one norm; nothing else about it
is kept, so the probe holds no activation beyond what autograd saves anyway. A single
`torch.autograd.grad` call then runs the one backward pass and returns the parameter gradients.
All scalars are moved to the host together at the end (one device synchronisation).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from stability.errors import CaseError

__all__ = ["Measurements", "probe", "projection_vector"]

_LOW = (torch.float16, torch.bfloat16)


@dataclass
class Measurements:
    """What one probe measured. Lists have one entry per boundary (n_blocks + 1)."""

    grad_norm: list[float]
    act_var: list[float]
    act_sq_mean: list[float]
    param_grad_norm: dict[str, float]
    identity_error: float | None
    input_grad_error: float | None
    nonfinite_at: int | None
    nonfinite_kind: Literal["activation", "gradient"] | None = None
    channels: list[int] = field(default_factory=list)

    @property
    def n_blocks(self) -> int:
        return len(self.grad_norm) - 1

    @property
    def gradient_ratio(self) -> float:
        """grad_norm[0] / grad_norm[-1]: how much of the output gradient reaches the input."""
        top = self.grad_norm[-1]
        return self.grad_norm[0] / top if top else math.nan


def projection_vector(shape: Sequence[int], seed: int, *, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """r ~ N(0, 1) drawn on the CPU from `seed`, so L = Σ y⊙r has ∂L/∂y = r on every device."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(tuple(shape), generator=gen, dtype=torch.float64).to(device=device, dtype=dtype)


def _as_list(blocks: nn.Module | Iterable[nn.Module]) -> list[nn.Module]:
    if isinstance(blocks, nn.Sequential):
        return list(blocks)
    if isinstance(blocks, nn.ModuleList):
        return list(blocks)
    if isinstance(blocks, nn.Module):
        return [blocks]
    return list(blocks)


def _named_parameters(blocks: nn.Module | Iterable[nn.Module], modules: list[nn.Module]) -> list[tuple[str, nn.Parameter]]:
    if isinstance(blocks, nn.Module):
        return [(n, p) for n, p in blocks.named_parameters() if p.requires_grad]
    return [(f"{i}.{n}", p) for i, m in enumerate(modules) for n, p in m.named_parameters() if p.requires_grad]


def _rel_diff64(a: torch.Tensor, b: torch.Tensor) -> float | None:
    """‖a − b‖ / ‖b‖ in float64, so it is 0 exactly when a and b are bit-identical."""
    if a.shape != b.shape:
        return None
    b64 = b.detach().to(torch.float64)
    num = torch.linalg.vector_norm(a.detach().to(torch.float64) - b64)
    den = torch.linalg.vector_norm(b64)
    return float(num / den) if float(den) > 0 else float(num)


def probe(
    blocks: nn.Module | Iterable[nn.Module],
    x: torch.Tensor,
    *,
    loss: Literal["projection", "sum", "mse"] = "projection",
    seed: int = 0,
    target: torch.Tensor | None = None,
    checkpoint_every: int = 0,
) -> Measurements:
    """Measure gradient arrival, activation statistics and identity error in one fwd + one bwd.

    `blocks` is an `nn.Sequential` (its children are the blocks) or any iterable of modules.
    `loss="projection"` backpropagates L = Σ y⊙r with r ~ N(0, 1) from `seed`; `"sum"` uses
    L = Σ y; `"mse"` uses L = mean((y − target)²). With `checkpoint_every = N > 0`, blocks run in
    checkpointed segments of N (recomputed during the backward pass): same numbers, less memory.
    """
    modules = _as_list(blocks)
    n = len(modules)
    if loss == "mse" and target is None:
        raise ValueError('probe(loss="mse") needs target=')
    if loss not in ("projection", "sum", "mse"):
        raise ValueError(f'probe(loss={loss!r}): choose "projection", "sum" or "mse"')
    low = x.dtype in _LOW
    norm_dtype = torch.float32 if low else None
    grad_norms: list[torch.Tensor | None] = [None] * (n + 1)
    stats: list[torch.Tensor] = []  # (2,) per boundary: variance, mean
    channels: list[int] = []
    recording = [True]  # False while a checkpointed segment is recomputed

    def observe(i: int, h: torch.Tensor) -> None:
        if not recording[0]:
            return
        hd = h.detach()
        var, mean = torch.var_mean(hd.float() if low else hd, correction=0)
        stats.append(torch.stack((var, mean)))
        channels.append(h.shape[1] if h.dim() > 1 else 1)
        if i > 0 and h.requires_grad:

            def hook(g: torch.Tensor, i: int = i) -> None:
                grad_norms[i] = torch.linalg.vector_norm(g, dtype=norm_dtype)

            h.register_hook(hook)

    def run(h: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        for i in range(start, stop):
            observe(i, h)
            try:
                h = modules[i](h)
            except RuntimeError as exc:
                if "out of memory" in str(exc).lower():
                    raise
                raise CaseError(f"block {i} ({type(modules[i]).__name__}) failed on an input of shape {tuple(h.shape)}: {exc}") from exc
            if not isinstance(h, torch.Tensor):
                raise CaseError(f"block {i} ({type(modules[i]).__name__}) returned {type(h).__name__}, not a tensor")
        return h

    named = _named_parameters(blocks, modules)
    params = [p for _, p in named]
    with torch.enable_grad():
        x0 = x.detach().requires_grad_(True)  # a view of x: no copy
        h = x0
        if checkpoint_every and checkpoint_every < n:
            for start in range(0, n, checkpoint_every):
                h = checkpoint(run, h, start, min(start + checkpoint_every, n), use_reentrant=False)
        else:
            h = run(h, 0, n)
        y = h
        observe(n, y)
        recording[0] = False  # the backward pass may recompute checkpointed segments: observe once
        if loss == "projection":
            out_grad = projection_vector(y.shape, seed, dtype=y.dtype, device=y.device)
            root, root_grad = y, out_grad
        elif loss == "sum":
            out_grad = torch.ones_like(y)
            root, root_grad = y, out_grad
        else:
            root, root_grad, out_grad = ((y - target) ** 2).mean(), None, None
        grads = torch.autograd.grad(
            root, [x0, *params], grad_outputs=root_grad, allow_unused=True, materialize_grads=True
        ) if (root.requires_grad) else [torch.zeros_like(x0), *[torch.zeros_like(p) for p in params]]
    g0 = grads[0]
    grad_norms[0] = torch.linalg.vector_norm(g0, dtype=norm_dtype)
    zero = torch.zeros((), device=x.device, dtype=torch.float32 if low else x.dtype)
    norms = torch.stack([zero if g is None else g.to(zero.dtype) for g in grad_norms])
    pnorms = torch._foreach_norm(list(grads[1:])) if params else []
    host = torch.cat([norms.double(), torch.stack(stats).double().flatten(), torch.stack(list(pnorms)).double() if params else norms.new_zeros(0).double()]).tolist()
    grad_norm = host[: n + 1]
    var = host[n + 1 : 3 * (n + 1) : 2]
    mean = host[n + 2 : 3 * (n + 1) : 2]
    sq_mean = [v + m * m for v, m in zip(var, mean)]
    pgn = dict(zip([name for name, _ in named], host[3 * (n + 1) :]))
    identity_error = _rel_diff64(y, x0)
    input_grad_error = _rel_diff64(g0, out_grad) if out_grad is not None else None
    nonfinite_at, kind = _first_nonfinite(var, mean, grad_norm)
    return Measurements(
        grad_norm=grad_norm,
        act_var=var,
        act_sq_mean=sq_mean,
        param_grad_norm=pgn,
        identity_error=identity_error,
        input_grad_error=input_grad_error,
        nonfinite_at=nonfinite_at,
        nonfinite_kind=kind,
        channels=channels,
    )


def _first_nonfinite(var: list[float], mean: list[float], grad: list[float]) -> tuple[int | None, Literal["activation", "gradient"] | None]:
    """The first boundary a non-finite value reached: in forward order for activations, in
    backward order (from the output down) for gradients."""
    for i, (v, m) in enumerate(zip(var, mean)):
        if not (math.isfinite(v) and math.isfinite(m)):
            return i, "activation"
    for i in range(len(grad) - 1, -1, -1):
        if not math.isfinite(grad[i]):
            return i, "gradient"
    return None, None
