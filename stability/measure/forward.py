"""A model's own forward as the probe's pass: hooks at its blocks' boundaries, nothing re-wired.

`model_forward` is a `probe_pass.Forward` that calls the model itself (`model(**inputs)`), so every
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
and one backward pass (`probe_pass.measure_pass` inside `probe_pass.prepared`); `stability.measure.probe`
turns to it for a whole model and for a built network that carries one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import torch
from torch import nn

from stability.errors import BlockError, CaseError
from stability.families.adapters import hidden_state
from stability.families.discover import Blocks, ModelInputs, ModelRun, discover, hidden_argument, run_model
from stability.measure.boundaries import BoundaryObserver
from stability.measure.init_stats import remember_moments
from stability.measure.measurements import Measurements
from stability.measure.probe_pass import Forward, measure_pass, prepared

__all__ = ["model_forward", "probe_model", "lesion_changes_in_model", "with_hidden"]


class _Stop(BaseException):
    """Raised by the hook on the last block, caught by `model_forward`: the model's forward ends there."""

    def __init__(self, y: torch.Tensor) -> None:
        super().__init__()
        self.y = y


def model_forward(model: nn.Module, inputs: ModelInputs, blocks: Blocks, *, grad: bool = True) -> Forward:
    """The model's own forward on `inputs`, measured at the boundaries of `blocks` (with `grad`
    False, no graph is recorded from block 0 on either)."""
    modules = blocks.modules
    index = {id(m): i for i, m in enumerate(modules)}
    n = len(modules)

    def forward(
        enter: Callable[[torch.Tensor], torch.Tensor], observe: Callable[[int, torch.Tensor], None]
    ) -> torch.Tensor:
        expected = [0]  # the block whose call comes next
        shape: list[torch.Size] = []

        def fail(i: int, problem: str) -> BlockError:
            return BlockError(f"block {i} ({type(modules[i]).__name__}, {blocks.names[i]}) {problem}")

        def pre(
            module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
            i = index[id(module)]
            if i != expected[0]:
                raise fail(i, f"was called when block {expected[0]} was due (each block runs once, in order)")
            where = hidden_argument(module, args, kwargs)
            if where is None:
                raise fail(i, "was called with no tensor hidden state (first positional argument or hidden_states=)")
            h = args[where] if isinstance(where, int) else kwargs[where]
            if i == 0:
                shape.append(h.shape)
                torch.set_grad_enabled(grad)  # from block 0 on the graph is recorded (restored when the forward ends)
                h0 = enter(h)
                if isinstance(where, int):
                    return (h0, *args[1:]), kwargs
                return args, {**kwargs, where: h0}
            if h.shape != shape[0]:
                raise fail(
                    i,
                    f"got a hidden state of shape {tuple(h.shape)}, block 0 got {tuple(shape[0])}: a ratio "
                    "across a shape change compares different tensors",
                )
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
                    raise fail(
                        i,
                        f"returned a hidden state of shape {tuple(y.shape)}, block 0 got {tuple(shape[0])}: a "
                        "ratio across a shape change compares different tensors",
                    )
                raise _Stop(y)

        handles = [m.register_forward_pre_hook(pre, with_kwargs=True) for m in modules]
        handles += [m.register_forward_hook(post) for m in modules]
        try:
            with torch.no_grad():
                run_model(model, inputs)
        except _Stop as stop:
            return stop.y
        except (
            CaseError,
            torch.OutOfMemoryError,
        ):  # a block's own error above, the time limit, or a device out of memory
            raise
        except Exception as exc:
            what = " ".join(f"{type(exc).__name__}: {exc}".split())
            raise BlockError(f"the forward of {type(model).__name__} failed: {what}") from exc
        finally:
            for handle in handles:
                handle.remove()
        raise BlockError(
            f"the forward of {type(model).__name__} returned before block {expected[0]} of {n} "
            f"({blocks.describe()}) ran"
        )

    return forward


def _device(model: nn.Module, inputs: ModelInputs) -> torch.device:
    values = (
        list(inputs.values())
        if isinstance(inputs, Mapping)
        else list(inputs)
        if isinstance(inputs, tuple)
        else [inputs]
    )
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
    remember_moments(
        model
    )  # a streamed model's parameters read as the pass first makes each block, not made again for init_record

    def body(named: list[tuple[str, nn.Parameter]]) -> Measurements:
        return measure_pass(forward, modules, named, loss=loss, seed=seed, target=target, observers=observers)

    return prepared(
        modules, body, named_root=None, also=[model], device=_device(model, inputs), seed=seed, rng_seed=rng_seed
    )


def with_hidden(output: Any, h: torch.Tensor) -> Any:
    """`output` (what a block returned) with its hidden state (`adapters.hidden_state`) replaced by `h`."""
    if isinstance(output, torch.Tensor):
        return h
    for key in ("last_hidden_state", "hidden_states"):
        if isinstance(output, Mapping) and isinstance(output.get(key), torch.Tensor):
            return type(output)(**{**output, key: h})
        if (
            isinstance(getattr(output, key, None), torch.Tensor)
            and dataclasses.is_dataclass(output)
            and not isinstance(output, type)
        ):
            return dataclasses.replace(output, **{key: h})
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return type(output)([h, *output[1:]])
    raise BlockError(f"cannot pass on a hidden state in place of {type(output).__name__}")


def lesion_changes_in_model(run: ModelRun) -> list[float]:
    """Veit et al.'s lesion (stability.measure.lesion) through the model's own forward: for each
    block l, one more forward of the model in which a forward hook hands block l's input on as its
    output (the block removed, the route around kept), ‖y − y₋ₗ‖ / ‖y‖ at the last block's output
    y; NaN for a block whose output shape differs from its input's. Without gradient, batch-norm
    running statistics left as they were."""
    from stability.measure.jacobian import no_running_stats

    blocks = run.blocks

    def output(removed: int | None) -> torch.Tensor:
        handles = []
        if removed is not None:
            block = blocks.modules[removed]
            seen: list[torch.Tensor] = []

            def keep(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
                where = hidden_argument(module, args, kwargs)
                if where is not None:
                    seen.append(args[where] if isinstance(where, int) else kwargs[where])

            def skip(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> Any:
                return with_hidden(out, seen[-1])

            handles = [
                block.register_forward_pre_hook(keep, with_kwargs=True),
                block.register_forward_hook(skip, with_kwargs=True),
            ]
        try:
            return model_forward(run.model, run.inputs, blocks, grad=False)(lambda h: h, lambda i, h: None)
        finally:
            for handle in handles:
                handle.remove()

    with torch.no_grad(), no_running_stats(run.model), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        y = output(None).double()
        y_norm = float(y.norm())
        out: list[float] = []
        for i in range(len(blocks.modules)):
            try:
                h = output(i).double()
            except BlockError:  # the block changes the hidden state's shape: it cannot be removed
                out.append(math.nan)
                continue
            diff = float((y - h).norm())
            out.append(diff / y_norm if y_norm > 0 else (0.0 if diff == 0 else math.inf))
    return out
