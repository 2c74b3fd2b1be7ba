"""tests/approx_support.py: `approx` refuses a relative tolerance that pytest.approx's default
absolute one would override, and no test in the suite calls pytest.approx with `rel` alone."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from approx_support import approx

TESTS = Path(__file__).resolve().parent


def test_a_relative_check_on_a_small_number_must_state_its_absolute_tolerance() -> None:
    tiny = 0.5**40  # ≈ 9.1e-13: pytest.approx(tiny, rel=1e-12) would pass 0 and 2·tiny
    assert 0.0 == pytest.approx(tiny, rel=1e-12) and 2 * tiny == pytest.approx(tiny, rel=1e-12)
    with pytest.raises(
        AssertionError, match=r"test_approx_support\.py:\d+: approx\(9\.09.*e-13, rel=1e-12\) .* give abs="
    ):
        approx(tiny, rel=1e-12)
    with pytest.raises(AssertionError, match="give abs="):
        approx({"a": [1.0, tiny]}, rel=1e-12)  # inside a container too
    assert 0.0 != approx(tiny, rel=1e-12, abs=0.0) and tiny * (1 + 1e-13) == approx(tiny, rel=1e-12, abs=0.0)


def test_where_the_relative_tolerance_decides_it_is_pytest_approx() -> None:
    assert 1.0 + 1e-7 == approx(1.0, rel=1e-6) and 1.0 + 1e-5 != approx(1.0, rel=1e-6)
    assert 0.0 == approx(0.0, rel=1e-6)  # zero: the absolute 1e-12 is the only tolerance there is
    assert [1.0, 2.0] == approx([1.0, 2.0 + 1e-9], rel=1e-6) and float("nan") == approx(float("nan"), nan_ok=True)


def _module_dicts(tree: ast.Module) -> dict[str, set[str]]:
    """Module-level NAME = {"rel": ..., "abs": ...} dicts: the keys a `**NAME` hands to approx."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and all(isinstance(k, ast.Constant) for k in node.value.keys):
                found[target.id] = {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    return found


def _relative_only(path: Path) -> list[str]:
    """Calls of pytest.approx that give a relative tolerance and no absolute one."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    dicts, bad = _module_dicts(tree), []
    for node in ast.walk(tree):
        func = node.func if isinstance(node, ast.Call) else None
        if not (isinstance(func, ast.Attribute) and func.attr == "approx" and ast.unparse(func) == "pytest.approx"):
            continue
        assert isinstance(node, ast.Call)
        keys = {k.arg for k in node.keywords if k.arg is not None} | ({"rel"} if len(node.args) > 1 else set())
        for spread in (k.value for k in node.keywords if k.arg is None):
            keys |= dicts.get(spread.id, {"rel"}) if isinstance(spread, ast.Name) else {"rel"}  # unknown: assume rel
        if "rel" in keys and "abs" not in keys:
            bad.append(f"{path.name}:{node.lineno}")
    return bad


def test_no_test_calls_pytest_approx_with_a_relative_tolerance_alone() -> None:
    """Its default abs=1e-12 would override rel on small numbers: such a check uses
    approx_support.approx, which refuses that case, or says abs= itself."""
    here = Path(__file__).resolve()  # its first test shows the trap with pytest.approx itself
    bad = [site for path in sorted(TESTS.rglob("*.py")) if path != here for site in _relative_only(path)]
    assert bad == [], f"pytest.approx(..., rel=...) without abs=: use `from approx_support import approx`: {bad}"


def test_the_scan_sees_each_way_of_giving_rel(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text(
        "import pytest\nR = {'rel': 1e-3}\nRA = {'rel': 1e-3, 'abs': 0}\n"
        "pytest.approx(1, rel=1e-3)\npytest.approx(1, 1e-3)\npytest.approx(1, **R)\npytest.approx(1, **other)\n"
        "pytest.approx(1, **RA)\npytest.approx(1, rel=1e-3, abs=0)\npytest.approx(1)\npytest.approx(1, abs=1)\n",
        encoding="utf-8",
    )
    assert _relative_only(tmp_path / "t.py") == ["t.py:4", "t.py:5", "t.py:6", "t.py:7"]
