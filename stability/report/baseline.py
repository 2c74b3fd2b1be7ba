"""Numbers against a baseline: `stability check --baseline FILE` compares each expectation's
observed number with a JSON report of an earlier run (the base branch's), on the same case, and
fails when a number moved by more than the expectation's `drift`, either way.

**Keying.** A baseline entry is one judged expectation of the report: (spec file, spec name,
invariant, case string), the spec file in one normal form on both sides (`spec_key`). The case
string fixes everything the builder uses, seed included, so replaying it is deterministic: on
unchanged code it gives the same number, bit for bit.

**The same cases.** The search of this run may pick other deciding cases than the baseline's
(the architecture changed, so the closest case moved), so each baseline entry's own case is
replayed on the current code, through the executor `check` used (`Task(case=…, only=…)`). An
entry whose case is also this run's deciding case is read from this run's result instead.

**Comparable runs.** Every spec in a JSON report records its provenance
(`stability.report.provenance`): the spec's content hash, the content hash of a custom spec's
factory module, and the harness's code version.
Whatever differs from the baseline is reported beside the numbers ("changed since the baseline:
the factory module …"), never silently compared, and never hidden: a changed factory is usually
the change under review. An entry that cannot be replayed (its case is outside a changed space,
its invariant is no longer declared, the case no longer runs) is listed as not comparable. A
comparison that compared no entry (`Comparison.compared`) judged nothing: `stability check` exits 5.

**The rule.** The change is relative, |after − before| / |before| (a move away from exactly 0 is
an infinite change). It fails the check (exit 1) when it is larger than `drift` **in either
direction**, or when the replayed case no longer meets the expectation at all (crossing the bound
fails whatever the size of the move). A number that moves a lot means the init changed, whichever
way: a bug can make a healthy number better by the bound's measure, and a negative control that
moves away from its bound is a worse model. The message names the direction: "rose" or "fell",
and toward or away from its bound (`toward_bound`): for an expectation that holds, toward means
the verdict came closer to failing by the search's own measure (`stability.run.conclude.severity`,
the invariant's registry entry's: for a `[lo, hi]` ratio, the log-distance to the nearer bound;
for a one-sided bound, the number itself); for a negative control (`expect = "violated"`), closer
to passing. `--update-baseline` writes this run's JSON report to FILE and reports the changes
without failing on them (drift is a warning there, not an error); it writes nothing when the run
could not judge a spec (exit 2), so a baseline never loses a spec's entries (docs/ci.md).

Reading the FILE, within bounds, is `stability.report.baseline_load`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from stability.judge.verdict import Verdict
from stability.numbers import number_text
from stability.report.provenance import provenance, provenance_changes
from stability.report.text import printable
from stability.run.conclude import severity
from stability.run.report_model import ComparisonEntry, DeltaEntry, DeltaStatus
from stability.run.results import InvariantResult
from stability.spec.case import Case, reproduce_command
from stability.spec.schema import Spec
from stability.spec.values import ExpectKind

if TYPE_CHECKING:  # only named in annotations: reading a baseline (a usage error) imports no torch
    from stability.run.executor import Outcome, Task

__all__ = [
    "Baseline",
    "Comparison",
    "Delta",
    "Key",
    "compare",
    "print_comparison",
    "relative_change",
    "spec_key",
    "toward_bound",
]


@dataclass(frozen=True, kw_only=True)
class Key:
    """What a baseline entry is keyed by."""

    file: str
    spec: str
    invariant: str
    case: str

    def __str__(self) -> str:
        return f"{self.file}::{self.invariant}"


@dataclass(frozen=True, kw_only=True)
class Entry:
    key: Key
    case: Case
    expect: ExpectKind
    met: bool
    verdict: Verdict


@dataclass(kw_only=True)
class Baseline:
    path: str
    entries: list[Entry]
    #: (spec file, spec name) → the provenance recorded for it (None: an older report without it).
    provenance: dict[tuple[str, str], dict[str, Any] | None] = field(default_factory=dict)


@dataclass(kw_only=True)
class Delta:
    """One baseline entry compared: `status` is "drift" (fails), "within" or "not_comparable"."""

    key: Key
    before: float
    after: float | None
    limit: float
    status: DeltaStatus
    why: str
    reproduce: str = ""
    #: The case's values that the spec's space lets vary (what the tables show).
    shown: str = ""

    @property
    def change(self) -> float | None:
        return None if self.after is None else relative_change(self.before, self.after)


@dataclass(kw_only=True)
class Comparison:
    path: str
    deltas: list[Delta]
    #: spec file → what differs from the baseline's provenance, in words.
    changed: dict[str, list[str]] = field(default_factory=dict)
    #: Expectations judged in this run that the baseline has no entry for.
    new: list[str] = field(default_factory=list)
    update: bool = False

    @property
    def drifted(self) -> list[Delta]:
        return [d for d in self.deltas if d.status == "drift"]

    @property
    def compared(self) -> int:
        """How many entries were compared with a number of this run (the not comparable left out):
        a comparison of none judged nothing, and `stability check --baseline` exits 5 on it."""
        return sum(d.status != "not_comparable" for d in self.deltas)

    @property
    def failed(self) -> bool:
        """Whether the comparison fails the run (never while updating the baseline)."""
        return bool(self.drifted) and not self.update

    def to_json(self) -> dict[str, Any]:
        """The report's `baseline` entry (`stability.run.report_model.ComparisonEntry`), as data."""
        return ComparisonEntry(
            file=self.path,
            failed=self.failed,
            deltas=[
                DeltaEntry(
                    **vars(d.key),
                    before=d.before,
                    after=d.after,
                    change=d.change,
                    limit=d.limit,
                    status=d.status,
                    why=d.why,
                )
                for d in self.deltas
            ],
            changed=self.changed,
            new=self.new,
        ).to_data()


def spec_key(path: str) -> str:
    """The one form a spec file takes in a baseline key, on both sides of a comparison: relative to
    this folder when the file lies under it (`specs/x.toml`, whether written `./specs/x.toml`,
    `specs/../specs/x.toml` or as an absolute path), else absolute; normalised either way."""
    absolute = os.path.normpath(os.path.abspath(path))
    here = os.path.abspath(os.curdir)
    return (
        os.path.relpath(absolute, here)
        if absolute == here or absolute.startswith(here.rstrip(os.sep) + os.sep)
        else absolute
    )


# ----------------------------------------------------------------------------- the rule


def relative_change(before: float, after: float) -> float:
    """(after − before) / |before|, signed; ±inf for a move away from exactly 0."""
    if after == before:
        return 0.0
    if before == 0:
        return math.copysign(math.inf, after)
    return (after - before) / abs(before)


def toward_bound(spec: Spec, name: str, before: Verdict, after: Verdict) -> bool:
    """Did the number of invariant `name` of `spec` move toward its bound? Closer to failing for an
    expectation that holds, closer to passing for a negative control."""
    was, now = severity(spec, name, before), severity(spec, name, after)
    return now > was if getattr(spec.expect, name).expect == "holds" else now < was


def _judge(spec: Spec, entry: Entry, after: InvariantResult) -> tuple[DeltaStatus, str]:
    """(status, why) of one entry against its replay."""
    limit = getattr(spec.expect, after.name).drift
    v = after.verdict
    if not after.applicable:
        return "not_comparable", "the case is no longer one the invariant applies to"
    if v is None or not math.isfinite(v.observed) or not math.isfinite(entry.verdict.observed):
        if entry.met and not after.met:
            return (
                "drift",
                f"the case no longer meets the expectation: {after.error or (v.detail if v else after.message)}",
            )
        return "not_comparable", f"no number to compare ({after.error or (v.detail if v else 'not measured')})"
    if entry.met and not after.met:
        return "drift", "the case no longer meets the expectation"  # crossing the bound fails whatever the drift
    change = abs(relative_change(entry.verdict.observed, v.observed))
    if change == 0:
        return "within", "unchanged"
    way = (
        f"{'rose' if v.observed > entry.verdict.observed else 'fell'}, "
        f"{'toward' if toward_bound(spec, after.name, entry.verdict, v) else 'away from'} "
        "its bound"
    )
    if change > limit:
        return "drift", f"{way}, by more than the drift limit"
    return "within", f"{way}, within the drift limit"


# ----------------------------------------------------------------------------- comparing


def compare(
    baseline: Baseline,
    outcomes: Sequence[Outcome],
    *,
    replay: Callable[[list[Task]], list[Outcome]],
    provenances: Mapping[str, dict[str, Any]] | None = None,
    update: bool = False,
) -> Comparison:
    """Compare this run (`outcomes`, one per task) with `baseline`: each entry of a spec and
    invariant judged here is replayed on its own case (`replay` runs tasks on the run's executor)
    unless this run's deciding case is that case already. `provenances` (spec path → `provenance`)
    saves computing them again."""
    here: dict[tuple[str, str, str, str], tuple[Outcome, InvariantResult]] = {}
    for o in outcomes:
        for r in o.result.results:
            here[(spec_key(o.task.spec.path), o.task.spec.name, r.name, o.task.options.device)] = (o, r)
    comparison = Comparison(path=baseline.path, deltas=[], update=update)
    known = {(e.key.file, e.key.spec, e.key.invariant) for e in baseline.entries}
    comparison.new = [
        f"{o.task.spec.path}::{r.name}"
        for (file, name, inv, _), (o, r) in here.items()
        if r.verdict is not None and (file, name, inv) not in known
    ]
    found: list[tuple[Entry, Outcome, InvariantResult | None, str]] = []
    pending: list[tuple[Entry, Outcome]] = []
    for entry in baseline.entries:
        match = here.get((entry.key.file, entry.key.spec, entry.key.invariant, entry.case.device))
        if match is None:
            continue  # a spec, an invariant or a device this run does not judge
        o, r = match
        if r.case == entry.case and r.verdict is not None:
            found.append((entry, o, r, ""))  # this run's deciding case is the baseline's
        else:
            pending.append((entry, o))
    tasks = [replace(o.task, case=entry.key.case, only=entry.key.invariant) for entry, o in pending]
    for (entry, o), ro in zip(pending, replay(tasks) if tasks else [], strict=True):
        again = next((x for x in ro.result.results if x.name == entry.key.invariant), None)
        if ro.error is not None or again is None:  # the case could not be replayed at all (outside a changed space, …)
            found.append((entry, o, None, ro.error or "the replay judged nothing"))
        else:
            found.append((entry, o, again, ""))
    order = {id(e): i for i, e in enumerate(baseline.entries)}
    for entry, o, result, reason in sorted(found, key=lambda m: order[id(m[0])]):
        spec = o.task.spec
        expectation = getattr(spec.expect, entry.key.invariant)
        command, shown = reproduce_command(spec, entry.case), entry.case.varying(spec)
        if result is None:
            comparison.deltas.append(
                Delta(
                    key=entry.key,
                    before=entry.verdict.observed,
                    after=None,
                    limit=expectation.drift,
                    status="not_comparable",
                    why=reason,
                    reproduce=command,
                    shown=shown,
                )
            )
            continue
        status, why = _judge(spec, entry, result)
        after = (
            result.verdict.observed if result.verdict is not None and math.isfinite(result.verdict.observed) else None
        )
        comparison.deltas.append(
            Delta(
                key=entry.key,
                before=entry.verdict.observed,
                after=after,
                limit=expectation.drift,
                status=status,
                why=why,
                reproduce=command,
                shown=shown,
            )
        )
    compared = {(d.key.file, d.key.spec) for d in comparison.deltas}
    for o in outcomes:
        spec = o.task.spec
        where = (spec_key(spec.path), spec.name)
        if where in compared and spec.path not in comparison.changed:
            now = (provenances or {}).get(spec.path) or provenance(spec)
            changes = provenance_changes(baseline.provenance.get(where), now)
            if changes:
                comparison.changed[spec.path] = changes
    return comparison


# ----------------------------------------------------------------------------- terminal


def fmt(x: float | None) -> str:
    """A number as the comparison shows it: three significant digits, trailing zeros kept (1.00)."""
    return number_text(x, nan="nan", trailing_zeros=True)


def fmt_change(d: Delta) -> str:
    change = d.change
    return "—" if change is None else ("0%" if change == 0 else f"{change:+.1%}")


def fmt_limit(limit: float) -> str:
    return "none" if math.isinf(limit) else f"{limit:.0%}" if limit * 100 == round(limit * 100) else f"{limit:.2%}"


def headline(c: Comparison) -> str:
    compared = c.compared
    text = (
        f"against the baseline {c.path}: {compared} expectation(s) compared on the same cases, "
        f"{len(c.drifted)} moved past the drift limit"
    )
    lost = len(c.deltas) - compared
    if lost:
        text += f", {lost} not comparable"
    if c.new:
        text += f", {len(c.new)} new (no baseline)"
    return text + (" (--update-baseline: not failing on it)" if c.update and c.drifted else "")


def print_comparison(c: Comparison, console: Console, *, quiet: bool = False) -> None:
    """The table of before → after (unless `quiet`), each drift with its reproduce command, and
    what changed since the baseline."""
    if c.deltas and not quiet:
        table = Table(header_style="bold")
        for col in ("spec", "invariant", "", "before → after", "change", "drift limit", "case"):
            table.add_column(col, justify="right" if col in ("change", "drift limit") else "left", overflow="fold")
        for d in c.deltas:
            mark = {"drift": "[red]✗[/red]", "within": "[green]✓[/green]"}.get(d.status, "[dim]n/a[/dim]")
            table.add_row(
                escape(printable(d.key.spec)),
                d.key.invariant,
                mark,
                f"{fmt(d.before)} → {fmt(d.after)}",
                fmt_change(d),
                fmt_limit(d.limit),
                escape(printable(d.shown)),
            )
        console.print(table)
    for d in c.deltas:
        if d.status == "drift":
            numbers = f"{fmt(d.before)} → {fmt(d.after)} ({fmt_change(d)}, drift limit {fmt_limit(d.limit)})"
            console.print(
                f"[red]✗[/red] {escape(printable(str(d.key)))}: {numbers}: {escape(printable(d.why))}", soft_wrap=True
            )
            if d.reproduce:
                console.print(f"    reproduce: {escape(printable(d.reproduce))}", soft_wrap=True)
        elif d.status == "not_comparable":
            console.print(
                f"[dim]n/a {escape(printable(str(d.key)))} at {escape(printable(d.key.case))}: not "
                f"comparable: {escape(printable(d.why))}[/dim]",
                soft_wrap=True,
            )
    for file, changes in c.changed.items():
        console.print(
            f"    changed since the baseline in {escape(printable(file))}: {escape(printable('; '.join(changes)))}",
            soft_wrap=True,
        )
    console.print(headline(c), soft_wrap=True)
