"""The parent judges again what a spec's worker judged.

A spec's factory and blocks run in its worker process (stability/run/worker.py), next to the code that
judges them, so a factory can replace that code: patch `stability.judge.invariants.gradient_arrival` to
always pass, and a vanishing gradient would be reported met. The parent process never imports a
spec's code, so it judges every case the worker judged again with its own, untouched functions
(`rejudge`), from the measurements the worker sent, and a result that disagrees becomes an error
of that spec (exit 2) naming the case. Judging is cheap next to probing (scalars and short lists).

What this cannot catch: the measurements themselves are taken in the process the spec's code runs
in, and code written to forge them (replacing the probe) is beyond any in-process measurement; the
harness defends against code that crashes, hangs, exits, prints, leaks state or replaces the
verdict, not against a factory built to falsify the numbers.
"""

from __future__ import annotations

from stability.judge.invariants import Verdict
from stability.run.engine import CaseRecord, InvariantResult, SpecResult, judge
from stability.spec.case import Case, reproduce_command
from stability.spec.schema import TRAINING_INVARIANTS, Spec

__all__ = ["rejudge"]


def rejudge(result: SpecResult) -> str | None:
    """Judge every case the worker judged again in this process, from `result.cases`; mark each
    invariant whose reported outcome its measurements contradict as an error (with this process's
    verdict on the case that contradicts it), and return a one-line description of the first
    contradiction (None when everything agrees)."""
    spec, cases = result.spec, result.cases
    first: str | None = None
    for i, r in enumerate(result.results):
        if not r.applicable or r.skipped or r.error or r.name in TRAINING_INVARIANTS or getattr(spec.expect, r.name, None) is None:
            continue
        found = _contradiction(spec, r, cases)
        if found is None:
            continue
        case, v, why = found
        line = f"{spec.path}::{r.name}: the worker reported it {'met' if r.met else 'not met'}, but {why}; the spec's code may have replaced part of the harness"
        result.results[i] = InvariantResult(r.name, r.expect, False, v, case, r.examples, line, reproduce_command(spec, case), error=line, judged=r.judged)
        first = first or line
    return first


def _contradiction(spec: Spec, r: InvariantResult, cases: dict[Case, CaseRecord]) -> tuple[Case, Verdict, str] | None:
    """(case, this process's verdict on it, what contradicts) for the first case whose verdict
    contradicts `r`: its deciding case judged otherwise, or (for an expectation met to hold) any
    case it judged that fails."""
    deciding = cases.get(r.case) if r.case is not None else None
    if deciding is not None and deciding.measurements is not None and r.verdict is not None:
        v = judge(spec, r.name, deciding)
        if v.passed != r.verdict.passed:
            return deciding.case, v, f"case {deciding.case} {'passes' if v.passed else 'fails'} when judged again from its measurements ({v.detail})"
    if r.expect == "holds" and r.met:
        for case in r.judged:  # every case its search judged (each one it applies to)
            record = cases.get(case)
            if record is None or record.measurements is None:
                continue
            v = judge(spec, r.name, record)
            if not v.passed:
                return case, v, f"case {case} fails it when judged again from its measurements ({v.detail})"
    return None
