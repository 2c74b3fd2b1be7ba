"""The one judgement: measurements → a verdict (`judge`), and the cases a search or a replay judged →
whether the expectation is met (`conclude`). The engine calls these in the process that probed, and
the parent process calls them again on the measurements a worker streamed (stability.run.audit),
so what a worker claims never decides anything; the sweep judges its points with `judge` too.

Whether an expectation is met is decided by evidence only (`stability.judge.verdict.is_evidence`):
`holds` is met when every case judged passes and gave a number; `violated` (a negative control)
when a measured case fails with a number. A case that could not be measured, a network with no
block, a verdict that measured nothing (an init rule that covered no parameter), or a search that
judged no case never meets either.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from stability.judge.laws import annotate
from stability.judge.verdict import Verdict, is_evidence
from stability.run.results import CaseRecord, InvariantResult
from stability.spec.applicability import not_applicable_reason
from stability.spec.case import Case, reproduce_command
from stability.spec.registry import INVARIANTS
from stability.spec.schema import Spec
from stability.spec.values import ExpectKind

__all__ = [
    "judge",
    "conclude_replay",
    "conclude_search",
    "case_verdicts",
    "not_applicable",
    "severity",
    "message",
    "met_by",
]


def judge(spec: Spec, name: str, record: CaseRecord) -> Verdict:
    """Invariant `name` of `spec` on one probed case, with the law's prediction appended where one
    applies (stability/judge/laws.py). A case that could not be measured is a failed verdict that
    is no evidence."""
    entry = INVARIANTS.get(name)
    if entry.training or entry.judge is None:
        raise ValueError(
            f"{name} is judged on an optimizer run (stability.run.training.evaluate), not from a probe's Measurements"
        )
    if record.measurements is None:
        return Verdict(
            invariant=name,
            passed=False,
            observed=math.nan,
            bound="",
            block=None,
            detail=f"case not measured: {record.error}",
            measured=False,
        )
    if record.measurements.n_blocks == 0:  # every invariant is about blocks: none, nothing judged (never met)
        return Verdict(
            invariant=name,
            passed=False,
            observed=math.nan,
            bound="",
            block=None,
            detail="the network has no block: nothing was judged",
            measured=False,
        )
    verdict: Verdict = annotate(
        spec, record.case, entry.judge(record.measurements, getattr(spec.expect, name)), record.measurements
    )
    return verdict


def case_verdicts(spec: Spec, records: Mapping[Case, CaseRecord]) -> dict[Case, dict[str, Verdict | None]]:
    """Every probed case on every declared probe invariant: its verdict, or None where the
    invariant does not apply (what the reports draw; training invariants are judged on optimizer
    runs, not on these cases, and are left out)."""
    names = [n for n, _ in spec.invariants() if not INVARIANTS.get(n).training]
    return {
        c: {n: None if not_applicable_reason(spec, n, c) is not None else judge(spec, n, r) for n in names}
        for c, r in records.items()
    }


def severity(spec: Spec, name: str, v: Verdict) -> float:
    """How close a passing verdict came to failing (bigger is closer): picks the reported case."""
    return INVARIANTS.get(name).severity_of(v, getattr(spec.expect, name))


def not_applicable(spec: Spec, name: str, case: Case) -> InvariantResult | None:
    """The result of replaying a case the invariant does not apply to (None when it applies)."""
    reason = not_applicable_reason(spec, name, case)
    if reason is None:
        return None
    expect = getattr(spec.expect, name).expect
    return InvariantResult(
        name=name,
        expect=expect,
        met=True,
        verdict=None,
        case=case,
        examples=0,
        message=f"{spec.path}::{name}: not applicable at {case}: {reason}",
        applicable=False,
    )


def met_by(expect: ExpectKind, v: Verdict, record: CaseRecord) -> bool:
    """Whether verdict `v` on `record` meets the expectation `expect` (evidence only)."""
    if record.error is not None or not is_evidence(v):
        return False
    return v.passed == (expect == "holds")


def conclude_replay(
    spec: Spec, name: str, case: Case, record: CaseRecord, v: Verdict | None = None, *, expect: ExpectKind | None = None
) -> InvariantResult:
    """One replayed case (`--case`, a training case): met when its verdict is evidence and agrees
    with the expectation (`expect`, default the spec's)."""
    expect = expect or getattr(spec.expect, name).expect
    v = judge(spec, name, record) if v is None else v
    met = met_by(expect, v, record)
    text = _unmeasured(spec, name, case, record) or message(spec, name, expect, met, v, case, True)
    return InvariantResult(
        name=name,
        expect=expect,
        met=met,
        verdict=v,
        case=case,
        examples=1,
        message=text,
        reproduce=reproduce_command(spec, case),
        error=record.error,
        judged=(case,),
    )


def conclude_search(
    spec: Spec,
    name: str,
    judged: Sequence[Case],
    records: Mapping[Case, CaseRecord],
    *,
    failing: Case | None,
    verdicts: Mapping[Case, Verdict] | None = None,
    expect: ExpectKind | None = None,
) -> InvariantResult:
    """A search's outcome from the cases it judged (in order) and their records: `failing` is the
    smallest case it found that fails (after shrinking), or None. With `verdicts` the judged cases'
    verdicts are taken as given (the process that judged them); the parent passes none and judges
    every case itself. `expect`: the expectation, default the spec's."""
    expect = expect or getattr(spec.expect, name).expect
    cache: dict[Case, Verdict] = dict(verdicts or {})

    def verdict(c: Case) -> Verdict:
        if c not in cache:
            cache[c] = judge(spec, name, records[c])
        return cache[c]

    examples = len(judged)
    if failing is not None:
        record = records[failing]
        v = verdict(failing)
        met = expect == "violated" and met_by("violated", v, record)
        text = _unmeasured(spec, name, failing, record) or message(spec, name, expect, met, v, failing, False)
        return InvariantResult(
            name=name,
            expect=expect,
            met=met,
            verdict=v,
            case=failing,
            examples=examples,
            message=text,
            reproduce=reproduce_command(spec, failing),
            error=record.error,
            judged=tuple(judged),
        )
    if not judged:
        return InvariantResult(
            name=name,
            expect=expect,
            met=False,
            verdict=None,
            case=None,
            examples=0,
            message="no applicable case was drawn",
            error="no applicable case",
        )
    seen = [(c, verdict(c)) for c in judged]
    silent = next(((c, v) for c, v in seen if not is_evidence(v)), None)
    if silent is not None:  # a case that passed without being measured decides nothing
        c, v = silent
        text = f"{spec.path}::{name}: not measured at {c}: {v.detail}"
        return InvariantResult(
            name=name,
            expect=expect,
            met=False,
            verdict=v,
            case=c,
            examples=examples,
            message=text,
            reproduce=reproduce_command(spec, c),
            error=v.detail,
            judged=tuple(judged),
        )
    c, v = max(seen, key=lambda cv: severity(spec, name, cv[1]))
    met = expect == "holds"
    return InvariantResult(
        name=name,
        expect=expect,
        met=met,
        verdict=v,
        case=c,
        examples=examples,
        message=message(spec, name, expect, met, v, c, False, examples),
        reproduce=reproduce_command(spec, c),
        error=None,
        judged=tuple(judged),
    )


def message(
    spec: Spec,
    name: str,
    expect: ExpectKind,
    met: bool,
    v: Verdict,
    case: Case,
    replay: bool,
    examples: int | None = None,
) -> str:
    where = f"{spec.path}::{name}"
    if expect == "holds":
        if met:
            return (
                f"{where}: holds on {examples} cases; closest to its bound: {v.detail} at {case}"
                if examples
                else f"{where}: holds at {case}: {v.detail}"
            )
        if not is_evidence(v):
            return f"{where}: not measured at {case}: {v.detail}"
        smallest = "" if replay else "smallest failing case "
        return f"{where}: expected to hold, but it fails at {smallest}{case}: {v.detail}"
    if met:
        smallest = "" if replay else "smallest violating case "
        return f"{where}: violated as expected at {smallest}{case}: {v.detail}"
    if not is_evidence(v):
        return f"{where}: expected to be violated, but the violation was not measured at {case}: {v.detail}"
    if replay:
        return f"{where}: expected to be violated, but it holds at {case}: {v.detail}"
    return f"{where}: expected to be violated, but no case among {examples} broke it; closest: {v.detail} at {case}"


def _unmeasured(spec: Spec, name: str, case: Case, record: CaseRecord) -> str | None:
    """The message for a deciding case that could not be measured (a block or the factory raised,
    the time limit, memory): the case fails whatever the expectation; None when it was measured."""
    if record.error is None:
        return None
    return f"{spec.path}::{name}: the case could not be measured at {case}"
