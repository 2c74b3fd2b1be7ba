"""The exit code is the verdict's: a closed or broken stdout or stderr changes neither the exit code
nor the reports (stability/run/streams.py). Each case runs `stability check` in a real subprocess,
since only there are the descriptors really closed or the pipe really broken."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from gate_support import plain, run_check

from stability.run.streams import Tolerant

SPECS = {"pass": (plain("pass"), 0), "fail": (plain("fail", activation="sigmoid", depth="[20, 30]"), 1)}


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("CI", "STABILITY_PROFILE", "GITHUB_ACTIONS")}


def _reports_complete(folder: Path, code: int) -> None:
    data = json.loads((folder / "r.json").read_text())
    assert data["met"] is (code == 0)
    assert [inv["status"] for inv in data["specs"][0]["invariants"]] == ["ok" if code == 0 else "failed"]
    suite = ET.parse(folder / "r.xml").getroot()
    assert suite.get("tests") == "1" and suite.get("failures") == str(code)


@pytest.mark.slow  # check subprocesses behind a closed pipe; the default suite has stdout_and_stderr_closed…
@pytest.mark.parametrize("tail", ["true", "head -1"])
@pytest.mark.parametrize("which", ["pass", "fail"])
def test_a_closed_pipe_on_stdout(tmp_path: Path, tail: str, which: str) -> None:
    text, code = SPECS[which]
    (tmp_path / "s.toml").write_text(text)
    proc = run_check(
        "s.toml",
        "--profile",
        "ci",
        "--json",
        "r.json",
        "--junit",
        "r.xml",
        "--in-process",
        cwd=tmp_path,
        shell_tail=tail,
    )
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr and "Exception ignored" not in proc.stderr
    _reports_complete(tmp_path, code)


@pytest.mark.parametrize(
    "which, workers",
    [pytest.param("pass", False, marks=pytest.mark.slow), ("fail", False)]
    + [pytest.param(w, True, marks=pytest.mark.slow) for w in ("pass", "fail")],  # slow: nightly
)
def test_stdout_and_stderr_closed_from_the_start(tmp_path: Path, which: str, workers: bool) -> None:
    """`>&- 2>&-`: descriptors 1 and 2 closed before Python starts; with workers, the pipes to
    them must not land on descriptor 1 or 2."""
    text, code = SPECS[which]
    (tmp_path / "s.toml").write_text(text)
    argv = [
        sys.executable,
        "-m",
        "stability",
        "check",
        "s.toml",
        "--profile",
        "ci",
        "--json",
        "r.json",
        "--junit",
        "r.xml",
        *([] if workers else ["--in-process"]),
    ]
    line = " ".join(f"'{a}'" for a in argv) + " >&- 2>&-"
    proc = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=_env(), timeout=300)
    assert proc.returncode == code
    _reports_complete(tmp_path, code)


@pytest.mark.slow  # a check subprocess with both pipes closed; nightly
def test_both_pipes_broken_before_the_first_write(tmp_path: Path) -> None:
    """The reader closes both pipes at once; a spec that does not load writes its error to the
    broken stderr, the other spec's table to the broken stdout: still exit 2, the report complete."""
    (tmp_path / "ok.toml").write_text(plain("ok"))
    (tmp_path / "bad.toml").write_text(plain("bad").replace("activation =", "activaton ="))
    argv = [
        sys.executable,
        "-m",
        "stability",
        "check",
        "ok.toml",
        "bad.toml",
        "--profile",
        "ci",
        "--json",
        "r.json",
        "--in-process",
    ]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    proc.stderr.close()
    assert proc.wait(timeout=300) == 2
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["specs"][0]["met"] is True and any("activaton" in e for e in data["errors"])


def test_a_tolerant_stream_drops_what_a_broken_pipe_refuses_and_silences_its_descriptor() -> None:
    read, write = os.pipe()
    os.close(read)
    stream = open(write, "w", buffering=1)  # noqa: SIM115 -- closed below
    t = Tolerant(stream)
    assert t.write("x\n") == 2 and t.gone
    assert os.readlink(f"/proc/self/fd/{write}") == os.devnull  # the interpreter's last flush meets /dev/null
    t.write("more\n")
    t.flush()
    stream.close()
    assert Tolerant(None).write("lost") == 4 and not Tolerant(None).isatty()


def test_closed_standard_descriptors_are_reopened_on_dev_null(tmp_path: Path) -> None:
    code = (
        "import os\nfrom stability.run.streams import "
        "ensure_standard_fds\nensure_standard_fds()\nprint(os.readlink('/proc/self/fd/1'), "
        "file=open('out.txt', 'w'))\n"
    )
    proc = subprocess.run(
        ["bash", "-c", f"'{sys.executable}' -c \"$CODE\" >&-"],
        env={**_env(), "CODE": code},
        cwd=tmp_path,
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out.txt").read_text().strip() == os.devnull
