"""`stability init` on the project's corpus of shipped init bugs (benchmarks/corpus.toml), both ways
a user meets one, with no spec of the project's in the loop:

- generated on the release that fixed the bug, the spec passes that release and fails the buggy
  one (the regression gate a user commits before upgrading);
- generated on the buggy release, with no other knowledge, the model's own declared init flags it:
  `stability init` exits 1 and names `init_conformance`.

Slow (an init of about a minute and a check per release, each in a subprocess importing the release
from its folder under .cache/corpus/, installed on first use): nightly."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from spec_support import ROOT

from benchmarks import corpus
from benchmarks.corpus import Bug, ReleaseUnavailable, load_bugs

BUGS = load_bugs()


def _target(bug: Bug) -> str:
    """The model the bug's zoo spec builds, as `stability init` takes it."""
    return str(tomllib.loads((ROOT / bug.spec).read_text())["block"]["model"])


def _folder(bug: Bug, which: str) -> Path:
    try:
        folder = corpus.install_release(bug.library, bug.release(which), pins=bug.pins)
    except ReleaseUnavailable as exc:
        pytest.skip(f"{bug.library} {bug.release(which)} is not cached and could not be installed: {exc}")
    assert corpus.imported_version(bug.library, folder, hide=bug.hide) == bug.release(which)
    return folder


def _init(bug: Bug, which: str, out: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "stability", "init", _target(bug), "--out", str(out), "-q"]
    env = corpus.release_env(_folder(bug, which), hide=bug.hide)
    return subprocess.run(cmd, env=env, cwd=out.parent, capture_output=True, text=True, timeout=1200)


@pytest.mark.slow
@pytest.mark.parametrize("bug", BUGS, ids=[b.id for b in BUGS])
def test_a_spec_made_on_the_fixed_release_passes_it_and_fails_the_buggy_one(bug: Bug, tmp_path: Path) -> None:
    spec = tmp_path / "made.toml"
    done = _init(bug, "fixed", spec)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    fixed = corpus.check(spec, _folder(bug, "fixed"), profile="ci", hide=bug.hide)
    assert fixed.passed, (fixed.failed, fixed.error)
    buggy = corpus.check(spec, _folder(bug, "buggy"), profile="ci", hide=bug.hide)
    assert buggy.caught, (buggy.exit_code, buggy.failed, buggy.error)


@pytest.mark.slow
@pytest.mark.parametrize("bug", BUGS, ids=[b.id for b in BUGS])
def test_made_on_the_buggy_release_the_models_own_init_flags_it(bug: Bug, tmp_path: Path) -> None:
    spec = tmp_path / "made.toml"
    done = _init(bug, "buggy", spec)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    assert spec.is_file()  # written, with the failure stated
    assert "init_conformance" in out and "fails" in out, out[-3000:]
