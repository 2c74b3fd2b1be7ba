"""Report paths at the file system's name limit: a report whose name fits is written after the run
(its temporary name is cut to fit, never longer than NAME_MAX), and one whose name cannot exist is
refused before anything runs. Tried with real `stability check` and `stability sweep` calls."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cli_support import Cli

from stability.report.outputs import write_atomic

SPEC = """\
name = "small"
description = "a small plain MLP"
family = "plain"
[space]
depth = [1, 3]
width = 4
batch = 2
weight_init = ["xavier_normal"]
[expect.gradient_arrival]
lo = 0.01
hi = 100.0
"""

NAME_MAX = os.pathconf("/tmp", "PC_NAME_MAX") if hasattr(os, "pathconf") else 255


def _long(stem: str, suffix: str, total: int) -> str:
    """A name of `total` bytes in UTF-8: `stem` repeated, then `suffix`."""
    name = ""
    while len((name + stem + suffix).encode()) <= total:
        name += stem
    return name + "r" * (total - len((name + suffix).encode())) + suffix


@pytest.mark.parametrize("stem", ["r", "é"], ids=["ascii", "two-byte"])
def test_reports_with_250_byte_names_are_written_after_the_run(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stem: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.toml").write_text(SPEC, encoding="utf-8")
    names = {
        kind: _long(stem, suffix, 250)
        for kind, suffix in (("json", ".json"), ("junit", ".xml"), ("sarif", ".sarif"), ("html", ""))
    }
    assert all(len(n.encode()) == 250 for n in names.values())
    code, out, err = cli(
        "check",
        "spec.toml",
        "--profile",
        "ci",
        "-q",
        "--json",
        names["json"],
        "--junit",
        names["junit"],
        "--sarif",
        names["sarif"],
        "--html",
        names["html"],
    )
    assert code == 0, out + err
    assert json.loads((tmp_path / names["json"]).read_text())["met"] is True
    assert ET.parse(tmp_path / names["junit"]).getroot().get("name") == "stability"
    assert json.loads((tmp_path / names["sarif"]).read_text())["version"] == "2.1.0"
    assert (tmp_path / names["html"] / "index.html").read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary file left


@pytest.mark.parametrize("option", ["--json", "--junit", "--sarif", "--html"])
def test_a_name_longer_than_the_file_system_allows_is_refused_before_the_run(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.toml").write_text(SPEC, encoding="utf-8")
    name = _long("é", ".out", NAME_MAX + 1)  # 256 bytes in 130 characters
    code, out, err = cli("check", "spec.toml", "--profile", "ci", option, name)
    assert code == 2 and out == ""  # nothing ran
    assert err.startswith(f"stability: error: {option} ") and err.count("\n") == 1
    assert f"is {NAME_MAX + 1} bytes, and the file system allows {NAME_MAX}; choose a shorter name" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.toml"]


def test_a_long_folder_on_the_path_is_refused_too(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.toml").write_text(SPEC, encoding="utf-8")
    code, _, err = cli("check", "spec.toml", "--json", f"{'d' * (NAME_MAX + 10)}/report.json")
    assert code == 2 and f"is {NAME_MAX + 10} bytes" in err


def test_a_sweep_report_in_a_250_byte_folder_is_written(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.toml").write_text(SPEC, encoding="utf-8")
    folder = "s" * 250
    code, out, err = cli(
        "sweep",
        "spec.toml",
        "--over",
        "depth=1,2",
        "--seeds",
        "1",
        "--serial",
        "--no-budget",
        "-q",
        "--db",
        "r.sqlite",
        "--html",
        folder,
    )
    assert code == 0, out + err
    assert (tmp_path / folder / "index.html").read_text().startswith("<!DOCTYPE html>")
    code, out, err = cli(
        "sweep", "spec.toml", "--over", "depth=1,2", "--serial", "--db", "r.sqlite", "--html", "s" * (NAME_MAX + 1)
    )
    assert code == 2 and "bytes, and the file system allows" in err and out == ""


def test_write_atomic_keeps_its_temporary_name_within_name_max(tmp_path: Path) -> None:
    for n in (NAME_MAX, NAME_MAX - 1, NAME_MAX - 12, 1):
        path = tmp_path / ("x" * n)
        write_atomic(path, "{}")
        assert path.read_text() == "{}"
    seen: list[str] = []
    import tempfile

    real = tempfile.mkstemp

    def spy(*args: object, **kwargs: object) -> tuple[int, str]:
        fd, name = real(*args, **kwargs)  # type: ignore[call-overload]
        seen.append(os.path.basename(name))
        return fd, name

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tempfile, "mkstemp", spy)
        write_atomic(tmp_path / ("é" * (NAME_MAX // 2)), "{}")  # a name of 254 bytes, cut inside no character it keeps
    assert (
        len(seen) == 1
        and len(os.fsencode(seen[0])) <= NAME_MAX
        and seen[0].startswith(".é")
        and seen[0].endswith(".tmp")
    )
