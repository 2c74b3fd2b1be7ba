"""Fast start: the commands that never probe (`--help`, `--version`, `list`, `explain`, `schema`)
and every usage error answer without importing torch (each in a fresh interpreter, checked on
`sys.modules`); benchmarks/bench_startup.py times them. And docs/timings.md is what
benchmarks/timings.py renders from benchmarks/timings.json, never a hand-edited number."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from types import ModuleType

import pytest
from spec_support import ROOT


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


startup = _load("bench_startup")

#: Usage errors past the argument parser, each refused before anything would import torch.
MORE_USAGE_ERRORS = {
    "json-path": ["check", str(ROOT / "specs" / "plain_mlp.toml"), "--json", "/proc/no/such/folder/report.json"],
    "memory-budget": ["check", str(ROOT / "specs" / "plain_mlp.toml"), "--memory-budget", "4XB"],
    "baseline": ["check", str(ROOT / "specs" / "plain_mlp.toml"), "--baseline", str(ROOT / "no_such_baseline.json")],
    "update-baseline": ["check", str(ROOT / "specs" / "plain_mlp.toml"), "--update-baseline"],
    "case-key": ["check", str(ROOT / "specs" / "plain_mlp.toml"), "--case", "dpeth=3"],
    "no-specs": ["check", str(ROOT / ".ci")],
    "only": ["check", str(ROOT / "specs" / "plain_mlp.toml"), "--only", "gradient_arival"],
    "sweep-no-spec": ["sweep"],
}

#: One interpreter imports `stability.cli` (never torch), then forks a child per command: each
#: child starts where a fresh `python -c "from stability.cli import main; main(ARGS)"` would, runs
#: the command, and reports its exit code, whether torch got imported and what it wrote to stderr.
_PROBE = """
import json, os, sys
from stability.cli import main
assert "torch" not in sys.modules, "importing stability.cli imported torch"
answers = {}
for name, args in json.loads(sys.argv[1]).items():
    result_r, result_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(result_r)
        os.close(err_r)
        os.dup2(err_w, 2)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        try:
            code = main(args)
        except SystemExit as exc:  # argparse's --help and --version
            code = exc.code
        sys.stdout.flush()
        sys.stderr.flush()
        os.write(result_w, json.dumps([code, "torch" in sys.modules]).encode())
        os._exit(0)
    os.close(result_w)
    os.close(err_w)
    with os.fdopen(err_r, encoding="utf-8", errors="replace") as f:
        err = f.read()
    with os.fdopen(result_r) as f:
        code, torch = json.loads(f.read())
    os.waitpid(pid, 0)
    answers[name] = [code, torch, err.strip()]
print(json.dumps(answers))
"""


def _answers(commands: dict[str, list[str]]) -> dict[str, tuple[int, bool, str]]:
    """Each command's (exit code, whether it imported torch, its stderr), from `_PROBE`."""
    run = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(commands)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert run.returncode == 0, run.stderr
    return {name: (code, torch, err) for name, (code, torch, err) in json.loads(run.stdout).items()}


@pytest.fixture(scope="module")
def answers() -> dict[str, tuple[int, bool, str]]:
    return _answers({**startup.COMMANDS, **MORE_USAGE_ERRORS})


@pytest.mark.parametrize("name", list(startup.COMMANDS))
def test_the_commands_that_never_probe_import_no_torch(name: str, answers: dict[str, tuple[int, bool, str]]) -> None:
    code, torch, err = answers[name]
    assert code == startup.EXIT[name], err
    assert not torch, f"stability {' '.join(startup.COMMANDS[name])} imported torch"


@pytest.mark.parametrize("name", list(MORE_USAGE_ERRORS))
def test_every_usage_error_answers_without_torch(name: str, answers: dict[str, tuple[int, bool, str]]) -> None:
    code, torch, err = answers[name]
    assert code == 2 and err.startswith("stability: error: ") and len(err.splitlines()) == 1, err
    assert not torch, f"stability {' '.join(MORE_USAGE_ERRORS[name])} imported torch before refusing"


@pytest.mark.slow  # a check that probes, in the forked child; nightly
def test_the_check_finds_a_command_that_imports_torch() -> None:
    """The probe itself can fail: a check that goes on to probe imports torch."""
    args = ["check", str(ROOT / "specs" / "plain_mlp.toml"), "--case", "depth=1", "--profile", "ci", "-q"]
    code, torch, _ = _answers({"probes": args})["probes"]
    assert code == 0 and torch


@pytest.mark.slow  # the startup benchmark as a script; nightly
def test_the_startup_benchmark_runs_as_a_script() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_startup.py"), "--repeat", "1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    lines = run.stdout.strip().splitlines()
    timed = [
        line.split()[0] for line in lines if not line.startswith(("target:", "over the target:"))
    ]  # the last lines, the second only when loaded
    assert timed == list(startup.COMMANDS), run.stdout + run.stderr
    assert run.returncode in (0, 1)  # 1: over 1 s on this (possibly loaded) machine; the number is for an idle one


def test_the_timings_page_is_what_the_script_renders_from_its_data() -> None:
    timings = _load("timings")
    data = json.loads((ROOT / "benchmarks" / "timings.json").read_text())
    assert (ROOT / "docs" / "timings.md").read_text() == timings.render(data)
    assert set(data) <= set(timings.MEASUREMENTS)
