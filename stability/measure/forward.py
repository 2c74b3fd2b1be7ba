"""A model's own forward as the probe's pass: hooks at its blocks' boundaries, nothing re-wired.

`model_forward` is a `probe.Forward` that calls the model itself (`model(**inputs)`), so every
argument its blocks get — rotary embeddings, ALiBi, T5's relative position bias, DeBERTa's
relative positions, causal, sliding-window and padding masks (eager attention included), Swin's
window shifts — reaches them exactly as in the shipped model, with no per-family code:

- a forward pre-hook on block 0 replaces its hidden-state argument (`discover.hidden_argument`:
  positional, or the `hidden_states` keyword) with the tensor `enter` returns, the pass's
  gradient leaf;
- a forward pre-hook on block i (i = 1 … L−1) calls `observe(i, h)` with the tensor it gets;
- a forward hook on block L−1 takes its hidden state (`adapters.hidden_state`) and stops the
  model's forward (`_Stop`, a BaseException, so no `except Exception` in a library swallows
  it): the loss is on the last block's output, and nothing after it (a final norm, a head, a
  decoder) runs.

The model runs without gradient until block 0 (embeddings, masks and position tables are
computed as usual but record no graph: nothing before block 0 is measured) and with it from
block 0 on. What the blocks see is the model's own forward with gradient on, bit for bit
(tests/test_library_forward.py checks every family); without gradient some kernels differ in the
last bits (torch's fused MultiheadAttention fast path, SDPA's inference paths), and that is not
the forward a gradient is taken of. A block called twice, out of order, or with a hidden state of
another shape than block 0's fails the case with a `BlockError` naming it, so a ratio never mixes
tensors of two shapes. `probe_model` is the entry: discovery (`stability.families.discover`), then one forward
and one backward pass (`probe.measure_pass` inside `probe.prepared`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import torch
from torch import nn

from stability.errors import BlockError, CaseError
from stability.families.adapters import hidden_state
from stability.families.discover import Blocks, ModelInputs, discover, hidden_argument, run_model
from stability.measure.measurements import Measurements
from stability.measure.probe import BoundaryObserver, Forward, measure_pass, prepared

__all__ = ["model_forward", "probe_model"]


class _Stop(BaseException):
    """Raised by the hook on the last block, caught by `model_forward`: the model's forward ends there."""

    def __init__(self, y: torch.Tensor) -> None:
        super().__init__()
        self.y = y


def model_forward(model: nn.Module, inputs: ModelInputs, blocks: Blocks) -> Forward:
    """The model's own forward on `inputs`, measured at the boundaries of `blocks`."""
    modules = blocks.modules
    index = {id(m): i for i, m in enumerate(modules)}
    n = len(modules)

    def forward(enter: Callable[[torch.Tensor], torch.Tensor], observe: Callable[[int, torch.Tensor], None]) -> torch.Tensor:
        expected = [0]  # the block whose call comes next
        shape: list[torch.Size] = []

        def fail(i: int, problem: str) -> BlockError:
            return BlockError(f"block {i} ({type(modules[i]).__name__}, {blocks.names[i]}) {problem}")

        def pre(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
            i = index[id(module)]
            if i != expected[0]:
                raise fail(i, f"was called when block {expected[0]} was due (each block runs once, in order)")
            where = hidden_argument(module, args, kwargs)
            if where is None:
                raise fail(i, "was called with no tensor hidden state (first positional argument or hidden_states=)")
            h = args[where] if isinstance(where, int) else kwargs[where]
            if i == 0:
                shape.append(h.shape)
                torch.set_grad_enabled(True)  # from block 0 on the graph is recorded (restored when the forward ends)
                h0 = enter(h)
                if isinstance(where, int):
                    return (h0, *args[1:]), kwargs
                return args, {**kwargs, where: h0}
            if h.shape != shape[0]:
                raise fail(i, f"got a hidden state of shape {tuple(h.shape)}, block 0 got {tuple(shape[0])}: a ratio across a shape change compares different tensors")
            observe(i, h)
            return None

        def post(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            i = index[id(module)]
            expected[0] = i + 1
            if i == n - 1:
                y = hidden_state(output)
                if y is None:
                    raise fail(i, f"returned {type(output).__name__} with no tensor hidden state")
                if y.shape != shape[0]:
                    raise fail(i, f"returned a hidden state of shape {tuple(y.shape)}, block 0 got {tuple(shape[0])}: a ratio across a shape change compares different tensors")
                raise _Stop(y)

        handles = [m.register_forward_pre_hook(pre, with_kwargs=True) for m in modules]
        handles += [m.register_forward_hook(post) for m in modules]
        try:
            with torch.no_grad():
                run_model(model, inputs)
        except _Stop as stop:
            return stop.y
        except (CaseError, torch.OutOfMemoryError):  # a block's own error above, the time limit, or a device out of memory
            raise
        except Exception as exc:
            what = " ".join(f"{type(exc).__name__}: {exc}".split())
            raise BlockError(f"the forward of {type(model).__name__} failed: {what}") from exc
        finally:
            for handle in handles:
                handle.remove()
        raise BlockError(f"the forward of {type(model).__name__} returned before block {expected[0]} of {n} ({blocks.describe()}) ran")

    return forward


def _device(model: nn.Module, inputs: ModelInputs) -> torch.device:
    values = list(inputs.values()) if isinstance(inputs, Mapping) else list(inputs) if isinstance(inputs, tuple) else [inputs]
    for v in values:
        if isinstance(v, torch.Tensor):
            return v.device
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def probe_model(
    model: nn.Module,
    inputs: ModelInputs,
    *,
    blocks: str | Sequence[nn.Module] | Blocks | None = None,
    loss: Literal["projection", "sum", "mse"] = "projection",
    seed: int = 0,
    target: torch.Tensor | None = None,
    observers: Sequence[BoundaryObserver] = (),
    rng_seed: int | None = None,
) -> Measurements:
    """Probe `model` called on `inputs` at its blocks' boundaries, in one forward and one backward
    pass of the model's own forward (the module docstring).

    `blocks`: None to discover them (`stability.families.discover`), a path (`"encoder.layer"`,
    `"layer3[1:]"`) or the modules to check and use, or a `Blocks` already discovered (no trace).
    Boundary 0 is the tensor that reaches block 0 (the gradient's leaf), boundary L the hidden
    state block L−1 returns; the loss (`probe.probe`'s `loss`, `seed`, `target`) is on it. The
    parameters reported are the blocks', named `"{i}.{name}"` by the block's place; the model's
    buffers and flags are put back afterwards and the global generators forked and seeded, as
    `probe` does."""
    found = blocks if isinstance(blocks, Blocks) else discover(model, inputs, blocks=blocks).blocks
    modules = list(found.modules)
    forward = model_forward(model, inputs, found)

    def body(named: list[tuple[str, nn.Parameter]]) -> Measurements:
        return measure_pass(forward, modules, named, loss=loss, seed=seed, target=target, observers=observers)

    return prepared(modules, body, named_root=None, also=[model], device=_device(model, inputs), seed=seed, rng_seed=rng_seed)
