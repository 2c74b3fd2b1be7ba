"""`stability check` as the CI gate: exit codes, the table, the JSON report, --case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from shipped_support import require_shipped_libraries
from spec_support import SPECS

from stability.cli import main

SIGMOID = """
name = "plain-sigmoid"
description = "plain sigmoid stack"
family = "plain"
[block]
layer = "linear"
activation = "sigmoid"
[space]
depth = [2, 30]
width = [8, 16]
batch = [4, 8]
weight_init = ["xavier_normal"]
[expect.gradient_arrival]
expect = "{expect}"
lo = 0.01
hi = 100.0
"""


def write(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_passing_spec_exits_0_and_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(SPECS / "preact_mlp.toml"), "--profile", "ci"]) == 0
    out = capsys.readouterr().out
    assert "preact-mlp" in out and "gradient_arrival" in out and "identity_at_init" in out and "✓" in out
    assert "3 expectation(s): 3 met, 0 not met" in out


def test_a_control_claimed_to_hold_exits_1_naming_the_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, SIGMOID.format(expect="holds"))
    assert main(["check", str(path), "--profile", "ci"]) == 1
    out = capsys.readouterr().out
    assert "expected to hold, but it fails at smallest failing case depth=" in out
    assert f"reproduce: stability check {path} --case " in out
    assert "explain:   stability explain gradient_arrival" in out


def test_the_same_control_as_violated_exits_0(tmp_path: Path) -> None:
    assert main(["check", str(write(tmp_path, SIGMOID.format(expect="violated"))), "--profile", "ci"]) == 0


def test_an_unknown_key_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, SIGMOID.format(expect="holds").replace("activation =", "activaton ="))
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{path}: block.activaton = 'sigmoid': unknown key" in err and 'did you mean "activation"' in err


def test_json_report(tmp_path: Path) -> None:
    path = write(tmp_path, SIGMOID.format(expect="holds"))
    out = tmp_path / "out.json"
    assert main(["check", str(path), "--profile", "ci", "--json", str(out)]) == 1
    report = json.loads(out.read_text())
    spec = report["specs"][0]
    assert (spec["name"], spec["file"], spec["family"], spec["verdict"]) == (
        "plain-sigmoid",
        str(path),
        "plain",
        "fail",
    )
    inv = spec["invariants"][0]
    assert inv["name"] == "gradient_arrival" and inv["expect"] == "holds" and inv["verdict"] == "violated"
    assert inv["observed"] < 0.01 and inv["bound"] == "[0.01, 100]"
    assert set(inv["case"]) >= {"depth", "width", "weight_init", "seed", "dtype", "device"}
    case = spec["cases"][0]
    depth = case["case"]["depth"]
    assert len(case["measurements"]["grad_norm"]) == depth + 1 == len(case["measurements"]["act_var"])


def test_replaying_the_printed_case_gives_the_same_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, SIGMOID.format(expect="holds"))
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    main(["check", str(path), "--profile", "ci", "--json", str(first)])
    inv = json.loads(first.read_text())["specs"][0]["invariants"][0]
    case_arg = inv["reproduce"].split("--case ")[1].strip("'")
    assert main(["check", str(path), "--case", case_arg, "--json", str(second)]) == 1
    again = json.loads(second.read_text())["specs"][0]["invariants"][0]
    assert again["observed"] == inv["observed"] and again["case"] == inv["case"]


def test_list_shows_specs_and_families(capsys: pytest.CaptureFixture[str]) -> None:
    require_shipped_libraries()
    assert main(["list", str(SPECS)]) == 0
    out = capsys.readouterr().out
    for family in ("plain", "postnorm", "preact", "highway", "dense", "custom"):
        assert family in out


def test_schema_is_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert {"name", "family", "block", "space", "expect"} <= set(schema["properties"])


def test_version_is_the_packages(capsys: pytest.CaptureFixture[str]) -> None:
    from stability._version import __version__

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out == f"stability {__version__}\n"
