"""`init_conformance`: every parameter's init against the rule its model declares.

The rule is data: the shipped rule tables (`init_rules.toml` beside this module, one per model
family, each row citing where its rule is declared) with a spec's own rows first
(`[expect.init_conformance] rules`, `stability.spec.init_expect`). Each parameter gets the law of
the first row that covers it, its numbers computed from the model's declared config
(`stability.measure.init_stats.InitRecord.variables`) and the parameter's fans; its statistics are
judged against that law with the sampling theory of `stability.judge.init_laws`, every test of the
case at `alpha / (number of tests)` (Bonferroni), so a correctly initialised model raises a false
alarm in at most a fraction `alpha` of cases, whatever its size. A constant (norm weights and
their offsets, zero biases and tokens, layer-scale values) is exact.

It fails when a parameter breaks its row's law, when a row that declares `count` covers another
number of parameters (a layer scale that is missing), or (`uncovered = "fail"`, the default) when
no row covers a parameter. The failures are reported per row: the parameter names (layer indices
as `*`), the statistic observed and declared, the rule's expression and its source.
"""

from __future__ import annotations

import functools
import math
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any

from stability.errors import StabilityError, did_you_mean
from stability.judge.init_laws import Check, Law, check_parameter, tests_for
from stability.judge.verdict import Verdict
from stability.spec.init_expect import InitConformance, InitRule, Undefined, evaluate, glob_matches

__all__ = ["RuleTable", "rule_tables", "table_for", "rows_of", "init_conformance", "RULES_FILE"]

RULES_FILE = "init_rules.toml"
_NAME = "init_conformance"
_MAX_NAMES = 6  # parameter groups listed per row in the detail (all are in the verdict's extra)


@dataclass(frozen=True)
class RuleTable:
    """One family's declared init: the model classes it covers, the table it extends and its rows."""

    name: str
    models: tuple[str, ...]
    extends: str | None
    rows: tuple[InitRule, ...]


@functools.cache
def rule_tables() -> dict[str, RuleTable]:
    """The shipped tables, in file order (each row validated as a spec's rows are)."""
    data = tomllib.loads(resources.files("stability.judge").joinpath(RULES_FILE).read_text(encoding="utf-8"))
    tables: dict[str, RuleTable] = {}
    for name, table in data.items():
        try:
            rows = tuple(InitRule.model_validate(r) for r in table.get("rows", []))
        except Exception as exc:  # a broken shipped table is a defect of the package, named precisely
            raise StabilityError(f"stability/judge/{RULES_FILE}: table {name!r}: {exc}") from None
        tables[name] = RuleTable(name, tuple(table.get("models", [])), table.get("extends"), rows)
    for t in tables.values():
        if t.extends is not None and t.extends not in tables:
            raise StabilityError(
                f"stability/judge/{RULES_FILE}: table {t.name!r} extends {t.extends!r}, which is not a table"
            )
    return tables


def table_for(model: tuple[str, ...], name: str | None = None) -> RuleTable | None:
    """The table named, or the first whose `models` matches the model's class or a base."""
    tables = rule_tables()
    if name is not None:
        return tables[name]
    return next((t for t in tables.values() if t.models and glob_matches(list(t.models), model)), None)


def rows_of(table: RuleTable | None) -> list[tuple[str, InitRule]]:
    """The table's rows then those of the tables it extends, each with its table's name."""
    out: list[tuple[str, InitRule]] = []
    seen: set[str] = set()
    while table is not None and table.name not in seen:
        seen.add(table.name)
        out += [(table.name, r) for r in table.rows]
        table = rule_tables()[table.extends] if table.extends else None
    return out


def check_table_name(name: str | None) -> str | None:
    """None when `name` is a shipped table (or not given), else the message naming the close ones."""
    if name is None or name in rule_tables():
        return None
    return f"is not a rule table{did_you_mean(name, list(rule_tables()))}; known: {', '.join(rule_tables())}"


# ----------------------------------------------------------------------------- resolving a row's law


class _RuleError(Exception):
    """A row whose numbers cannot be computed for this model (a name its config does not declare)."""


def _number(row: InitRule, key: str, env: dict[str, Any]) -> float:
    raw = getattr(row, key)
    try:
        value = evaluate(raw, env)
    except Undefined as exc:
        raise _RuleError(
            f"its {key} = {raw!r} names {exc.name!r}, which this model does not declare: set it under [expect.init_conformance] config"
        ) from None
    except (ArithmeticError, TypeError, ValueError, IndexError) as exc:
        raise _RuleError(f"its {key} = {raw!r} does not compute for this model ({type(exc).__name__}: {exc})") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _RuleError(f"its {key} = {raw!r} is {value!r} for this model, not a finite number")
    return float(value)


def _applies(row: InitRule, env: dict[str, Any]) -> bool:
    """A row's `when` (a name the config does not set reads as false)."""
    if row.when is None:
        return True
    try:
        return bool(evaluate(row.when, env))
    except Undefined:
        return False
    except (ArithmeticError, TypeError, ValueError, IndexError) as exc:
        raise _RuleError(
            f"its when = {row.when!r} does not compute for this model ({type(exc).__name__}: {exc})"
        ) from None


def _law(row: InitRule, env: dict[str, Any]) -> Law:
    if row.law == "any":
        return Law("any")
    if row.law == "constant":
        return Law("constant", value=_number(row, "value", env))
    if row.law == "uniform":
        if row.bound is not None:
            bound = abs(_number(row, "bound", env))
            a, b = -bound, bound
        else:
            a, b = _number(row, "a", env), _number(row, "b", env)
        return Law("constant", value=a) if a == b else Law("uniform", a=min(a, b), b=max(a, b))
    mean = _number(row, "mean", env) if row.mean is not None else 0.0
    std = _number(row, "std", env)
    if std < 0:
        raise _RuleError(f"its std = {row.std!r} is {std:g} for this model, and a standard deviation is ≥ 0")
    if std == 0:
        return Law("constant", value=mean)
    if row.law == "normal":
        return Law("normal", mean=mean, std=std)
    a = _number(row, "a", env) if row.a is not None else -2.0
    b = _number(row, "b", env) if row.b is not None else 2.0
    if a == b:
        return Law("constant", value=a)
    law = Law("trunc_normal", mean=mean, std=std, a=min(a, b), b=max(a, b))
    try:
        law.moments()
    except (ZeroDivisionError, OverflowError):
        raise _RuleError(f"its truncation [{law.a:g}, {law.b:g}] holds no mass of N({mean:g}, {std:g}²)") from None
    return law


def _declared(row: InitRule, law: Law) -> str:
    """The law with the expression it came from: `N(0, 0.002²), std = initializer_range / sqrt(2 * n_layer)`."""
    keys = {
        "normal": ("std", "mean"),
        "trunc_normal": ("std", "a", "b"),
        "uniform": ("bound", "a", "b"),
        "constant": ("value",),
        "any": (),
    }[row.law]
    exprs = [f"{k} = {getattr(row, k)}" for k in keys if isinstance(getattr(row, k, None), str)]
    return law.describe() + (f" ({'; '.join(exprs)})" if exprs else "")


# ----------------------------------------------------------------------------- the judge


def _group(name: str) -> str:
    return re.sub(r"(?<=\.)\d+(?=\.|$|\[)", "*", name)


def _show(c: Check, law: Law) -> str:
    if c.statistic == "variance":
        lo, hi = math.sqrt(max(c.lo, 0.0)), math.sqrt(c.hi)
        return f"std {math.sqrt(max(c.observed, 0.0)):.4g} (allowed {lo:.4g}..{hi:.4g})"
    if c.statistic == "value":
        return f"value {c.observed:.6g}"
    return f"{c.statistic} {c.observed:.4g} (allowed {c.lo:.4g}..{c.hi:.4g})"


@dataclass
class _RowResult:
    origin: str
    row: InitRule
    covered: list[str]
    broken: list[tuple[str, Check, Law]]


def init_conformance(m: Any, e: InitConformance) -> Verdict:
    """The verdict of one case (the module docstring); `m.extra["init_conformance"]` is the
    `InitRecord` its after-probe measurement took."""
    record = m.extra.get(_NAME)
    bound = f"0 parameters off the declared init (false alarms ≤ {e.alpha:g} a case)"
    if record is None:
        return Verdict(
            _NAME, False, math.nan, bound, None, "no parameter statistics were recorded for this case", measured=False
        )
    table = table_for(tuple(record.model), e.table)
    rows: list[tuple[str, InitRule]] = [("spec", r) for r in e.rules] + rows_of(table)
    if not rows:
        return Verdict(
            _NAME,
            False,
            math.nan,
            bound,
            None,
            f"no rule table declares the init of {record.model[0]}: add rows under [expect.init_conformance] rules",
            measured=False,
        )
    env: dict[str, Any] = {**record.variables, **e.config}
    results = [_RowResult(origin, row, [], []) for origin, row in rows]
    try:
        applicable = [_applies(r.row, env) for r in results]
    except _RuleError as exc:
        return Verdict(
            _NAME, False, math.nan, bound, None, f"a rule cannot be read for this model: {exc}", measured=False
        )
    assigned: list[tuple[Any, _RowResult, Law]] = []
    uncovered: list[str] = []
    for p in record.parameters:
        chosen = next(
            (
                r
                for r, ok in zip(results, applicable, strict=True)
                if ok and r.row.covers(p.name, tuple(p.module), tuple(p.within))
            ),
            None,
        )
        if chosen is None:
            uncovered.append(p.name)
            continue
        local = {**env, "fan_in": p.fan_in, "fan_out": p.fan_out, "numel": p.n}
        try:
            law = _law(chosen.row, local)
        except _RuleError as exc:
            return Verdict(
                _NAME,
                False,
                math.nan,
                bound,
                None,
                f"the rule for {p.name} ({chosen.row.pattern()}, {chosen.origin}) cannot be read: {exc}",
                measured=False,
            )
        chosen.covered.append(p.name)
        assigned.append((p, chosen, law))
    tests = sum(tests_for(law, p.n) for p, _, law in assigned)
    level = e.alpha / max(tests, 1)
    worst = (0.0, "")
    for p, r, law in assigned:
        checks = check_parameter(law, n=p.n, mean=p.mean, var=p.var, lo=p.min, hi=p.max, eps=p.eps, level=level)
        failed = [c for c in checks if not c.passed]
        if failed:
            r.broken.append((p.name, max(failed, key=lambda c: c.excess), law))
            continue
        for c in checks:
            if math.isfinite(c.excess) and c.excess > worst[0]:
                worst = (c.excess, f"{p.name} {c.statistic} at p = {c.p:.2g}")
    problems: list[str] = []
    missing = 0
    for r, ok in zip(results, applicable, strict=True):
        if r.broken:
            problems.append(_row_failure(r))
        if ok and r.row.count is not None:
            try:
                want = int(_number(r.row, "count", env))
            except _RuleError as exc:
                return Verdict(
                    _NAME,
                    False,
                    math.nan,
                    bound,
                    None,
                    f"the rule {r.row.pattern()} ({r.origin}) cannot be read: {exc}",
                    measured=False,
                )
            if len(r.covered) != want:
                missing += abs(want - len(r.covered))
                problems.append(
                    f"{r.row.pattern()}: {len(r.covered)} parameters, declared {want} = {r.row.count} ({r.row.source})"
                )
    if uncovered and e.uncovered == "fail":
        groups = sorted({_group(n) for n in uncovered})
        listed = ", ".join(groups[:_MAX_NAMES]) + (" …" if len(groups) > _MAX_NAMES else "")
        problems.append(
            f'no rule declares the init of {len(uncovered)} parameters: {listed} (add rows under [expect.init_conformance] rules, or uncovered = "allow")'
        )
    broken = sum(len(r.broken) for r in results)
    observed = broken + missing + (len(uncovered) if e.uncovered == "fail" else 0)
    judged = len(assigned)
    where = table.name if table is not None else "the spec's rules"
    extra: dict[str, Any] = {
        "table": where,
        "parameters": judged,
        "tests": tests,
        "level": level,
        "uncovered": uncovered,
        "worst_excess": worst[0],
        "rows": [
            {
                "rule": r.row.pattern(),
                "origin": r.origin,
                "source": r.row.source,
                "covered": len(r.covered),
                "broken": [n for n, _, _ in r.broken],
            }
            for r in results
            if r.covered or r.broken
        ],
    }
    if problems:
        return Verdict(_NAME, False, float(observed), bound, None, "; ".join(problems), extra=extra)
    if judged == 0:  # no parameter held to a rule: nothing was judged, and nothing judged is not a pass
        what = f"none of its {len(uncovered)} parameters is covered by a rule" if uncovered else "it has no parameters"
        return Verdict(_NAME, False, math.nan, bound, None, f"no parameter was judged: {what}", extra, measured=False)
    closest = f"; closest to failing: {worst[1]}" if worst[1] else ""
    skipped = f"; {len(uncovered)} not covered (allowed)" if uncovered else ""
    return Verdict(
        _NAME,
        True,
        0.0,
        bound,
        None,
        f"{judged} parameters hold the init {where} declares ({tests} tests at level {level:.2g} each{closest}){skipped}",
        extra=extra,
    )


def _row_failure(r: _RowResult) -> str:
    """`h.*.mlp.c_proj.weight: std 0.02 (allowed …), declared N(0, 0.002²) (std = …) (source) — 8 of 8 parameters`."""
    by_group: dict[str, list[tuple[str, Check, Law]]] = {}
    for item in r.broken:
        by_group.setdefault(_group(item[0]), []).append(item)
    parts = []
    for g, items in list(by_group.items())[:_MAX_NAMES]:
        name, c, law = max(items, key=lambda it: it[1].excess)
        parts.append(f"{g}: {_show(c, law)}, declared {_declared(r.row, law)}")
    more = f" (and {len(by_group) - _MAX_NAMES} more groups)" if len(by_group) > _MAX_NAMES else ""
    origin = "" if r.origin == "spec" else f"; rule table {r.origin}"
    return f"{'; '.join(parts)}{more} [{r.row.source}{origin}] — {len(r.broken)} of {len(r.covered)} parameters"
