"""The family rule tables (`init_rules.toml` beside this module) and the law one row declares for
one parameter (pure: the numbers come from the model's declared config and the parameter's fans).

A table is chosen by the model's **actual class**: its `models` patterns are matched against the
class and its bases (`InitRecord.model`). Named by a spec (`table = "gpt2"`), it is applied when
they match, and otherwise not, in one line (`choose_table`'s note) — a table written for another
class describes another model. Chosen by default, it is the first table whose `models` match a
class of the model **and** whose class's init is the model's: where a more derived class defines
its own init method (`_init_weights`, `init_weights`: `InitRecord.init_defined_by`), the table of a
base describes code the model does not run, and the model's recorded intent judges it instead
(`stability.judge.init_intent`). A table marked `generic` (transformers' PreTrainedModel init, which
every model of the library inherits) states what that code does, not what a model declares beyond
it: by default it is chosen only where no init was recorded, since the recording says the same
and, where the generic code is the bug (it filled Gemma's (1 + w) norms with 1), the table would
declare the bug; for the same reason a generic table's rows do not come with a table that extends
it where the init was recorded. `table = false` chooses none.
"""

from __future__ import annotations

import functools
import math
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any

from stability.errors import StabilityError, did_you_mean
from stability.judge.init_laws import Law
from stability.spec.init_expect import InitRule, Undefined, evaluate, glob_matches

__all__ = [
    "RULES_FILE",
    "RuleTable",
    "RuleError",
    "rule_tables",
    "table_for",
    "choose_table",
    "rows_of",
    "check_table_name",
    "row_number",
    "row_applies",
    "row_law",
    "row_declared",
]

RULES_FILE = "init_rules.toml"


@dataclass(frozen=True, kw_only=True)
class RuleTable:
    """One family's declared init: the model classes it covers, the table it extends and its rows."""

    name: str
    models: tuple[str, ...]
    extends: str | None
    rows: tuple[InitRule, ...]
    #: It states what a library's generic init does (transformers' PreTrainedModel._init_weights):
    #: chosen by default only where no init was recorded.
    generic: bool = False


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
        tables[name] = RuleTable(
            name=name,
            models=tuple(table.get("models", [])),
            extends=table.get("extends"),
            rows=rows,
            generic=bool(table.get("generic", False)),
        )
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


def _matched(t: RuleTable, model: tuple[str, ...]) -> int | None:
    """The place in the model's classes (itself first) of the first the table's `models` match."""
    return next((i for i, c in enumerate(model) if glob_matches(list(t.models), c)), None)


def choose_table(
    model: tuple[str, ...], name: str | bool | None, init_defined_by: tuple[str, ...] = (), *, recorded: bool = False
) -> tuple[RuleTable | None, str]:
    """The table to apply to a model of these classes (the module docstring) and, where a table is
    left out, the one line that says why; `recorded`: the model's init was recorded (a generic
    table is then not chosen by default)."""
    if name is False:
        return None, ""
    tables = rule_tables()
    if isinstance(name, str):
        t = tables[name]
        if not t.models or _matched(t, model) is not None:
            return t, ""
        return None, (
            f"table {name!r} is written for {' or '.join(t.models)}, and {model[0]} is none of them "
            f"(its classes: {', '.join(c.partition(':')[2] for c in model[:4])}): not applied"
        )
    for t in tables.values():
        at = _matched(t, model) if t.models and not (t.generic and recorded) else None
        if at is None:
            continue
        overriding = next((c for c in model[:at] if c in init_defined_by), None)
        if overriding is None:
            return t, ""
        return None, (
            f"table {t.name!r} is written for {model[at]}, whose init {overriding} overrides: "
            "not applied (the model's own init is judged)"
        )
    return None, ""


def rows_of(table: RuleTable | None, *, recorded: bool = False) -> list[tuple[str, InitRule]]:
    """The table's rows then those of the tables it extends, each with its table's name; with
    `recorded` (the model's init was recorded), not those of a generic table it extends (they
    state what generic code does: the recording says what it did)."""
    out: list[tuple[str, InitRule]] = []
    seen: set[str] = set()
    first = table
    while table is not None and table.name not in seen:
        seen.add(table.name)
        if table is first or not (recorded and table.generic):
            out += [(table.name, r) for r in table.rows]
        table = rule_tables()[table.extends] if table.extends else None
    return out


def check_table_name(name: str | bool | None) -> str | None:
    """None when `name` is a shipped table (or not given, or false), else the message naming the close ones."""
    if name is None or name is False or (isinstance(name, str) and name in rule_tables()):
        return None
    if name is True:
        return "is true: name a table of stability/judge/init_rules.toml, or false for none"
    return f"is not a rule table{did_you_mean(str(name), list(rule_tables()))}; known: {', '.join(rule_tables())}"


# ----------------------------------------------------------------------------- resolving a row's law


class RuleError(Exception):
    """A row whose numbers cannot be computed for this model (a name its config does not declare)."""


def row_number(row: InitRule, key: str, env: dict[str, Any]) -> float:
    raw = getattr(row, key)
    try:
        value = evaluate(raw, env)
    except Undefined as exc:
        raise RuleError(
            f"its {key} = {raw!r} names {exc.name!r}, which this model does not declare: "
            "set it under [expect.init_conformance] config"
        ) from None
    except (ArithmeticError, TypeError, ValueError, IndexError) as exc:
        raise RuleError(f"its {key} = {raw!r} does not compute for this model ({type(exc).__name__}: {exc})") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RuleError(f"its {key} = {raw!r} is {value!r} for this model, not a finite number")
    return float(value)


def row_applies(row: InitRule, env: dict[str, Any]) -> bool:
    """A row's `when` (a name the config does not set reads as false)."""
    if row.when is None:
        return True
    try:
        return bool(evaluate(row.when, env))
    except Undefined:
        return False
    except (ArithmeticError, TypeError, ValueError, IndexError) as exc:
        raise RuleError(
            f"its when = {row.when!r} does not compute for this model ({type(exc).__name__}: {exc})"
        ) from None


def row_law(row: InitRule, env: dict[str, Any]) -> Law:
    """The law `row` declares, its numbers computed over `env` (the config and the parameter's fans)."""
    if row.law == "any":
        return Law("any")
    if row.law == "constant":
        return Law("constant", value=row_number(row, "value", env))
    if row.law == "uniform":
        if row.bound is not None:
            bound = abs(row_number(row, "bound", env))
            a, b = -bound, bound
        else:
            a, b = row_number(row, "a", env), row_number(row, "b", env)
        return Law("constant", value=a) if a == b else Law("uniform", a=min(a, b), b=max(a, b))
    mean = row_number(row, "mean", env) if row.mean is not None else 0.0
    std = row_number(row, "std", env)
    if std < 0:
        raise RuleError(f"its std = {row.std!r} is {std:g} for this model, and a standard deviation is ≥ 0")
    if std == 0:
        return Law("constant", value=mean)
    if row.law == "normal":
        return Law("normal", mean=mean, std=std)
    a = row_number(row, "a", env) if row.a is not None else -2.0
    b = row_number(row, "b", env) if row.b is not None else 2.0
    if a == b:
        return Law("constant", value=a)
    law = Law("trunc_normal", mean=mean, std=std, a=min(a, b), b=max(a, b))
    try:
        law.moments()
    except (ZeroDivisionError, OverflowError):
        raise RuleError(f"its truncation [{law.a:g}, {law.b:g}] holds no mass of N({mean:g}, {std:g}²)") from None
    return law


def row_declared(row: InitRule, law: Law) -> str:
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
