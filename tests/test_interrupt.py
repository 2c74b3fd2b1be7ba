"""Nothing is lost when a run stops early: Ctrl-C prints the partial summary and exits 130; neither
Ctrl-C nor SIGKILL touches a report from an earlier run; reports are written all-or-nothing and
leave no temporary files behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_support import Cli

import stability.report.outputs
import stability.run.engine
from stability.report.outputs import write_atomic

OLD_REPORT = (
    '{"schema_version": 1, "met": true, "interrupted": false, "seconds": 0.5, "from": "the previous '
    'run"}\n'
)  # opens as every report does
# a previous run's report (a report replaces only its own kind)
OLD_JUNIT = '<?xml version="1.0"?>\n<testsuite name="stability" tests="0" />\n'


def _default_sigint() -> None:
    """In the child before exec: SIGINT back to its default action. A suite started as a
    background job of a non-interactive shell (`cmd &`) runs with SIGINT ignored, which every child
    inherits and Python then leaves ignored, so the signal this test sends would never arrive; a
    user's Ctrl-C reaches a process that does not ignore it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_slow_run(
    factory_dir: Path, custom_spec: Callable[..., Path], base_spec: str, tmp_path: Path
) -> tuple[subprocess.Popen[str], Path, Path]:
    """`stability check fast.toml slow.toml --json --junit -j 1` in a subprocess, returned once the slow
    spec's forward pass has started (one spec after the other: the fast spec is then done)."""
    fast = factory_dir / f"fast_{tmp_path.name}.toml"
    fast.write_text(base_spec.replace('name = "base"', f'name = "fast-{tmp_path.name}"'))
    slow = custom_spec("slow", depth="2")
    report, junit = tmp_path / "out.json", tmp_path / "out.xml"
    report.write_text(OLD_REPORT)
    junit.write_text(OLD_JUNIT)
    marker = tmp_path / "started"
    env = {**os.environ, "STABILITY_TEST_MARKER": str(marker), "PYTHONUNBUFFERED": "1"}
    env.pop("CI", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stability",
            "check",
            str(fast),
            str(slow),
            "--json",
            str(report),
            "--junit",
            str(junit),
            "--profile",
            "ci",
            "--case-timeout",
            "0",
            "-j",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        preexec_fn=_default_sigint,
    )
    deadline = time.monotonic() + 120
    while not marker.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"the slow case never started (exit {proc.returncode}):\n{out}\n{err}")
        time.sleep(0.05)
    return proc, report, junit


def _communicate(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[str, str]:
    """`proc.communicate(timeout)`; past the timeout, the failure names every process still alive
    under it (its pid, state, kernel wait channel and command), so a hang can be told apart from a
    slow exit, then kills them."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        tree = subprocess.run(
            ["ps", "-o", "pid,ppid,stat,wchan:20,etime,args", "--ppid", str(proc.pid), "-p", str(proc.pid)],
            capture_output=True,
            text=True,
        ).stdout
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(
            f"stability check still running {timeout:g} s after the signal; its "
            f"processes:\n{tree}\nstdout:\n{out}\nstderr:\n{err}"
        )


def _untouched(report: Path, junit: Path) -> None:
    assert report.read_text() == OLD_REPORT
    json.loads(report.read_text())  # still valid JSON
    assert junit.read_text() == OLD_JUNIT
    leftovers = [p.name for p in report.parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


@pytest.mark.slow  # a check subprocess interrupted mid-run; nightly
def test_ctrl_c_prints_the_partial_summary_and_keeps_the_previous_report(
    factory_dir: Path, custom_spec: Callable[..., Path], base_spec: str, tmp_path: Path
) -> None:
    proc, report, junit = _start_slow_run(factory_dir, custom_spec, base_spec, tmp_path)
    proc.send_signal(signal.SIGINT)
    out, err = _communicate(proc)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in out + err
    assert f"fast-{tmp_path.name}" in out  # the spec that finished is in the partial table
    summary = [line for line in out.splitlines() if line.startswith("interrupted: ")]
    assert summary and summary[0].startswith("interrupted: 1 spec(s), 1 expectation(s)"), out
    assert "not written (any previous report is left as it was)" in err
    _untouched(report, junit)


@pytest.mark.slow  # a subprocess run killed mid-spec; Ctrl-C in a subprocess and in-process stay in the default run
def test_sigkill_mid_run_keeps_the_previous_report(
    factory_dir: Path, custom_spec: Callable[..., Path], base_spec: str, tmp_path: Path
) -> None:
    proc, report, junit = _start_slow_run(factory_dir, custom_spec, base_spec, tmp_path)
    proc.kill()
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    _untouched(report, junit)


def test_ctrl_c_in_process(
    monkeypatch: pytest.MonkeyPatch, cli: Cli, write_spec: Callable[..., Path], base_spec: str, tmp_path: Path
) -> None:
    """The fast variant of the subprocess test: the second spec is interrupted."""
    a = write_spec(base_spec.replace('name = "base"', 'name = "first"'), "a.toml")
    write_spec(base_spec.replace('name = "base"', 'name = "second"'), "b.toml")
    report = tmp_path / "out.json"
    report.write_text(OLD_REPORT)
    real = stability.run.engine.run_spec
    calls = []

    def run_spec(spec, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(spec.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(spec, *args, **kwargs)

    monkeypatch.setattr(stability.run.engine, "run_spec", run_spec)
    code, out, err = cli("check", a.parent, "--json", report, "--profile", "ci", "--in-process")
    assert code == 130
    assert "first" in out and "interrupted: 1 spec(s)" in out
    assert report.read_text() == OLD_REPORT


def test_reports_are_written_whole_with_no_temporary_files(
    cli: Cli, write_spec: Callable[..., Path], base_spec: str, tmp_path: Path
) -> None:
    spec = write_spec(base_spec)
    out_dir = tmp_path / "reports"
    out_dir.mkdir()
    (out_dir / "out.json").write_text(OLD_REPORT)
    code, _, err = cli(
        "check", spec, "--case", "depth=1", "--json", out_dir / "out.json", "--junit", out_dir / "out.xml"
    )
    assert code == 0, err
    assert sorted(p.name for p in out_dir.iterdir()) == ["out.json", "out.xml"]
    assert json.loads((out_dir / "out.json").read_text())["met"] is True


@pytest.mark.parametrize("where", ["os.replace", "os.fsync"])
@pytest.mark.parametrize("exc", [OSError("disk full"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
def test_a_write_that_fails_half_way_leaves_the_old_file_and_no_temporary(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, where: str, exc: BaseException
) -> None:
    target = tmp_path / "out.json"
    target.write_text(OLD_REPORT)

    def fail(*args: object) -> None:
        raise exc

    monkeypatch.setattr(stability.report.outputs.os, where.split(".")[1], fail)
    with pytest.raises(type(exc)):
        write_atomic(target, '{"new": true}\n')
    assert target.read_text() == OLD_REPORT
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
