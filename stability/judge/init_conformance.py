"""`init_conformance`: every parameter's init against what its model declares.

Three sources declare a parameter's init, in this order of precedence:

1. the spec's own rows (`[expect.init_conformance] rules`, `stability.spec.init_expect`);
2. the rows of the family table chosen by the model's actual class (`init_rules.toml`,
   `stability.judge.init_tables.choose_table`; each row cites where its rule is declared and
   computes its numbers from the model's declared config, `InitRecord.variables`);
3. the model's own intent, read from the init each parameter received while the model was
   constructed (`InitRecord.trace`, `stability.measure.init_trace`): a parameter whose recorded
   init contradicts the intent (`stability.judge.init_intent.deviations`: left at PyTorch's
   default where the model declares a law, a layer scale or a norm offset not at its declared
   constant, frozen at zero, never written) fails by the rule it breaks; any other parameter's
   values are judged against the law recorded for it, so that what is reported is what the model
   holds.

A row's law, or a recorded one, is judged on the parameter's statistics with the sampling theory
of `stability.judge.init_laws`, every test of the case at `alpha / (number of tests)`
(Bonferroni), so a correctly initialised model raises a false alarm in at most a fraction `alpha`
of cases, whatever its size; a constant is exact. A row that declares `count` must cover that
many parameters (a layer scale that is missing).

A parameter nothing declares (no row covers it, its init was not recorded or is computed — a
table of sin-cos positions, Mamba's log(1..N)) is **undeclared**: listed, not failed, unless
`uncovered = "fail"`. A table named for another class, a row that covers no parameter (a spec's
row; a row of the table's own that names parameters or counts them — its rows by module class
alone are templates), and an init key the spec's config sets to another value than the registered
model's are reported in the detail, each in one line. A case in which nothing was judged is not
met. The failures are reported per row and per rule: the parameter groups (layer indices as `*`),
the law observed or recorded and the one declared, and where it is declared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from stability.judge.init_intent import Deviation, deviations, group_of, trace_of
from stability.judge.init_laws import Check, Law, check_parameter, tests_for
from stability.judge.init_tables import (
    RULES_FILE,
    RuleError,
    RuleTable,
    check_table_name,
    choose_table,
    row_applies,
    row_declared,
    row_law,
    row_number,
    rows_of,
    rule_tables,
    table_for,
)
from stability.judge.verdict import Verdict
from stability.measure.init_trace_law import RecordedLaw
from stability.spec.init_expect import InitConformance, InitRule

__all__ = [
    "RuleTable",
    "rule_tables",
    "table_for",
    "rows_of",
    "check_table_name",
    "init_conformance",
    "judged_law",
    "RULES_FILE",
]

_NAME = "init_conformance"
_MAX_NAMES = 6  # parameter groups listed per row in the detail (all are in the verdict's extra)
_MODEL = "the model's own init"


def judged_law(law: RecordedLaw) -> Law | None:
    """The law the sampling theory judges a recorded one by (None: one it does not judge)."""
    if law.kind == "normal":
        return Law("normal", mean=law.mean, std=law.std)
    if law.kind == "trunc_normal":
        return Law("trunc_normal", mean=law.mean, std=law.std, a=law.a, b=law.b)
    if law.kind == "uniform":
        return Law("uniform", a=law.a, b=law.b)
    if law.kind == "constant":
        return Law("constant", value=law.value)
    return None


def _show(c: Check) -> str:
    if c.statistic == "variance":
        lo, hi = math.sqrt(max(c.lo, 0.0)), math.sqrt(c.hi)
        return f"std {math.sqrt(max(c.observed, 0.0)):.4g} (allowed {lo:.4g}..{hi:.4g})"
    if c.statistic == "value":
        return f"value {c.observed:.6g}"
    return f"{c.statistic} {c.observed:.4g} (allowed {c.lo:.4g}..{c.hi:.4g})"


@dataclass
class _Judged:
    """The parameters one declaration covers (a row, or the model's recorded init) and those off it."""

    origin: str  # "spec", a table's name, or _MODEL
    row: InitRule | None
    applies: bool = True
    covered: list[str] = field(default_factory=list)
    broken: list[tuple[str, Check, str]] = field(default_factory=list)  # (name, worst check, declared law)


@dataclass
class _Row(_Judged):
    """A row's parameters (the spec's or a table's)."""

    row: InitRule

    def idle(self, own: str | None) -> bool:
        """It covers no parameter, and that is worth a word: a spec's row; a row of the table's own
        (not of the tables it extends) that names parameters or counts them (its rows by module class
        alone are templates: a model without biases has no bias to zero)."""
        specific = self.row.name is not None or self.row.count is not None
        return self.applies and not self.covered and (self.origin == "spec" or (self.origin == own and specific))


def _unmeasured(detail: str, bound: str) -> Verdict:
    return Verdict(
        invariant=_NAME, passed=False, observed=math.nan, bound=bound, block=None, detail=detail, measured=False
    )


def init_conformance(m: Any, e: InitConformance) -> Verdict:
    """The verdict of one case (the module docstring); `m.extra["init_conformance"]` is the
    `InitRecord` its after-probe measurement took."""
    record = m.extra.get(_NAME)
    bound = f"0 parameters off the declared init (false alarms ≤ {e.alpha:g} a case)"
    if record is None:
        return _unmeasured("no parameter statistics were recorded for this case", bound)
    table, table_note = choose_table(
        tuple(record.model), e.table, tuple(record.init_defined_by), recorded=record.trace is not None
    )
    rows = rows_of(table, recorded=record.trace is not None)
    judged = [_Row("spec", r) for r in e.rules] + [_Row(origin, r) for origin, r in rows]
    env: dict[str, Any] = {**record.variables, **e.config}
    try:
        for j in judged:
            j.applies = row_applies(j.row, env)
    except RuleError as exc:
        return _unmeasured(f"a rule cannot be read for this model: {exc}", bound)
    model = _Judged(_MODEL, None)
    found = deviations(record)
    intent = {d.name: d for d in found if d.name}
    off_intent: list[Deviation] = [d for d in found if not d.name]  # the model's as a whole
    assigned: list[tuple[Any, _Judged, Law, str]] = []
    undeclared: list[str] = []
    for p in record.parameters:
        where = (tuple(p.module), tuple(p.within))
        chosen = next((j for j in judged if j.applies and j.row.covers(p.name, *where)), None)
        if chosen is not None:
            local = {**env, "fan_in": p.fan_in, "fan_out": p.fan_out, "numel": p.n}
            try:
                law = row_law(chosen.row, local)
            except RuleError as exc:
                return _unmeasured(
                    f"the rule for {p.name} ({chosen.row.pattern()}, {chosen.origin}) cannot be read: {exc}", bound
                )
            chosen.covered.append(p.name)
            assigned.append((p, chosen, law, row_declared(chosen.row, law)))
            continue
        if p.name in intent:
            off_intent.append(intent[p.name])
            continue
        traced = trace_of(record, p.name)
        law_ = judged_law(traced[1]) if traced is not None else None
        if traced is None or law_ is None:
            undeclared.append(p.name)
            continue
        model.covered.append(p.name)
        t, recorded = traced
        assigned.append((p, model, law_, f"{recorded.describe()} by {t.writer.partition(':')[2] or 'its constructor'}"))
    tests = sum(tests_for(law, p.n) for p, _, law, _ in assigned)
    level = e.alpha / max(tests, 1)
    worst = (0.0, "")
    for p, by, law, declared in assigned:
        checks = check_parameter(law, n=p.n, mean=p.mean, var=p.var, lo=p.min, hi=p.max, eps=p.eps, level=level)
        failed = [c for c in checks if not c.passed]
        if failed:
            by.broken.append((p.name, max(failed, key=lambda c: c.excess), declared))
            continue
        for c in checks:
            if math.isfinite(c.excess) and c.excess > worst[0]:
                worst = (c.excess, f"{p.name} {c.statistic} at p = {c.p:.2g}")
    problems: list[str] = []
    missing = 0
    for j in judged:
        if j.broken:
            problems.append(_broken(j))
        if j.applies and j.row.count is not None:
            try:
                want = int(row_number(j.row, "count", env))
            except RuleError as exc:
                return _unmeasured(f"the rule {j.row.pattern()} ({j.origin}) cannot be read: {exc}", bound)
            if len(j.covered) != want:
                missing += abs(want - len(j.covered))
                problems.append(
                    f"{j.row.pattern()}: {len(j.covered)} parameters, declared {want} = {j.row.count} ({j.row.source})"
                )
    if model.broken:
        problems.append(_broken(model))
    problems += _intent_failures(off_intent)
    if undeclared and e.uncovered == "fail":
        problems.append(
            f"no rule declares the init of {len(undeclared)} parameters: {_listed(undeclared)} "
            '(add rows under [expect.init_conformance] rules, or uncovered = "allow")'
        )
    notes = _notes(record, table, table_note, judged, undeclared if e.uncovered != "fail" else [])
    count = len(assigned) + len(off_intent)
    broken = sum(len(j.broken) for j in [*judged, model])
    observed = broken + missing + len(off_intent) + (len(undeclared) if e.uncovered == "fail" else 0)
    extra: dict[str, Any] = {
        "table": table.name if table is not None else None,
        "parameters": count,
        "by_rows": sum(len(j.covered) for j in judged),
        "by_intent": len(model.covered) + len(off_intent),
        "tests": tests,
        "level": level,
        "uncovered": undeclared,
        "worst_excess": worst[0],
        "deviations": [vars(d) | {} for d in off_intent],
        "notes": notes,
        "overrides": [o.describe() for o in record.overrides],
        "rows": [
            {
                "rule": j.row.pattern() if j.row is not None else _MODEL,
                "origin": j.origin,
                "source": j.row.source if j.row is not None else "the init recorded as the model was constructed",
                "covered": len(j.covered),
                "broken": [n for n, _, _ in j.broken],
            }
            for j in [*judged, model]
            if j.covered or j.broken
        ],
    }
    if problems:
        return Verdict(
            invariant=_NAME,
            passed=False,
            observed=float(observed),
            bound=bound,
            block=None,
            detail="; ".join(problems + notes),
            extra=extra,
        )
    if count == 0:
        detail = "nothing was judged: " + (
            "no rule declares the init of any parameter, and no init was recorded"
            if record.parameters
            else "it has no parameters"
        )
        return Verdict(
            invariant=_NAME,
            passed=False,
            observed=math.nan,
            bound=bound,
            block=None,
            detail="; ".join([detail, *notes]),
            extra=extra,
            measured=False,
        )
    closest = f"; closest to failing: {worst[1]}" if worst[1] else ""
    sources = [f"{extra['by_rows']} by the rows of {table.name if table is not None else 'the spec'}"] * bool(
        extra["by_rows"]
    ) + [f"{extra['by_intent']} by {_MODEL}, as recorded"] * bool(extra["by_intent"])
    detail = (
        f"{count} parameters hold their declared init ({', '.join(sources)}; "
        f"{tests} tests at level {level:.2g} each{closest})"
    )
    return Verdict(
        invariant=_NAME,
        passed=True,
        observed=0.0,
        bound=bound,
        block=None,
        detail="; ".join([detail, *notes]),
        extra=extra,
    )


def _listed(names: list[str]) -> str:
    groups = sorted({group_of(n) for n in names})
    return ", ".join(groups[:_MAX_NAMES]) + (" …" if len(groups) > _MAX_NAMES else "")


def _broken(j: _Judged) -> str:
    """`h.*.mlp.c_proj.weight: std 0.02 (allowed …), declared N(0, 0.002²) (std = …) [source] — 8 of 8
    parameters`."""
    by_group: dict[str, list[tuple[str, Check, str]]] = {}
    for item in j.broken:
        by_group.setdefault(group_of(item[0]), []).append(item)
    parts = []
    for g, items in list(by_group.items())[:_MAX_NAMES]:
        _, c, declared = max(items, key=lambda it: it[1].excess)
        verb = "recorded" if j.row is None else "declared"
        parts.append(f"{g}: {_show(c)}, {verb} {declared}")
    more = f" (and {len(by_group) - _MAX_NAMES} more groups)" if len(by_group) > _MAX_NAMES else ""
    if j.row is None:
        where = "the values are not the init recorded as the model was constructed"
    else:
        where = j.row.source + ("" if j.origin == "spec" else f"; rule table {j.origin}")
    return f"{'; '.join(parts)}{more} [{where}] — {len(j.broken)} of {len(j.covered)} parameters"


def _intent_failures(found: list[Deviation]) -> list[str]:
    """One line per (rule, group): `blocks.*.ls1.gamma: recorded = 1 by LayerScale.reset_parameters,
    declared = 1e-06 [layer scale from LayerScale(init_values=1e-06) (…)] — 4 parameters`."""
    by: dict[tuple[str, str], list[Deviation]] = {}
    for d in found:
        by.setdefault((d.rule, d.group), []).append(d)
    out = []
    for (_, g), items in by.items():
        d = items[0]
        n = len(items)
        count = f" — {n} parameter{'s' * (n != 1)}" if d.name else ""
        out.append(f"{g}: recorded {d.recorded}, declared {d.declared} [{d.source}]{count}")
    return out


def _notes(
    record: Any, table: RuleTable | None, table_note: str, judged: list[_Row], undeclared: list[str]
) -> list[str]:
    notes = [table_note] if table_note else []
    idle = [j for j in judged if j.idle(table.name if table is not None else None)]
    if idle:
        listed = "; ".join(f"{j.row.pattern()} ({j.origin})" for j in idle[:_MAX_NAMES])
        notes.append(f"{len(idle)} rule{'s' * (len(idle) != 1)} cover{'s' * (len(idle) == 1)} no parameter: {listed}")
    notes += [o.describe() for o in record.overrides]
    if record.trace is None and record.unrecorded:
        notes.append(f"the init was not recorded ({record.unrecorded}): only rows judge")
    if undeclared:
        notes.append(f"{len(undeclared)} undeclared (not judged): {_listed(undeclared)}")
    return notes
