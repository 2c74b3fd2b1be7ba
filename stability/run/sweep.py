"""`stability sweep`: a spec over a grid of points, each a seed ensemble → phase diagrams and the
spec's depth budget, every probe kept in the results store.

1. The grid (`stability.run.grid`): every combination of the `--over` axes. Each point is probed with
   the same seeds (`--seeds N`, from the spec's first seed up). Points already in the store under
   these inputs (`stability.run.store_keys.inputs_hash`: the spec's content and a custom spec's
   factory module), this code version and this device are read, not probed; the rest run on a backend
   (`stability.run.sweep_exec`: in this process, or on Dask workers) and are stored as they arrive.
2. The depth budget: for every slice of the grid (each combination of the axes other than depth)
   and every declared invariant, the largest depth at which the invariant holds on *every* seed
   of the ensemble, found by bisection between the smallest and largest depth (geometric
   midpoints, since budgets range over orders of magnitude), not by probing every depth. All
   slices and invariants bisect in lockstep, so each round is one batch for the backend. The
   bisection assumes a failure at depth L persists at every depth beyond L, which is what a
   vanishing or exploding product of per-block factors does; a non-monotone invariant gets one of
   its crossing depths.

`stability sweep --compare A B`, which reads the budgets of two code versions back from the store
and probes nothing, is `stability.run.sweep_compare`.
"""

from __future__ import annotations

import math
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from stability.judge.verdict import is_evidence
from stability.measure.measurements import Measurements
from stability.run.conclude import judge, severity
from stability.run.executor import Executor, Outcome
from stability.run.grid import Axis, Value, apply_point, check_points, grid_points, point_key
from stability.run.results import CaseRecord
from stability.run.store import Budget, BudgetStatus, Store
from stability.run.store_keys import code_version, inputs_hash
from stability.run.sweep_exec import PointTask, Row
from stability.spec.applicability import not_applicable_reason
from stability.spec.schema import Spec

__all__ = [
    "PointResult",
    "PointVerdict",
    "SweepResult",
    "Sweep",
    "ensemble_verdict",
]

Progress = Callable[[int, int, int], None]  # (points done, of which cached, points known so far)


@dataclass(kw_only=True)
class PointResult:
    """One grid point: its rows (one per seed), whether they came from the store, and each
    declared invariant's verdict there (`ensemble_verdict`; the reports draw these)."""

    point: dict[str, Value]
    rows: list[Row]
    cached: bool
    verdicts: dict[str, PointVerdict] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return all(r["m"] is None for r in self.rows)


@dataclass(kw_only=True)
class SweepResult:
    spec: Spec
    axes: list[Axis]
    seeds: list[int]
    points: list[PointResult]
    budgets: list[Budget]
    depth_range: tuple[int, int]
    code_version: str
    seconds: float = 0.0
    probed: int = 0
    cached: int = 0
    workers: int = 1
    extra_points: list[PointResult] = field(default_factory=list)  # probed by the bisection, off the grid

    @property
    def judged(self) -> list[str]:
        """The invariants judged at the points (all the spec declares, or those `--only` kept), in the spec's order."""
        seen = {n for p in (*self.points, *self.extra_points) for n in p.verdicts}
        return [n for n, _ in self.spec.invariants() if n in seen]


#: (holds on every seed, or None when the invariant does not apply; the first failing case; its
#: detail; the observed number: the failing case's, else the one closest to failing, None when n/a).
PointVerdict = tuple[bool | None, str | None, str, float | None]


def ensemble_verdict(
    spec: Spec, name: str, point: dict[str, Value], rows: list[Row], *, device: str = "cpu"
) -> PointVerdict:
    """Invariant `name` at one point: it holds when it holds on every seed's case, each judged as
    `stability check --case` judges it (`stability.run.conclude.judge`, on the same measurements);
    a case it does not apply to (`applies_when`, or its own rule) makes the point not applicable,
    and a case that could not be measured, or a verdict that measured nothing, fails it."""
    closest: tuple[float, float] | None = None
    for row in rows:
        spec_p, case = apply_point(spec, point, seed=row["seed"], device=device)
        reason = not_applicable_reason(spec_p, name, case)
        if reason is not None:
            return None, None, f"not applicable: {reason}", None
        m = Measurements.from_json(row["m"]) if row["m"] is not None else None
        v = judge(spec_p, name, CaseRecord(case=case, measurements=m, error=row["error"]))
        if not (v.passed and is_evidence(v)):
            return False, str(case), v.detail, v.observed
        closeness = severity(spec_p, name, v)
        if closest is None or closeness > closest[0]:
            closest = (closeness, v.observed)
    return True, None, "", None if closest is None else closest[1]


class _Bisection:
    """Largest depth in [lo, hi] at which an invariant holds, on geometric midpoints."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi
        self.good: int | None = None  # largest depth known to hold
        self.bad: int | None = None  # smallest depth known to fail
        self.deciding: tuple[str | None, str] = (None, "")
        self.na = False

    def next_depths(self) -> list[int]:
        if self.na:
            return []
        if self.good is None and self.bad is None:
            return sorted({self.lo, self.hi})
        if self.bad is None or (self.good is None and self.bad == self.lo):
            return []
        good = self.good if self.good is not None else self.lo
        if self.bad - good <= 1:
            return []
        mid = round(math.sqrt(good * self.bad))
        return [min(max(mid, good + 1), self.bad - 1)]

    def update(self, depth: int, holds: bool | None, case: str | None, detail: str) -> None:
        if holds is None:
            self.na, self.deciding = True, (None, detail)
        elif holds:
            self.good = depth if self.good is None else max(self.good, depth)
        elif self.bad is None or depth < self.bad:
            self.bad, self.deciding = depth, (case, detail)
        if self.good is not None and self.bad is not None and self.good > self.bad:  # not monotone: keep the failure
            self.good = None if self.bad == self.lo else self.good

    def budget(self) -> tuple[int | None, BudgetStatus]:
        if self.na:
            return None, "not applicable"
        if self.bad is None:
            return self.good, "at_least"
        if self.good is None or self.bad <= self.lo:
            return None, "below"
        return self.bad - 1, "found"


class Sweep:
    """Runs the points of one spec on a backend, through the store."""

    def __init__(
        self,
        spec: Spec,
        store: Store,
        backend: Executor,
        *,
        seeds: Sequence[int],
        device: str = "cpu",
        version: str | None = None,
        progress: Progress | None = None,
        invariants: Sequence[str] | None = None,
        memory_budget: int | None = None,
        case_timeout: float | None = 120.0,
    ) -> None:
        self.spec, self.store, self.backend = spec, store, backend
        self.case_timeout = case_timeout
        #: The invariants swept: the spec's declared ones, or those asked for (`--only`).
        self.names = [n for n, _ in spec.invariants() if invariants is None or n in invariants]
        self.memory_budget = memory_budget
        self.seeds, self.device = list(seeds), device
        self.version = version or code_version()
        self.hash = inputs_hash(spec)
        self.progress = progress
        self.done = self.cached = self.known = 0
        self._fresh: set[str] = set()  # points probed by this run: found again later (bisection), they are not "reused"
        self._reused: set[str] = set()  # points found in the store from an earlier run, each counted once
        self._here: dict[str, list[Row]] = {}  # every point this run has, stored or not (a failed one is not stored)
        self.probed = 0

    def evaluate(self, points: list[dict[str, Value]]) -> list[PointResult]:
        """Every point's rows: from the store where present, else probed (and then stored)."""
        results: list[PointResult | None] = [None] * len(points)
        tasks: list[PointTask] = []
        self.known += len(points)
        for i, p in enumerate(points):
            rows = self._here.get(point_key(p)) or self.store.cached(
                self.hash, self.version, point_key(p), self.seeds, self.device
            )
            if rows is not None:
                results[i] = PointResult(point=p, rows=rows, cached=True, verdicts=self._verdicts(p, rows))
                self.done += 1
                if point_key(p) not in self._fresh and point_key(p) not in self._reused:
                    self._reused.add(point_key(p))
                    self.cached += 1
            else:
                tasks.append(
                    PointTask(
                        self.spec,
                        p,
                        tuple(self.seeds),
                        self.device,
                        tag={"index": i},
                        memory_budget=self.memory_budget,
                        timeout=self.case_timeout,
                    )
                )
        self._report()

        def arrived(outcome: Outcome) -> None:
            task, rows = outcome.task, outcome.result
            self.store.put(self.hash, self.version, self.spec.name, point_key(task.point), self.device, rows)
            self._here[point_key(task.point)] = rows
            self._fresh.add(point_key(task.point))
            results[task.tag["index"]] = PointResult(
                point=task.point, rows=rows, cached=False, verdicts=self._verdicts(task.point, rows)
            )
            self.done += 1
            self.probed += len(rows)
            self._report()

        self.backend.map(tasks, on_done=arrived)
        return [r for r in results if r is not None]

    def _verdicts(self, point: dict[str, Value], rows: list[Row]) -> dict[str, PointVerdict]:
        return {n: ensemble_verdict(self.spec, n, point, rows, device=self.device) for n in self.names}

    def _report(self) -> None:
        if self.progress is not None:
            self.progress(self.done, self.cached, self.known)

    def budgets(self, axes: list[Axis], depth_range: tuple[int, int]) -> tuple[list[Budget], list[PointResult]]:
        """The depth budget of every (slice, invariant), by lockstep bisection."""
        others = [a for a in axes if a.key != "depth"]
        slices = grid_points(others)
        names = self.names
        lo, hi = depth_range
        state = {(point_key(s), n): _Bisection(lo, hi) for s in slices for n in names}
        seen: dict[str, PointResult] = {}
        while True:
            wanted: dict[str, dict[str, Value]] = {}
            for s in slices:
                for n in names:
                    for d in state[(point_key(s), n)].next_depths():
                        p = {**s, "depth": d}
                        if point_key(p) not in seen:
                            wanted[point_key(p)] = p
            if not wanted:
                break
            for res in self.evaluate(list(wanted.values())):
                seen[point_key(res.point)] = res
            for s in slices:
                for n in names:
                    b = state[(point_key(s), n)]
                    for d in b.next_depths():
                        p = {**s, "depth": d}
                        holds, case, detail, _ = seen[point_key(p)].verdicts[n]
                        b.update(d, holds, case, detail)
        out = []
        for s in slices:
            for n in names:
                b = state[(point_key(s), n)]
                budget, status = b.budget()
                case, detail = b.deciding
                failing_depth = b.bad
                out.append(
                    Budget(
                        spec_name=self.spec.name,
                        slice=point_key(s),
                        invariant=n,
                        budget=budget,
                        status=status,
                        deciding_case=case,
                        detail=detail,
                        reproduce=self.reproduce(s, failing_depth, case)
                        if case is not None and failing_depth is not None
                        else None,
                    )
                )
        self.store.put_budgets(self.hash, self.version, self.seeds, depth_range, out, device=self.device)
        return out, list(seen.values())

    def reproduce(self, slice_: dict[str, Value], depth: int, case_text: str) -> str:
        """The command that probes exactly the deciding case again: `stability check --case` when
        the case lies inside the spec's space and the point changes nothing else, otherwise a
        one-point, one-seed `stability sweep`."""
        from stability.errors import StabilityError
        from stability.spec.case import parse_case_string, reproduce_command

        seed = int(dict(item.split("=", 1) for item in case_text.split(","))["seed"])
        spec_keys = set(slice_) - {"width", "batch", "weight_init", "branch_init", "dtype"}
        if not spec_keys:
            try:
                case = parse_case_string(case_text, self.spec, device=self.device)
                return reproduce_command(self.spec, case)
            except StabilityError:
                pass
        over = " ".join(f"--over {shlex.quote(f'{k}={v}')}" for k, v in {"depth": depth, **slice_}.items())
        device = "" if self.device == "cpu" else f" --device {shlex.quote(self.device)}"
        return f"stability sweep {shlex.quote(self.spec.path)} {over} --seeds 1 --first-seed {seed}{device}"


def run_sweep(
    spec: Spec,
    axes: list[Axis],
    store: Store,
    backend: Executor | None = None,
    *,
    seeds: Sequence[int],
    device: str = "cpu",
    depth_range: tuple[int, int] | None = None,
    budgets: bool = True,
    progress: Progress | None = None,
    version: str | None = None,
    invariants: Sequence[str] | None = None,
    memory_budget: int | None = None,
    case_timeout: float | None = 120.0,
) -> SweepResult:
    """The grid, then the budgets (see the module docstring). `backend`: where the points run
    (stability.run.executor's contract; default this process)."""
    from stability.run.executor import InProcessExecutor

    t0 = time.perf_counter()
    backend = backend or InProcessExecutor()
    from stability.families.library_depth import narrowed

    spec = narrowed(spec)  # no depth below the smallest the model builds at (a model whose init needs depth >= 2)
    grid = grid_points(axes)
    check_points(
        spec, grid, seed=seeds[0] if seeds else 0, device=device
    )  # a point that cannot run is refused before any runs
    sweep = Sweep(
        spec,
        store,
        backend,
        seeds=seeds,
        device=device,
        version=version,
        progress=progress,
        invariants=invariants,
        memory_budget=memory_budget,
        case_timeout=case_timeout,
    )
    points = sweep.evaluate(grid)
    if depth_range is None:
        depth_axis = next((a for a in axes if a.key == "depth"), None)
        ints = [int(v) for v in depth_axis.values] if depth_axis else list(spec.space.depth)
        depth_range = (max(min(ints), spec.space.depth[0]), max(ints))
    found: list[Budget] = []
    extra: list[PointResult] = []
    if budgets:
        found, probed = sweep.budgets(axes, depth_range)
        on_grid = {point_key(p.point) for p in points}
        extra = [r for r in probed if point_key(r.point) not in on_grid]
    return SweepResult(
        spec=spec,
        axes=axes,
        seeds=list(seeds),
        points=points,
        budgets=found,
        depth_range=depth_range,
        code_version=sweep.version,
        seconds=time.perf_counter() - t0,
        probed=sweep.probed,
        cached=sweep.cached,
        workers=backend.workers,
        extra_points=extra,
    )
