"""stability/spec/locate.py: the line of an expectation in a spec's text, in every shape TOML allows."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from shipped_support import require_shipped_libraries
from spec_support import SPECS

from stability.spec.load import find_specs, load_spec
from stability.spec.locate import expectation_line, locate_expectation, statements

HEAD = 'name = "x"\ndescription = "d"\nfamily = "plain"\n'


def _line_of(text: str, marker: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if marker in line and not line.startswith("#"))


@pytest.mark.parametrize(
    "body, marker",
    [
        ("[expect.gradient_arrival]\nlo = 0.5\n", "[expect.gradient_arrival]"),
        ('[ expect . "gradient_arrival" ]  # quoted, spaced\nlo = 0.5\n', "[ expect"),
        ("[expect]\nidentity_at_init = { atol = 0.0 }\ngradient_arrival = { lo = 0.5 }\n", "gradient_arrival ="),
        ("[expect]\ngradient_arrival.lo = 0.5\n", "gradient_arrival.lo"),
        ("expect.gradient_arrival.lo = 0.5\n[block]\nlayer = 'linear'\n", "expect.gradient_arrival.lo"),
        ("[expect.gradient_arrival.applies_when]\ndepth = [2]\n[expect.gradient_arrival]\nlo = 0.5\n", "applies_when]"),
        ("expect = { gradient_arrival = { lo = 0.5 } }\n", "expect = {"),
    ],
    ids=[
        "header",
        "quoted-header",
        "inline-table",
        "dotted-under-expect",
        "dotted-top-level",
        "sub-table-first",
        "inline-expect",
    ],
)
def test_every_shape_points_at_its_own_line(body: str, marker: str) -> None:
    text = HEAD + "\n# [expect.gradient_arrival] in a comment is not a header\n" + body + "\n[space]\ndepth = 2\n"
    assert "gradient_arrival" in tomllib.loads(text)["expect"]  # each shape is valid TOML, and means the expectation
    assert expectation_line(text, "gradient_arrival") == _line_of(text, marker)


def test_strings_comments_and_multi_line_values_are_skipped() -> None:
    text = (
        'name = "x"\n'
        'description = """\n[expect.gradient_arrival]\nnot a header: inside a string\n"""\n'
        "literal = '''\n[expect.gradient_arrival]\n'''\n"
        'quote = "a \\" [expect.gradient_arrival]"\n'
        "values = [\n  1,\n  # [expect.gradient_arrival]\n  2,\n]\n"
        "table = { a = 1, b = [\n 3 ] }\n"
        "[expect.variance_growth]\nmax_growth = 'linear'\n"
        "[expect.gradient_arrival]\nlo = 0.5\n"
    )
    tomllib.loads(text)
    assert expectation_line(text, "gradient_arrival") == len(text.splitlines()) - 1
    assert expectation_line(text, "variance_growth") == len(text.splitlines()) - 3
    paths = [path for path, _ in statements(text)]
    assert paths[:6] == [("name",), ("description",), ("literal",), ("quote",), ("values",), ("table",)]
    assert paths[6:] == [
        ("expect", "variance_growth"),
        ("expect", "variance_growth", "max_growth"),
        ("expect", "gradient_arrival"),
        ("expect", "gradient_arrival", "lo"),
    ]


def test_an_expectation_not_written_or_an_unreadable_file_points_at_line_1(tmp_path: Path) -> None:
    assert expectation_line(HEAD, "gradient_arrival") == 1
    assert locate_expectation(tmp_path / "missing.toml", "gradient_arrival") == 1
    (tmp_path / "binary.toml").write_bytes(b"\xff\xfe[expect.x]\n")
    assert locate_expectation(tmp_path / "binary.toml", "x") == 1


def test_every_shipped_expectation_is_found_at_its_header() -> None:
    require_shipped_libraries()
    checked = 0
    for path in find_specs([SPECS, SPECS.parent / "docs" / "examples", SPECS.parent / "stability" / "examples"]):
        lines = path.read_text(encoding="utf-8").splitlines()
        for name, _ in load_spec(path).invariants():
            line = locate_expectation(path, name)
            assert lines[line - 1].strip().startswith(f"[expect.{name}]"), f"{path}:{line}: {lines[line - 1]!r}"
            checked += 1
    assert checked > 50
