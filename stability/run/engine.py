"""Runs a spec: draws cases with Hypothesis, probes them, judges each declared invariant, and
shrinks any failing case to the smallest network that still shows it.

For every invariant the search looks for a case on which the invariant fails. If the spec says the
invariant *holds*, finding one means the expectation is not met, and the shrunk case is reported;
if it says *violated* (a negative control), finding one is the point, and the smallest violating
case is reported ("collapses from depth 9"); not finding one within the budget is a failure, like
a strict xfail. Measurements are cached per case, so invariants share probes. What one case's
probe measures is `stability.run.probing`'s.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import example, given, seed, target
from hypothesis.errors import HypothesisException

from stability.errors import BlockError, CaseError, SpecError
from stability.judge.verdict import Verdict
from stability.run.conclude import (
    case_verdicts,
    conclude_replay,
    conclude_search,
    judge,
    message,
    met_by,
    not_applicable,
    severity,
)
from stability.run.guard import case_limit, case_threads, fit_budget, time_limit, warm_up
from stability.run.probing import MeasureContext, measure_case, probe_observers
from stability.run.profiles import get_profile, keyed
from stability.run.results import CaseRecord, InvariantResult, SpecResult
from stability.run.strategies import cases
from stability.spec.applicability import not_applicable_reason
from stability.spec.case import Case, parse_case_string, reproduce_command
from stability.spec.registry import INVARIANTS
from stability.spec.schema import Spec
from stability.spec.values import ExpectKind

__all__ = [
    "CaseRecord",
    "InvariantResult",
    "SpecResult",
    "MeasureContext",
    "measure_case",
    "probe_observers",
    "evaluate",
    "judge",
    "run_spec",
    "run_training",
    "skipped_in_profile",
    "RunOptions",
    "smallest_depth",
]


@dataclass(kw_only=True)
class RunOptions:
    """How to run: the profile, the device, and the per-case limits."""

    profile: str | None = None
    device: str = "cpu"
    case_timeout: float | None = 120.0
    memory_budget: int | None = None
    deterministic: bool = False
    #: Hypothesis's seed for the search (`stability check --seed N`); None: the profile's own
    #: (random in dev and thorough, derandomized in ci).
    seed: int | None = None


def evaluate(spec: Spec, case: Case, options: RunOptions | None = None) -> CaseRecord:
    """Build and probe one case. Problems with the case become `CaseRecord.error`: a block's or
    the factory's own exception on this case, the time limit, memory. A factory that cannot be
    imported or returns something that is not a stack of blocks is bad input: `SpecError`."""
    options = options or RunOptions()
    t0 = time.perf_counter()
    if case.device.startswith("cuda") and not torch.cuda.is_available():
        return CaseRecord(
            case=case, measurements=None, error="CUDA is not available on this machine; use --device cpu", seconds=0.0
        )
    try:
        built, why = fit_budget(spec, case, options.memory_budget)  # (a library model over it: streamed)
        limit = case_limit(spec, options.case_timeout)
        if limit:
            warm_up(case.device)  # torch's lazy imports and CUDA start-up are no case's own time
        with time_limit(limit), case_threads(spec):
            m = measure_case(built, case)
        if why is not None:
            m.extra["within_budget"] = why
    except BlockError as exc:  # a block raised on this case (any family): this case fails, the run goes on
        return CaseRecord(
            case=case, measurements=None, error=f"the case does not run: {exc}", seconds=time.perf_counter() - t0
        )
    except CaseError as exc:  # the time limit, or refused for memory
        return CaseRecord(case=case, measurements=None, error=str(exc), seconds=time.perf_counter() - t0)
    except torch.OutOfMemoryError as exc:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        first = str(exc).splitlines()[0] if str(exc) else "out of memory"
        return CaseRecord(
            case=case,
            measurements=None,
            error=f"out of memory on {case.device}: {first}",
            seconds=time.perf_counter() - t0,
        )
    except SpecError:
        raise
    except Exception as exc:  # any other exception a block raised (BatchNorm's ValueError on one value
        # per channel, a user block's own check): this case fails, the run goes on, no traceback
        what = " ".join(f"{type(exc).__name__}: {exc}".split())
        return CaseRecord(
            case=case, measurements=None, error=f"the case does not run: {what}", seconds=time.perf_counter() - t0
        )
    return CaseRecord(case=case, measurements=m, error=None, seconds=time.perf_counter() - t0)


def _applies(spec: Spec, name: str, case: Case) -> bool:
    return not_applicable_reason(spec, name, case) is None


class _Found(Exception):
    """Raised inside the Hypothesis test when a case breaks the invariant."""


def _target(name: str, v: Verdict) -> None:
    """Steer the thorough profile's search toward the invariant's failure (its registry `targets`)."""
    entry = INVARIANTS.get(name)
    if entry.targets is None:
        return
    for value, label in entry.targets(v):
        target(value, label=label)


def run_spec(
    spec: Spec,
    options: RunOptions | None = None,
    *,
    case: Case | str | None = None,
    only: str | None = None,
    on_case: Callable[[CaseRecord], None] | None = None,
    on_start: Callable[[Case], None] | None = None,
    on_result: Callable[[InvariantResult], None] | None = None,
) -> SpecResult:
    """Judge every declared invariant of `spec` (or only `only`). With `case`, judge that one case.
    `on_start(case)` is called before a case is built, `on_case(record)` after it is probed and
    `on_result(result)` when an invariant is judged (a supervising process uses them to enforce
    the time limit and to know what was finished)."""
    options = options or RunOptions()
    profile_name, profile = get_profile(options.profile)
    t0 = time.perf_counter()
    from stability.families.library_depth import narrowed

    spec = narrowed(spec)  # no depth below the smallest the model builds at (a model whose init needs depth >= 2)
    cache: dict[Case, CaseRecord] = {}

    def measured(c: Case) -> CaseRecord:
        if c not in cache:
            if on_start is not None:
                on_start(c)
            cache[c] = evaluate(spec, c, options)
            if on_case is not None:
                on_case(cache[c])
        return cache[c]

    if isinstance(case, str):
        case = parse_case_string(case, spec, device=options.device)
    results = []
    train_cache: dict[Any, Any] = {}  # optimizer runs shared by the training invariants of this spec
    for name, expectation in spec.invariants():
        if only is not None and name != only:
            continue
        started = time.perf_counter()
        if INVARIANTS.get(name).training:
            results.append(run_training(spec, name, expectation, options, profile_name, case=case, cache=train_cache))
            results[-1].seconds = time.perf_counter() - started
            continue
        if case is None and profile_name not in spec.probe.profiles:
            results.append(
                skipped_in_profile(spec, name, expectation, profile_name, spec.probe.profiles, "probe.profiles")
            )
        elif case is not None:
            results.append(_replay(spec, name, expectation, case, measured))
        else:
            results.append(_search(spec, name, expectation, options, profile_name, profile, measured))
        results[-1].seconds = time.perf_counter() - started
        if on_result is not None:
            on_result(results[-1])
    return SpecResult(
        spec=spec,
        results=results,
        cases=cache,
        seconds=time.perf_counter() - t0,
        profile=profile_name,
        verdicts=case_verdicts(spec, cache),
    )


def skipped_in_profile(
    spec: Spec, name: str, expectation: Any, profile_name: str, profiles: Sequence[str], key: str
) -> InvariantResult:
    """An invariant the spec runs in other profiles only (`probe.profiles`, `train.profiles`)."""
    text = (
        f"{spec.path}::{name}: skipped in profile {profile_name} ({key} = {', '.join(profiles)}); run it "
        f"with --profile {profiles[0]}"
    )
    return InvariantResult(
        name=name, expect=expectation.expect, met=True, verdict=None, case=None, examples=0, message=text, skipped=True
    )


def _unjudged(name: str, expect: ExpectKind, examples: int, message: str, error: str) -> InvariantResult:
    """An expectation its search could not judge (no verdict, no case): unmet, saying why."""
    return InvariantResult(
        name=name, expect=expect, met=False, verdict=None, case=None, examples=examples, message=message, error=error
    )


def _replay(
    spec: Spec, name: str, expectation: Any, case: Case, measured: Callable[[Case], CaseRecord]
) -> InvariantResult:
    outside = not_applicable(spec, name, case)
    if outside is not None:
        return outside
    record = measured(case)
    return conclude_replay(spec, name, case, record, judge(spec, name, record), expect=expectation.expect)


def _search(
    spec: Spec,
    name: str,
    expectation: Any,
    options: RunOptions,
    profile_name: str,
    profile: Any,
    measured: Callable[[Case], CaseRecord],
) -> InvariantResult:
    failing: list[Case] = []
    seen: list[tuple[Case, Verdict]] = []
    thorough = profile_name == "thorough"
    first_failure: list[float] = []  # when the first failing case was found: shrinking starts

    def test(c: Case) -> None:
        if not _applies(spec, name, c):
            return
        v = judge(spec, name, measured(c))
        seen.append((c, v))
        if thorough:
            _target(name, v)
        if not v.passed:
            if not failing:
                first_failure.append(time.perf_counter())
            failing.append(c)
            raise _Found

    strategy = cases(spec, device=options.device, invariant=name)
    # One example database entry per (spec, invariant, device), not one for every spec.
    run = keyed(profile, f"{spec.path}::{name}::{options.device}")(given(strategy)(test))
    fixed = [parse_case_string(text, spec, device=options.device) for text in spec.probe.ci_cases]
    pinned = [*fixed, *(parse_case_string(text, spec, device=options.device) for text in spec.space.examples)]
    for c in reversed(pinned):
        run = example(c)(run)
    if options.seed is not None:
        run = seed(options.seed)(run)
    try:
        if profile_name == "ci" and fixed:  # probe.ci_cases: exactly these cases, no search
            for c in fixed:
                test(c)
        else:
            run()
    except _Found:
        pass
    except HypothesisException as exc:  # e.g. an unsatisfiable space; reported, never a traceback
        return _unjudged(name, expectation.expect, len(seen), f"the search failed: {exc}", str(exc))
    judged = tuple(dict.fromkeys(c for c, _ in seen))  # each case once, in order
    records = {c: measured(c) for c in judged}
    verdicts = dict(reversed(seen))  # (the first verdict of each case, as the search saw it)
    smallest = None
    if failing:
        smallest = _smallest_depth(spec, name, failing[-1], measured)  # Hypothesis replays its shrunk example last
        records[smallest] = measured(smallest)
        verdicts.setdefault(smallest, judge(spec, name, records[smallest]))
    result = conclude_search(
        spec, name, judged, records, failing=smallest, verdicts=verdicts, expect=expectation.expect
    )
    if first_failure:
        result.shrink_seconds = time.perf_counter() - first_failure[0]
    return result


def _smallest_depth(spec: Spec, name: str, case: Case, measured: Callable[[Case], CaseRecord]) -> Case:
    """Bisect the depth of a failing case down to the smallest depth that still fails, the other
    values held. Hypothesis's shrinker cannot leave the one-in-eight "deepest depth" draw (the
    depth is then fixed at the maximum whatever the shrinker tries), so this finishes the job; on
    an already-minimal case it costs log2(depth) probes, all cached."""
    return smallest_depth(spec, case, lambda trial: not judge(spec, name, measured(trial)).passed)


def smallest_depth(spec: Spec, case: Case, fails: Callable[[Case], bool]) -> Case:
    """The smallest depth the spec's space admits, at most `case.depth`, at which `fails` (the
    other values of `case` held), by bisection; `case` itself is known to fail. Also what
    `stability.testing.given_spec` runs after Hypothesis's shrinking, with the user's test as `fails`."""
    space = spec.space.depth
    if getattr(space, "constrained", False):  # bisect over the depths the space admits
        depths = [d for d in (space.values or range(space[0], case.depth + 1, space.multiple_of)) if d <= case.depth]
        return _bisect(case, fails, 0, len(depths) - 1, depths.__getitem__)
    return _bisect(case, fails, spec.space.depth[0], case.depth, lambda depth: depth)


def _bisect(case: Case, fails: Callable[[Case], bool], lo: int, hi: int, depth_at: Callable[[int], int]) -> Case:
    """`case` at `depth_at(i)` for the smallest i in [lo, hi] at which it `fails`, by bisection (it is
    known to fail at `depth_at(hi)`): one bisection for a space of admitted depths and for a range."""
    while lo < hi:
        mid = (lo + hi) // 2
        if not fails(dataclasses.replace(case, depth=depth_at(mid))):
            lo = mid + 1
        else:
            hi = mid
    return dataclasses.replace(case, depth=depth_at(hi))


# ----------------------------------------------------------------------------- training invariants


def run_training(
    spec: Spec,
    name: str,
    expectation: Any,
    options: RunOptions,
    profile_name: str,
    *,
    case: Case | None = None,
    cache: dict[Any, Any] | None = None,
) -> InvariantResult:
    """Judge a training invariant (update_size, trainability, residual_size): each case is an
    optimizer run (stability.measure.train), not a probe. With `case`, that case is replayed whatever the
    profile. Otherwise, in the profiles `train.profiles` lists, Hypothesis draws `train.cases` cases
    (ten times as many in `thorough`), generation only: a training run is too costly to shrink.
    In other profiles the invariant is skipped and says so."""
    from hypothesis import Phase, settings

    from stability.run.training import evaluate as evaluate_training
    from stability.run.training import trained_text

    assert spec.train is not None  # the loader requires [train] with a training invariant
    t = spec.train
    cache = {} if cache is None else cache
    seen: dict[Case, tuple[Verdict, str | None]] = {}

    def run(c: Case) -> tuple[Verdict, str | None]:
        v, error = evaluate_training(
            spec, name, c, case_timeout=options.case_timeout, memory_budget=options.memory_budget, cache=cache
        )
        if v is None:
            return Verdict(
                invariant=name,
                passed=False,
                observed=math.nan,
                bound="",
                block=None,
                detail=f"case not trained: {error}",
                measured=False,
            ), error
        return v, None

    def result(c: Case, v: Verdict, error: str | None, replay: bool, examples: int) -> InvariantResult:
        met = met_by(expectation.expect, v, CaseRecord(case=c, measurements=None, error=error))
        text = message(spec, name, expectation.expect, met, v, c, replay, None if replay else examples) + trained_text(
            spec, name, c
        )
        return InvariantResult(
            name=name,
            expect=expectation.expect,
            met=met,
            verdict=v,
            case=c,
            examples=examples,
            message=text,
            reproduce=reproduce_command(spec, c),
            error=error,
            judged=tuple(seen) or (c,),
        )

    if case is not None:
        outside = not_applicable(spec, name, case)
        if outside is not None:
            return outside
        v, error = run(case)
        return result(case, v, error, True, 1)
    if profile_name not in t.profiles:
        return skipped_in_profile(spec, name, expectation, profile_name, t.profiles, "train.profiles")
    _, profile = get_profile(profile_name)
    n = t.cases * (10 if profile_name == "thorough" else 1)
    failing: list[Case] = []

    def test(c: Case) -> None:
        if c not in seen:
            seen[c] = run(c)
        v, error = seen[c]
        if error is not None or not v.passed:
            failing.append(c)
            raise _Found

    search = settings(profile, max_examples=n, phases=(Phase.explicit, Phase.generate), database=None)
    # Only the cases it applies to (a filter that passes everything draws what the bare strategy
    # draws; the test's body is unchanged, so a derandomized profile draws the same cases as before).
    applicable = cases(spec, device=options.device, invariant=name).filter(lambda c: _applies(spec, name, c))
    test_fn = search(given(applicable)(test))
    for c in reversed([parse_case_string(text, spec, device=options.device) for text in spec.space.examples]):
        test_fn = example(c)(test_fn)
    if options.seed is not None:
        test_fn = seed(options.seed)(test_fn)
    try:
        test_fn()
    except _Found:
        pass
    except HypothesisException as exc:
        return _unjudged(name, expectation.expect, len(seen), f"the search failed: {exc}", str(exc))
    if failing:
        c = failing[-1]
        v, error = seen[c]
        return result(c, v, error, True, len(seen))  # not shrunk: worded like a replay
    if not seen:
        return _unjudged(name, expectation.expect, 0, "no case was drawn", "no case")
    # The case closest to failing: the largest severity (the entry's: the headline number's size,
    # slope magnitude, loss ratio, mean residual).
    c, (v, _) = max(seen.items(), key=lambda cv: severity(spec, name, cv[1][0]))
    return result(c, v, None, False, len(seen))
