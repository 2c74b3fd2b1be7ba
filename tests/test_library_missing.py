"""A library spec whose library does not import here (transformers, timm or torchvision not
installed): `stability check` refuses it in one line with what to install (exit 2, never a
traceback), and the pytest plugin skips its items saying the same. Simulated by making the import
fail in a fresh process (`sys.modules[name] = None`)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from spec_support import ROOT

BLOCK = "import sys; sys.modules[{lib!r}] = None\n"


def _run(lib: str, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCK.format(lib=lib) + code], capture_output=True, text=True, cwd=ROOT, timeout=240
    )


@pytest.mark.slow  # two subprocesses that hide a library and import the rest
def test_check_refuses_a_spec_whose_library_does_not_import_in_one_line() -> None:
    for lib, spec, fix in [
        ("transformers", "specs/zoo/bert.toml", 'pip install -e ".[hf]"'),
        ("timm", "specs/zoo/timm_vit.toml", "docs/library-models.md"),
    ]:
        run = _run(lib, f"from stability.cli import main; sys.exit(main(['check', {spec!r}, '-q']))")
        assert run.returncode == 2, run.stdout + run.stderr
        assert "Traceback" not in run.stderr and run.stderr.strip().count("\n") == 0, run.stderr
        assert (
            run.stderr.startswith(f"stability: error: {spec}: block.model = ")
            and f"{lib} does not import here (ModuleNotFoundError" in run.stderr
            and fix in run.stderr
        )


@pytest.mark.slow  # a pytest subprocess; nightly
def test_the_plugin_skips_a_spec_whose_library_does_not_import_saying_what_to_install() -> None:
    run = _run(
        "transformers",
        "import pytest; sys.exit(pytest.main(['specs/zoo/bert.toml', '-rs', '-q', '-p', 'no:cacheprovider']))",
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert (
        "1 skipped" in run.stdout
        and "transformers does not import here" in run.stdout
        and 'pip install -e ".[hf]"' in run.stdout
    ), run.stdout
