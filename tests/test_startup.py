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

_PROBE = """
import sys
from stability.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:  # argparse's --help and --version
    code = exc.code
print("exit", code, "torch", "torch" in sys.modules, file=sys.stderr)
"""


def _imports_torch(args: list[str]) -> tuple[int, bool, str]:
    run = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
    *rest, last = run.stderr.strip().splitlines()
    _, code, _, torch = last.split()
    return int(code), torch == "True", "\n".join(rest)


@pytest.mark.parametrize("name", list(startup.COMMANDS))
def test_the_commands_that_never_probe_import_no_torch(name: str) -> None:
    code, torch, err = _imports_torch(startup.COMMANDS[name])
    assert code == startup.EXIT[name], err
    assert not torch, f"stability {' '.join(startup.COMMANDS[name])} imported torch"


@pytest.mark.parametrize("name", list(MORE_USAGE_ERRORS))
def test_every_usage_error_answers_without_torch(name: str) -> None:
    code, torch, err = _imports_torch(MORE_USAGE_ERRORS[name])
    assert code == 2 and err.startswith("stability: error: ") and len(err.splitlines()) == 1, err
    assert not torch, f"stability {' '.join(MORE_USAGE_ERRORS[name])} imported torch before refusing"


@pytest.mark.slow  # startup subprocesses; nightly
def test_the_check_finds_a_command_that_imports_torch() -> None:
    """The probe itself can fail: a check that goes on to probe imports torch."""
    code, torch, _ = _imports_torch(
        ["check", str(ROOT / "specs" / "plain_mlp.toml"), "--case", "depth=1", "--profile", "ci", "-q"]
    )
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
