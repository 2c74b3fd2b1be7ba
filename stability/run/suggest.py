"""Suggestions: for a spec with an unmet expectation, which registered remedy
(`stability.spec.remedy`) makes every expectation hold, proven by running it.

The one computation every surface asks (`stability suggest`, `stability check --suggest`, the HTML
report and the GitHub job summary render its result, `Suggestions`):

1. The spec is run as `stability check` runs it (same profile, same executor), unless the caller
   has that result already. Its unmet `holds` expectations are what to fix.
2. Every remedy meant for one of those invariants (`Remedy.fixes`) that applies to the spec
   (`Remedy.applies`) gives an edit; the edited document is validated by the loader (a change the
   family refuses is listed as refused, with the loader's one line), and no edit may touch an
   `[expect]` table or which cases are drawn and how they are judged
   (`stability.run.suggest_candidates.judged_changes`). Each structural remedy is also composed
   with every initialisation remedy that applies to the network it makes, as a candidate of its
   own named `structure+init` (`compositions`: the residual route with its branches at zero).
3. First the failing cases: each candidate replays, with the same seeds, the deciding case of
   every unmet expectation (its values mapped into the edited space where a remedy changed a
   choice, e.g. `branch_init=default` → `zero`), one job per (remedy, case), all at once on the
   executor. A candidate is out at its first case that still fails.
4. Then the survivors on the whole case set: the edited spec's own search in the same profile
   (what `stability check FIXED.toml` runs), every expectation of the spec. A remedy holds when
   every one is met.
   When no candidate holds, every two single remedies whose edits set different keys are tried
   the same way, as one attempt named `a+b` (at most `MAX_PAIRS`, none that repeats a
   composition): qk-layernorm and a z-loss together, where each alone fixes one of two unmet
   expectations.
5. Ranked (`Suggestions.ranked`): fewest changed keys first, then the larger margin (the
   survivors' closest-to-failing verdict of each fixed invariant, by that invariant's severity:
   the one farther from its bound first), then the order tried (registry order, single remedies
   before compositions).

Nothing here writes a file: `stability.cli.suggest` writes `--out`.
"""

from __future__ import annotations

import dataclasses
import math
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stability.errors import SpecError
from stability.run.conclude import severity
from stability.run.engine import RunOptions
from stability.run.executor import Executor, Outcome, Task
from stability.run.results import InvariantResult, SpecResult
from stability.run.suggest_candidates import applies, attempt_of, compositions, pairs, same_changes
from stability.run.suggestions import Attempt, Numbers, Suggestions
from stability.spec.case import Case
from stability.spec.edit import edited_text
from stability.spec.load import load_spec, validate_spec
from stability.spec.registry import INVARIANTS
from stability.spec.remedy import REMEDIES, Remedy
from stability.spec.schema import Spec

__all__ = ["Numbers", "Attempt", "Suggestions", "suggest", "failing_expectations", "map_case"]


def failing_expectations(result: SpecResult, only: str | None = None) -> list[InvariantResult]:
    """The expectations a remedy can fix: declared `holds`, judged, and not met."""
    return [
        r
        for r in result.results
        if not r.met and r.expect == "holds" and r.applicable and not r.skipped and (only is None or r.name == only)
    ]


def map_case(case: Case, spec: Spec) -> Case:
    """`case` with each choice the edited space no longer offers replaced by its first choice (a
    remedy that sets `branch_init = ["zero"]` replays `branch_init=default` as `zero`) and each
    integer it no longer admits by the nearest one it does; every other value, the seed among
    them, unchanged."""
    s = spec.space
    changes: dict[str, Any] = {}
    for key, choices in (("weight_init", s.weight_init), ("branch_init", s.branch_init), ("dtype", s.dtype)):
        if getattr(case, key) not in choices:
            changes[key] = choices[0]
    for key in ("depth", "width", "batch", "spatial", "input_width", "tokens", "seed"):
        value, space = getattr(case, key), getattr(s, key, None)
        if value is not None and space is not None and not _admits(space, value):
            changes[key] = _nearest(space, value)
    return dataclasses.replace(case, **changes) if changes else case


def _admits(space: Any, value: int) -> bool:
    return bool(space.admits(value)) if hasattr(space, "admits") else space[0] <= value <= space[1]


def _nearest(space: Any, value: int) -> int:
    """The value of an integer space nearest `value` (the smaller on a tie)."""
    values = getattr(space, "values", None)
    if values:
        return int(min(values, key=lambda v: (abs(v - value), v)))
    step = getattr(space, "multiple_of", 1)
    lo, hi = -(-space[0] // step) * step, (space[1] // step) * step
    return int(min(max(round(value / step) * step, lo), hi))


def _expect_flipped(data: Mapping[str, Any]) -> dict[str, Any]:
    """The edit that reads every negative control's `expect = "violated"` as "holds"."""
    expect = data.get("expect")
    if not isinstance(expect, Mapping):
        return {}
    return {
        f"expect.{n}.expect": "holds"
        for n, t in expect.items()
        if isinstance(t, Mapping) and t.get("expect") == "violated"
    }


def suggest(
    path: str,
    *,
    options: RunOptions,
    executor: Executor,
    only: str | None = None,
    holds: bool = False,
    result: SpecResult | None = None,
    on_attempt: Callable[[Attempt], None] | None = None,
) -> Suggestions:
    """The remedies that make every expectation of the spec at `path` hold (see the module
    docstring). `holds`: read each `expect = "violated"` as "holds" first (what removes a negative
    control's failure). `result`: the spec's run already made by the caller (`check --suggest`).
    Raises `SpecError` for a spec that does not load or could not run."""
    t0 = time.perf_counter()
    load_spec(path)  # the file's own errors first, worded as `stability check` words them
    with open(path, encoding="utf-8-sig") as fh:
        text = fh.read()
    data = tomllib.loads(text)
    if holds and (flips := _expect_flipped(data)):
        text = edited_text(text, flips)
        data = tomllib.loads(text)
        result = None
    spec = validate_spec(data, file=path)
    if result is None:
        (outcome,) = executor.map([Task(spec, options, only=only)])
        _raise_on_error(outcome, path)
        result = outcome.result
    failing = failing_expectations(result, only)
    unfixable = [
        f"{r.name}: {r.message}"
        for r in result.results
        if not r.met and r.expect != "holds" and (only is None or r.name == only)
    ]
    out = Suggestions(
        path=path,
        name=spec.name,
        profile=result.profile,
        failing=failing,
        attempts=[],
        family=spec.family,
        unfixable=unfixable,
    )
    if not failing:
        out.seconds = time.perf_counter() - t0
        return out
    names = {r.name for r in failing}
    candidates: list[tuple[Attempt, Spec]] = []
    edits: dict[str, tuple[Remedy, dict[str, Any]]] = {}
    for entry in REMEDIES:
        if not entry.fixes & names or not applies(entry, spec, data):
            continue
        try:
            edit = dict(entry.edit(spec, data))
        except Exception as exc:  # a plugin's edit that raises on this spec: listed, never a traceback
            out.attempts.append(
                Attempt(
                    remedy=entry.name,
                    summary=entry.summary,
                    references=entry.references,
                    changes=[],
                    diff="",
                    text=text,
                    status="refused",
                    detail=f"its edit raised {type(exc).__name__}: {exc}",
                )
            )
            continue
        attempt, edited = attempt_of(entry.name, entry.summary, entry.references, edit, data, text, path, spec)
        if attempt is None:
            continue
        _add(out, candidates, attempt, edited, on_attempt)
        if edited is not None:
            edits[entry.name] = (entry, edit)
    for attempt, edited in compositions(list(REMEDIES), names, spec, data, text, path):
        _add(out, candidates, attempt, edited, on_attempt)  # the route around with its branches at zero, ...
    survivors = _replay_failing(candidates, failing, options, executor, on_attempt)
    _confirm(survivors, failing, options, executor, only, on_attempt)
    if not out.ranked and len(edits) > 1:  # no candidate holds: two remedies together (qk-norm and a z-loss, ...)
        together: list[tuple[Attempt, Spec]] = []
        for attempt, edited in pairs(edits, data, text, path, spec):
            if not any(same_changes(attempt, a) for a in out.attempts):  # (not a composition tried already)
                _add(out, together, attempt, edited, on_attempt)
        survivors = _replay_failing(together, failing, options, executor, on_attempt)
        _confirm(survivors, failing, options, executor, only, on_attempt)
    out.seconds = time.perf_counter() - t0
    return out


def _add(
    out: Suggestions,
    candidates: list[tuple[Attempt, Spec]],
    attempt: Attempt,
    edited: Spec | None,
    on_attempt: Callable[[Attempt], None] | None,
) -> None:
    """List an attempt; run it when it was not refused."""
    out.attempts.append(attempt)
    if edited is not None:
        candidates.append((attempt, edited))
    elif on_attempt is not None:
        on_attempt(attempt)


def _raise_on_error(outcome: Outcome, path: str) -> None:
    if outcome.error is not None:
        raise SpecError(
            path, None, f"could not run: {outcome.error}", fix="fix what `stability check` reports for it first"
        )


def _replay_failing(
    candidates: Sequence[tuple[Attempt, Spec]],
    failing: Sequence[InvariantResult],
    options: RunOptions,
    executor: Executor,
    on_attempt: Callable[[Attempt], None] | None,
) -> list[tuple[Attempt, Spec]]:
    """Step 3: every candidate on the deciding case of every unmet expectation, all at once; the
    unmet expectations that share a deciding case share its job (and its optimizer run)."""
    by_case: dict[Case, list[InvariantResult]] = {}
    for r in failing:
        if r.case is not None:
            by_case.setdefault(r.case, []).append(r)
    jobs: list[Task] = []
    owners: list[tuple[int, list[InvariantResult]]] = []
    for i, (attempt, edited) in enumerate(candidates):
        for r in failing:
            attempt.numbers.append(
                Numbers(
                    invariant=r.name,
                    case="" if r.case is None else str(r.case),
                    bound=r.verdict.bound if r.verdict else "",
                    before=r.verdict.observed if r.verdict else math.nan,
                )
            )
        for case, group in by_case.items():
            only = group[0].name if len(group) == 1 else None
            jobs.append(Task(edited, options, case=str(map_case(case, edited)), only=only))
            owners.append((i, group))
    t0 = time.perf_counter()
    outcomes = executor.map(jobs)
    spent = (time.perf_counter() - t0) / max(1, len(candidates))
    out: dict[int, bool] = {i: True for i in range(len(candidates))}
    for (i, group), outcome in zip(owners, outcomes, strict=True):
        attempt = candidates[i][0]
        attempt.seconds += spent / max(1, len(by_case))
        for r in group:
            replayed = next((x for x in outcome.result.results if x.name == r.name), None)
            numbers = next(n for n in attempt.numbers if n.invariant == r.name)
            if replayed is not None:
                numbers.after = replayed.verdict.observed if replayed.verdict is not None else None
                numbers.after_case = None if replayed.case is None else str(replayed.case)
            ok = outcome.error is None and replayed is not None and replayed.met and replayed.applicable
            if not ok and out[i]:
                out[i] = False
                attempt.status = "fails"
                attempt.detail = "at the failing case: " + (
                    outcome.error or (replayed.message if replayed is not None else "not judged")
                )
    survivors = [(a, s) for i, (a, s) in enumerate(candidates) if out[i]]
    for i, (a, _) in enumerate(candidates):
        if not out[i] and on_attempt is not None:
            on_attempt(a)
    return survivors


def _confirm(
    survivors: Sequence[tuple[Attempt, Spec]],
    failing: Sequence[InvariantResult],
    options: RunOptions,
    executor: Executor,
    only: str | None,
    on_attempt: Callable[[Attempt], None] | None,
) -> None:
    """Step 4: each survivor's own search over the whole case set, every expectation."""
    t0 = time.perf_counter()
    outcomes = executor.map([Task(edited, options, only=only) for _, edited in survivors])
    spent = (time.perf_counter() - t0) / max(1, len(survivors))
    for (attempt, edited), outcome in zip(survivors, outcomes, strict=True):
        attempt.seconds += spent
        res = outcome.result
        by_name = {r.name: r for r in res.results}
        for n in attempt.numbers:
            r = by_name.get(n.invariant)
            if r is not None and r.verdict is not None:
                n.closest, n.closest_case, n.examples = (
                    r.verdict.observed,
                    None if r.case is None else str(r.case),
                    r.examples,
                )
        unmet = [r for r in res.results if not r.met]
        unjudged = [  # a fixed expectation the remedied spec no longer judges is not fixed
            r.name
            for r in failing
            if r.name not in by_name or not by_name[r.name].applicable or by_name[r.name].skipped
        ]
        if outcome.error is not None:
            attempt.status, attempt.detail = "fails", f"the edited spec could not run: {outcome.error}"
        elif unmet:
            attempt.status, attempt.detail = "fails", "over the whole case set: " + unmet[0].message
        elif unjudged:
            attempt.status = "fails"
            attempt.detail = (
                f"over the whole case set: {', '.join(unjudged)} judged no case (not applicable or skipped)"
            )
        else:
            attempt.status = "holds"
            met = [by_name[r.name] for r in failing if r.name in by_name]
            attempt.detail = "; ".join(f"{r.name} holds on {r.examples} case(s)" for r in met)
            attempt.margin = tuple(_margin(edited, by_name.get(r.name)) for r in failing)
        if on_attempt is not None:
            on_attempt(attempt)


def _margin(spec: Spec, r: InvariantResult | None) -> float:
    """How close the fixed invariant's closest case came to failing (smaller: more margin)."""
    if r is None or r.verdict is None or r.name not in INVARIANTS:
        return math.inf
    try:
        return float(severity(spec, r.name, r.verdict))
    except Exception:  # a plugin's severity that raises: no margin to rank by
        return math.inf
