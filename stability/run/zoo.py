"""The zoo: how every library model family behaves at initialisation, from the specs under
`specs/zoo/` (one `family = "library"` spec each, zero lines of Python).

For each spec, `zoo_row` measures on a fixed grid, so the table is a function of the specs and
the code (no search, no randomness beyond the seeds named here):

- **Parameterisation**, read off block 0 of the built model by one forward with hooks: where its
  norms sit (`pre`: a norm reads the block's input itself; `post`: the block returns a norm's
  output; `in branch`: neither, e.g. a ResNet's BatchNorms with the activation after the sum), the
  norm classes and how many a block has, the positional scheme (`_POSITIONS`: markers in the
  module tree and the config), and the init: the library's σ (`initializer_range` where the
  config has one) and the median σ²·fan-in of the block's weight matrices (each branch's gain
  squared, which `block.shipped`'s init rule keeps at the shipped model's value).
- **Verdicts and gradient ratios** at each depth of `depths` (default 4, 8, 16; the verdicts only
  at the depths inside the spec's `space.depth`, where its bands make a claim), on the spec's
  corner case at that depth (`stability.spec.case.corner_case`: its smallest width, batch and
  token count, seed 0), measured and judged as `stability check --case` would.
- **The depth budget** of `gradient_arrival` (the spec's band, or the one-decade band [0.1, 10]
  where the spec declares none): the largest depth up to `max(depths)` at which it holds on both
  seeds 0 and 1, bisected on geometric midpoints by `stability sweep`'s own
  bisection (`run_sweep`, in memory), as `docs/sweeps.md` defines it.

`stability zoo` writes the rows as docs/zoo.md's table (`stability.report.zoo`) and as a page of
the HTML report.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from stability.errors import UsageError
from stability.families.build import build
from stability.families.discover import run_model
from stability.measure.block_form import NormPosition
from stability.run.conclude import judge
from stability.run.engine import RunOptions, evaluate
from stability.run.store import Budget, budget_text
from stability.spec.applicability import not_applicable_reason
from stability.spec.case import corner_case
from stability.spec.load import find_specs, load_spec
from stability.spec.registry import INVARIANTS
from stability.spec.schema import Spec

__all__ = ["ZOO", "DEPTHS", "BUDGET_SEEDS", "ZooRow", "zoo_specs", "zoo_row", "zoo_budget", "parameterisation"]

#: Where the zoo's specs are shipped.
ZOO = Path(__file__).resolve().parents[2] / "specs" / "zoo"
DEPTHS: tuple[int, ...] = (4, 8, 16)
BUDGET_SEEDS = (0, 1)

#: Positional schemes by what marks them: (config attribute that is true, a module class-name
#: part, a parameter or module name part) → the scheme's name. The first match wins.
_POSITIONS: tuple[tuple[str, str, str, str], ...] = (
    ("alibi", "", "", "ALiBi"),
    ("", "", "relative_attention_bias", "relative bias (T5 buckets)"),
    ("relative_attention", "", "rel_embeddings", "relative (DeBERTa, disentangled)"),
    ("", "", "relative_position_bias_table", "relative bias (windows)"),
    ("", "Rotary", "", "rotary"),
    ("", "", "wpe", "learned absolute"),
    ("", "", "position_embeddings", "learned absolute"),
    ("", "", "embed_positions", "learned absolute"),
    ("", "", "pos_embed", "learned absolute"),
)


@dataclass(kw_only=True)
class ZooRow:
    """One family of the zoo (the module docstring)."""

    name: str
    path: str
    library: str
    model: str
    block: str
    norm_position: str
    norms: str
    positions: str
    init: str
    expects: dict[str, str]  # invariant → "holds" / "violated", as the spec declares
    verdicts: dict[str, dict[int, bool | None]] = field(
        default_factory=dict
    )  # invariant → depth → passed (None: n/a or not measured)
    ratios: dict[int, float | None] = field(default_factory=dict)  # depth → ‖∂L/∂x₀‖ / ‖∂L/∂x_L‖
    budget: str = ""
    errors: dict[int, str] = field(default_factory=dict)  # depth → why the case did not run


def zoo_specs(folder: str | Path = ZOO) -> list[Spec]:
    """The zoo's specs, by file name."""
    return [load_spec(p) for p in find_specs([folder])]


def _strip(name: str, prefix: str) -> str:
    """`LlamaRMSNorm` → `RMSNorm` with the model's class prefix `Llama` (what its model and block classes share)."""
    rest = name.removeprefix(prefix)
    return rest if prefix and rest[:1].isupper() else name


def _prefix(model: str, block: str) -> str:
    """The class-name prefix a model and its block share, up to a
    capital (`ConvNext` of `ConvNextModel`, `ConvNextLayer`)."""
    n = len(os.path.commonprefix([model, block]))
    while 0 < n < min(len(model), len(block)) and not (model[n].isupper() and block[n].isupper()):
        n -= 1
    return model[:n]


def parameterisation(model: nn.Module, inputs: Any, block: nn.Module) -> tuple[str, str, str]:
    """(norm position, norm classes with their count, positional scheme) of a built model whose
    blocks are of `type(block)`, from one forward without gradient (the module docstring; the
    position by `stability.measure.block_form.NormPosition`, the rule the probe's entry asks)."""
    reader = NormPosition(block)
    norms = reader.norms

    def block_post(module: nn.Module, args: tuple[Any, ...], out: Any) -> None:
        raise _Stop

    stop = block.register_forward_hook(block_post)  # after the reader's own hook
    try:
        with torch.no_grad():
            run_model(model, inputs)
    except _Stop:
        pass
    finally:
        stop.remove()
        reader.close()
    position = reader.position() or ("in branch" if norms else "none")
    counts: dict[str, int] = {}
    prefix = _prefix(type(model).__name__, type(block).__name__)
    for n in norms:
        label = _strip(type(n).__name__, prefix)
        counts[label] = counts.get(label, 0) + 1
    norm_text = ", ".join(f"{k} ×{v}" for k, v in counts.items()) or "none"
    return position, norm_text, _positions(model)


def _positions(model: nn.Module) -> str:
    config = getattr(model, "config", None)
    names = [n for n, _ in model.named_modules()] + [n for n, _ in model.named_parameters()]
    classes = [type(m).__name__ for m in model.modules()]
    for attribute, cls, name, scheme in _POSITIONS:
        if attribute and not bool(getattr(config, attribute, False)):
            continue
        if cls and not any(cls in c for c in classes):
            continue
        if name and not any(name in n.rsplit(".", 1)[-1] or n.endswith(name) for n in names):
            continue
        if scheme == "rotary":
            share = next(
                (
                    float(v)
                    for v in (getattr(config, k, None) for k in ("partial_rotary_factor", "rotary_pct"))
                    if isinstance(v, (int, float))
                ),
                1.0,
            )
            return scheme if share >= 1 else f"rotary on {share:g} of each head"
        return scheme
    return "none"


class _Stop(BaseException):
    """Ends the parameterisation's forward after block 0."""


def _weights(block: nn.Module) -> list[tuple[nn.Module, torch.Tensor]]:
    from stability.families.library_build import weight_matrices

    return list(weight_matrices(block).values())


def _init_text(model: nn.Module, block: nn.Module) -> str:
    from stability.families.library_build import weight_fans

    gains = [
        float(p.detach().double().pow(2).mean()) * weight_fans(owner, p)[0]
        for owner, p in _weights(block)
        if p.numel() > 1
    ]
    gains = [g for g in gains if g > 0]
    config = getattr(model, "config", None)
    sigma = next(
        (v for v in (getattr(config, k, None) for k in ("initializer_range", "init_std")) if isinstance(v, float)), None
    )
    text = f"σ {sigma:g}, " if isinstance(sigma, float) else ""
    return f"{text}σ²·fan-in {statistics.median(gains):.2g}" if gains else f"{text}zero weights"


def _describe(spec: Spec) -> tuple[str, str, str, str, str, str]:
    """(norm position, norms, positions, init, block class, model class) of the spec's model at its corner case."""
    case = corner_case(spec, depth=max(spec.space.depth[0], 2))
    net = build(spec, case)
    if net.model is None:
        raise UsageError(
            f'{spec.path}: the zoo tabulates models probed through their own forward (family = "library"); '
            f"this spec's family '{spec.family}' builds blocks"
        )
    block = net.model.blocks.modules[0]
    position, norms, positions = parameterisation(net.model.model, net.model.inputs, block)
    return (
        position,
        norms,
        positions,
        _init_text(net.model.model, block),
        type(block).__name__,
        type(net.model.model).__name__,
    )


def zoo_budget(spec: Spec, *, top: int = max(DEPTHS)) -> Budget | None:
    """The depth budget of `gradient_arrival` in [1, top] on `BUDGET_SEEDS` (the module
    docstring): the spec's own band where it declares one, else the one-decade band [0.1, 10],
    the same for every family (a measurement of how far the whole ratio g₀/g_L stays within a
    decade, the embedding's entry included on every model, not a claim of the spec's)."""
    from stability.run.executor import InProcessExecutor
    from stability.run.store import Store
    from stability.run.sweep import run_sweep
    from stability.spec import schema

    declared = spec.expect.gradient_arrival or schema.GradientArrival.model_validate({"include_entry": True})
    spec = spec.model_copy(
        update={"expect": schema.Expect.model_validate({"gradient_arrival": declared})}
    )  # the budget's invariant alone: no other measurement runs
    with Store(":memory:") as store:
        result = run_sweep(
            spec,
            [],
            store,
            InProcessExecutor(),
            seeds=BUDGET_SEEDS,
            depth_range=(1, top),
            invariants=["gradient_arrival"],
            version="zoo",
            case_timeout=None,
        )
    return next(b for b in result.budgets if b.invariant == "gradient_arrival")


def _budget_cell(b: Budget | None) -> str:
    if b is None:
        return "—"
    return "< 1" if b.status == "below" else budget_text(b)


def zoo_row(
    spec: Spec, *, depths: Sequence[int] = DEPTHS, budget: bool = True, on_case: Callable[[str], None] | None = None
) -> ZooRow:
    """The zoo's row of one spec (the module docstring): its cases run in this process."""
    torch.set_num_threads(1)  # the same numbers on every machine: one thread's reduction order
    position, norms, positions, init, block, model = _describe(spec)
    o = spec.options
    library = str(getattr(o, "model", "")).partition(":")[0]
    declared = [(n, e) for n, e in spec.invariants() if not INVARIANTS.get(n).training]
    row = ZooRow(
        name=spec.name,
        path=spec.path,
        library=library,
        model=model,
        block=block,
        norm_position=position,
        norms=norms,
        positions=positions,
        init=init,
        expects={n: e.expect for n, e in declared},
    )
    options = RunOptions(case_timeout=None)
    for depth in depths:
        case = corner_case(spec, depth=depth)
        if on_case is not None:
            on_case(f"{spec.name} depth {depth}")
        inside = spec.space.depth[0] <= depth <= spec.space.depth[1]  # a spec's bands are claims about its own depths
        # beyond them only the ratio is tabulated: the case's own network, no seed ensemble
        record = evaluate(
            spec if inside else spec.model_copy(update={"probe": spec.probe.model_copy(update={"ensemble": 1})}),
            case,
            options,
        )
        if record.error is not None:
            row.errors[depth] = record.error
        m = record.measurements
        row.ratios[depth] = (
            m.gradient_ratio
            if m is not None and m.gradient_ratio is not None and math.isfinite(m.gradient_ratio)
            else None
        )
        for name, _ in declared:
            passed: bool | None = None
            if inside and not_applicable_reason(spec, name, case) is None and m is not None:
                passed = judge(spec, name, record).passed
            row.verdicts.setdefault(name, {})[depth] = passed
    row.budget = _budget_cell(zoo_budget(spec, top=max(depths))) if budget else "—"
    return row


def as_dict(row: ZooRow) -> dict[str, Any]:
    return dataclasses.asdict(row)
