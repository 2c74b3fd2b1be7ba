"""Applicability stated, not guessed (stability/spec/applicability.py): `applies_when` validation, the
search drawing only applicable cases, and a replayed case outside shown as "not applicable" in
the terminal, JSON, JUnit and HTML, never as a pass; an `applies_when` outside the space refused by
`check` and `sweep` naming the key and the space."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_support import Cli

from stability.errors import SpecError
from stability.spec.applicability import narrow_for, not_applicable_reason
from stability.spec.case import parse_case_string
from stability.spec.load import parse_spec

FACTORY = """
import torch
from torch import nn


class Residual(nn.Module):
    def __init__(self, width, zero):
        super().__init__()
        self.branch = nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, width))
        if zero:
            nn.init.zeros_(self.branch[-1].weight)
            nn.init.zeros_(self.branch[-1].bias)

    def forward(self, x):
        return x + self.branch(x)


def make(depth, width, branch_init):
    return nn.Sequential(*[Residual(width, branch_init == "zero") for _ in range(depth)])
"""


def custom(applies: str = "") -> str:
    return (
        textwrap.dedent("""\
        name = "applicable"
        description = "a residual MLP whose factory zeroes its branches on branch_init = zero"
        family = "custom"

        [block]
        factory = "applicability_factory:make"

        [space]
        depth = [1, 4]
        width = [2, 6]
        batch = 2
        branch_init = ["default", "zero"]

        [expect.identity_at_init]
        atol = 0.0
        """)
        + applies
    )


@pytest.fixture
def spec_file(tmp_path: Path) -> Callable[[str], Path]:
    (tmp_path / "applicability_factory.py").write_text(FACTORY, encoding="utf-8")

    def write(text: str) -> Path:
        path = tmp_path / "applicable.toml"
        path.write_text(text, encoding="utf-8")
        return path

    return write


ZERO_ONLY = 'applies_when = { branch_init = ["zero"] }\n'


@pytest.mark.slow  # every case of a custom spec; nightly
def test_without_applies_when_a_custom_identity_is_judged_on_every_case(
    cli: Cli, spec_file: Callable[[str], Path]
) -> None:
    code, out, _ = cli("check", spec_file(custom()), "--profile", "ci")
    assert code == 1 and "branch_init=default" in out, out


def test_applies_when_restricts_the_search_to_the_cases_named(
    cli: Cli, spec_file: Callable[[str], Path], tmp_path: Path
) -> None:
    report = tmp_path / "r.json"
    code, out, _ = cli("check", spec_file(custom(ZERO_ONLY)), "--profile", "ci", "--json", report)
    assert code == 0, out
    data = json.loads(report.read_text())
    probed = [c["case"]["branch_init"] for c in data["specs"][0]["cases"]]
    assert probed and set(probed) == {"zero"}


def test_a_replayed_case_outside_is_not_applicable_everywhere(
    cli: Cli, spec_file: Callable[[str], Path], tmp_path: Path
) -> None:
    path = spec_file(custom(ZERO_ONLY))
    out_json, out_xml, out_html = tmp_path / "r.json", tmp_path / "r.xml", tmp_path / "html"
    code, out, err = cli(
        "check",
        path,
        "--case",
        "depth=2,width=3,branch_init=default",
        "--json",
        out_json,
        "--junit",
        out_xml,
        "--html",
        out_html,
    )
    assert code == 5 and "nothing was judged" in err, out  # judged nothing: pytest's "no tests ran", never a pass
    assert "n/a" in out and "not applicable" in out and "✓" not in out
    assert "0 met, 0 not met, 1 not applicable, 0 case(s) probed" in out
    assert "n/a " + f"{path}::identity_at_init: not applicable at depth=2,width=3," in " ".join(out.split())
    inv = json.loads(out_json.read_text())["specs"][0]["invariants"][0]
    assert inv["status"] == "not_applicable" and inv["verdict"] is None and inv["observed"] is None
    assert "branch_init=default is outside expect.identity_at_init.applies_when" in inv["message"]
    suite = ET.parse(out_xml).getroot()
    assert suite.get("skipped") == "1" and suite.get("failures") == "0"
    assert suite.find("testcase/skipped") is not None
    page = (out_html / "index.html").read_text()
    assert 'title="not_applicable">n/a<' in page


def test_a_builtin_identity_is_not_applicable_off_zero_branch() -> None:
    spec = parse_spec(
        textwrap.dedent("""\
        name = "p"
        description = "d"
        family = "preact"
        [space]
        depth = 2
        width = 4
        branch_init = ["default", "zero"]
        [expect.identity_at_init]
        """)
    )
    default = parse_case_string("branch_init=default", spec)
    assert "not a zero-branch init" in (not_applicable_reason(spec, "identity_at_init", default) or "")
    assert not_applicable_reason(spec, "identity_at_init", parse_case_string("branch_init=zero", spec)) is None


def test_choice_keys_narrow_the_drawn_space() -> None:
    spec = parse_spec(custom(ZERO_ONLY).replace('factory = "applicability_factory:make"', 'factory = "m:f"'))
    assert narrow_for(spec, "identity_at_init").space.branch_init == ["zero"]
    assert spec.space.branch_init == ["default", "zero"]
    deep = parse_spec(
        custom('applies_when = { depth = [2, 4], init = ["default"] }\n').replace(
            'factory = "applicability_factory:make"', 'factory = "m:f"'
        )
    )
    narrowed = narrow_for(deep, "identity_at_init").space
    assert narrowed.depth == (2, 4) and narrowed.weight_init == ["default"] and narrowed.width == (2, 6)
    depth3 = parse_case_string("depth=3,branch_init=zero", deep)
    assert "depth=3 is outside expect.identity_at_init.applies_when depth = [2, 4]" in (
        not_applicable_reason(deep, "identity_at_init", depth3) or ""
    )


@pytest.mark.parametrize(
    ("applies", "fragments"),
    [
        (
            'applies_when = { brnch_init = ["zero"] }',
            ["applies_when.brnch_init", "is not a case key", 'did you mean "branch_init"?'],
        ),
        (
            'applies_when = { branch_init = ["rezero"] }',
            ["applies_when.branch_init", "'rezero' is not in space.branch_init ['default', 'zero']"],
        ),
        ("applies_when = { depth = [9] }", ["applies_when.depth", "9 is not a value space.depth [1, 4] can draw"]),
        ("applies_when = { branch_init = [] }", ["lists no value"]),
        ("applies_when = {}", ["applies_when", "is empty"]),
        ('applies_when = { branch_init = "zero" }', ["applies_when.branch_init", "must be a list"]),
    ],
)
def test_bad_applies_when_is_one_line_naming_the_key(applies: str, fragments: list[str]) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(custom(applies + "\n"), file="s.toml")
    line = str(info.value)
    assert "\n" not in line and line.startswith("s.toml: expect.identity_at_init.applies_when")
    for f in fragments:
        assert f in line, line


# ----------------------------------------------------------------------------- applies_when outside the space


APPLIES_WHEN = """\
name = "applies-when-{name}"
description = "applies_when outside the space"
family = "plain"
[space]
depth = [1, 4]
width = {width}
batch = 2
[expect.gradient_arrival]
lo = 0.1
hi = 10.0
applies_when = {{ width = [{value}] }}
"""


@pytest.mark.parametrize(
    ("width", "value", "space"),
    [
        ("{ values = [4, 64] }", 16, "space.width { values = [4, 64] }"),
        ("{ range = [8, 64], multiple_of = 8 }", 9, "space.width { range = [8, 64], multiple_of = 8 }"),
    ],
)
@pytest.mark.parametrize("command", ["check", "sweep"])
def test_applies_when_outside_the_space_is_refused_naming_the_key_and_the_space(
    cli: Cli, tmp_path: Path, width: str, value: int, space: str, command: str
) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(APPLIES_WHEN.format(name=value, width=width, value=value), encoding="utf-8")
    db = tmp_path / "r.sqlite"
    args = ("--profile", "ci") if command == "check" else ("--over", "depth=1,2", "--serial", "--db", db)
    code, out, err = cli(command, spec, *args)
    assert code == 2
    assert (
        err == f"stability: error: {spec}: expect.gradient_arrival.applies_when.width = [{value}]: {value} is not "
        f"a value {space} can draw; list values space.width draws, or widen space.width\n"
    )
    assert "Traceback" not in out + err and not db.exists()
