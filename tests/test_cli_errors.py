"""Misusing the command line gives one line and exit 2; user strings reach the reports escaped.

Reports carry strings the user controls (spec names, descriptions, file paths): JSON escapes them
by construction, JUnit XML goes through ElementTree (which escapes markup but writes control
characters raw, so those are written as \\xNN), and the terminal table escapes rich markup.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_support import Cli, one_error


def test_a_path_that_does_not_exist(cli: Cli, tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    line = one_error(cli("check", missing))
    assert f"{missing}: no such file or folder" in line
    assert "pass a spec file or a folder of *.toml specs" in line


def test_a_folder_with_no_specs(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a spec")
    line = one_error(cli("check", tmp_path))
    assert f"{tmp_path}: no *.toml spec files found" in line


def test_a_run_where_no_spec_loads_prints_its_errors_and_no_empty_summary(
    cli: Cli, write_spec: Callable[..., Path], base_spec: str
) -> None:
    path = write_spec(base_spec.replace('family = "plain"', 'family = "plian"'))
    code, out, err = cli("check", path, "--in-process")
    line = one_error((code, out, err))
    assert "family" in line and "plian" in line
    assert "spec(s)" not in out, out  # (no "0 spec(s), 0 expectation(s)" line under the error)


def test_an_unknown_case_key_says_did_you_mean(cli: Cli, write_spec: Callable[..., Path], base_spec: str) -> None:
    line = one_error(cli("check", write_spec(base_spec), "--case", "dept=3"))
    assert "--case: unknown key 'dept'" in line
    assert 'did you mean "depth"?' in line
    assert "known keys: init, depth, width" in line


def test_a_case_value_outside_the_space(cli: Cli, write_spec: Callable[..., Path], base_spec: str) -> None:
    line = one_error(cli("check", write_spec(base_spec), "--case", "depth=30"))
    assert "--case: depth=30 is outside the spec's space [1, 4]" in line


def test_a_case_choice_outside_the_space_says_did_you_mean(
    cli: Cli, write_spec: Callable[..., Path], base_spec: str
) -> None:
    line = one_error(cli("check", write_spec(base_spec), "--case", "depth=2,init=defualt"))
    assert "init=defualt" in line and 'did you mean "default"?' in line


def test_a_case_that_is_not_key_value(cli: Cli, write_spec: Callable[..., Path], base_spec: str) -> None:
    line = one_error(cli("check", write_spec(base_spec), "--case", "depth"))
    assert "'depth' is not key=value" in line


def test_case_with_several_specs(cli: Cli, write_spec: Callable[..., Path], base_spec: str) -> None:
    write_spec(base_spec, "a.toml")
    folder = write_spec(base_spec.replace('name = "base"', 'name = "other"'), "b.toml").parent
    line = one_error(cli("check", folder, "--case", "depth=1"))
    assert "--case replays one case of one spec, but 2 specs were given" in line


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["check", "--profile", "quick"], "invalid choice: 'quick'"),
        (["check", "--case-timeout", "soon"], "invalid float value: 'soon'"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        ([], "the following arguments are required: command"),
    ],
    ids=["profile", "case-timeout", "command", "nothing"],
)
def test_argument_errors(cli: Cli, args: list[str], fragment: str) -> None:
    line = one_error(cli(*args))
    assert fragment in line and "see `stability" in line


def test_a_bad_memory_budget(cli: Cli, write_spec: Callable[..., Path], base_spec: str) -> None:
    line = one_error(cli("check", write_spec(base_spec), "--memory-budget", "lots"))
    assert "--memory-budget 'lots': write a size like 4GiB" in line


def test_every_bad_file_gets_its_own_line(cli: Cli, write_spec: Callable[..., Path], base_spec: str) -> None:
    a = write_spec(base_spec.replace("batch = 2", "batch = 0"), "a.toml")
    b = write_spec(base_spec.replace("lo = 0.1", "lo = nan"), "b.toml")
    code, out, err = cli("check", a.parent)
    assert code == 2 and "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("stability: error: ") for line in lines), err
    assert str(a) in lines[0] and "space.batch = 0" in lines[0]
    assert str(b) in lines[1] and "expect.gradient_arrival.lo = nan" in lines[1]


def test_two_specs_with_one_name(cli: Cli, write_spec: Callable[..., Path], base_spec: str) -> None:
    write_spec(base_spec, "a.toml")
    folder = write_spec(base_spec, "b.toml").parent
    line = one_error(cli("check", folder))
    assert "b.toml: name = 'base': is already used by" in line and "a.toml" in line


# ----------------------------------------------------------------------------- escaping


NASTY = '<x a="1"> & \' ]]> [red]not markup[/red] \\u001b[31m'  # as written in TOML
NASTY_VALUE = '<x a="1"> & \' ]]> [red]not markup[/red] \x1b[31m'  # as loaded


def test_user_strings_reach_json_and_junit_escaped(cli: Cli, tmp_path: Path, base_spec: str) -> None:
    folder = tmp_path / 'we<ird> & "quoted"'
    folder.mkdir()
    spec = folder / "a\x1bb.toml"  # a file name may hold a control character
    text = base_spec.replace('name = "base"', f'name = "{NASTY.replace(chr(34), chr(92) + chr(34))}"')
    spec.write_text(text.replace('"a small plain MLP"', f'"{NASTY.replace(chr(34), chr(92) + chr(34))}"'))
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    # depth=1 passes, depth=4 fails: one ok and one failing testcase, so the message is written too
    for case, expected in (("depth=1", 0), ("depth=4", 1)):
        code, out, err = cli("check", spec, "--case", case, "--json", report, "--junit", junit)
        assert code == expected, err
        data = json.loads(report.read_text(encoding="utf-8"))
        assert data["specs"][0]["name"] == NASTY_VALUE
        assert data["specs"][0]["description"] == NASTY_VALUE
        assert data["specs"][0]["file"] == str(spec)
        root = ET.fromstring(junit.read_bytes())  # parses: nothing raw that XML cannot hold
        testcase = root.find("testcase")
        assert testcase is not None
        assert testcase.get("classname") == str(spec).replace("\x1b", "\\x1b")
        assert 'we<ird> & "quoted"' in testcase.get("classname", "")
    failure = testcase.find("failure")
    assert failure is not None and 'we<ird> & "quoted"' in failure.get("message", "")
    assert "\\x1b" in (failure.text or "")
    # the table shows rich markup in a name literally instead of interpreting it
    assert "[red]not markup[/red]" in out


def test_a_fault_of_the_tool_exits_3_with_its_traceback_neutralised(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """An exception the tool did not expect is its own fault: exit 3 (pytest's internal error), not
    Python's 1, which a CI gate reads as "an expectation was not met"; its traceback goes through
    the same neutralisation as every other text (stability.report.text)."""
    import stability.cli.check
    from stability.cli import main

    def broken(*args: object) -> int:
        raise RuntimeError("##[add-mask]secret\n::stop-commands::tok")

    monkeypatch.setattr(stability.cli.check, "check_command", broken)
    assert main(["check", "specs/plain_mlp.toml"]) == 3
    err = capfd.readouterr().err
    assert "Traceback" in err and "RuntimeError" in err
    assert "##[add-mask]" not in err and "##\\[add-mask]secret" in err
    assert "\n::stop-commands" not in err and ":\\:stop-commands::tok" in err
    assert (
        err.strip().splitlines()[-1]
        == "stability: internal error (the traceback above is the tool's own fault, not the spec's); exit code 3"
    )
