"""What `stability check` shows while it runs (stability/report/progress.py) and what its last
line says: one line per spec and heartbeats in a CI log, the bar on a terminal, the summary's
phases and counts against their closed forms, and each spec error printed once."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console
from spec_support import spec_text, write_spec

from stability.judge.verdict import Verdict
from stability.report.formats import phase_seconds, spec_line, summary_line
from stability.report.progress import HEARTBEAT_ENV, RunProgress, duration, heartbeat_seconds, mode_for
from stability.run.results import CaseRecord, InvariantResult, SpecResult
from stability.spec.case import corner_case
from stability.spec.load import parse_spec


def _quick(name: str, family: str = "plain", block: str = 'layer = "linear"', *, also: str = "") -> str:
    """A small stack's spec, depth 1 to 3, with a wide gradient band (`also`: further expectations)."""
    return spec_text(
        family,
        block=block,
        space="depth = [1, 3]\nwidth = 4\nbatch = 2",
        expect="[expect.gradient_arrival]\nlo = 1e-6\nhi = 1e6\n" + also,
        name=name,
        description="a small plain stack",
    )


#: A factory that takes its time: every case sleeps, so the spec runs for seconds.
SLOW = (
    "import time\nimport torch.nn as nn\n\ndef make(depth: int, width: int):\n    time.sleep({sleep})\n   "
    " return nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])\n"
)


def _specs(tmp_path: Path, sleep: float) -> tuple[Path, Path]:
    quick = write_spec(tmp_path, "quick", _quick("quick"))
    slow_text = _quick("slow", "custom", 'layer = "linear"\nfactory = "slow_blocks:make"')
    slow = write_spec(tmp_path, "slow", slow_text, modules={"slow_blocks": SLOW.format(sleep=sleep)})
    return quick, slow


@pytest.mark.slow  # a subprocess run long enough for heartbeats
def test_a_ci_log_gets_a_line_per_spec_and_heartbeats_while_a_long_spec_runs(tmp_path: Path) -> None:
    """stdout to a file, as in CI: the first spec's line is in the file before the second spec
    ends, and heartbeat lines name the spec still running, all while the run goes on (the
    heartbeat period set low through $STABILITY_HEARTBEAT so the test stays short)."""
    quick, slow = _specs(tmp_path, sleep=0.6)  # ci profile: ~10 cases of the slow spec, ≥ 6 s
    log = tmp_path / "log.txt"
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {HEARTBEAT_ENV: "0.5"}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stability", "check", str(quick), str(slow), "--profile", "ci"],
            stdout=out,
            stderr=subprocess.PIPE,
            env=env,
            cwd=tmp_path,
        )
        seen_while_running: list[str] = []
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            text = log.read_text()
            if "✓ quick:" in text and "still running: slow (running" in text:
                seen_while_running = text.splitlines()
                break
            time.sleep(0.1)
        _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    assert seen_while_running, f"no per-spec line and heartbeat while the run went on:\n{log.read_text()}"
    first = next(line for line in seen_while_running if line.startswith("✓ quick:"))
    assert first.startswith("✓ quick: gradient_arrival ✓; ") and " case(s) probed in " in first
    assert any(
        line.startswith("… still running: slow (running ") and "1 of 2 spec(s) done" in line
        for line in seen_while_running
    )
    final = log.read_text().splitlines()
    assert any(line.startswith("✓ slow: gradient_arrival ✓; ") for line in final)
    assert (
        final[-1].startswith("2 spec(s), 2 expectation(s): 2 met, 0 not met, ")
        and "probing " in final[-1]
        and ", reports " in final[-1]
    )  # "(summed over 2 workers: probing" under -j auto


def test_heartbeats_come_at_most_once_a_period_and_only_while_something_runs() -> None:
    out = Console(file=open(os.devnull, "w"), width=200)  # noqa: SIM115 -- closed with the console
    progress = RunProgress(["a", "b"], mode="lines", out=out, err=out, workers=1, heartbeat=0.2)
    lines: list[str] = []
    progress._print = lambda line, now: (lines.append(line), setattr(progress, "last_line", now))  # type: ignore[method-assign]
    with progress:
        time.sleep(0.75)
        progress.finished(0, None)
        time.sleep(0.05)
        assert progress.running.keys() == {1}  # the next job started when the first finished
    beats = [line for line in lines if line.startswith("… still running: a (running ")]
    assert 2 <= len(beats) <= 4, lines  # 0.75 s at one line per 0.2 s at most
    assert not progress.thread or not progress.thread.is_alive()
    out.file.close()


def test_the_bar_shows_a_spec_name_as_text_not_as_markup() -> None:
    """A spec named `n[/y]` is a name, not rich's closing tag (a MarkupError in the bar's refresh,
    a traceback on the terminal), and the device of `--device all` is shown as `[cuda]`."""
    sink = io.StringIO()
    err = Console(file=sink, force_terminal=True, width=200, color_system=None)
    progress = RunProgress(["n[/y]", "b [cuda]"], mode="bar", out=err, err=err, workers=1)
    with progress:
        progress.finished(0, None)
        progress.bar.refresh()
        assert "n[/y]" in sink.getvalue()
        progress.finished(1, None)
        progress.bar.refresh()
    assert "b [cuda]" in sink.getvalue()


def test_the_mode_is_the_bar_on_a_terminal_lines_elsewhere_and_nothing_when_quiet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CI", raising=False)
    terminal = Console(force_terminal=True)
    assert mode_for(terminal, quiet=False) == "bar"
    assert mode_for(Console(file=sys.stdout, force_terminal=False), quiet=False) == "lines"
    assert mode_for(terminal, quiet=True) == "off"
    monkeypatch.setenv("CI", "true")
    assert mode_for(terminal, quiet=False) == "lines"


def test_the_heartbeat_period_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, cli) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv(HEARTBEAT_ENV, raising=False)
    assert heartbeat_seconds() == 30.0
    monkeypatch.setenv(HEARTBEAT_ENV, "0")
    assert heartbeat_seconds() == 0.0
    monkeypatch.setenv(HEARTBEAT_ENV, "soon")
    code, out, err = cli("check", Path(__file__).resolve().parent.parent / "specs" / "plain_mlp.toml")
    assert code == 2 and err.strip().splitlines() == [
        f"stability: error: {HEARTBEAT_ENV}='soon': give the seconds between heartbeat lines (e.g. 30), or 0 for none"
    ]
    assert duration(59.6) == "1 min 00 s" and duration(3725) == "1 h 02 min" and duration(4.4) == "4 s"


def _result(
    name: str, seconds: float, parts: list[tuple[str, float, float]], *, trained: int = 0, probed: int = 0
) -> SpecResult:
    spec = parse_spec(_quick(name))
    cases = [corner_case(spec, depth=d) for d in range(1, 4)]
    results = []
    for invariant, took, shrink in parts:
        judged = tuple(cases[:trained]) if invariant == "trainability" else ()
        results.append(
            InvariantResult(
                name=invariant,
                expect="holds",
                met=True,
                verdict=Verdict(invariant=invariant, passed=True, observed=1.0, bound="", block=None, detail="ok"),
                case=cases[0],
                examples=1,
                message="",
                judged=judged,
                seconds=took,
                shrink_seconds=shrink,
            )
        )
    records = {c: CaseRecord(case=c, measurements=None) for c in cases[:probed]}
    return SpecResult(spec=spec, results=results, cases=records, seconds=seconds)


def test_the_summary_says_how_long_each_phase_took() -> None:
    """probing = the specs' seconds − shrinking − training; shrinking and training summed over
    the specs: every number of the line from the results' own fields."""
    a = _result("a", 10.0, [("gradient_arrival", 9.0, 2.5)], probed=3)
    b = _result("b", 4.0, [("gradient_arrival", 1.0, 0.25), ("trainability", 2.75, 0.0)], trained=2, probed=1)
    assert phase_seconds([a, b]) == {"probing": 14.0 - 2.75 - 2.75, "shrinking": 2.75, "training": 2.75}
    line = summary_line([a, b], 15.25, reports=0.5)
    assert (
        line == "2 spec(s), 3 expectation(s): 3 met, 0 not met, 4 case(s) probed, 2 case(s) trained in 15.2 s "
        "(probing 8.5 s, shrinking 2.8 s, training 2.8 s, reports 0.5 s)"
    )
    assert summary_line([a, b], 15.25, workers=4).endswith(
        "in 15.2 s (summed over 2 workers: probing 8.5 s, shrinking 2.8 s, training 2.8 s)"
    )  # two specs: two workers ran
    assert summary_line([a], 10.0, workers=4).endswith(
        "in 10.0 s (probing 7.5 s, shrinking 2.5 s)"
    )  # one spec: one worker, nothing overlapped


def test_a_training_spec_counts_its_trained_cases_not_zero_probed() -> None:
    only_training = _result("t", 3.0, [("trainability", 3.0, 0.0)], trained=3)
    assert "0 case(s) probed" not in summary_line([only_training], 3.0)
    assert "3 case(s) trained in 3.0 s (probing 0.0 s, shrinking 0.0 s, training 3.0 s)" in summary_line(
        [only_training], 3.0
    )
    assert spec_line(only_training, seconds=3.04) == "✓ t: trainability ✓; 3 case(s) trained in 3.0 s"


@pytest.mark.slow  # a check subprocess over several specs; nightly
def test_a_spec_error_is_printed_once(tmp_path: Path) -> None:
    """A factory that returns no module is a spec error of the worker: it used to be printed in
    every unjudged expectation's message, again on an `error:` line under each, and once on
    stderr (five times for two expectations)."""
    text = _quick(
        "c",
        "custom",
        'layer = "linear"\nfactory = "blocks:make"',
        also='[expect.variance_growth]\nmax_growth = "exponential"\n',
    )
    spec = write_spec(tmp_path, "spec", text, modules={"blocks": "def make(depth, width):\n    return 42\n"})
    run = subprocess.run(
        [sys.executable, "-m", "stability", "check", str(spec), "--profile", "ci"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=240,
    )
    assert run.returncode == 2, run.stdout + run.stderr
    error = run.stderr.strip().splitlines()[-1]
    assert error.startswith("stability: error: ") and "blocks:make" in error
    reason = error.removeprefix("stability: error: ").split(": ", 1)[1]  # after the spec's path
    assert (run.stdout + run.stderr).count(reason) == 1, run.stdout + run.stderr
    assert run.stdout.count("the spec could not run (its error is printed below)") == 2
