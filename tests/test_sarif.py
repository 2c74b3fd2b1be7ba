"""stability/report/sarif.py: `--sarif FILE`, SARIF 2.1.0 as code scanning (upload-sarif) reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_github import FAILING, PASSING

from stability.cli import main
from stability.report.sarif import SARIF_SCHEMA


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "failing.toml").write_text(FAILING)
    (tmp_path / "specs" / "passing.toml").write_text(PASSING)
    (tmp_path / "specs" / "broken.toml").write_text(
        PASSING.replace('name = "relu"', 'name = "broken"').replace("batch = 2", "batch = 0")
    )
    monkeypatch.chdir(tmp_path / "specs")  # reports are located from the workspace, not from here
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    return tmp_path


def test_one_result_per_unmet_expectation_at_its_line(repo: Path) -> None:
    assert (
        main(["check", ".", "--profile", "ci", "--in-process", "--sarif", "../out/s.sarif"]) == 2
    )  # broken.toml does not load
    log = json.loads((repo / "out" / "s.sarif").read_text())
    assert log["$schema"] == SARIF_SCHEMA and log["version"] == "2.1.0"
    (run,) = log["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert run["tool"]["driver"]["name"] == "stability" and [r["id"] for r in rules] == [
        "spec_load",
        "gradient_arrival",
        "variance_growth",
    ]
    assert (
        rules[1]["shortDescription"]["text"].startswith("gradient_arrival: ")
        and "Usual fixes" in rules[1]["help"]["text"]
    )
    found = [(r["ruleId"], r["ruleIndex"], r["level"], r["locations"][0]["physicalLocation"]) for r in run["results"]]
    lines = (repo / "specs" / "failing.toml").read_text().splitlines()
    assert [(rule, index, level, loc["artifactLocation"]) for rule, index, level, loc in found] == [
        ("spec_load", 0, "error", {"uri": "specs/broken.toml", "uriBaseId": "%SRCROOT%"}),
        ("gradient_arrival", 1, "error", {"uri": "specs/failing.toml", "uriBaseId": "%SRCROOT%"}),
        ("variance_growth", 2, "error", {"uri": "specs/failing.toml", "uriBaseId": "%SRCROOT%"}),
    ]
    assert [lines[loc["region"]["startLine"] - 1].split(" ")[0] for *_, loc in found[1:]] == [
        "[expect.gradient_arrival]",
        "variance_growth",
    ]
    message = run["results"][1]["message"]["text"]
    assert (
        message.startswith("failing.toml::gradient_arrival: expected to hold")
        and "\nreproduce: stability check failing.toml --case depth=" in message
    )
    fingerprints = [r["partialFingerprints"] for r in run["results"]]
    assert len({json.dumps(f) for f in fingerprints}) == 3  # one alert per (spec, invariant)
    assert (
        main(
            [
                "check",
                "failing.toml",
                "--profile",
                "ci",
                "--in-process",
                "--sarif",
                "../out/s.sarif",
                "--case",
                "depth=25",
            ]
        )
        == 1
    )  # another case…
    again = json.loads((repo / "out" / "s.sarif").read_text())["runs"][0]["results"]
    assert [r["partialFingerprints"] for r in again] == fingerprints[1:]  # …the same alerts


def test_a_met_run_has_no_results_and_the_path_is_checked_like_every_report(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "passing.toml", "--profile", "ci", "--in-process", "--sarif", "s.sarif"]) == 0
    assert json.loads((repo / "specs" / "s.sarif").read_text())["runs"][0]["results"] == []
    (repo / "notes.sarif").write_text("my notes\n")
    for path, says in (
        ("..", "is a folder"),
        ("../notes.sarif", "is not a stability SARIF report"),
        ("passing.toml", "is the input spec"),
    ):
        assert main(["check", "passing.toml", "--profile", "ci", "--in-process", "--sarif", path]) == 2
        assert says in capsys.readouterr().err
    assert (repo / "notes.sarif").read_text() == "my notes\n"
