"""Stage 1: the `[expect.init_conformance]` table and the rule rows it and the shipped rule tables
(`stability/judge/init_rules.toml`) are written in, with the arithmetic a row's numbers may use.

A **row** says which parameters it covers and the law their init declares:

- which: `name` (the parameter's full name), `param` (its last part: "weight", "bias", "gamma"),
  `module` (the owning module's class or any of its bases: "Linear" covers `FalconLinear`),
  `within` (the class of any module around it: "GPT2MLP"); each one pattern or a list of them,
  where `*` matches any run of characters (dots included) and nothing else is special. A row
  covers a parameter when every key it sets matches; the first row that covers it decides.
- the law (`law`): "normal" (`mean` = 0, `std`), "trunc_normal" (`mean` = 0, `std` and the bounds
  `a` = −2, `b` = 2, torch's `trunc_normal_`), "uniform" (`a`, `b`, or `bound` for ±bound),
  "constant" (`value`), or "any" (declared, not judged: the `source` says why).
- `when`: the row applies only where this is true (`"init_values"`: timm's layer scale is set);
  `count`: how many parameters it must cover (a missing layer scale is a bug too);
- `source`: where the rule is declared (paper, config, library code), shown with every failure.

Numbers are a number or an expression of the model's declared config (`initializer_range`,
`n_layer`, `d_model`, …) and the parameter's `fan_in`, `fan_out` and `numel`: + − * / ** %,
comparisons, `and`, `or` (the first operand that is set and true: `initializer_range or
init_std`), `x if c else y`, `v[i]`, `v[i:j]`, and sqrt, log, exp, abs, min, max, sum, len.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from stability.spec.expectations import Expectation
from stability.spec.values import StrictModel

__all__ = [
    "InitRule",
    "InitConformance",
    "Undefined",
    "compile_expression",
    "evaluate",
    "glob_matches",
    "LAW_PARAMETERS",
]

Number = float | str
Patterns = str | list[str] | None

#: The parameters each law takes, with their defaults (None: required).
LAW_PARAMETERS: dict[str, dict[str, float | None]] = {
    "normal": {"mean": 0.0, "std": None},
    "trunc_normal": {"mean": 0.0, "std": None, "a": -2.0, "b": 2.0},
    "uniform": {"a": None, "b": None},
    "constant": {"value": None},
    "any": {},
}

_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "log": math.log,
    "exp": math.exp,
    "abs": abs,
    "min": min,
    "max": max,
    "sum": sum,
    "len": len,
}
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}


class Undefined(LookupError):
    """An expression names a variable the model does not declare."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _check_node(node: ast.AST) -> None:
    if isinstance(node, ast.Expression):
        _check_node(node.body)
    elif isinstance(node, ast.Constant):
        if not isinstance(node.value, (int, float, str, bool)):
            raise ValueError(f"constant {node.value!r} is not a number, a string or a boolean")
    elif isinstance(node, ast.Name):
        pass
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        _check_node(node.left)
        _check_node(node.right)
    elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        _check_node(node.operand)
    elif isinstance(node, ast.BoolOp):
        for v in node.values:
            _check_node(v)
    elif isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        for v in (node.left, *node.comparators):
            _check_node(v)
    elif isinstance(node, ast.IfExp):
        for v in (node.test, node.body, node.orelse):
            _check_node(v)
    elif isinstance(node, ast.Subscript):
        _check_node(node.value)
        _check_node(node.slice)
    elif isinstance(node, ast.Slice) and node.step is None:
        for bound in (node.lower, node.upper):
            if bound is not None:
                _check_node(bound)
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
    ):
        for v in node.args:
            _check_node(v)
    else:
        raise ValueError(
            f"{ast.unparse(node)!r} is not allowed (numbers, config keys, + - * / ** %, comparisons, and/or, "
            f"x if c else y, v[i], v[i:j], {', '.join(_FUNCTIONS)})"
        )


@lru_cache(maxsize=1024)
def compile_expression(text: str) -> ast.Expression:
    """The parsed expression, or ValueError naming what is not allowed."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"{text!r} is not an expression ({exc.msg})") from None
    _check_node(tree)
    return tree


def _compute(node: ast.AST, env: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env or env[node.id] is None:
            raise Undefined(node.id)
        return env[node.id]
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_compute(node.left, env), _compute(node.right, env))
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_compute(node.operand, env))
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.Or):  # the first operand that is set and true (else the last one's value)
            last: Any = None
            for v in node.values:
                try:
                    last = _compute(v, env)
                except Undefined:
                    continue
                if last:
                    return last
            if last is None:
                raise Undefined(" or ".join(ast.unparse(v) for v in node.values))
            return last
        result: Any = True
        for v in node.values:
            result = _compute(v, env)
            if not result:
                return result
        return result
    if isinstance(node, ast.Compare):
        left = _compute(node.left, env)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _compute(right_node, env)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _compute(node.body, env) if _compute(node.test, env) else _compute(node.orelse, env)
    if isinstance(node, ast.Subscript):
        return _compute(node.value, env)[_compute(node.slice, env)]
    if isinstance(node, ast.Slice):
        return slice(*(None if v is None else _compute(v, env) for v in (node.lower, node.upper)))
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)  # _check_node admitted only named functions
        return _FUNCTIONS[node.func.id](*(_compute(a, env) for a in node.args))
    raise ValueError(f"{ast.unparse(node)!r} is not allowed")  # pragma: no cover (compile_expression refused it)


def evaluate(value: float | int | str | bool, env: Mapping[str, Any]) -> Any:
    """A row's number: itself, or its expression evaluated over `env` (Undefined: a name not set)."""
    if isinstance(value, str):
        return _compute(compile_expression(value).body, env)
    return value


@lru_cache(maxsize=4096)
def _glob(pattern: str) -> str:
    """The regular expression of a pattern: `*` any run of characters, everything else literal."""
    return ".*".join(re.escape(part) for part in pattern.split("*"))


def glob_matches(patterns: Patterns, names: str | tuple[str, ...]) -> bool:
    """Whether any pattern matches (whole) the name or any of the names; None matches everything."""
    if patterns is None:
        return True
    pats = [patterns] if isinstance(patterns, str) else patterns
    candidates = (names,) if isinstance(names, str) else names
    return any(re.fullmatch(_glob(p), n) for p in pats for n in candidates)


class InitRule(StrictModel):
    """One row (the module docstring)."""

    name: Patterns = None
    param: Patterns = None
    module: Patterns = None
    within: Patterns = None
    law: Literal["normal", "trunc_normal", "uniform", "constant", "any"]
    mean: Number | None = None
    std: Number | None = None
    a: Number | None = None
    b: Number | None = None
    bound: Number | None = None
    value: Number | None = None
    when: str | None = None
    count: int | str | None = None
    source: str = Field(min_length=1, description="where the rule is declared: paper, config, library code")

    @field_validator("mean", "std", "a", "b", "bound", "value", "when", "count")
    @classmethod
    def _expression(cls, v: Any) -> Any:
        if isinstance(v, str):
            compile_expression(v)
        elif isinstance(v, float) and not math.isfinite(v):
            raise ValueError("must be finite")
        return v

    @field_validator("std")
    @classmethod
    def _spread(cls, v: Any) -> Any:
        if isinstance(v, int | float) and not isinstance(v, bool) and v < 0:
            raise ValueError(f"is negative, and a standard deviation is ≥ 0 (write {abs(v)!r})")
        return v

    @model_validator(mode="after")
    def _parameters(self) -> InitRule:
        takes = dict(LAW_PARAMETERS[self.law])
        given = {k for k in ("mean", "std", "a", "b", "bound", "value") if getattr(self, k) is not None}
        if self.law == "uniform" and "bound" in given:
            if given & {"a", "b"}:
                raise ValueError("uniform takes a and b, or bound (±bound), not both")
            given = (given - {"bound"}) | {"a", "b"}
        extra = sorted(given - set(takes))
        if extra:
            raise ValueError(f"law {self.law!r} takes {', '.join(takes) or 'no parameters'}, not {', '.join(extra)}")
        missing = [k for k, d in takes.items() if d is None and k not in given]
        if missing:
            raise ValueError(
                f"law {self.law!r} needs {', '.join(missing)}" + (" (or bound)" if self.law == "uniform" else "")
            )
        return self

    def covers(self, name: str, module: tuple[str, ...], within: tuple[str, ...]) -> bool:
        leaf = name.split("[", 1)[0].rpartition(".")[2]
        return (
            glob_matches(self.name, name)
            and glob_matches(self.param, leaf)
            and glob_matches(self.module, module)
            and glob_matches(self.within, within)
        )

    def pattern(self) -> str:
        """The row's covering keys, as a reader sees them."""
        parts = [
            f"{k} {getattr(self, k) if isinstance(getattr(self, k), str) else '|'.join(getattr(self, k))}"
            for k in ("name", "within", "module", "param")
            if getattr(self, k) is not None
        ]
        return ", ".join(parts) or "every parameter"


class InitConformance(Expectation):
    """`[expect.init_conformance]`: every parameter's init against the rule its model declares."""

    #: Rows of the spec's own, tried before the shipped table's (so they add and override).
    rules: list[InitRule] = Field(default_factory=list)
    #: The shipped rule table to use: a name (applied where its `models` match the model's class), false
    #: for none (the model's own recorded intent alone), or unset: the table of the model's class
    #: (`stability.judge.init_tables.choose_table`).
    table: str | bool | None = None
    #: Declared values: those the model's config does not hold (a registered model's own defaults), and the
    #: intended value over the model's own where it holds another (docs/specs.md).
    config: dict[str, float | int | bool | str | list[float]] = Field(default_factory=dict)
    #: A parameter nothing declares (no row covers it, and its init was not recorded or is computed):
    #: "allow" (listed as undeclared) or "fail" (the declared rule must be complete).
    uncovered: Literal["fail", "allow"] = "allow"
    #: The false-alarm level of one case over all its tests (split over them, Bonferroni).
    alpha: float = Field(1e-6, gt=0.0, lt=0.5)
