"""The pytest plugin, run the way users run it: pytest in a project with a specs/ folder."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cli_support import PLAIN
from once_support import once_per_run

GOOD = """
name = "good"
description = "zero-init preact"
family = "preact"
[space]
depth = [1, 12]
width = [4, 8]
batch = 2
branch_init = ["zero"]
[expect.gradient_arrival]
[expect.identity_at_init]
"""

CLAIM = """
name = "highway-claim"
description = "claims a positive gate bias keeps the gradient arriving"
family = "highway"
[block]
gate_bias = 2.0
[space]
depth = [1, 30]
width = [4, 8]
batch = 2
branch_init = ["zero"]
[expect.gradient_arrival]
lo = 0.01
"""


def project(tmp_path: Path, **specs: str) -> Path:
    (tmp_path / "specs").mkdir()
    for name, text in specs.items():
        (tmp_path / "specs" / f"{name}.toml").write_text(text)
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options]\ntestpaths = ['specs']\n")
    return tmp_path


def pytest_run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--stability-profile", "ci", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


BROKEN = GOOD.replace("depth = [1, 12]", "depth = [0, 12]").replace('"good"', '"broken"')


@pytest.fixture(scope="module")
def one_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One pytest run in a project with a healthy spec, a false claim and a spec that does not load,
    shared by the tests below (each asks it a different question)."""

    def run(folder: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
        proj = project(folder, good=GOOD, claim=CLAIM, broken=BROKEN)
        return proj, pytest_run(proj, "-v", "--junitxml", "out.xml")

    return once_per_run(tmp_path_factory, "plugin", run)


def test_items_are_spec_and_invariant(one_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    _, run = one_run
    items = sorted(line.split()[0] for line in run.stdout.splitlines() if line.endswith("%]"))
    assert items == [
        "specs/broken.toml::load",
        "specs/claim.toml::gradient_arrival",
        "specs/good.toml::gradient_arrival",
        "specs/good.toml::identity_at_init",
    ], run.stdout


def test_a_false_claim_fails_with_the_shrunk_case_and_a_reproduction(
    one_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    proj, run = one_run
    assert run.returncode == 1, run.stdout
    assert "2 passed" in run.stdout and "2 failed" in run.stdout
    assert "specs/claim.toml::gradient_arrival FAILED" in run.stdout
    # 0.1192^L < 0.01 from L = 3: the smallest failing depth.
    assert "smallest failing case depth=3,width=4" in run.stdout
    assert "reproduce: stability check specs/claim.toml --case depth=3,width=4," in run.stdout
    cases = ET.parse(proj / "out.xml").getroot().iter("testcase")
    names = sorted(c.get("name") for c in cases)
    assert names == ["gradient_arrival", "gradient_arrival", "identity_at_init", "load"]


def test_a_spec_that_fails_validation_is_one_failed_item_with_the_loader_error(
    one_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    _, run = one_run
    assert "specs/broken.toml::load FAILED" in run.stdout
    assert "stability: error: " in run.stdout and "space.depth" in run.stdout and "must be at least 1" in run.stdout
    assert "Traceback" not in run.stdout


@pytest.mark.slow  # four pytest runs in subprocesses
def test_the_ids_pytest_v_prints_paste_back_and_select_the_same_item(tmp_path: Path) -> None:
    """`pytest -v` prints each item's node id (`specs/good.toml::identity_at_init`); it printed
    `specs/good::toml::identity_at_init` (the file name in the item's location, whose dots pytest
    turns into `::`), which selects nothing when pasted back."""
    proj = project(tmp_path, good=GOOD, broken=BROKEN)
    run = pytest_run(proj, "-v")
    printed = sorted(
        line.split()[0]
        for line in run.stdout.splitlines()
        if line.endswith("%]") and ("PASSED" in line or "FAILED" in line)
    )
    assert printed == [
        "specs/broken.toml::load",
        "specs/good.toml::gradient_arrival",
        "specs/good.toml::identity_at_init",
    ], run.stdout
    for node in printed:  # what the pasted id selects: collecting it lists the items a run would run
        again = pytest_run(proj, "--collect-only", "-q", node)
        assert [line for line in again.stdout.splitlines() if "::" in line] == [node], again.stdout


@pytest.mark.slow  # pytest -n 2 in a subprocess, each xdist worker starting its own spec workers
def test_works_with_xdist(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    proj = project(tmp_path, good=GOOD, claim=CLAIM)
    run = pytest_run(proj, "-q", "-n", "2")
    assert "2 passed" in run.stdout and "1 failed" in run.stdout
    assert "smallest failing case depth=3,width=4" in run.stdout


@pytest.mark.slow  # a pytest run in a subprocess over every device
def test_gpu_items_skip_with_a_reason_without_cuda(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the skip path is for machines without it")
    proj = project(tmp_path, good=GOOD)
    run = pytest_run(proj, "-q", "-rs", "--stability-device", "all")
    assert "good.toml::gradient_arrival[cuda]" in run.stdout or "2 skipped" in run.stdout
    assert "CUDA is not available" in run.stdout
    assert "2 passed" in run.stdout and "2 skipped" in run.stdout


def test_spec_items_run_with_the_gates_thread_count_and_put_the_sessions_back(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from stability.plugin import _spec_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("STABILITY_THREADS", raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with _spec_threads():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        monkeypatch.setenv("STABILITY_THREADS", "2")
        torch.set_num_threads(1)
        with _spec_threads():
            assert torch.get_num_threads() == 2
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.slow  # three pytest runs in subprocesses
def test_a_project_below_a_folder_named_specs_collects_none_of_its_own_toml_files(tmp_path: Path) -> None:
    proj = tmp_path / "specs" / "proj"  # e.g. /home/me/specs/proj: its pyproject.toml is no spec
    proj.mkdir(parents=True)
    (proj / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    (proj / "ruff.toml").write_text("line-length = 100\n")
    (proj / "test_ok.py").write_text("def test_ok():\n    pass\n")
    run = pytest_run(proj, "-q")
    assert run.returncode == 0, run.stdout
    assert "1 passed" in run.stdout and "toml" not in run.stdout
    project(proj, good=GOOD)  # its own specs/ folder, below the rootdir, is collected
    run = pytest_run(proj, "--collect-only", "-q")
    assert "specs/good.toml::gradient_arrival" in run.stdout and "pyproject.toml" not in run.stdout


HOSTILE_FACTORY = """
import os

import torch
from torch import nn


def exits(depth, width):
    os._exit(0)


def leaks(depth, width):
    torch.set_default_dtype(torch.float64)
    return nn.Sequential(*[nn.Linear(width, width, dtype=torch.float32) for _ in range(depth)])
"""


def _custom(name: str, fn: str) -> str:
    head = f'name = "{name}"\ndescription = "x"\nfamily = "custom"\n[block]\nfactory = "plugin_hostile:{fn}"\n'
    return head + "[space]\ndepth = 2\nwidth = 4\nbatch = 2\n[expect.gradient_arrival]\nlo = 1e-6\nhi = 1e6\n"


@pytest.mark.slow  # pytest runs in subprocesses whose specs exit, print and patch
def test_a_custom_specs_code_runs_in_a_worker_and_cannot_end_or_change_the_session(tmp_path: Path) -> None:
    proj = project(tmp_path, exits=_custom("exits", "exits"), leaks=_custom("leaks", "leaks"))
    (proj / "specs" / "plugin_hostile.py").write_text(HOSTILE_FACTORY)
    (proj / "test_after.py").write_text(
        "import torch\n\ndef test_default_dtype_untouched():\n    assert torch.get_default_dtype() == torch.float32\n"
    )
    (proj / "pyproject.toml").write_text("[tool.pytest.ini_options]\ntestpaths = ['specs', 'test_after.py']\n")
    run = pytest_run(proj, "-q", "-p", "no:randomly")
    assert run.returncode == 1, (
        run.stdout + run.stderr
    )  # os._exit(0) in a factory: one failed item, not a silent exit 0
    assert "1 failed, 2 passed" in run.stdout, run.stdout
    assert (
        "specs/exits.toml::gradient_arrival" in run.stdout
        and "the worker exited with code 0 before reporting" in run.stdout
    )


@pytest.mark.slow  # a pytest run in a subprocess each
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--stability-case-timeout", "-1"], "'-1' is not a time limit"),
        (["--stability-case", ""], "--stability-case '': an empty value"),
    ],
)
def test_the_pytest_options_refuse_what_stability_check_refuses(tmp_path: Path, args: list[str], needle: str) -> None:
    """A negative time limit was no limit, and an empty case a search, where `stability check` refuses both."""
    (tmp_path / "spec.toml").write_text(PLAIN.format(extra="", expect=""))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", "spec.toml", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == pytest.ExitCode.USAGE_ERROR and needle in run.stderr, (run.returncode, run.stderr)
