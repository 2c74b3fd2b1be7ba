"""Runs a spec: draws cases with Hypothesis, probes them, judges each declared invariant, and
shrinks any failing case to the smallest network that still shows it.

For every invariant the search looks for a case on which the invariant fails. If the spec says the
invariant *holds*, finding one means the expectation is not met, and the shrunk case is reported;
if it says *violated* (a negative control), finding one is the point, and the smallest violating
case is reported ("collapses from depth 9"); not finding one within the budget is a failure, like
a strict xfail. Measurements are cached per case, so invariants share probes.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import example, given, target
from hypothesis.errors import HypothesisException

from stability import invariants as inv
from stability.build import build, derive_seed, make_input
from stability.case import Case, parse_case_string, reproduce_command
from stability.channels import ChannelStats
from stability.ensemble import ensemble_size, probe_ensemble_until_decided
from stability.errors import BlockError, CaseError, SpecError
from stability.guard import check_budget, time_limit, warm_up
from stability.invariants import Verdict
from stability.laws import annotate
from stability.probe import Measurements, probe
from stability.profiles import get_profile
from stability.spec import ZERO_BRANCH_INITS, Spec
from stability.strategies import cases

__all__ = ["CaseRecord", "InvariantResult", "SpecResult", "evaluate", "judge", "run_spec", "RunOptions"]


@dataclass
class RunOptions:
    """How to run: the profile, the device, and the per-case limits."""

    profile: str | None = None
    device: str = "cpu"
    case_timeout: float | None = 120.0
    memory_budget: int | None = None
    deterministic: bool = False


@dataclass
class CaseRecord:
    case: Case
    measurements: Measurements | None
    error: str | None = None
    seconds: float = 0.0


@dataclass
class InvariantResult:
    """One (spec, invariant) pair: was the expectation met, and which case decided it."""

    name: str
    expect: str  # "holds" | "violated"
    met: bool
    verdict: Verdict | None
    case: Case | None
    examples: int
    message: str
    reproduce: str | None = None
    error: str | None = None

    @property
    def status(self) -> str:
        return "ok" if self.met else ("error" if self.error else "failed")


@dataclass
class SpecResult:
    spec: Spec
    results: list[InvariantResult]
    cases: dict[Case, CaseRecord] = field(default_factory=dict)
    seconds: float = 0.0
    profile: str = "dev"

    @property
    def met(self) -> bool:
        return all(r.met for r in self.results)


def _apply(name: str, expectation: Any, m: Measurements) -> Verdict:
    if name == "gradient_arrival":
        return inv.gradient_arrival(m, lo=expectation.lo, hi=expectation.hi)
    if name == "variance_growth":
        return inv.variance_growth(
            m,
            max_growth=expectation.max_growth,
            max_ratio=expectation.max_ratio,
            min_ratio=expectation.min_ratio,
            statistic=expectation.statistic,
            bounded_ratio=expectation.bounded_ratio,
        )
    if name == "mean_shift":
        return inv.mean_shift(m, max_ratio=expectation.max_ratio)
    return inv.identity_at_init(m, atol=expectation.atol)


def evaluate(spec: Spec, case: Case, options: RunOptions | None = None) -> CaseRecord:
    """Build and probe one case. Problems with the case become `CaseRecord.error`; a broken custom
    factory is bad input and raises `SpecError`."""
    options = options or RunOptions()
    t0 = time.perf_counter()
    if case.device.startswith("cuda") and not torch.cuda.is_available():
        return CaseRecord(case, None, "CUDA is not available on this machine; use --device cpu", 0.0)
    try:
        check_budget(spec, case, options.memory_budget)
        if options.case_timeout:
            warm_up(case.device)  # torch's lazy imports and CUDA start-up are no case's own time
        with time_limit(options.case_timeout):
            net = build(spec, case)
            x = make_input(spec, case)
            if net.stem is not None:
                with torch.no_grad():
                    x = net.stem(x)
            m = probe(
                net.blocks, x, loss=spec.probe.loss, seed=derive_seed(case.seed, 2),
                checkpoint_every=spec.probe.checkpoint_every,
                observers=[ChannelStats()] if spec.expect.mean_shift is not None else (),
            )
            if spec.expect.variance_growth is not None and ensemble_size(spec) > 1:  # the law is judged on seeds
                m.extra["ensemble"] = probe_ensemble_until_decided(spec, case, m, size=ensemble_size(spec))
    except BlockError as exc:  # a block raised: for a custom factory, its blocks do not chain
        if spec.family == "custom":
            raise SpecError(spec.path, "block.factory", f"the blocks do not run: {exc} (case {case})", value=spec.block.factory) from None
        return CaseRecord(case, None, f"the case does not run: {exc}", time.perf_counter() - t0)
    except CaseError as exc:  # the time limit, or refused for memory
        return CaseRecord(case, None, str(exc), time.perf_counter() - t0)
    except torch.OutOfMemoryError as exc:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        first = str(exc).splitlines()[0] if str(exc) else "out of memory"
        return CaseRecord(case, None, f"out of memory on {case.device}: {first}", time.perf_counter() - t0)
    except SpecError:
        raise
    except Exception as exc:  # any other exception a block raised (BatchNorm's ValueError on one value
        # per channel, a user block's own check): this case fails, the run goes on, no traceback
        what = " ".join(f"{type(exc).__name__}: {exc}".split())
        if spec.family == "custom":
            raise SpecError(spec.path, "block.factory", f"the blocks do not run: {what} (case {case})", value=spec.block.factory) from None
        return CaseRecord(case, None, f"the case does not run: {what}", time.perf_counter() - t0)
    return CaseRecord(case, m, None, time.perf_counter() - t0)


def judge(spec: Spec, name: str, record: CaseRecord) -> Verdict:
    expectation = getattr(spec.expect, name)
    if record.measurements is None:
        return Verdict(name, False, math.nan, "", None, f"case not measured: {record.error}")
    return annotate(spec, record.case, _apply(name, expectation, record.measurements), record.measurements)  # + the law's prediction


def _applies(spec: Spec, name: str, case: Case) -> bool:
    return name != "identity_at_init" or spec.family == "custom" or case.branch_init in ZERO_BRANCH_INITS


def _severity(name: str, v: Verdict, expectation: Any) -> float:
    """How close a passing verdict came to failing (bigger is closer): picks the reported case."""
    if name == "gradient_arrival":
        if not v.observed > 0:
            return math.inf
        return -min(math.log(v.observed / expectation.lo), math.log(expectation.hi / v.observed))
    return v.observed if math.isfinite(v.observed) else math.inf


class _Found(Exception):
    """Raised inside the Hypothesis test when a case breaks the invariant."""


def _target(name: str, v: Verdict) -> None:
    if not math.isfinite(v.observed) or v.observed <= 0:
        return
    if name == "gradient_arrival":
        target(-math.log10(v.observed), label="vanishing gradient (log10)")
        target(math.log10(v.observed), label="exploding gradient (log10)")
    elif name == "variance_growth":
        target(math.log10(v.observed), label="variance growth (log10 ratio)")
    elif name == "mean_shift":
        target(v.observed, label="mean shift (squared channel mean / channel variance)")
    else:
        target(v.observed, label="identity error")


def run_spec(
    spec: Spec,
    options: RunOptions | None = None,
    *,
    case: Case | str | None = None,
    only: str | None = None,
    on_case: Callable[[CaseRecord], None] | None = None,
) -> SpecResult:
    """Judge every declared invariant of `spec` (or only `only`). With `case`, judge that one case."""
    options = options or RunOptions()
    profile_name, profile = get_profile(options.profile)
    t0 = time.perf_counter()
    cache: dict[Case, CaseRecord] = {}

    def measured(c: Case) -> CaseRecord:
        if c not in cache:
            cache[c] = evaluate(spec, c, options)
            if on_case is not None:
                on_case(cache[c])
        return cache[c]

    if isinstance(case, str):
        case = parse_case_string(case, spec, device=options.device)
    results = []
    for name, expectation in spec.invariants():
        if only is not None and name != only:
            continue
        if case is not None:
            results.append(_replay(spec, name, expectation, case, measured))
        else:
            results.append(_search(spec, name, expectation, options, profile_name, profile, measured))
    return SpecResult(spec, results, cache, time.perf_counter() - t0, profile_name)


def _replay(spec: Spec, name: str, expectation: Any, case: Case, measured: Callable[[Case], CaseRecord]) -> InvariantResult:
    if not _applies(spec, name, case):
        return InvariantResult(name, expectation.expect, True, None, case, 0, f"not applicable: branch_init={case.branch_init} is not a zero-branch init")
    record = measured(case)
    v = judge(spec, name, record)
    met = v.passed == (expectation.expect == "holds") and record.error is None
    return InvariantResult(
        name, expectation.expect, met, v, case, 1, _message(spec, name, expectation.expect, met, v, case, True),
        reproduce_command(spec, case), record.error,
    )


def _search(
    spec: Spec, name: str, expectation: Any, options: RunOptions, profile_name: str, profile: Any,
    measured: Callable[[Case], CaseRecord],
) -> InvariantResult:
    failing: list[Case] = []
    seen: list[tuple[Case, Verdict]] = []
    thorough = profile_name == "thorough"

    def test(c: Case) -> None:
        if not _applies(spec, name, c):
            return
        v = judge(spec, name, measured(c))
        seen.append((c, v))
        if thorough:
            _target(name, v)
        if not v.passed:
            failing.append(c)
            raise _Found

    strategy = cases(spec, device=options.device, invariant=name)
    run = profile(given(strategy)(test))
    pinned = [parse_case_string(text, spec, device=options.device) for text in spec.space.examples]
    for c in reversed(pinned):
        run = example(c)(run)
    # One example database entry per (spec, invariant, device), not one for every spec.
    run.hypothesis._hypothesis_internal_add_digest = f"{spec.path}::{name}::{options.device}".encode()
    try:
        run()
    except _Found:
        pass
    except HypothesisException as exc:  # e.g. an unsatisfiable space; reported, never a traceback
        return InvariantResult(name, expectation.expect, False, None, None, len(seen), f"the search failed: {exc}", error=str(exc))
    examples = len({c for c, _ in seen})
    if failing:
        c = _smallest_depth(spec, name, failing[-1], measured)  # Hypothesis replays its shrunk example last
        record = measured(c)
        v = judge(spec, name, record)
        met = expectation.expect == "violated" and record.error is None
        return InvariantResult(
            name, expectation.expect, met, v, c, examples, _message(spec, name, expectation.expect, met, v, c, False),
            reproduce_command(spec, c), record.error,
        )
    if not seen:
        return InvariantResult(name, expectation.expect, False, None, None, 0, "no applicable case was drawn", error="no applicable case")
    c, v = max(seen, key=lambda cv: _severity(name, cv[1], expectation))
    met = expectation.expect == "holds"
    return InvariantResult(
        name, expectation.expect, met, v, c, examples, _message(spec, name, expectation.expect, met, v, c, False, examples),
        reproduce_command(spec, c), None,
    )


def _smallest_depth(spec: Spec, name: str, case: Case, measured: Callable[[Case], CaseRecord]) -> Case:
    """Bisect the depth of a failing case down to the smallest depth that still fails, the other
    values held. Hypothesis's shrinker cannot leave the one-in-eight "deepest depth" draw (the
    depth is then fixed at the maximum whatever the shrinker tries), so this finishes the job; on
    an already-minimal case it costs log2(depth) probes, all cached."""
    lo, hi = spec.space.depth[0], case.depth
    while lo < hi:
        mid = (lo + hi) // 2
        trial = dataclasses.replace(case, depth=mid)
        if judge(spec, name, measured(trial)).passed:
            lo = mid + 1
        else:
            hi = mid
    return dataclasses.replace(case, depth=hi)


def _message(spec: Spec, name: str, expect: str, met: bool, v: Verdict, case: Case, replay: bool, examples: int | None = None) -> str:
    where = f"{spec.path}::{name}"
    if expect == "holds":
        if met:
            return f"{where}: holds on {examples} cases; closest to its bound: {v.detail} at {case}" if examples else f"{where}: holds at {case}: {v.detail}"
        smallest = "" if replay else "smallest failing case "
        return f"{where}: expected to hold, but it fails at {smallest}{case}: {v.detail}"
    if met:
        smallest = "" if replay else "smallest violating case "
        return f"{where}: violated as expected at {smallest}{case}: {v.detail}"
    if replay:
        return f"{where}: expected to be violated, but it holds at {case}: {v.detail}"
    return f"{where}: expected to be violated, but no case among {examples} broke it; closest: {v.detail} at {case}"
