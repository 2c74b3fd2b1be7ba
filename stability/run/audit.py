"""The parent decides what a spec's worker judged.

A spec's factory and blocks run in its worker process (stability/run/worker.py), next to the code that
judges them, so a factory can replace that code or rewrite what the worker sends: patch a judge to
always pass, or rewrite the results to "met". So the parent, which never imports a spec's code,
takes from the worker only which cases each invariant's search judged and which one it found
failing, and the measurements it streamed (and checks that what it calls not applicable is), and
decides every expectation itself with its own, untouched `stability.run.conclude` (the same
functions the engine uses, so an honest worker's results come out identical). Where the parent's
conclusion differs from the worker's, it replaces it and the spec gets an error (exit 2) naming the
case: the spec's code may have replaced part of the harness. Judging is cheap next to probing
(scalars and short lists).

What this cannot catch: the measurements themselves are taken in the process the spec's code runs
in, and code written to forge them (replacing the probe, or hiding a case's record) is beyond any
in-process measurement; the training invariants' optimizer runs are judged in the worker (they run
only the built-in families' code, never a factory's); the harness defends against code that crashes,
hangs, exits, prints, leaks state or replaces the verdict, not against a factory built to falsify
the numbers.
"""

from __future__ import annotations

import math
from typing import Any

from stability.judge.verdict import Verdict, is_evidence
from stability.run.conclude import conclude_replay, conclude_search, judge
from stability.run.results import CaseRecord, InvariantResult, SpecResult
from stability.spec.applicability import not_applicable_reason
from stability.spec.case import Case, reproduce_command
from stability.spec.registry import INVARIANTS

__all__ = ["rejudge"]

_TAMPERED = "; the spec's code may have replaced part of the harness"


def rejudge(result: SpecResult, *, replay: bool) -> str | None:
    """Decide every probe invariant of `result` again from `result.cases` (the streamed records);
    replace each result the parent concludes otherwise, and return a one-line description of the
    first such contradiction (None when the worker's results stand). `replay`: the task replayed
    one case (`--case`) instead of searching."""
    spec, cases = result.spec, result.cases
    first: str | None = None
    for i, r in enumerate(result.results):
        if not r.applicable and r.name in INVARIANTS and getattr(spec.expect, r.name, None) is not None:
            if (
                r.case is None or not_applicable_reason(spec, r.name, r.case) is None
            ):  # it does apply: it was not judged
                where = f" at {r.case}" if r.case is not None else ""
                line = (
                    f"{spec.path}::{r.name}: the worker reported it not applicable{where}, but it applies "
                    f"there{_TAMPERED}"
                )
                result.results[i] = InvariantResult(
                    name=r.name,
                    expect=r.expect,
                    met=False,
                    verdict=None,
                    case=r.case,
                    examples=0,
                    message=line,
                    error=line,
                )
                first = first or line
            continue
        if (
            r.skipped
            or r.name not in INVARIANTS
            or INVARIANTS.get(r.name).training
            or getattr(spec.expect, r.name, None) is None
        ):
            continue
        if r.error is not None and not r.judged:  # never judged (the run stopped first): already a failure
            continue
        missing = [c for c in (*r.judged, *([r.case] if r.case is not None else [])) if c not in cases]
        if missing:
            line = (
                f"{spec.path}::{r.name}: the worker reported it judged case {missing[0]} but sent no "
                f"measurements for it{_TAMPERED}"
            )
            result.results[i] = InvariantResult(
                name=r.name,
                expect=r.expect,
                met=False,
                verdict=None,
                case=missing[0],
                examples=r.examples,
                message=line,
                reproduce=reproduce_command(spec, missing[0]),
                error=line,
                judged=r.judged,
            )
            first = first or line
            continue
        mine = _conclude(r, cases, replay=replay, spec=spec)
        if _same(mine, r):
            continue
        line = (
            f"{spec.path}::{r.name}: the worker reported it {'met' if r.met else 'not met'}, but "
            f"{_why(spec, r, mine, cases)}{_TAMPERED}"
        )
        result.results[i] = InvariantResult(
            name=mine.name,
            expect=mine.expect,
            met=False,
            verdict=mine.verdict,
            case=mine.case,
            examples=mine.examples,
            message=line,
            reproduce=mine.reproduce,
            error=line,
            judged=mine.judged,
        )
        first = first or line
    return first


def _conclude(r: InvariantResult, cases: dict[Case, CaseRecord], *, replay: bool, spec: object) -> InvariantResult:
    from stability.spec.schema import Spec

    assert isinstance(spec, Spec)
    if replay and r.case is not None:
        return conclude_replay(spec, r.name, r.case, cases[r.case])
    failing = None
    if r.case is not None and not judge(spec, r.name, cases[r.case]).passed:
        failing = r.case  # the smallest failing case the worker's search found: it does fail
    else:  # the worker claims no case failed: any judged case that fails says otherwise
        failing = next((c for c in r.judged if not judge(spec, r.name, cases[c]).passed), None)
    return conclude_search(spec, r.name, r.judged, cases, failing=failing)


def _why(spec: Any, r: InvariantResult, mine: InvariantResult, cases: dict[Case, CaseRecord]) -> str:
    """What contradicts the worker's result, in words."""
    if r.case is not None and r.verdict is not None:
        v = judge(spec, r.name, cases[r.case])
        if v.passed != r.verdict.passed:
            return (
                f"case {r.case} {'passes' if v.passed else 'fails'} when judged again from its "
                f"measurements ({v.detail})"
            )
    if mine.case is not None and mine.verdict is not None and not mine.verdict.passed:
        return f"case {mine.case} fails it when judged again from its measurements ({mine.verdict.detail})"
    return f"judged again from its measurements it is {'met' if mine.met else 'not met'} ({mine.message})"


def _same(a: InvariantResult, b: InvariantResult) -> bool:
    """The parent's and the worker's conclusions agree: the same outcome, decided on the same case
    with the same verdict."""
    if a.met != b.met or a.case != b.case or (a.verdict is None) != (b.verdict is None):
        return False
    if a.verdict is None or b.verdict is None:
        return True
    return (
        a.verdict.passed == b.verdict.passed
        and _same_number(a.verdict, b.verdict)
        and is_evidence(a.verdict) == is_evidence(b.verdict)
    )


def _same_number(a: Verdict, b: Verdict) -> bool:
    return a.observed == b.observed or (math.isnan(a.observed) and math.isnan(b.observed))
