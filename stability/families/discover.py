"""Where a model keeps its repeated blocks, found by running it once.

A library model (a transformers `*Model`, a timm or torchvision network) holds its blocks in an
`nn.ModuleList` or `nn.Sequential`: GPT-2's `h`, Llama's `layers`, BERT's `encoder.layer`, T5's
`encoder.block`, Swin's `encoder.layers.k.blocks`, ResNet's `layer3`. `discover` finds them with
no per-family table:

1. **Candidates, from the module tree.** Every maximal run of consecutive children of one class in
   an `nn.ModuleList` or `nn.Sequential` (the plain containers themselves are walked into, never
   taken as blocks).
2. **One run of the model, without gradient** (`trace`), in eval mode, its flags and the global
   generator put back afterwards, with hooks on the candidates only: each call's hidden state in
   (`hidden_argument`) and out (`adapters.hidden_state`).
3. **The hidden state's path.** A run is cut into segments where each block is called exactly
   once, takes as its hidden state the very tensor the block before it returned (so nothing runs
   between two probed blocks), and returns a hidden state of the shape it took. A block that
   changes the shape (a CNN stage's first block, a Swin stage's patch merging, a
   `ConvNextStage`) is a *transition*: it ends a segment and is never inside one, so no ratio is
   taken between tensors of two shapes.
4. **The choice.** The segment with the most blocks; ties go to a class the library marks as a
   block (transformers' `_no_split_modules`), then to a container named like one
   (`adapters.BLOCK_ATTRIBUTES`), then to the one that runs first (BART's encoder before its
   decoder). `Discovery.stages` lists every segment of the chosen class in the order they run
   (ResNet's or Swin's stages), so a caller can probe each stage on its own.

Explicit blocks (`blocks="encoder.stages.1.layers"`, a slice `"layer3[1:]"`, or the modules
themselves) skip step 4 and must form one segment; otherwise `DiscoveryError` says which block
breaks it and why (the shape change, a second call, a tensor that did not come from the block
before).
"""

from __future__ import annotations

import inspect
import re
import typing
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from stability.errors import BlockError, CaseError, StabilityError
from stability.families.adapters import BLOCK_ATTRIBUTES, hidden_state

__all__ = [
    "Blocks",
    "Discovery",
    "DiscoveryError",
    "ModelInputs",
    "ModelRun",
    "block_runs",
    "discover",
    "holds_blocks",
    "inputs_to",
    "run_model",
    "hidden_argument",
    "trace",
]

#: What a model is called with: keyword arguments (`model(**inputs)`), positional ones, or one tensor.
ModelInputs = Mapping[str, Any] | tuple[Any, ...] | torch.Tensor

_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


class DiscoveryError(StabilityError):
    """The model's blocks cannot be probed as asked: the message names the block and the reason.
    (A forward that fails on its inputs is a `BlockError` instead: that case fails.)"""


@dataclass(frozen=True, kw_only=True)
class Blocks:
    """A run of blocks on the hidden state's path: `modules[i]` is block i, at `names[i]` in the
    model; `shape` is the hidden state's shape at every boundary (from the traced run)."""

    modules: tuple[nn.Module, ...]
    names: tuple[str, ...]
    shape: tuple[int, ...]

    def describe(self) -> str:
        """`encoder.layer.0..2 (3 x BertLayer)`."""
        first, last = self.names[0], self.names[-1]
        span = first if len(self.names) == 1 else f"{first}..{last.rsplit('.', 1)[-1]}"
        return f"{span} ({len(self.modules)} x {type(self.modules[0]).__name__})"


@dataclass(frozen=True, kw_only=True)
class ModelRun:
    """A whole model, what it is called with, and the blocks on its hidden state's path: a network
    the probe measures through the model's own forward (`stability.measure.forward`), hooks at the
    blocks' boundaries, instead of calling the blocks one after another. `rescaled`: the factor
    the init rule multiplied each parameter by (by its name in the model;
    `stability.families.library_build`), so the library's own init can be read back."""

    model: nn.Module
    inputs: ModelInputs
    blocks: Blocks
    rescaled: Mapping[str, float] = field(default_factory=dict)

    @property
    def token_inputs(self) -> bool:
        """Whether the model is called with token ids (one integer tensor, or `input_ids`) or with
        `inputs_embeds` (drawn at its embedding's scale): x₀ is then its own embedding's output."""
        if isinstance(self.inputs, torch.Tensor):
            return not self.inputs.is_floating_point()
        return isinstance(self.inputs, Mapping) and ("input_ids" in self.inputs or "inputs_embeds" in self.inputs)


@dataclass(frozen=True)
class Discovery:
    """The blocks to probe, every stage of the same class (in the order they run), and each
    transition found (a block whose output shape differs from its input's)."""

    blocks: Blocks
    stages: tuple[Blocks, ...]
    transitions: tuple[str, ...] = field(default=())


@dataclass
class _Call:
    order: int  # the call's place among all the traced calls
    shape_in: tuple[int, ...]  # () when the call carries no tensor hidden state
    source: int | None  # id() of the traced module whose output this call's hidden state is, if any
    shape_out: tuple[int, ...] | None = None


@dataclass(frozen=True)
class _Run:
    modules: tuple[nn.Module, ...]
    names: tuple[str, ...]
    marked: bool  # the library names the class a block (`_no_split_modules`)
    attribute: bool  # the container's attribute is one of BLOCK_ATTRIBUTES


_FIRST_PARAMETER: dict[type, str | None] = {}


def hidden_argument(module: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> int | str | None:
    """Where a block's call carries its hidden state: 0 when the first positional argument is a
    tensor; else the keyword of the block's first `forward` parameter, or `hidden_states`, when it
    holds a tensor; None when the call has no tensor there."""
    if args and isinstance(args[0], torch.Tensor):
        return 0
    cls = type(module)
    if cls not in _FIRST_PARAMETER:
        try:
            params = [
                p.name
                for p in inspect.signature(module.forward).parameters.values()
                if p.kind is not inspect.Parameter.VAR_KEYWORD
            ]
        except (TypeError, ValueError):
            params = []
        _FIRST_PARAMETER[cls] = params[0] if params else None
    for name in (_FIRST_PARAMETER[cls], "hidden_states"):
        if name is not None and isinstance(kwargs.get(name), torch.Tensor):
            return name
    return None


def inputs_to(inputs: ModelInputs, *, device: torch.device, dtype: torch.dtype) -> ModelInputs:
    """`inputs` on `device`, floating-point tensors in `dtype` (token ids and masks keep theirs)."""

    def move(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return v.to(device=device, dtype=dtype) if v.is_floating_point() else v.to(device=device)
        return v

    if isinstance(inputs, Mapping):
        return {k: move(v) for k, v in inputs.items()}
    if isinstance(inputs, tuple):
        return tuple(move(v) for v in inputs)
    return typing.cast(torch.Tensor, move(inputs))


def run_model(model: nn.Module, inputs: ModelInputs) -> Any:
    """Call the model on its inputs: keyword arguments, positional arguments, or one tensor."""
    if isinstance(inputs, Mapping):
        return model(**inputs)
    if isinstance(inputs, tuple):
        return model(*inputs)
    return model(inputs)


def _candidates(model: nn.Module) -> list[_Run]:
    """Every maximal run of consecutive same-class children of an nn.ModuleList or nn.Sequential."""
    marked = set(getattr(model, "_no_split_modules", None) or ())
    runs: list[_Run] = []
    for path, parent in model.named_modules():
        if not isinstance(parent, (nn.Sequential, nn.ModuleList)):
            continue
        attribute = path.rsplit(".", 1)[-1] in BLOCK_ATTRIBUTES
        children = [(f"{path}.{n}" if path else n, c) for n, c in parent.named_children() if type(c) not in _CONTAINERS]
        start = 0
        for i in range(1, len(children) + 1):
            if i == len(children) or type(children[i][1]) is not type(children[start][1]):
                group = children[start:i]
                if group:
                    runs.append(
                        _Run(
                            tuple(c for _, c in group),
                            tuple(n for n, _ in group),
                            type(group[0][1]).__name__ in marked,
                            attribute,
                        )
                    )
                start = i
    return runs


def block_runs(model: nn.Module) -> list[_Run]:
    """Every run of blocks `discover` considers, before tracing: maximal runs of consecutive
    same-class children of an nn.ModuleList or nn.Sequential (`.modules`, `.names`; `.marked`:
    of a class the library marks as a block)."""
    return _candidates(model)


def holds_blocks(module: nn.Module, *, min_run: int = 2) -> bool:
    """Whether `module` is a whole model rather than one block: it holds, in an nn.ModuleList or
    nn.Sequential, `min_run` or more consecutive children of one class that is neither torch's nor
    this package's (transformers' layers, timm's and torchvision's blocks, a user's blocks), or a
    run of a class the library marks as a block (transformers' `_no_split_modules`, so a depth-1
    model counts). A block of torch layers (`nn.Sequential(nn.Linear(…), nn.Linear(…))`) or of
    this package is not one."""
    if isinstance(module, _CONTAINERS):
        return False
    return any(
        (len(run.modules) >= min_run or run.marked)
        and not type(run.modules[0]).__module__.startswith(("torch.", "stability."))
        for run in _candidates(module)
    )


def trace(model: nn.Module, inputs: ModelInputs, modules: Sequence[nn.Module]) -> dict[int, list[_Call]]:
    """Run the model once without gradient, in eval mode (its flags and the global generator put
    back), recording each call of `modules`, keyed by `id(module)`: its hidden state's shape in
    and out, and which traced module returned the tensor it took (a weak reference to each
    output tells a live tensor from a new one at a reused address)."""
    calls: dict[int, list[_Call]] = {id(m): [] for m in modules}
    outputs: dict[
        int, tuple[weakref.ref[torch.Tensor], int]
    ] = {}  # id(tensor) -> (the tensor, the module that returned it)
    counter = [0]

    def pre(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        where = hidden_argument(module, args, kwargs)
        h = None if where is None else (args[where] if isinstance(where, int) else kwargs[where])
        counter[0] += 1
        if h is None:
            calls[id(module)].append(_Call(counter[0], (), None))
            return
        ref, source = outputs.get(id(h), (None, None))
        calls[id(module)].append(_Call(counter[0], tuple(h.shape), source if ref is not None and ref() is h else None))

    def post(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        out = hidden_state(output)
        if out is not None:
            calls[id(module)][-1].shape_out = tuple(out.shape)
            outputs[id(out)] = (weakref.ref(out), id(module))

    flags = [(m, m.training) for m in model.modules()]
    handles = []
    try:
        for m in {id(m): m for m in modules}.values():
            handles.append(m.register_forward_pre_hook(pre, with_kwargs=True))
            handles.append(m.register_forward_hook(post))
        model.eval()
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            run_model(model, inputs)
    except (CaseError, torch.OutOfMemoryError):  # the time limit, or a device out of memory
        raise
    except Exception as exc:  # this case's model does not run on its inputs: the case fails, as in the probe's own pass
        what = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise BlockError(f"the forward of {type(model).__name__} failed on its inputs: {what}") from exc
    finally:
        for handle in handles:
            handle.remove()
        for m, flag in flags:
            m.training = flag
    return calls


def _segments(run: _Run, calls: Mapping[int, list[_Call]]) -> tuple[list[Blocks], list[str], list[str]]:
    """(segments, transitions, breaks) of a run: the maximal chained, shape-preserving pieces, the
    blocks that change the hidden state's shape, and why each other cut was made."""
    segments: list[Blocks] = []
    transitions: list[str] = []
    breaks: list[str] = []
    current: list[int] = []

    def close() -> None:
        if current:
            shape = calls[id(run.modules[current[0]])][0].shape_in
            segments.append(
                Blocks(
                    modules=tuple(run.modules[i] for i in current),
                    names=tuple(run.names[i] for i in current),
                    shape=shape,
                )
            )
            current.clear()

    for i, module in enumerate(run.modules):
        name = f"{run.names[i]} ({type(module).__name__})"
        made = calls[id(module)]
        if len(made) != 1:
            close()
            breaks.append(f"{name} ran {len(made)} times in one forward (a probed block runs once)")
            continue
        call = made[0]
        if not call.shape_in or call.shape_out is None:
            close()
            breaks.append(
                f"{name} has no tensor hidden state {'in its arguments' if not call.shape_in else 'in what it returns'}"
            )
            continue
        if call.shape_out != call.shape_in:
            close()
            transitions.append(f"{name} maps {call.shape_in} to {call.shape_out}")
            continue
        if current:
            before = run.modules[current[-1]]
            if call.source != id(before):
                close()
                breaks.append(
                    f"{name} does not take the tensor {run.names[i - 1]} returned (something runs between them)"
                )
        current.append(i)
    close()
    return segments, transitions, breaks


def _explicit(model: nn.Module, blocks: str | Sequence[nn.Module]) -> _Run:
    """The run a caller named: a path (optionally with a slice, `layer3[1:]`), or the modules."""
    names_of = {id(m): n for n, m in model.named_modules()}
    if isinstance(blocks, str):
        match = re.fullmatch(r"([\w.]*?)(?:\[(-?\d*):(-?\d*)\])?", blocks.strip())
        path = match.group(1) if match else blocks
        try:
            container = model.get_submodule(path)
        except AttributeError:
            raise DiscoveryError(f"blocks = {blocks!r}: {type(model).__name__} has no submodule {path!r}") from None
        if not isinstance(container, (nn.Sequential, nn.ModuleList)):
            raise DiscoveryError(
                f"blocks = {blocks!r} is a {type(container).__name__}, not an nn.ModuleList or nn.Sequential of blocks"
            )
        items = [(f"{path}.{n}" if path else n, c) for n, c in container.named_children()]
        if match and match.group(2) is not None:
            lo, hi = (int(g) if g else None for g in (match.group(2), match.group(3)))
            items = items[lo:hi]
        if not items:
            raise DiscoveryError(f"blocks = {blocks!r} holds no blocks")
        return _Run(tuple(c for _, c in items), tuple(n for n, _ in items), True, True)
    modules = tuple(blocks)
    missing = [type(m).__name__ for m in modules if id(m) not in names_of]
    if missing or not modules:
        raise DiscoveryError(
            f"blocks: {', '.join(missing) or 'nothing'} {'is' if len(missing) == 1 else 'are'} not part of the model"
        )
    return _Run(modules, tuple(names_of[id(m)] for m in modules), True, True)


def discover(model: nn.Module, inputs: ModelInputs, *, blocks: str | Sequence[nn.Module] | None = None) -> Discovery:
    """The blocks to probe in `model` called on `inputs` (the rules in the module docstring)."""
    runs = [_explicit(model, blocks)] if blocks is not None else _candidates(model)
    if not runs:
        raise DiscoveryError(
            f"{type(model).__name__} holds no nn.ModuleList or nn.Sequential of blocks; name its blocks, e.g. "
            "blocks = 'encoder.layer'"
        )
    calls = trace(model, inputs, [m for run in runs for m in run.modules])
    found: list[tuple[_Run, Blocks]] = []
    transitions: list[str] = []
    breaks: list[str] = []
    for run in runs:
        segments, moved, why = _segments(run, calls)
        found += [(run, s) for s in segments]
        transitions += moved
        breaks += why
    if blocks is not None:
        if len(found) != 1 or len(found[0][1].modules) != len(runs[0].modules):
            problems = transitions + breaks
            hint = f"; probe one stage at a time, e.g. {found[0][1].describe()}" if found else ""
            raise DiscoveryError(
                f"blocks = {_show(blocks)} are not one run of shape-preserving blocks on the hidden state's "
                f"path: {'; '.join(problems[:3])}{hint}"
            )
    if not found:
        raise DiscoveryError(
            f"{type(model).__name__}: no block keeps the hidden state's shape on its path "
            f"({'; '.join((transitions + breaks)[:3])})"
        )

    def first_call(item: tuple[_Run, Blocks]) -> int:
        return calls[id(item[1].modules[0])][0].order

    run, chosen = min(
        found, key=lambda item: (-len(item[1].modules), not item[0].marked, not item[0].attribute, first_call(item))
    )
    cls = type(chosen.modules[0])
    stages = tuple(s for _, s in sorted((item for item in found if type(item[1].modules[0]) is cls), key=first_call))
    return Discovery(chosen, stages, tuple(transitions))


def _show(blocks: str | Sequence[nn.Module]) -> str:
    return repr(blocks) if isinstance(blocks, str) else f"[{', '.join(type(m).__name__ for m in blocks)}]"
