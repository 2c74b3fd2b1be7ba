"""Calibration: the bands of a spec's invariants, set from the family's own numbers.

A band (`stability.spec.registry.Band`: `residual_stream`'s g₁/g_L, g₀/g₁, Var(x_L)/Var(x₀)/L^p
and block change, `gradient_arrival`'s ratio, `variance_growth`'s smallest and largest ratio; a
plugin's invariant declares its own) describes what an architecture's init does, so it is measured,
not guessed. docs/zoo.md calibrated its families by hand; this is that method as one computation,
which `stability calibrate` prints (and writes with `--write`) and `stability init` writes:

1. **The networks.** At each depth of the spec's space (default 1, 2, 4, 8, those the space admits),
   the spec's corner case (`corner_case`: its smallest width, batch and tokens) with each of
   `seeds` seeds: the first members of the corner seed's ensemble (`ensemble_seeds`), so the
   networks `stability check` judges at that seed are among them. Each is built and probed exactly as
   `stability check --case` does (`stability.run.engine.evaluate`, under the per-case limits), in
   one job per worker of the executor (a worker process each: a factory that crashes, hangs or
   exits fails its job, never this process), with the seed ensemble off: every network is one sample.
2. **The numbers.** Each declared invariant with bands is judged on every network by its own judge
   (`stability.run.conclude.judge`), and each band's number read off the verdict (`Band.values`).
3. **The band** the spread sets (`stability.run.bands`): [min / 1.25, max × 1.25] over every depth
   and seed, rounded outward to two significant digits.

Nothing here writes a file: `stability.cli.calibrate` and `stability.run.init` do.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from stability.errors import SpecError, StabilityError, UsageError
from stability.run.bands import MARGIN, Calibration, band_of
from stability.run.conclude import judge
from stability.run.engine import RunOptions
from stability.run.executor import Executor, Job, Outcome, Trace
from stability.run.guard import case_limit
from stability.run.results import CaseRecord
from stability.spec import schema
from stability.spec.applicability import not_applicable_reason
from stability.spec.case import Case, corner_case
from stability.spec.registry import INVARIANTS, Band
from stability.spec.schema import Spec

__all__ = [
    "DEFAULT_DEPTHS",
    "DEFAULT_SEEDS",
    "Measured",
    "CalibrationJob",
    "calibration_depths",
    "calibration_seeds",
    "measuring_spec",
    "measure",
    "calibrate",
    "banded",
]

DEFAULT_DEPTHS: tuple[int, ...] = (1, 2, 4, 8)
DEFAULT_SEEDS = 8
_LIBRARIES = ("transformers", "timm", "torchvision")


@dataclass(frozen=True, kw_only=True)
class Measured:
    """The calibration's networks, probed: one record per (depth, seed), the releases they were
    built with, and the wall seconds each depth's job took."""

    spec: Spec
    depths: tuple[int, ...]
    seeds: tuple[int, ...]
    records: tuple[CaseRecord, ...]
    releases: tuple[str, ...]
    seconds: float

    def case_seconds(self) -> tuple[dict[int, float], float]:
        """(the median seconds one network took at each depth, what a ci case costs per member;
        the seconds a process spends once before its first network: the slowest network's excess
        over its depth's median, imports and the init rule's shipped-width models)."""
        import statistics

        by_depth: dict[int, list[float]] = {}
        for r in self.records:
            by_depth.setdefault(r.case.depth, []).append(r.seconds)
        median = {d: statistics.median(v) for d, v in by_depth.items()}
        slowest = max(self.records, key=lambda r: r.seconds, default=None)
        warm = 0.0 if slowest is None else max(0.0, slowest.seconds - median[slowest.case.depth])
        return median, warm


def calibration_depths(spec: Spec, depths: Sequence[int] | None = None) -> tuple[int, ...]:
    """The depths to measure: `depths` (each must be one the spec's space admits, else a UsageError),
    or those of 1, 2, 4, 8 the space admits; where it admits none of them, its smallest and largest."""
    space = spec.space.depth
    if depths is not None:
        outside = [d for d in depths if not _admits(space, d)]
        if outside:
            raise UsageError(
                f"--depths {','.join(map(str, depths))}: {', '.join(map(str, outside))} is outside the spec's "
                f"space.depth "
                f"{_describe(space)}; give depths it admits"
            )
        return tuple(sorted(set(depths)))
    inside = tuple(d for d in DEFAULT_DEPTHS if _admits(space, d))
    if inside:
        return inside
    admitted = [d for d in (getattr(space, "values", None) or range(space[0], space[1] + 1)) if _admits(space, d)]
    return tuple(sorted({admitted[0], admitted[-1]}))


def _admits(space: Any, depth: int) -> bool:
    return bool(space.admits(depth)) if hasattr(space, "admits") else space[0] <= depth <= space[1]


def _describe(space: Any) -> str:
    return str(space.describe()) if hasattr(space, "describe") else f"[{space[0]}, {space[1]}]"


def calibration_seeds(spec: Spec, count: int = DEFAULT_SEEDS) -> tuple[int, ...]:
    """The first `count` members of the corner seed's ensemble (the case's seed, then its derived ones)."""
    from stability.measure.ensemble import ensemble_seeds

    if count < 2:
        raise UsageError(f"--seeds {count}: a spread needs at least 2 seeds (default {DEFAULT_SEEDS})")
    return tuple(ensemble_seeds(spec.space.seed[0], count))


def banded(spec: Spec) -> list[tuple[str, Band]]:
    """(invariant, band) of every declared invariant that has bands, in the spec's order."""
    return [(name, band) for name, _ in spec.invariants() for band in INVARIANTS.get(name).bands]


def measuring_spec(spec: Spec) -> Spec:
    """The spec as the calibration probes it: its invariants with bands alone (nothing else is
    measured), each network alone (no seed ensemble)."""
    kept = {name: e for name, e in spec.invariants() if INVARIANTS.get(name).bands}
    if not kept:
        raise SpecError(
            spec.path,
            "expect",
            "declares no invariant with bands to calibrate",
            fix=f"declare one of {', '.join(e.name for e in INVARIANTS if e.bands)} (stability explain NAME)",
        )
    return spec.model_copy(
        update={
            "probe": spec.probe.model_copy(update={"ensemble": 1}),
            "expect": schema.Expect.model_validate(kept),
        }
    )


def _releases(spec: Spec) -> list[str]:
    """torch's release and the model library's: a library spec's own, else every one this process
    has imported (a factory's model may come from any)."""
    import torch

    out = [f"torch {torch.__version__.split('+')[0]}"]
    model = str(getattr(spec.options, "model", "") or "")
    for name in [model.partition(":")[0]] if model else _LIBRARIES:
        module = sys.modules.get(name)
        version = getattr(module, "__version__", None)
        if version:
            out.append(f"{name} {str(version).split('+')[0]}")
    return out


@dataclass(frozen=True)
class CalibrationJob(Job):
    """Some of the calibration's networks, built and probed as `stability check --case` does, in
    the order given; what the executor sends back is their records (`Outcome.result`)."""

    spec: Spec
    cases: tuple[Case, ...]
    options: RunOptions = dataclasses.field(default_factory=RunOptions)

    @property
    def label(self) -> str:
        return f"{self.spec.name} (calibration)"

    @property
    def case_timeout(self) -> float | None:
        return case_limit(self.spec, self.options.case_timeout)

    def execute(self, emit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        from stability.run.engine import evaluate

        for case in self.cases:
            emit({"kind": "start", "case": case.as_dict()})
            try:
                record = evaluate(self.spec, case, self.options)
            except StabilityError as exc:  # the factory does not load, exits, returns no blocks
                return {"error": str(exc), "releases": _releases(self.spec)}
            emit({"kind": "case", "record": record.to_dict()})
        return {"error": None, "releases": _releases(self.spec)}

    def conclude(self, trace: Trace) -> Outcome:
        error = None
        if trace.final is None:
            where = f" at case {trace.current}" if trace.current is not None else ""
            error = f"{self.spec.path}: the calibration stopped{where}: {trace.failure or 'the job did not finish'}"
        elif trace.final.get("error"):
            error = str(trace.final["error"])
        releases = [str(r) for r in (trace.final or {}).get("releases", [])]
        return Outcome(task=self, result=(list(trace.records), releases), error=error)


def measure(
    spec: Spec,
    *,
    executor: Executor,
    depths: Sequence[int],
    seeds: Sequence[int],
    options: RunOptions | None = None,
) -> Measured:
    """Probe the calibration's networks (the module docstring, step 1), one job per depth.
    Raises SpecError naming the first network that could not be measured, and why."""
    options = options or RunOptions()
    probed = measuring_spec(spec)
    cases = [corner_case(probed, depth=d, seed=s) for d in depths for s in seeds]
    parts = max(1, min(executor.workers, len(cases)))  # one process per worker: each pays its imports once
    jobs = [CalibrationJob(probed, tuple(cases[i::parts]), options) for i in range(parts)]
    t0 = time.perf_counter()
    outcomes = executor.map(jobs)
    seconds = time.perf_counter() - t0
    records: list[CaseRecord] = []
    releases: list[str] = []
    for outcome in outcomes:
        if outcome.error is not None:
            raise SpecError(
                spec.path, None, _one_line(outcome.error), fix="fix what stops it, or calibrate other --depths"
            )
        found, named = outcome.result
        records += found
        releases += [r for r in named if r not in releases]
    for r in records:
        if r.error is not None or r.measurements is None:
            raise SpecError(
                spec.path,
                None,
                f"depth {r.case.depth}, seed {r.case.seed}: {_one_line(r.error or 'not measured')}",
                fix="fix what stops it, or calibrate other --depths",
            )
    return Measured(
        spec=spec,
        depths=tuple(depths),
        seeds=tuple(seeds),
        records=tuple(records),
        releases=tuple(releases),
        seconds=seconds,
    )


def _one_line(text: str) -> str:
    return " ".join(text.split())


def calibrate(
    measured: Measured, *, spec: Spec | None = None, margin: float = MARGIN, only: str | None = None
) -> Calibration:
    """Every band of `spec` (default: the measured spec) from the measured networks (steps 2 and 3):
    `spec` may differ from the measured one in its expectations alone (another variance exponent),
    as each number is judged again from the records."""
    spec = spec or measured.spec
    if not margin >= 1:
        raise UsageError(f"--margin {margin}: a band is widened by a factor of at least 1 (default {MARGIN})")
    fits = []
    for name, band in banded(spec):
        if only is not None and name != only:
            continue
        per_depth: dict[int, list[float]] = {d: [] for d in measured.depths}
        for r in measured.records:
            if not_applicable_reason(spec, name, r.case) is None:  # its applies_when, the family's rule
                per_depth.setdefault(r.case.depth, []).extend(band.values(judge(spec, name, r)))
        expectation = getattr(spec.expect, name)
        current = (
            None if band.lo is None else getattr(expectation, band.lo),
            None if band.hi is None else getattr(expectation, band.hi),
        )
        dtype = measured.records[0].case.dtype if measured.records else "float32"
        fits.append(band_of(name, band, per_depth, current=current, margin=margin, dtype=dtype))
    return Calibration(
        path=spec.path,
        depths=measured.depths,
        seeds=measured.seeds,
        margin=margin,
        releases=measured.releases,
        fits=tuple(fits),
        cases=len(measured.records),
        seconds=measured.seconds,
    )
