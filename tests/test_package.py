"""The package people install: `python -m build` makes an sdist and a wheel named `stability-harness`,
and the wheel, installed into a clean virtual environment, runs the README's first example there.

The build is offline (`--no-isolation`: this environment's setuptools, which the test extra pins
to what `[build-system]` asks), from a copy of the files git tracks, the sdist first and the wheel
from the sdist (as `python -m build` does), so a file the sdist forgets is missing from the wheel.

The virtual environment is made without `--system-site-packages` and holds nothing but the wheel,
installed `--no-deps` from the file. Its third-party dependencies (torch, numpy, hypothesis, ...)
come from this environment's site-packages through one `.pth` line, so no multi-GB torch is
downloaded. That is still a clean test of the wheel's own contents: a `.pth` line only adds a
folder to `sys.path` (the `.pth` files inside it, such as this checkout's editable-install hook,
are not run), the folder comes after the environment's own site-packages, nothing sets PYTHONPATH
or runs in the checkout, and the test asserts that `stability` is imported from the wheel's files.
Whether the wheel's declared requirements are met by those dependencies is checked separately.
"""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from spec_support import ROOT

pytest.importorskip("build", reason="needs the build package (the test extra: pip install -e '.[test]')")

DIST = "stability_harness-0.1.0"
EXAMPLES = ("stability/examples/quickstart/plain.toml", "stability/examples/quickstart/residual.toml")


def _run(*args: str | Path, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300, **kwargs)


def _tracked(dest: Path) -> Path:
    """A copy of the checkout's files (tracked or new, not ignored), without its build outputs."""
    listed = _run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout ({listed.stderr.strip()}): the files to package are unknown")
    for name in filter(None, listed.stdout.split("\0")):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = _tracked(tmp_path_factory.mktemp("source"))
    out = tmp_path_factory.mktemp("dist")
    built = _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, source, cwd=source)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return out


@pytest.mark.slow  # python -m build; .ci/run runs this file's slow tests as their own step
def test_build_makes_an_sdist_and_a_wheel_that_hold_the_whole_package(dist: Path) -> None:
    assert sorted(p.name for p in dist.iterdir()) == [f"{DIST}-py3-none-any.whl", f"{DIST}.tar.gz"]
    wheel = zipfile.ZipFile(dist / f"{DIST}-py3-none-any.whl")
    names = set(wheel.namelist())
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "stability").rglob("*.py")}
    assert modules - names == set(), "modules the wheel leaves out"
    assert {"stability/py.typed", "stability/judge/init_rules.toml", *EXAMPLES} <= names
    assert not {n for n in names if n.startswith(("tests/", "dev/", "docs/", "benchmarks/", "specs/"))}
    metadata = wheel.read(f"{DIST}.dist-info/METADATA").decode()
    assert re.search(r"^Name: stability-harness$", metadata, re.M)
    assert re.search(r"^License-Expression: MIT$", metadata, re.M)
    assert f"{DIST}.dist-info/licenses/LICENSE" in names
    with tarfile.open(dist / f"{DIST}.tar.gz") as sdist:
        inside = {name.partition("/")[2] for name in sdist.getnames()}
    assert {"pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", *EXAMPLES} <= inside
    assert not {n for n in inside if n.startswith("tests/")}, "MANIFEST.in prunes the tests"
    entry_points = wheel.read(f"{DIST}.dist-info/entry_points.txt").decode()
    assert "[console_scripts]\nstability = stability.cli:main" in entry_points
    assert "[pytest11]\nstability = stability.plugin" in entry_points


def _first_example_command() -> str:
    """The README's command that runs the quickstart from an installed package."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (line,) = [ln for ln in readme.splitlines() if ln.startswith("stability check") and "importlib.resources" in ln]
    return line


@pytest.mark.slow  # a clean virtual environment; .ci/run runs it as its own step
def test_the_wheel_in_a_clean_environment_runs_the_first_example(dist: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    made = _run(sys.executable, "-m", "venv", "--without-pip", env_dir)
    assert made.returncode == 0, made.stderr
    python = env_dir / "bin" / "python"
    own = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    (own / "_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n", encoding="utf-8")
    wheel = dist / f"{DIST}-py3-none-any.whl"
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "--quiet", wheel]
    installed = _run(*pip)
    assert installed.returncode == 0, installed.stdout + installed.stderr

    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP"}}
    env |= {"PATH": f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}", "VIRTUAL_ENV": str(env_dir)}
    where = _run(python, "-c", "import stability; print(stability.__file__)", env=env, cwd=tmp_path)
    assert Path(where.stdout.strip()) == own / "stability" / "__init__.py", where.stdout + where.stderr
    unmet = _run(python, "-c", _UNMET, env=env, cwd=tmp_path)
    assert unmet.returncode == 0 and unmet.stdout == "", unmet.stdout + unmet.stderr

    ran = _run("bash", "-c", _first_example_command(), env=env, cwd=tmp_path)
    assert ran.returncode == 1, ran.stdout + ran.stderr  # the control fails, as the README shows
    assert "│ quickstart-plain    │ gradient_arrival │ holds  │ ✗ │   0.0476 │ [0.1, 10] │" in ran.stdout
    assert "│ quickstart-residual │ gradient_arrival │ holds  │ ✓ │" in ran.stdout
    assert f"reproduce: stability check {own}/stability/examples/quickstart/plain.toml --case depth=2," in ran.stdout
    assert "2 spec(s), 2 expectation(s): 1 met, 1 not met" in ran.stdout


#: Prints each requirement of the installed distribution (its extras aside) that is not met.
_UNMET = """
from importlib import metadata
from packaging.requirements import Requirement
for text in metadata.requires("stability-harness") or []:
    req = Requirement(text)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    try:
        have = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        print(f"{req}: not installed")
        continue
    if have not in req.specifier:
        print(f"{req}: {have} installed")
"""
