"""What `stability init` reads off the built model before it chooses invariants: one network of a
draft spec, built by the spec's family exactly as a check builds it (in a worker process, so a
factory that crashes, hangs or exits is a failed job, never this process), and its block 0 called
once more on the hidden state it received, with the arguments the model passed it:

- **the hidden state**: block 0's input shape, hence the layer (`(B, T, C)`: tokens; `(B, C, H, W)`:
  conv2d; `(B, H, W, C)`, a channels-last image stream: tokens without the token invariants;
  `(B, C)`: linear) and the width (its channels);
- **where its norms sit** (`stability.run.zoo.parameterisation`, the zoo table's rule: `pre`, `post`,
  `pre + post`, `in branch`, `none`);
- **residual or not**: block 0 with every weight matrix (every parameter of two or more dimensions)
  set to zero, on the same input: a residual block still passes its input on (cosine of its output
  with its input ≥ 0.5: the stream, a norm of it, or a ReLU of a non-negative one), a plain block
  returns its biases;
- **causal or not** (a token stream): the last position of block 0's input changed, then the first;
  a causal block leaves every earlier position of its output unchanged by the last (bit for bit: a
  masked key's weight is exactly 0) and changes later ones by the first, however little (a layer
  scale of 1e-6 leaves a change of that size); a block whose tokens do not mix is neither;
- **layer scale**: the 1-D parameters of block 0 of the hidden state's width whose entries all hold
  one value of size below 0.1 that is not 0 (a norm's weight is 1 and its bias 0; a layer scale's
  gamma is its init value, 1e-5 or 1e-6);
- **init_conformance** and **rank_collapse** (a token stream): whether the judge gives this model
  a verdict (a rule table, or the model's own declared init), and those verdicts.

Everything comes back as plain data (`Survey`). Detection is from the model, never its name.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from stability.errors import CaseError, StabilityError
from stability.run.engine import RunOptions
from stability.run.executor import Job, Outcome, Trace
from stability.run.guard import case_limit, case_threads, time_limit
from stability.spec.case import Case
from stability.spec.schema import Spec

__all__ = ["Survey", "SurveyJob", "survey"]


@dataclass(frozen=True, kw_only=True)
class Survey:
    """The structure of one built network (the module docstring)."""

    layer: str
    hidden: tuple[int, ...]
    width: int
    blocks: int
    names: tuple[str, ...]
    block: str
    model: str
    norm: str
    residual: bool
    causal: bool | None
    layer_scale: tuple[float, ...]
    init_judged: bool
    init_passed: bool
    init_detail: str
    rank_passed: bool | None
    rank_detail: str
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Survey:
        out = dict(data)
        out["hidden"] = tuple(out["hidden"])
        out["layer_scale"] = tuple(out["layer_scale"])
        out["names"] = tuple(out["names"])
        return cls(**out)


class _Stop(BaseException):
    """Ends the model's forward once block 0 has run."""


class Unbuildable(StabilityError):
    """The network cannot be built at all (the factory raises, exits, hangs or returns no blocks;
    the library refuses the config): no other layer is tried."""


def _block_call(net: Any, x: torch.Tensor | None) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any], torch.Tensor]:
    """Block 0, the arguments it was called with in the network's own forward, and its output."""
    from stability.families.adapters import hidden_state, resolve_call_kwargs
    from stability.families.discover import run_model

    block = net.model.blocks.modules[0] if net.model is not None else net.blocks[0]
    seen: dict[str, Any] = {}

    def pre(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        seen["args"], seen["kwargs"] = args, kwargs

    def post(module: nn.Module, args: tuple[Any, ...], out: Any) -> None:
        seen["out"] = hidden_state(out)
        raise _Stop

    handles = [block.register_forward_pre_hook(pre, with_kwargs=True), block.register_forward_hook(post)]
    try:
        with torch.no_grad():
            if net.model is not None:
                run_model(net.model.model, net.model.inputs)
            elif x is not None:
                block(x, **resolve_call_kwargs(net.call_kwargs, x))
    except _Stop:
        pass
    finally:
        for h in handles:
            h.remove()
    if "out" not in seen or seen["out"] is None:
        raise StabilityError("block 0 returned no tensor hidden state")
    return block, seen["args"], dict(seen["kwargs"]), seen["out"]


def _hidden(block: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[int | str, torch.Tensor]:
    from stability.families.discover import hidden_argument

    where = hidden_argument(block, args, kwargs)
    if where is None:
        raise StabilityError(f"block 0 ({type(block).__name__}) was called without a tensor hidden state")
    return where, args[where] if isinstance(where, int) else kwargs[where]


def _call(
    block: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any], where: int | str, h: torch.Tensor
) -> torch.Tensor | None:
    """`block` called as it was, with `h` for its hidden state."""
    from stability.families.adapters import hidden_state

    given, named = list(args), dict(kwargs)
    if isinstance(where, int):
        given[where] = h
    else:
        named[where] = h
    with torch.no_grad():
        return hidden_state(block(*given, **named))


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double().flatten(), b.detach().double().flatten()
    den = float(a.norm() * b.norm())
    return float(a @ b) / den if den > 0 else 0.0


def _residual(block: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any], where: int | str, h: Any) -> bool:
    zeroed = copy.deepcopy(block)
    with torch.no_grad():
        for p in zeroed.parameters():
            if p.dim() >= 2:
                p.zero_()
    out = _call(zeroed, args, kwargs, where, h)
    return out is not None and out.shape == h.shape and _cosine(out, h) >= 0.5


def _moves(
    block: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any], where: int | str, h: Any, *, at: int
) -> tuple[bool, bool] | None:
    """Whether changing position `at` of block 0's input changes its output (before `at`, after it)."""
    changed = h.clone()
    changed[:, at] = changed[:, at] * -3.0 + 1.0
    a, b = _call(block, args, kwargs, where, h), _call(block, args, kwargs, where, changed)
    if a is None or b is None or a.shape != b.shape or a.dim() != 3:
        return None
    scale = 1e-10 * max(float(a.abs().max()), 1e-30)  # below any float32 change: unchanged means bit for bit
    diff = (b - a).double().abs()
    return float(diff[:, :at].max()) > scale if at > 0 else False, (
        float(diff[:, at + 1 :].max()) > scale if at + 1 < a.shape[1] else False
    )


def _causal(
    block: nn.Module, args: tuple[Any, ...], kwargs: Mapping[str, Any], where: int | str, h: Any
) -> bool | None:
    """True: a later token never changes an earlier output, and an earlier one changes later ones;
    False: a later token changes earlier outputs; None: the tokens do not mix at all."""
    first, last = _moves(block, args, kwargs, where, h, at=0), _moves(block, args, kwargs, where, h, at=h.shape[1] - 1)
    if first is None or last is None:
        return None
    if last[0]:
        return False
    return True if first[1] else None


def _layer_scale(block: nn.Module, width: int) -> tuple[float, ...]:
    found = []
    for p in block.parameters():
        if p.dim() == 1 and p.numel() == width and width > 1:
            first = float(p.detach()[0])
            if 0 < abs(first) < 0.1 and bool((p.detach() == p.detach()[0]).all()):
                found.append(first)
    return tuple(sorted(set(found)))


def _layout(h: torch.Tensor, width_hint: int | None) -> tuple[str, int]:
    """(layer, channels) of a hidden state: (B, T, C) tokens, (B, C, H, W) conv2d, (B, H, W, C)
    channels-last (tokens without the token invariants), (B, C) linear."""
    shape = tuple(h.shape)
    if len(shape) == 2:
        return "linear", shape[1]
    if len(shape) == 3:
        return "tokens", shape[2]
    if len(shape) == 4:
        channels_last = shape[1] == shape[2] and shape[3] != shape[1]
        if width_hint is not None:
            channels_last = shape[-1] == width_hint and shape[1] != width_hint
        return ("tokens", shape[3]) if channels_last else ("conv2d", shape[1])
    return "tokens", shape[-1]


def survey(spec: Spec, case: Case) -> Survey:
    """Build the case's network and read its structure (the module docstring)."""
    from stability.families.build import build, network_input
    from stability.run.conclude import judge
    from stability.run.engine import evaluate
    from stability.run.zoo import parameterisation

    t0 = time.perf_counter()
    try:
        net = build(spec, case)
        x = network_input(spec, case, net)
    except Exception as exc:  # the factory's own failure: the same whatever input it is given
        raise Unbuildable(" ".join(f"{exc}".split()) or type(exc).__name__) from exc
    block, args, kwargs, out = _block_call(net, x)
    where, h = _hidden(block, args, kwargs)
    layer, width = _layout(h, None)

    class _Once(nn.Module):  # block 0 called as the network called it: what parameterisation runs
        def __init__(self) -> None:
            super().__init__()
            self.block = block

        def forward(self) -> Any:
            return self.block(*args, **kwargs)

    norm, _, _ = parameterisation(_Once(), {}, block)
    residual = _residual(block, args, kwargs, where, h)
    causal = _causal(block, args, kwargs, where, h) if len(h.shape) == 3 and h.shape[1] > 1 else None
    names = tuple(net.model.blocks.names) if net.model is not None else tuple(str(i) for i in range(len(net.blocks)))
    model = type(net.model.model).__name__ if net.model is not None else type(net.blocks).__name__
    verdict = rank = None
    if spec.expect.init_conformance is not None or spec.expect.rank_collapse is not None:
        record = evaluate(spec, case, RunOptions(case_timeout=None))
        if spec.expect.init_conformance is not None:
            verdict = judge(spec, "init_conformance", record)
        if spec.expect.rank_collapse is not None:
            rank = judge(spec, "rank_collapse", record)
    return Survey(
        layer=layer,
        hidden=tuple(h.shape),
        width=width,
        blocks=len(names),
        names=names,
        block=type(block).__name__,
        model=model,
        norm=norm,
        residual=residual,
        causal=causal,
        layer_scale=_layer_scale(block, width),
        init_judged=verdict is not None and verdict.measured and not math.isnan(verdict.observed),
        init_passed=verdict is not None and verdict.passed,
        init_detail="" if verdict is None else verdict.detail,
        rank_passed=None if rank is None else rank.passed,
        rank_detail="" if rank is None else rank.detail,
        seconds=time.perf_counter() - t0,
    )


@dataclass(frozen=True)
class SurveyJob(Job):
    """`survey` of the first of `specs` (one per layer to try, for a factory whose input is not
    known) whose network builds and runs; the result is the `Survey` and the index of that spec,
    or the reasons every one failed."""

    specs: tuple[Spec, ...]
    case_strings: tuple[str, ...]
    options: RunOptions = dataclasses.field(default_factory=RunOptions)

    @property
    def label(self) -> str:
        return f"{self.specs[0].name} (survey)"

    @property
    def case_timeout(self) -> float | None:
        return case_limit(self.specs[0], self.options.case_timeout)

    def execute(self, emit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        from stability.spec.case import parse_case_string

        reasons = []
        for i, (spec, text) in enumerate(zip(self.specs, self.case_strings, strict=True)):
            case = parse_case_string(text, spec)
            emit({"kind": "start", "case": case.as_dict()})
            try:
                with time_limit(self.case_timeout), case_threads(spec):
                    found = survey(spec, case)
            except (Unbuildable, CaseError) as exc:  # the model itself fails (a time limit among it)
                return {"survey": None, "index": None, "reasons": [" ".join(str(exc).split())]}
            except Exception as exc:  # this layer's input does not fit the network: the next one is tried
                reasons.append(f"as {spec.block.layer}: {' '.join(f'{type(exc).__name__}: {exc}'.split())}")
                continue
            return {"survey": found.to_dict(), "index": i, "reasons": reasons}
        return {"survey": None, "index": None, "reasons": reasons}

    def conclude(self, trace: Trace) -> Outcome:
        if trace.final is None:
            return Outcome(task=self, result=None, error=trace.failure or "the job did not finish")
        found = trace.final["survey"]
        if found is None:
            return Outcome(task=self, result=None, error="; ".join(trace.final["reasons"]) or "nothing was built")
        return Outcome(task=self, result=(Survey.from_dict(found), int(trace.final["index"])), error=None)
