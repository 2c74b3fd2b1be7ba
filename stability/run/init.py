"""`stability init TARGET`: a spec that is right for a model nobody calibrated, measured on it.

1. **The draft** (`stability.run.init_draft`): the model at a reduced width from its registered or
   default config, only the keys the case fills in `block.config`, the registered widths in
   `block.shipped`.
2. **The survey** (`stability.run.init_survey`): one network built and read in a worker: its
   hidden state (token stream, image, vector), where its norms sit, residual or not, causal or
   not, layer scale, and whether `init_conformance` can judge it.
3. **The invariants**, by that structure: a residual stack gets `residual_stream` with its four
   bands (the block change only where the blocks are meant to be near the identity: a layer scale,
   or every block changing the stream by at most 1%); a stack without the identity path gets
   `gradient_arrival`'s band; a token stream `rank_collapse` (where the surveyed network holds it);
   every model `[expect.init_conformance]`, without a table (the judge reads the model's own
   declared init; where it cannot judge the model yet, the spec says so and leaves it out).
4. **The calibration** (`stability.run.calibrate`, the one code path `stability calibrate` runs):
   the seed ensemble at each depth; every band is the measured spread widened by the margin, each
   with its spread, depths, seeds and releases in a comment beside it. `variance_exponent` is the
   p ∈ {0, 1} under which Var(x_L)/Var(x₀)/L^p spreads least over the depths (0: the output's
   variance is bounded in depth, 1: each block adds a fixed amount).
5. **The ci cases**: the two smallest measured depths from 2 up with the zoo's ensemble of 4
   networks, fewer where the networks measured above say the ci run would pass `CI_SECONDS`.
6. **Written, then checked**: the spec goes through `stability check --profile ci`'s path on the
   same executor, and the run's seconds are written beside `ci_cases`.
"""

from __future__ import annotations

import math
import textwrap
import time
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stability.errors import UsageError
from stability.run.bands import Calibration, written_bands
from stability.run.calibrate import Measured, calibrate, measure
from stability.run.engine import RunOptions
from stability.run.executor import Executor, Outcome, Task
from stability.run.init_draft import GENERATED, Draft, InitTarget, draft
from stability.run.init_survey import Survey, SurveyJob
from stability.spec.edit import commented_text, generated_text
from stability.spec.load import validate_spec
from stability.spec.schema import Spec

__all__ = ["CI_SECONDS", "ENSEMBLE", "InitResult", "init"]

#: The most seconds the family's ci run may take (docs/ci.md: the gate runs every spec on every push).
CI_SECONDS = 10.0
#: The seed ensemble a ci case judges the medians of (the zoo's).
ENSEMBLE = 4
#: The largest block change, over every measured network, of blocks meant to be near the identity.
NEAR_IDENTITY = 0.01


@dataclass(kw_only=True)
class InitResult:
    """What `init` did: the file it wrote and its text, what it read off the model, the calibration,
    the check of the written spec (its outcome) and the seconds of each step."""

    path: Path
    text: str
    survey: Survey
    calibration: Calibration
    check: Outcome
    seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _validated(data: Mapping[str, Any], path: Path) -> Spec:
    return validate_spec(dict(data), file=str(path))


def _survey(
    d: Draft, target: InitTarget, path: Path, executor: Executor, options: RunOptions
) -> tuple[Survey, dict[str, Any]]:
    """The survey of the draft, as the first layer whose network builds and runs (a library model's
    from its inputs: images are tried as a conv2d stream first; a factory's: vector, image, token)."""
    from stability.families.library import input_modality, parse_library

    space = {"width": 64, "depth": 1, **d.data["space"]}
    depth = space["depth"]
    at = depth[1] if isinstance(depth, list) else depth  # the deepest: its run of blocks is the longest
    candidates = []
    layers: tuple[str, ...] = ("linear", "conv2d", "tokens")
    if target.kind == "library":
        block = d.data["block"]
        lib = parse_library(block["model"], config=block.get("config", {}), file=str(path), prefix="block.")
        layers = ("tokens",) if input_modality(lib) != "images" else ("conv2d", "tokens")
    for layer in layers:
        data = {**d.data, "space": dict(space), "block": {**d.data["block"], "layer": layer}}
        if layer == "tokens" and "spatial" not in space and target.kind == "factory":
            data["space"]["tokens"] = 8
        if layer == "conv2d" and target.kind == "factory":
            data["space"]["spatial"] = 8
        if layer != "conv2d":
            data["space"].pop("spatial", None)
        data["expect"] = {"init_conformance": {}, **({"rank_collapse": {}} if layer == "tokens" else {})}
        candidates.append((data, _validated(data, path)))
    job = SurveyJob(tuple(s for _, s in candidates), tuple(f"depth={at}" for _ in candidates), options)
    (outcome,) = executor.map([job])
    if outcome.error is not None:
        raise UsageError(
            f"stability init {target.text}: the model could not be built and run: {' '.join(outcome.error.split())}; "
            "nothing was written"
        )
    found, index = outcome.result
    data = candidates[index][0]
    data["space"]["width"] = found.width
    order = ("depth", "width", "batch", "spatial", "tokens")
    data["space"] = {k: data["space"][k] for k in sorted(data["space"], key=lambda k: (order + (k,)).index(k))}
    return found, data


def _expectations(found: Survey) -> dict[str, Any]:
    if found.residual:
        return {"residual_stream": {"variance_exponent": 0.0}}
    return {"gradient_arrival": {}}


def _choose_exponent(measured: Measured, spec: Spec) -> tuple[Spec, Calibration, str]:
    """The variance exponent p ∈ {0, 1} under which the variance band spreads least over depths."""
    best: tuple[float, Spec, Calibration, float] | None = None
    spreads = []
    for p in (0.0, 1.0):
        rs = spec.expect.residual_stream
        assert rs is not None
        variant = spec.model_copy(
            update={
                "expect": spec.expect.model_copy(
                    update={"residual_stream": rs.model_copy(update={"variance_exponent": p})}
                )
            }
        )
        cal = calibrate(measured, spec=variant)
        fit = next(f for f in cal.fits if f.invariant == "residual_stream" and f.number == "variance")
        spread = math.log(fit.most / fit.least) if fit.least > 0 and math.isfinite(fit.most) else math.inf
        spreads.append(
            f"p = {p:g}: max/min {math.exp(spread):.3g}" if math.isfinite(spread) else f"p = {p:g}: undefined"
        )
        if best is None or spread < best[0] - 1e-12:
            best = (spread, variant, cal, p)
    assert best is not None
    why = (
        f"variance_exponent = {best[3]:g}: Var(x_L)/Var(x₀)/L^p spreads least over the depths with it "
        f"({'; '.join(spreads)})"
    )
    return best[1], best[2], why


def _ci(measured: Measured, depths: tuple[int, ...]) -> tuple[list[str], int, float]:
    """(ci_cases, ensemble, the estimated seconds of the ci run) within `CI_SECONDS`."""
    cost, warm = measured.case_seconds()
    chosen = [d for d in depths if d >= 2][:2] or list(depths[:1])
    ensemble = ENSEMBLE
    while True:
        estimate = warm + sum(cost.get(d, 0.0) * ensemble for d in chosen)
        if estimate <= CI_SECONDS or (ensemble == 2 and len(chosen) == 1):
            break
        if ensemble > 2:
            ensemble = 2
        else:
            chosen = chosen[:1]
    return [f"depth={d}" for d in chosen], ensemble, estimate


def _kept(found: Survey, cal: Calibration) -> Callable[[str, str], bool]:
    change = next((f for f in cal.fits if f.number == "change"), None)
    near = bool(found.layer_scale) or (change is not None and change.problem is None and change.most <= NEAR_IDENTITY)

    def keep(invariant: str, key: str) -> bool:
        return key != "max_block_change" or near

    return keep


def _describe(found: Survey) -> str:
    what = {"tokens": "token stream", "conv2d": "image stream", "linear": "vector stream"}[found.layer]
    if found.layer == "tokens" and len(found.hidden) == 4:
        what = "channels-last image stream"
    parts = [
        f"{what} {tuple(found.hidden)}",
        f"norms {found.norm}" if found.norm != "none" else "no norms",
        "residual" if found.residual else "no identity path (not residual)",
    ]
    if found.layer == "tokens" and len(found.hidden) == 3:
        parts.append("tokens do not mix" if found.causal is None else "causal" if found.causal else "not causal")
    parts.append(
        f"layer scale {', '.join(f'{v:g}' for v in found.layer_scale)}" if found.layer_scale else "no layer scale"
    )
    return "; ".join(parts)


def init(
    target: InitTarget,
    path: Path,
    factory: str | None,
    *,
    executor: Executor,
    depths: tuple[int, ...],
    seeds: int,
    case_timeout: float | None,
    write: Callable[[Path, str], None],
    on_step: Callable[[str], None] | None = None,
) -> InitResult:
    """Steps 1–6 of the module docstring; `write(path, text)` writes the spec (atomically, by the
    caller). Raises UsageError or SpecError (exit 2) where the model cannot be built, run or measured."""
    from stability.run.calibrate import calibration_depths, calibration_seeds

    seconds: dict[str, float] = {}
    options = RunOptions(case_timeout=case_timeout)

    def step(name: str) -> None:
        seconds[name] = time.perf_counter()
        if on_step is not None:
            on_step(name)

    step("survey")
    d = draft(target, factory=factory, depths=depths)
    found, data = _survey(d, target, path, executor, options)
    if d.fixed_depth:
        data["space"]["depth"] = found.blocks
    elif d.staged and found.blocks == data["space"]["depth"][1] - 1 and found.names[0].endswith(".1"):
        container = found.names[0].rsplit(".", 1)[0]
        data["block"]["blocks"] = f"{container}[1:]"
        data["space"]["depth"] = [x + 1 for x in data["space"]["depth"]]
        depths = tuple(x + 1 for x in depths)
        d.notes.append(
            f"the stage's first block changes the hidden state's shape, so the probed blocks are the others "
            f"({container}[1:]): the case's depth counts the stage's blocks, one more than are probed"
        )
    data["expect"] = _expectations(found)
    spec = _validated(data, path)
    step("calibration")
    measured_depths = calibration_depths(spec, None if d.fixed_depth else depths)
    measured = measure(
        spec, executor=executor, depths=measured_depths, seeds=calibration_seeds(spec, seeds), options=options
    )
    notes = list(d.notes)
    if found.residual:
        spec, cal, why = _choose_exponent(measured, spec)
        chosen = spec.expect.residual_stream
        assert chosen is not None  # a residual stack's spec declares it (_expectations)
        data["expect"]["residual_stream"]["variance_exponent"] = chosen.variance_exponent
        notes.append(why)
    else:
        cal = calibrate(measured, spec=spec)
    bands = written_bands(cal, keys=_kept(found, cal))
    for key, (value, _) in bands.items():
        _, name, leaf = key.split(".")
        data["expect"][name][leaf] = value
    notes += [f"no band for {f.invariant} {f.label}: {f.problem}" for f in cal.fits if f.problem]
    if found.rank_passed:
        data["expect"]["rank_collapse"] = {}
    elif found.rank_passed is False:
        notes.append(f"rank_collapse left out: it does not hold on the surveyed network ({found.rank_detail})")
    if found.init_judged:
        data["expect"]["init_conformance"] = {}
    else:
        notes.append(f"init_conformance left out: it cannot judge this model yet ({found.init_detail})")
    ci_cases, ensemble, estimate = _ci(measured, measured_depths)
    data["probe"] = {"ensemble": ensemble, "ci_cases": ci_cases}
    text = commented_text(_text(target, data, found, notes, cal, estimate), bands)
    final = _validated(tomllib.loads(text), path)
    step("check")
    write(path, text)
    t0 = time.perf_counter()
    (outcome,) = executor.map([Task(final, RunOptions(profile="ci", case_timeout=case_timeout))])
    took = time.perf_counter() - t0
    note = f"calibrated: the ci run of these cases took {took:.1f} s here (stability init; at most {CI_SECONDS:g} s)"
    text = commented_text(text, {"probe.ci_cases": (ci_cases, note)})
    write(path, text)
    marks = [*seconds.values(), time.perf_counter()]
    seconds = {k: marks[i + 1] - marks[i] for i, k in enumerate(seconds)}
    return InitResult(path=path, text=text, survey=found, calibration=cal, check=outcome, seconds=seconds, notes=notes)


def _text(
    target: InitTarget, data: Mapping[str, Any], found: Survey, notes: list[str], cal: Calibration, estimate: float
) -> str:
    from stability._version import __version__

    header = [
        f"{GENERATED[2:]} {target.text}` (stability {__version__}; {', '.join(cal.releases)}).",
        "Rerun it to regenerate this file (init replaces only a file whose first line is this one);",
        "recalibrate its bands with `stability calibrate SPEC --write`; edit the rest as your own.",
        "",
        f"Read off the built model ({found.model}, block 0 a {found.block}): {_describe(found)}.",
        *(f"- {n}." for n in notes),
        "",
    ]
    spec_notes = {
        "probe": [
            f"ci: the smallest measured depths from 2, each judged on the median of {data['probe']['ensemble']} "
            f"networks (estimated {estimate:.1f} s from the calibration's networks)"
        ],
        "expect.init_conformance": [
            "every parameter's init against what declares this model's init; no table named: the judge chooses"
        ],
    }
    ordered = {
        "name": data["name"],
        "description": f"{target.text} as stability init found it: {_describe(found)}",
        "family": data["family"],
        "block": data["block"],
        "space": data["space"],
        "probe": data["probe"],
        "expect": data["expect"],
    }
    wrapped = [part for line in header for part in (textwrap.wrap(line, 100, subsequent_indent="  ") or [""])]
    return generated_text(ordered, header=wrapped, notes=spec_notes)
