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
3. **The band.** Over every depth and seed: [min / margin, max × margin], rounded outward to two
   significant digits, margin 1.25 (docs/zoo.md's: eight networks per depth leave a ninth outside
   their range with probability 2/9 at each end, and a band judged on the median of the case's
   ensemble has that much room on a network that is no outlier). A hi below `RESOLUTION` units in
   the last place of the case's number type (an identity block's change, 0 to rounding) is raised
   to it: a band narrower than the arithmetic's rounding would judge the rounding.

Nothing here writes a file: `stability.cli.calibrate` and `stability.run.init` do.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stability.errors import SpecError, StabilityError, UsageError
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
    "MARGIN",
    "RESOLUTION",
    "Spread",
    "BandFit",
    "Measured",
    "Calibration",
    "CalibrationJob",
    "calibration_depths",
    "calibration_seeds",
    "measuring_spec",
    "measure",
    "calibrate",
    "band_of",
    "banded",
    "written_bands",
]

DEFAULT_DEPTHS: tuple[int, ...] = (1, 2, 4, 8)
DEFAULT_SEEDS = 8
MARGIN = 1.25
#: The narrowest hi a band gets, in units of the case's number type's epsilon (float32: 9.5e-7).
RESOLUTION = 8
_EPS = {"float32": 2.0**-23, "float64": 2.0**-52, "bfloat16": 2.0**-7, "float16": 2.0**-10}
_LIBRARIES = ("transformers", "timm", "torchvision")


@dataclass(frozen=True, kw_only=True)
class Spread:
    """One band's number at one depth: its smallest and largest value over the seeds (nan when it
    is undefined on every network there), and on how many networks it was undefined."""

    depth: int
    lo: float
    hi: float
    undefined: int = 0


@dataclass(frozen=True, kw_only=True)
class BandFit:
    """One band of one invariant: the spread per depth, the bounds the spec declares now (None:
    unset), the band the spread sets, and why there is none (`problem`)."""

    invariant: str
    number: str
    label: str
    lo_key: str | None
    hi_key: str | None
    spreads: tuple[Spread, ...]
    current: tuple[float | None, float | None]
    proposed: tuple[float | None, float | None]
    problem: str | None = None

    @property
    def least(self) -> float:
        return min((s.lo for s in self.spreads if not math.isnan(s.lo)), default=math.nan)

    @property
    def most(self) -> float:
        return max((s.hi for s in self.spreads if not math.isnan(s.hi)), default=math.nan)

    def spread_text(self) -> str:
        """`1: 1–1, 2: 1.32–1.39, 4: 1.78–2.05` (docs/zoo.md's notation)."""
        return ", ".join(
            f"{s.depth}: undefined" if math.isnan(s.lo) else f"{s.depth}: {s.lo:.3g}–{s.hi:.3g}" for s in self.spreads
        )


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


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """Every band of every declared invariant with bands (`BandFit`), and how they were measured."""

    path: str
    depths: tuple[int, ...]
    seeds: tuple[int, ...]
    margin: float
    releases: tuple[str, ...]
    fits: tuple[BandFit, ...]
    cases: int
    seconds: float

    def seeds_text(self) -> str:
        return f"{len(self.seeds)} seeds of seed {self.seeds[0]}'s ensemble"


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
        return Outcome(self, (list(trace.records), releases), error)


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


def band_of(
    invariant: str,
    band: Band,
    per_depth: Mapping[int, Sequence[float]],
    *,
    current: tuple[float | None, float | None] = (None, None),
    margin: float = MARGIN,
    dtype: str = "float32",
) -> BandFit:
    """The band a number's values over depths and seeds set (the module docstring, step 3)."""
    spreads = []
    for depth, values in sorted(per_depth.items()):
        live = [v for v in values if math.isfinite(v)]
        spreads.append(
            Spread(
                depth=depth,
                lo=min(live) if live else math.nan,
                hi=max(live) if live else math.nan,
                undefined=len(values) - len(live),
            )
        )
    fit = BandFit(
        invariant=invariant,
        number=band.number,
        label=band.label,
        lo_key=band.lo,
        hi_key=band.hi,
        spreads=tuple(spreads),
        current=current,
        proposed=(None, None),
    )
    undefined = sum(s.undefined for s in spreads)
    if not any(per_depth.values()):
        return dataclasses.replace(fit, problem="it applies to none of the calibrated networks (applies_when)")
    if undefined:
        where = ", ".join(f"depth {s.depth}" for s in spreads if s.undefined)
        problem = f"undefined on {undefined} network(s) ({where}: a zero or non-finite variance or gradient)"
        return dataclasses.replace(fit, problem=problem)
    least, most = fit.least, fit.most
    lo = hi = None
    if band.lo is not None:
        if not least > 0:
            return dataclasses.replace(fit, problem=f"its smallest value is {least:.3g}: no positive lower bound holds")
        lo = _down(least / margin)
    if band.hi is not None:
        hi = _up(max(most * margin, RESOLUTION * _EPS.get(dtype, _EPS["float32"])))
    return dataclasses.replace(fit, proposed=(lo, hi))


def _digits(x: float, rounding: Callable[[float], float]) -> float:
    """`x` rounded to two significant digits by `rounding` (floor or ceil), written exactly ("3.6",
    not 3.6000000001)."""
    exponent = math.floor(math.log10(x)) - 1
    mantissa = rounding(round(x / 10.0**exponent, 9))
    return float(f"{int(mantissa)}e{exponent}")


def _down(x: float) -> float:
    return _digits(x, math.floor)


def _up(x: float) -> float:
    return _digits(x, math.ceil)


def written_bands(
    calibration: Calibration, *, keys: Callable[[str, str], bool] | None = None
) -> dict[str, tuple[float, str]]:
    """`expect.NAME.KEY` → (the band's bound, the comment beside it) for every proposed bound
    (`keys(invariant, key)` chooses which): the band's first key carries its spread per depth, the
    seeds, the margin and the releases; its second one the arithmetic, pointing at the first."""
    from stability.spec.edit import COMMENT_MARK

    out: dict[str, tuple[float, str]] = {}
    m = f"{calibration.margin:g}"
    releases = ", ".join(calibration.releases)
    for fit in calibration.fits:
        if fit.problem is not None:
            continue
        sides = [
            (key, value, f"{fit.least:.3g} / {m}" if i == 0 else f"{fit.most:.3g} × {m}")
            for i, (key, value) in enumerate(zip((fit.lo_key, fit.hi_key), fit.proposed, strict=True))
            if key is not None and value is not None and (keys is None or keys(fit.invariant, key))
        ]
        for j, (key, value, arithmetic) in enumerate(sides):
            if j == 0:
                text = (
                    f"{COMMENT_MARK}: {fit.label} {fit.spread_text()} (depth: min–max over "
                    f"{calibration.seeds_text()}); {arithmetic}; {releases}"
                )
            else:
                text = f"{COMMENT_MARK}: {arithmetic} (the spread: beside {sides[0][0]})"
            out[f"expect.{fit.invariant}.{key}"] = (value, text)
    return out
