"""stability/numbers.py: how a number is written, in JSON and for a person, in one place; and no
other module of the package writes one its own way."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest

import stability
from stability.numbers import from_json_number, from_json_safe, json_number, json_safe, number_text

PACKAGE = Path(stability.__file__).parent
INF, NAN = math.inf, math.nan


def test_a_json_number_spells_what_json_cannot_hold() -> None:
    assert [json_number(x) for x in (1.5, 0, -0.0, None, NAN, INF, -INF)] == [1.5, 0, -0.0, None, "nan", "inf", "-inf"]
    assert [json_number(x, nonfinite="null") for x in (1.5, NAN, INF, -INF)] == [1.5, None, None, None]
    assert isinstance(json_number(0), int)  # an integer stays one: the bytes json.dumps writes do not change


def test_json_safe_reaches_every_depth_and_round_trips() -> None:
    data = {"a": [1.0, NAN, {"b": (INF, -INF, 2)}], "c": "nan", "d": None, "e": True}
    safe = json_safe(data)
    assert safe == {"a": [1.0, "nan", {"b": ["inf", "-inf", 2]}], "c": "nan", "d": None, "e": True}
    text = json.dumps(safe, allow_nan=False)  # standard JSON
    back = from_json_safe(json.loads(text))
    assert math.isnan(back["a"][1]) and back["a"][2]["b"] == [INF, -INF, 2] and back["a"][0] == 1.0
    assert json_safe({"x": [NAN, (1.0, INF)]}, nonfinite="null") == {"x": [None, [1.0, None]]}
    assert [from_json_number(x) for x in ("inf", "-inf", "1.5", 3, None)] == [INF, -INF, "1.5", 3, None]


@pytest.mark.parametrize(
    "x, options, text",
    [
        (0.00169, {}, "0.00169"),
        (1234.5, {}, "1.23e+03"),
        (1.0, {}, "1"),
        (0.0, {}, "0"),
        (-0.0, {}, "0"),
        (None, {}, "—"),
        (NAN, {}, "—"),
        (INF, {}, "inf"),
        (-INF, {}, "-inf"),
        (NAN, {"nan": "nan"}, "nan"),  # the HTML report's cells
        (None, {"missing": "n/a"}, "n/a"),
        (INF, {"infinity": "∞"}, "∞"),  # the sweep report's cells
        (-INF, {"infinity": "∞"}, "−∞"),
        (1.0, {"trailing_zeros": True}, "1.00"),  # the baseline's before → after
        (0.0, {"trailing_zeros": True}, "0.00"),
        (2.4e5, {"trailing_zeros": True}, "2.40e+05"),
        (-INF, {"trailing_zeros": True, "nan": "nan"}, "-inf"),
    ],
)
def test_number_text(x: float | None, options: dict[str, object], text: str) -> None:
    assert number_text(x, **options) == text  # type: ignore[arg-type]


def _is_math_test(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr in ("isfinite", "isnan", "isinf")
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == "math"
        for n in ast.walk(node)
    )


def _str_of_a_name(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "str"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Name)
    )


def _three_digits_alone(node: ast.AST) -> bool:
    """An f-string that is one number at three significant digits and nothing else."""
    if not isinstance(node, ast.JoinedStr) or len(node.values) != 1:
        return False
    v = node.values[0]
    spec = v.format_spec if isinstance(v, ast.FormattedValue) else None
    return spec is not None and "".join(str(c.value) for c in spec.values if isinstance(c, ast.Constant)) in (
        ".3g",
        "#.3g",
    )


def own_number_writers(root: Path = PACKAGE) -> list[str]:
    """Functions outside stability/numbers.py that write a number their own way: one that returns a
    number at three significant digits (a formatter), or one that spells a non-finite float with
    `str` under a `math.isfinite` test (a JSON encoding)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path == root / "numbers.py":
            continue
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef):
                continue
            for n in ast.walk(fn):
                if isinstance(n, ast.Return) and n.value is not None and _three_digits_alone(n.value):
                    found.append(f"{path.relative_to(root)}:{n.lineno} {fn.name} formats a number")
                if (
                    isinstance(n, ast.IfExp)
                    and _is_math_test(n.test)
                    and (_str_of_a_name(n.body) or _str_of_a_name(n.orelse))
                ):
                    found.append(f"{path.relative_to(root)}:{n.lineno} {fn.name} spells a non-finite number")
    return found


def test_no_module_writes_a_number_its_own_way() -> None:
    assert own_number_writers() == []


def test_the_check_finds_a_formatter_and_a_json_spelling(tmp_path: Path) -> None:
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "table.py").write_text(
        "import math\n\n\n"
        "def _fmt(x):\n    return f'{x:.3g}'\n\n\n"
        "def _num(x):\n    return x if math.isfinite(x) else str(x)\n\n\n"
        "def message(x):\n    return f'ratio {x:.3g}'\n"
    )
    (tmp_path / "numbers.py").write_text("def number_text(x):\n    return f'{x:.3g}'\n")
    assert own_number_writers(tmp_path) == [
        "report/table.py:5 _fmt formats a number",
        "report/table.py:9 _num spells a non-finite number",
    ]
