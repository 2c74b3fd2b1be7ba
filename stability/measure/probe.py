"""Stage 4: blocks and an input → `Measurements`, from one forward and one backward pass.

Boundary l is the input of block l (l = 0 … L−1) and boundary L is the output of the stack.
During the forward pass each boundary tensor gets its statistics reduced to a few scalars and a
gradient hook that reduces its gradient to one norm; nothing else about it is kept, so the probe
holds no activation beyond what autograd saves anyway. A single `torch.autograd.grad` call then runs the
one backward pass and returns the parameter gradients, reduced to norms a group at a time
(`param_norms.param_grad_norms`), the large ones by hooks as autograd produces them.

What happens at each boundary, and when the scalars reach the host, is
`stability.measure.boundaries`: on the CPU they are read as they come (free there), which lets
each accuracy fallback be decided while its tensor is at hand; on a device everything stays there
in float64 until the pass's one read at the end (no synchronisation inside the pass). docs/performance.md has the
measurements behind both.

This module is the entry: `probe` and `probe_network` pick the forward (a stack's blocks one after
another, `blocks_forward`; a whole model's own, `stability.measure.forward`), and the pass itself,
the same for both, is `stability.measure.probe_pass`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from stability.allocator import tune_malloc
from stability.errors import BlockError, CaseError
from stability.families.adapters import CallKwargs, Stack, find_blocks, hidden_state, resolve_call_kwargs
from stability.families.build import Network
from stability.families.discover import holds_blocks
from stability.measure.boundaries import BoundaryObserver
from stability.measure.forward import probe_model
from stability.measure.measurements import Measurements
from stability.measure.probe_pass import Forward, measure_pass, prepared

__all__ = ["Measurements", "BoundaryObserver", "probe", "probe_network", "blocks_forward", "block_list"]


def block_list(blocks: nn.Module | Iterable[nn.Module] | Stack) -> list[nn.Module]:
    """The blocks of a stack, a Sequential, a ModuleList, one module or an iterable of them."""
    if isinstance(blocks, Stack):
        found = find_blocks(blocks)
        if found is None:
            raise TypeError(
                f"Stack.blocks is a {type(blocks.blocks).__name__}: give an nn.Sequential, an nn.ModuleList "
                "or a module with .blocks/.layers/.layer/.h/.block"
            )
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
    of modules, or a `stability.Stack` (its `embedding` is applied to `x` when `x` holds token ids,
    then its `stem`, both without gradient, and its `call_kwargs` are used). A whole model (a module
    holding a run of blocks, `stability.families.discover.holds_blocks`: GPT2Model, LlamaModel, a
    timm or torchvision network) is probed through its own forward, `x` being what it is called with
    (a tensor, or a mapping of keyword arguments such as `{"input_ids": ids}`): its blocks are
    discovered and measured at their boundaries with hooks
    (`stability.measure.forward.probe_model`); any other module is one block. Each block is called
    as `block(h, **call_kwargs)` and the hidden state taken from its result by
    `stability.families.adapters.hidden_state` (a tensor; else `last_hidden_state` or
    `hidden_states`; else element 0 of a tuple or list). `loss="projection"` backpropagates
    L = Σ y⊙r with r ~ N(0, 1) from `seed`; `"sum"` uses L = Σ y; `"mse"` uses
    L = mean((y − target)²). `grad_norm[l]` is the norm of the gradient that flows back through
    boundary l to the blocks before it: the sum over every use of the boundary, after any hook a
    block set on that tensor (a block that clips the gradient through its input reports the clipped
    one), and 0 where no gradient reaches it. With `checkpoint_every = N > 0`, blocks run in
    checkpointed segments of N (recomputed during the backward pass): same numbers, less memory.
    `observers` add opt-in measurements (`BoundaryObserver`); their results land in `.extra`.

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
    if isinstance(blocks, nn.Module) and holds_blocks(
        blocks
    ):  # a whole model: probed through its own forward, `x` its inputs
        if call_kwargs is not None or checkpoint_every:
            raise ValueError(
                f"probe({type(blocks).__name__}, …) runs the model's own forward, which passes its blocks "
                "what they need: call_kwargs and checkpoint_every do not apply"
            )
        return probe_model(blocks, x, loss=loss, seed=seed, target=target, observers=observers, rng_seed=rng_seed)
    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"probe(blocks, x): x is a {type(x).__name__}; blocks called one after another take a tensor (a "
            "whole model takes a mapping of its inputs)"
        )
    stem: nn.Module | None = None
    embedding: Callable[[torch.Tensor], torch.Tensor] | None = None
    if isinstance(blocks, Stack):
        stem, embedding = blocks.stem, blocks.embedding
        call_kwargs = blocks.call_kwargs if call_kwargs is None else call_kwargs
    modules = block_list(blocks)

    def body(named: list[tuple[str, nn.Parameter]]) -> Measurements:
        h = x
        if embedding is not None and not (h.is_floating_point() or h.is_complex()):  # token ids
            with torch.no_grad():
                h = embedding(h)
        if stem is not None:
            with torch.no_grad():
                h = stem(h)
        kwargs = resolve_call_kwargs(call_kwargs, h)
        return measure_pass(
            blocks_forward(modules, h, kwargs, checkpoint_every=checkpoint_every),
            modules,
            named,
            loss=loss,
            seed=seed,
            target=target,
            observers=observers,
        )

    return prepared(
        modules,
        body,
        named_root=_naming_root(blocks),
        also=[stem] if stem is not None else [],
        device=x.device,
        seed=seed,
        rng_seed=rng_seed,
    )


def blocks_forward(
    modules: list[nn.Module], x: torch.Tensor, kwargs: dict[str, Any], *, checkpoint_every: int = 0
) -> Forward:
    """The forward of a stack of blocks called one after another, `block(h, **kwargs)`, on `x`;
    with `checkpoint_every = N > 0` in checkpointed segments of N blocks (recomputed during the
    backward pass, when `observe` ignores them)."""
    n = len(modules)

    def forward(
        enter: Callable[[torch.Tensor], torch.Tensor], observe: Callable[[int, torch.Tensor], None]
    ) -> torch.Tensor:
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
                    raise BlockError(
                        f"block {i} ({type(modules[i]).__name__}) failed on an input of shape {tuple(h.shape)}: {what}"
                    ) from exc
                found = out if isinstance(out, torch.Tensor) else hidden_state(out)
                if found is None:
                    raise BlockError(
                        f"block {i} ({type(modules[i]).__name__}) returned {type(out).__name__} with no "
                        "tensor hidden state "
                        "(a tensor; else last_hidden_state or hidden_states; else element 0 of a tuple or list)"
                    )
                h = found
            return h

        h = enter(x)
        if checkpoint_every and checkpoint_every < n:
            tune_malloc()  # deep checkpointed stacks: keep freed activations from piling up (stability/allocator.py)

            for start in range(0, n, checkpoint_every):
                h = checkpoint(run, h, start, min(start + checkpoint_every, n), use_reentrant=False)
            recomputing[0] = True  # the backward pass recomputes the segments: errors there are checkpoint's own
            return h
        return run(h, 0, n)

    return forward


def probe_network(
    net: Network,
    x: torch.Tensor | None,
    *,
    loss: Literal["projection", "sum", "mse"] = "projection",
    seed: int = 0,
    checkpoint_every: int = 0,
    rng_seed: int | None = None,
    observers: Sequence[BoundaryObserver] = (),
) -> Measurements:
    """Probe a built network: through its model's own forward when it carries one (`net.model`;
    `x` is then unused), else its blocks called one after another on `x` (after the stem) with
    its `call_kwargs`. What the engine and the seed ensembles call for every network."""
    if net.model is not None:
        run = net.model
        return probe_model(
            run.model, run.inputs, blocks=run.blocks, loss=loss, seed=seed, observers=observers, rng_seed=rng_seed
        )
    if x is None:
        raise ValueError("a network of blocks is probed on an input tensor x")
    return probe(
        net.blocks,
        x,
        loss=loss,
        seed=seed,
        checkpoint_every=checkpoint_every,
        call_kwargs=net.call_kwargs,
        rng_seed=rng_seed,
        observers=observers,
    )
