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
from hypothesis import example, given, seed, target
from hypothesis.errors import HypothesisException

from stability.errors import BlockError, CaseError, SpecError
from stability.families.build import build, derive_seed, make_input
from stability.judge import invariants as inv
from stability.judge import theory_checks as theory
from stability.judge import token_invariants
from stability.judge.growth import enough_members
from stability.judge.invariants import Verdict
from stability.judge.laws import annotate
from stability.measure.channels import ChannelStats
from stability.measure.ensemble import ensemble_size, lesion_ensemble, probe_channel_ensemble, probe_ensemble, probe_ensemble_until_decided
from stability.measure.probe import Measurements, probe
from stability.run.guard import check_budget, time_limit, warm_up
from stability.run.profiles import get_profile, keyed
from stability.run.strategies import cases
from stability.spec.applicability import narrow_for, not_applicable_reason
from stability.spec.case import Case, parse_case_string, reproduce_command
from stability.spec.schema import TRAINING_INVARIANTS, Spec

__all__ = ["CaseRecord", "InvariantResult", "SpecResult", "evaluate", "judge", "run_spec", "run_training", "RunOptions"]


@dataclass
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
    #: False when the replayed case lies outside the cases the invariant applies to: then `met` is
    #: True (nothing was judged), `verdict` is None and `status` is "not_applicable".
    applicable: bool = True
    skipped: bool = False  # not run in this profile (a training invariant outside train.profiles)
    #: The cases judged for this invariant, in order (for `stability.run.audit.rejudge` in the parent).
    judged: tuple[Case, ...] = ()

    @property
    def status(self) -> str:
        if not self.applicable:
            return "not_applicable"
        if self.skipped:
            return "skipped"
        return "ok" if self.met else ("error" if self.error else "failed")


@dataclass
class SpecResult:
    spec: Spec
    results: list[InvariantResult]
    cases: dict[Case, CaseRecord] = field(default_factory=dict)
    seconds: float = 0.0
    profile: str = "dev"
    #: What the spec's own code (factory, blocks) wrote to stdout and stderr in its worker process,
    #: bounded (stability/run/worker.py); empty when nothing was written or capture was off.
    output: str = ""

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
    if name in token_invariants.TOKEN_INVARIANTS:
        return token_invariants.judge(name, expectation, m)
    if name == "jacobian_spectrum":
        return theory.jacobian_spectrum(m, max_spread=expectation.max_spread, mean_lo=expectation.mean_lo, mean_hi=expectation.mean_hi)
    if name == "mean_field":
        return theory.mean_field(m, k_sigma=expectation.k_sigma)
    if name == "lesion":
        return theory.lesion(m, max_change=expectation.max_change, statistic=expectation.statistic)
    if name in TRAINING_INVARIANTS:  # judged on an optimizer run (run_training), not on a probe
        raise ValueError(f"{name} is judged by stability.run.training.evaluate, not from a probe's Measurements")
    if name == "mean_shift":
        return inv.mean_shift(m, max_ratio=expectation.max_ratio)
    return inv.identity_at_init(m, atol=expectation.atol)


def evaluate(spec: Spec, case: Case, options: RunOptions | None = None) -> CaseRecord:
    """Build and probe one case. Problems with the case become `CaseRecord.error`: a block's or
    the factory's own exception on this case, the time limit, memory. A factory that cannot be
    imported or returns something that is not a stack of blocks is bad input: `SpecError`."""
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
                net.blocks,
                x,
                loss=spec.probe.loss,
                seed=derive_seed(case.seed, 2),
                checkpoint_every=spec.probe.checkpoint_every,
                call_kwargs=net.call_kwargs,
                rng_seed=derive_seed(case.seed, 3),
                observers=[*token_invariants.observers_for(spec), *([ChannelStats()] if spec.expect.mean_shift is not None else [])],
            )
            m = token_invariants.finish_measurements(spec, m)
            m.extra.update(theory.extra_measurements(spec, case, net.blocks, x, seed=derive_seed(case.seed, 3)))
            ens = None
            if spec.expect.variance_growth is not None and ensemble_size(spec) > 1:  # the law is judged on seeds
                ens = m.extra["ensemble"] = probe_ensemble_until_decided(
                    spec, case, m, size=ensemble_size(spec), enough=enough_members(case.depth, bounded_ratio=spec.expect.variance_growth.bounded_ratio)
                )
            if spec.expect.mean_field is not None and ensemble_size(spec) > 1:  # so is the mean-field factor (the same members)
                ens = ens or probe_ensemble(spec, case, m, size=ensemble_size(spec))
                m.extra["mean_field_ensemble"] = [(g[0], g[-1]) for g in ens.grad_norm]
            if spec.expect.mean_shift is not None and ensemble_size(spec) > 1:  # so is the mean shift
                m.extra["channel_ensemble"] = probe_channel_ensemble(spec, case, m, size=ensemble_size(spec))
            if spec.expect.lesion is not None and ensemble_size(spec) > 1 and "lesion" in m.extra:  # and the lesions
                m.extra["lesion_ensemble"] = lesion_ensemble(spec, case, m.extra["lesion"], size=ensemble_size(spec))
    except BlockError as exc:  # a block raised on this case (any family): this case fails, the run goes on
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
        return CaseRecord(case, None, f"the case does not run: {what}", time.perf_counter() - t0)
    return CaseRecord(case, m, None, time.perf_counter() - t0)


def judge(spec: Spec, name: str, record: CaseRecord) -> Verdict:
    expectation = getattr(spec.expect, name)
    if record.measurements is None:
        return Verdict(name, False, math.nan, "", None, f"case not measured: {record.error}")
    verdict: Verdict = annotate(spec, record.case, _apply(name, expectation, record.measurements), record.measurements)
    return verdict  # with the law's prediction appended where one applies (stability/judge/laws.py)


def _applies(spec: Spec, name: str, case: Case) -> bool:
    return not_applicable_reason(spec, name, case) is None


def _severity(name: str, v: Verdict, expectation: Any) -> float:
    """How close a passing verdict came to failing (bigger is closer): picks the reported case."""
    if name == "gradient_arrival":
        if not v.observed > 0:
            return math.inf
        return -min(math.log(v.observed / expectation.lo), math.log(expectation.hi / v.observed))
    if name == "attention_entropy":  # lower entropy is closer to collapse
        return -v.observed if math.isfinite(v.observed) else math.inf
    if name == "mean_field" and v.observed > 0 and v.extra.get("predicted", 0) > 0:
        return abs(math.log(v.observed / v.extra["predicted"]))
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
    elif name in token_invariants.TOKEN_INVARIANTS:
        target(-v.observed if name == "attention_entropy" else v.observed, label=name)
    elif name == "jacobian_spectrum":
        target(math.log10(v.observed), label="Jacobian spread (log10)")
    elif name == "lesion":
        target(v.observed, label="lesion change")
    elif name == "mean_field" and v.extra.get("predicted", 0) > 0:
        target(abs(math.log(v.observed / v.extra["predicted"])), label="mean-field mismatch (log)")
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
        if name in TRAINING_INVARIANTS:
            results.append(run_training(spec, name, expectation, options, profile_name, case=case, cache=train_cache))
            continue
        if case is not None:
            results.append(_replay(spec, name, expectation, case, measured))
        else:
            results.append(_search(spec, name, expectation, options, profile_name, profile, measured))
        if on_result is not None:
            on_result(results[-1])
    return SpecResult(spec, results, cache, time.perf_counter() - t0, profile_name)


def _replay(spec: Spec, name: str, expectation: Any, case: Case, measured: Callable[[Case], CaseRecord]) -> InvariantResult:
    reason = not_applicable_reason(spec, name, case)
    if reason is not None:
        return InvariantResult(
            name,
            expectation.expect,
            True,
            None,
            case,
            0,
            f"{spec.path}::{name}: not applicable at {case}: {reason}",
            applicable=False,
        )
    record = measured(case)
    v = judge(spec, name, record)
    met = v.passed == (expectation.expect == "holds") and record.error is None
    message = _unmeasured(spec, name, case, record) or _message(spec, name, expectation.expect, met, v, case, True)
    return InvariantResult(name, expectation.expect, met, v, case, 1, message, reproduce_command(spec, case), record.error, judged=(case,))


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

    strategy = cases(narrow_for(spec, name), device=options.device, invariant=name)
    # One example database entry per (spec, invariant, device), not one for every spec.
    run = keyed(profile, f"{spec.path}::{name}::{options.device}")(given(strategy)(test))
    pinned = [parse_case_string(text, spec, device=options.device) for text in spec.space.examples]
    for c in reversed(pinned):
        run = example(c)(run)
    if options.seed is not None:
        run = seed(options.seed)(run)
    try:
        run()
    except _Found:
        pass
    except HypothesisException as exc:  # e.g. an unsatisfiable space; reported, never a traceback
        return InvariantResult(name, expectation.expect, False, None, None, len(seen), f"the search failed: {exc}", error=str(exc))
    judged = tuple(dict.fromkeys(c for c, _ in seen))  # each case once, in order
    examples = len(judged)
    if failing:
        c = _smallest_depth(spec, name, failing[-1], measured)  # Hypothesis replays its shrunk example last
        record = measured(c)
        v = judge(spec, name, record)
        met = expectation.expect == "violated" and record.error is None
        message = _unmeasured(spec, name, c, record) or _message(spec, name, expectation.expect, met, v, c, False)
        return InvariantResult(name, expectation.expect, met, v, c, examples, message, reproduce_command(spec, c), record.error, judged=judged)
    if not seen:
        return InvariantResult(name, expectation.expect, False, None, None, 0, "no applicable case was drawn", error="no applicable case")
    c, v = max(seen, key=lambda cv: _severity(name, cv[1], expectation))
    met = expectation.expect == "holds"
    return InvariantResult(
        name,
        expectation.expect,
        met,
        v,
        c,
        examples,
        _message(spec, name, expectation.expect, met, v, c, False, examples),
        reproduce_command(spec, c),
        None,
        judged=judged,
    )


def _smallest_depth(spec: Spec, name: str, case: Case, measured: Callable[[Case], CaseRecord]) -> Case:
    """Bisect the depth of a failing case down to the smallest depth that still fails, the other
    values held. Hypothesis's shrinker cannot leave the one-in-eight "deepest depth" draw (the
    depth is then fixed at the maximum whatever the shrinker tries), so this finishes the job; on
    an already-minimal case it costs log2(depth) probes, all cached."""
    space = spec.space.depth
    if getattr(space, "constrained", False):  # bisect over the depths the space admits
        depths = [d for d in (space.values or range(space[0], case.depth + 1, space.multiple_of)) if d <= case.depth]
        lo, hi = 0, len(depths) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if judge(spec, name, measured(dataclasses.replace(case, depth=depths[mid]))).passed:
                lo = mid + 1
            else:
                hi = mid
        return dataclasses.replace(case, depth=depths[hi])
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


def _unmeasured(spec: Spec, name: str, case: Case, record: CaseRecord) -> str | None:
    """The message for a deciding case that could not be measured (a block or the factory raised,
    the time limit, memory): the case fails whatever the expectation; None when it was measured."""
    if record.error is None:
        return None
    return f"{spec.path}::{name}: the case could not be measured at {case}"


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

    assert spec.train is not None  # the loader requires [train] with a training invariant
    t = spec.train
    cache = {} if cache is None else cache
    where = f"{spec.path}::{name}"

    def run(c: Case) -> tuple[Verdict, str | None]:
        v, error = evaluate_training(spec, name, c, case_timeout=options.case_timeout, memory_budget=options.memory_budget, cache=cache)
        if v is None:
            return Verdict(name, False, math.nan, "", None, f"case not trained: {error}"), error
        return v, None

    def result(c: Case, v: Verdict, error: str | None, met: bool, message: str, examples: int) -> InvariantResult:
        return InvariantResult(name, expectation.expect, met, v, c, examples, message, reproduce_command(spec, c), error)

    if case is not None:
        v, error = run(case)
        met = v.passed == (expectation.expect == "holds") and error is None
        return result(case, v, error, met, _message(spec, name, expectation.expect, met, v, case, True), 1)
    if profile_name not in t.profiles:
        return InvariantResult(
            name,
            expectation.expect,
            True,
            None,
            None,
            0,
            f"{where}: skipped in profile {profile_name} (train.profiles = {', '.join(t.profiles)}); run it with --profile {t.profiles[0]}",
            skipped=True,
        )
    _, profile = get_profile(profile_name)
    n = t.cases * (10 if profile_name == "thorough" else 1)
    seen: dict[Case, tuple[Verdict, str | None]] = {}
    failing: list[Case] = []

    def test(c: Case) -> None:
        if c not in seen:
            seen[c] = run(c)
        v, error = seen[c]
        if error is not None or not v.passed:
            failing.append(c)
            raise _Found

    search = settings(profile, max_examples=n, phases=(Phase.explicit, Phase.generate), database=None)
    test_fn = search(given(cases(spec, device=options.device, invariant=name))(test))
    for c in reversed([parse_case_string(text, spec, device=options.device) for text in spec.space.examples]):
        test_fn = example(c)(test_fn)
    if options.seed is not None:
        test_fn = seed(options.seed)(test_fn)
    try:
        test_fn()
    except _Found:
        pass
    except HypothesisException as exc:
        return InvariantResult(name, expectation.expect, False, None, None, len(seen), f"the search failed: {exc}", error=str(exc))
    if failing:
        c = failing[-1]
        v, error = seen[c]
        met = expectation.expect == "violated" and error is None  # not shrunk: worded like a replay
        return result(c, v, error, met, _message(spec, name, expectation.expect, met, v, c, True), len(seen))
    if not seen:
        return InvariantResult(name, expectation.expect, False, None, None, 0, "no case was drawn", error="no case")
    # The case closest to failing: the largest headline number (slope magnitude, loss ratio, mean residual).
    c, (v, _) = max(seen.items(), key=lambda cv: abs(cv[1][0].observed) if math.isfinite(cv[1][0].observed) else math.inf)
    met = expectation.expect == "holds"
    return result(c, v, None, met, _message(spec, name, expectation.expect, met, v, c, False, len(seen)), len(seen))
