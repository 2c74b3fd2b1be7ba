"""Hostile inputs get one line and the right exit code, never a traceback or a hang: FIFOs among
the specs, byte-order marks, deep nesting, bad sizes and limits, impossible replays, a file named
twice, a run that judges nothing (exit 5), control characters on the terminal, a closed stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from cli_support import Cli, one_error
from gate_support import plain, run_check


def test_a_fifo_among_the_specs_is_reported_and_the_others_run(
    cli: Cli, write_spec: Callable[..., Path], base_spec: str, tmp_path: Path
) -> None:
    good = write_spec(base_spec, "a.toml")
    fifo = tmp_path / "b.toml"
    os.mkfifo(fifo)
    report, junit = tmp_path / "out" / "r.json", tmp_path / "out" / "r.xml"
    code, out, err = cli("check", tmp_path, "--profile", "ci", "--json", report, "--junit", junit)
    assert code == 2, err
    assert f"stability: error: {fifo}: is not a regular file (a FIFO); it was not read" in err
    assert "1 spec(s), 1 expectation(s): " in out  # the good spec still ran and reported
    data = json.loads(report.read_text())
    assert [s["file"] for s in data["specs"]] == [str(good)] and data["met"] is False
    assert any("a FIFO" in e for e in data["errors"])
    suite = ET.fromstring(junit.read_bytes())
    load = [tc for tc in suite.iter("testcase") if tc.get("name") == "load"]
    assert len(load) == 1 and load[0].get("classname") == str(fifo) and suite.get("errors") == "1"


def test_a_fifo_named_directly_is_not_no_such_file(cli: Cli, tmp_path: Path) -> None:
    fifo = tmp_path / "x.toml"
    os.mkfifo(fifo)
    one_error(cli("check", fifo), "is not a regular file (a FIFO)")


def test_a_byte_order_mark_is_accepted(cli: Cli, write_spec: Callable[..., Path], base_spec: str) -> None:
    spec = write_spec(b"\xef\xbb\xbf" + base_spec.encode(), "bom.toml")
    code, out, err = cli("check", spec, "--case", "depth=1", "--in-process")
    assert code == 0, err


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("junk = " + "[" * 600 + "]" * 600, "nests arrays or tables too deeply to read"),
        ("junk = " + "{a=" * 600 + "1" + "}" * 600, "nests arrays or tables too deeply to read"),
        ("[" + ".".join(["t"] * 3000) + "]\nx = 1", "nests arrays or tables too deeply to validate"),
    ],
    ids=["arrays-600", "inline-tables-600", "tables-3000"],
)
def test_deep_nesting_is_one_line(
    cli: Cli, write_spec: Callable[..., Path], base_spec: str, text: str, fragment: str
) -> None:
    spec = write_spec(base_spec + "\n" + text + "\n" if text.startswith("[") else text + "\n" + base_spec)
    one_error(cli("check", spec), str(spec), fragment)


@pytest.mark.parametrize("size", ["inf", "-1", "0", "nan", "bogus"])
def test_a_memory_budget_that_is_not_a_size(
    cli: Cli, write_spec: Callable[..., Path], base_spec: str, size: str
) -> None:
    one_error(
        cli("check", write_spec(base_spec), "--memory-budget", size),
        f"--memory-budget {size!r}: write a size like 4GiB",
    )


def test_a_memory_budget_variable_that_is_not_a_size(
    cli: Cli, write_spec: Callable[..., Path], base_spec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STABILITY_MEMORY_BUDGET", "bogus")
    one_error(cli("check", write_spec(base_spec)), "STABILITY_MEMORY_BUDGET='bogus': write a size like 4GiB")


@pytest.mark.parametrize("limit", ["nan", "-5", "inf"])
def test_a_case_timeout_that_is_not_a_limit(
    cli: Cli, write_spec: Callable[..., Path], base_spec: str, limit: str
) -> None:
    one_error(
        cli("check", write_spec(base_spec), "--case-timeout", limit),
        f"argument --case-timeout: {limit!r} is not a time limit",
    )


@pytest.mark.parametrize(("option", "value"), [("--jobs", "0"), ("-j", "many"), ("--threads", "-1")])
def test_counts_that_are_not_counts(
    cli: Cli, write_spec: Callable[..., Path], base_spec: str, option: str, value: str
) -> None:
    one_error(cli("check", write_spec(base_spec), option, value), f"{value!r} is not a count")


@pytest.mark.parametrize(("argv", "cores", "jobs"), [([], 3, 3), (["-j", "auto"], 1, 1), (["-j", "2"], 5, 2)])
def test_jobs_default_to_the_usable_cores(
    argv: list[str], cores: int, jobs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import stability.cli.arg_types
    import stability.cli.grammar

    monkeypatch.setattr(stability.cli.arg_types, "cores", lambda: cores)
    assert stability.cli.grammar.parser().parse_args(["check", "spec.toml", *argv]).jobs == jobs


def test_threads_variable_that_is_not_a_count(
    cli: Cli, write_spec: Callable[..., Path], base_spec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STABILITY_THREADS", "two")
    one_error(cli("check", write_spec(base_spec)), "STABILITY_THREADS='two'")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_replaying_a_cuda_case_without_cuda(cli: Cli, write_spec: Callable[..., Path], base_spec: str) -> None:
    one_error(
        cli("check", write_spec(base_spec), "--case", "depth=1,device=cuda"), "device=cuda but CUDA is not available"
    )


def test_a_case_key_given_twice(cli: Cli, write_spec: Callable[..., Path], base_spec: str) -> None:
    one_error(cli("check", write_spec(base_spec), "--case", "depth=1,depth=2"), "depth is given twice")


def test_a_file_named_twice_is_checked_once(cli: Cli, write_spec: Callable[..., Path], base_spec: str) -> None:
    spec = write_spec(base_spec)
    code, out, err = cli("check", spec.parent, spec, "--case", "depth=1", "--in-process")
    assert code == 0 and "already used" not in err, err


def test_a_run_on_no_matching_device_judges_nothing_and_exits_5(
    cli: Cli, write_spec: Callable[..., Path], base_spec: str
) -> None:
    spec = write_spec(base_spec.replace("batch = 2", 'batch = 2\ndevice = ["cuda"]'))
    line = one_error(cli("check", spec, "--in-process"), "nothing was judged", "base (cpu not in space.device)", code=5)
    assert "exit code 5" in line


def test_a_spec_skipped_in_this_profile_names_the_profile_that_runs_it(
    cli: Cli, write_spec: Callable[..., Path], base_spec: str
) -> None:
    spec = write_spec(base_spec.replace("[expect.", '[probe]\nprofiles = ["thorough"]\n\n[expect.'))
    line = one_error(
        cli("check", spec, "--profile", "ci", "--in-process"),
        "nothing was judged",
        "1 skipped in this profile",
        "run it with --profile thorough",
        code=5,
    )
    assert "no declared invariant applied" not in line  # it was not judged for its profile, not for applicability


def test_only_an_undeclared_invariant_exits_5(
    cli: Cli, write_spec: Callable[..., Path], base_spec: str, tmp_path: Path
) -> None:
    report = tmp_path / "r.json"
    one_error(
        cli("check", write_spec(base_spec), "--only", "variance_growth", "--json", report, "--in-process"),
        "no spec declares --only variance_growth",
        code=5,
    )
    assert json.loads(report.read_text())["met"] is False


def test_control_characters_never_reach_the_terminal(cli: Cli, tmp_path: Path, base_spec: str) -> None:
    spec = tmp_path / "a\x1b]0;owned\x07b.toml"
    spec.write_text(base_spec.replace('name = "base"', 'name = "x\\u001b[2Jy"').replace("batch = 2", "batch = 0"))
    line = one_error(cli("check", spec))
    assert "\x1b" not in line and "\x07" not in line and "a\\x1b]0;owned\\x07b.toml" in line
    spec.write_text(base_spec.replace('name = "base"', 'name = "x\\u001b[2Jy\\u202e"'))
    code, out, err = cli("check", spec, "--case", "depth=4", "--in-process")
    assert code == 1
    assert "\x1b" not in out + err and "\u202e" not in out + err
    assert "x\\x1b[2Jy\\u202e" in out


@pytest.mark.slow  # check subprocesses behind a closed pipe (tests/test_closed_streams.py has the default suite's)
@pytest.mark.parametrize("tail", ["head -1", "true"])
def test_a_closed_stdout_changes_neither_the_verdict_nor_the_report(tmp_path: Path, tail: str) -> None:
    (tmp_path / "fail.toml").write_text(plain("fail", activation="sigmoid", depth="[20, 30]"))
    report = tmp_path / "r.json"
    proc = run_check(
        tmp_path / "fail.toml", "--profile", "ci", "--json", report, "--in-process", cwd=tmp_path, shell_tail=tail
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr
    data = json.loads(report.read_text())
    assert data["met"] is False and data["specs"][0]["invariants"][0]["status"] == "failed"


@pytest.mark.slow  # a pytest run in a subprocess over misbehaving specs
def test_the_pytest_plugin_reports_sys_exit_deep_nesting_and_duplicate_names_in_one_line(tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "blocks_exit.py").write_text(
        "import sys\nfrom torch import nn\nclass Exit(nn.Module):\n    def forward(self, x):\n        "
        "sys.exit(3)\ndef make(depth, width):\n    return nn.Sequential(Exit())\n"
    )
    (specs / "a.toml").write_text(plain("same"))
    (specs / "b.toml").write_text(plain("same"))
    (specs / "c.toml").write_text(
        'name = "exits"\ndescription = "d"\nfamily = "custom"\n[block]\nfactory = '
        '"blocks_exit:make"\n[space]\ndepth = 1\nwidth = 2\nbatch = '
        "2\n[expect.gradient_arrival]\n"
    )
    (specs / "deep.toml").write_text("junk = " + "[" * 600 + "]" * 600 + "\n" + plain("deep"))
    env = {**os.environ, "STABILITY_PROFILE": "ci"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", str(specs)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    out = proc.stdout
    assert proc.returncode == 1, out
    assert "b.toml: name = 'same': is already used by" in out
    assert "the spec's code called sys.exit(3)" in out
    assert "deep.toml: nests arrays or tables too deeply to read" in out  # one item fails, collection goes on
    assert "3 failed, 1 passed" in out  # a.toml ran; b (duplicate), c (exit) and deep failed, one line each
    assert "Hypothesis" not in out and "Falsifying" not in out
