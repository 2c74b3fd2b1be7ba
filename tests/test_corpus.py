"""The corpus of shipped initialisation bugs (benchmarks/corpus.py, benchmarks/corpus.toml): each
bug's zoo spec fails the gate on the buggy release and passes on the fixed one (`-m slow`:
minutes per release; nightly), and the harness that installs and selects the releases."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import corpus
from benchmarks.corpus import Bug, Outcome, ReleaseUnavailable, load_bugs

BUGS = load_bugs()

#: Bugs the zoo spec of their family cannot see yet, each with what keeps it from seeing them. A
#: strict xfail: the day the spec catches the bug, the test fails until the entry is removed.
NOT_YET_CAUGHT: dict[str, str] = {}


def _judge(bug: Bug, which: str) -> Outcome:
    try:
        return corpus.judge(bug, which)
    except ReleaseUnavailable as exc:
        pytest.skip(f"{bug.library} {bug.release(which)} is not in {corpus.CACHE} and could not be installed: {exc}")


def _marks(bug: Bug) -> list[pytest.MarkDecorator]:
    reason = NOT_YET_CAUGHT.get(bug.id)
    return [pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)] if reason else []


@pytest.mark.slow
@pytest.mark.parametrize("bug", [pytest.param(b, id=b.id, marks=_marks(b)) for b in BUGS])
def test_the_zoo_spec_fails_the_buggy_release(bug: Bug) -> None:
    got = _judge(bug, "buggy")
    assert got.caught, (
        f"{bug.spec} on {bug.library} {bug.buggy} ({bug.mechanism}): exit {got.exit_code}, nothing failed {got.error}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("bug", [pytest.param(b, id=b.id) for b in BUGS])
def test_the_zoo_spec_passes_the_fixed_release(bug: Bug) -> None:
    got = _judge(bug, "fixed")
    assert got.passed, f"{bug.spec} on {bug.library} {bug.fixed}: exit {got.exit_code}: {got.failed or got.error}"


# --- the harness itself (fast, nothing downloaded) ---------------------------------------------------


def test_every_bug_names_a_zoo_spec_and_sources() -> None:
    assert len(BUGS) >= 4
    for bug in BUGS:
        assert (
            bug.spec.startswith("specs/zoo/")
            and bug.source.startswith("https://github.com/")
            and bug.fix.startswith("https://github.com/")
        )
    assert set(NOT_YET_CAUGHT) <= {b.id for b in BUGS}


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "corpus.toml"
    path.write_text(text)
    return path


ENTRY = (
    'id = "x"\nlibrary = "timm"\nspec = "specs/zoo/timm_vit.toml"\nbuggy = "1.0.21"\nfixed = '
    '"1.0.22"\nmechanism = "m"\nsource = "s"\nfix = "f"\n'
)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("timm", "keras"), "library = 'keras'"),
        (("timm_vit", "no_such"), "no such file"),
        (('buggy = "1.0.21"', 'buggy = "1.0.23"'), "not older than"),
        (('fix = "f"', 'fix = "f"\nsince = "1.0.20"'), "unexpected keyword"),
    ],
)
def test_a_bad_entry_is_refused_naming_it(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    path = _write(tmp_path, "[[bug]]\n" + ENTRY.replace(*change))
    with pytest.raises(ValueError, match=message) as info:
        load_bugs(path)
    assert "bug[0]" in str(info.value)


def test_a_bug_given_twice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="given twice"):
        load_bugs(_write(tmp_path, f"[[bug]]\n{ENTRY}[[bug]]\n{ENTRY}"))


def _dist(folder: Path, name: str, version: str, requires: list[str]) -> None:
    info = folder / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}"] + [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


def test_unmet_lists_what_the_environment_lacks_beside_a_release(tmp_path: Path) -> None:
    import packaging

    have = packaging.__version__
    _dist(
        tmp_path,
        "fakelib",
        "1.0",
        [
            f"packaging=={have}",
            "packaging<1",
            "no-such-dist-here>=2",
            'other-missing ; extra == "dev"',
            'yet-another ; python_version < "3"',
        ],
    )
    got = sorted(str(r) for r in corpus.unmet(tmp_path))
    assert got == ["no-such-dist-here>=2", "packaging<1"]  # met, extras and other Pythons left out
    _dist(tmp_path, "no-such-dist-here", "2.5", [])  # a requirement installed beside the release meets it
    assert sorted(str(r) for r in corpus.unmet(tmp_path)) == ["packaging<1"]


def test_a_release_needing_torch_is_refused_before_anything_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(corpus, "_pip", lambda *a, **k: calls.append(a))
    with pytest.raises(ReleaseUnavailable, match="torch"):
        corpus.install_release("timm", "1.0.21", pins=("torch==2.0",), cache=tmp_path)
    assert calls == [] and not list(tmp_path.iterdir())  # nothing left half-installed


def test_a_cached_release_is_used_without_the_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = corpus.release_dir("timm", "1.0.21", tmp_path)
    folder.mkdir()
    (folder / corpus.DONE).write_text("timm==1.0.21\n")
    monkeypatch.setattr(corpus, "_pip", lambda *a, **k: pytest.fail("pip called for a cached release"))
    assert corpus.install_release("timm", "1.0.21", cache=tmp_path) == folder


def test_an_unreachable_index_is_reported_not_raised_raw(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens on the discard port
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    with pytest.raises(ReleaseUnavailable, match="not cached, and no network"):
        corpus.install_release("timm", "0.0.1", cache=tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == []  # the partial folder is removed


def test_the_release_folder_comes_first_in_the_subprocess(tmp_path: Path) -> None:
    pkg = tmp_path / "timm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('__version__ = "0.0.0+planted"\n')
    assert corpus.imported_version("timm", tmp_path) == "0.0.0+planted"
    env = corpus.release_env(tmp_path, {"PYTHONPATH": "/elsewhere"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(tmp_path), "/elsewhere"]


def test_a_release_that_does_not_import_says_why(tmp_path: Path) -> None:
    pkg = tmp_path / "timm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('raise ImportError("needs tokenizers<0.13")\n')
    with pytest.raises(RuntimeError, match="does not import.*needs tokenizers"):
        corpus.imported_version("timm", tmp_path)


def test_outcomes_count_exit_one_as_caught_and_only_zero_as_passing() -> None:
    assert Outcome("r", "ci", 1, ["gradient_arrival: …"]).caught
    assert Outcome("r", "ci", 0).passed and not Outcome("r", "ci", 0).caught
    for code in (2, 5, -9):  # a bad spec, nothing judged, a killed run: neither caught nor passing
        assert not Outcome("r", "ci", code).caught and not Outcome("r", "ci", code).passed
    # exit 1 where no case could be measured (the release does not build the model here): no catch
    unmeasured = Outcome("r", "ci", 1, [], error="rank_collapse: transformers:MambaModel could not be built")
    assert not unmeasured.caught and not unmeasured.passed


def test_a_report_whose_cases_could_not_be_measured_catches_nothing() -> None:
    """`outcome_of` reads the JSON report's statuses: a violated verdict is caught; an expectation
    whose case errored (the release cannot build the model here) is the outcome's error."""
    violated = {"name": "init_conformance", "status": "failed", "message": "3 parameters off", "error": None}
    errored = {
        "name": "rank_collapse",
        "status": "error",
        "message": "could not be measured",
        "error": "ImportError: hub",
    }
    met = {"name": "residual_stream", "status": "ok", "message": "", "error": None}
    caught = corpus.outcome_of("r", "ci", 1, {"specs": [{"invariants": [violated, errored, met]}], "seconds": 2.0})
    assert (
        caught.caught and caught.failed == ["init_conformance: 3 parameters off"] and "ImportError: hub" in caught.error
    )
    broken = corpus.outcome_of("r", "ci", 1, {"specs": [{"invariants": [errored, met]}]})
    assert (
        not broken.caught
        and not broken.passed
        and broken.failed == []
        and broken.error == "rank_collapse: ImportError: hub"
    )


def test_the_table_counts_caught_bugs_and_false_alarms() -> None:
    a, b = BUGS[0], BUGS[1]
    text = corpus.table(
        [
            (a, Outcome("x", "ci", 1, ["variance_growth: m"]), Outcome("y", "ci", 0)),
            (b, Outcome("x", "ci", 0), Outcome("y", "ci", 1, ["rank_collapse: m"])),
        ]
    )
    assert "✗ caught (variance_growth)" in text and "✓ passes" in text
    assert text.endswith("Caught by the spec alone: 1 of 2; false alarms on the fixed releases: 1 of 2.")


def test_an_error_on_the_fixed_release_is_no_false_alarm_and_none_on_the_buggy_one_is_a_catch() -> None:
    """A fixed release that could not be judged (exit 2; exit 1 with every case unmeasured) is
    shown as an error: it neither passes nor raises a false alarm; the same on the buggy release
    catches nothing."""
    a, b = BUGS[0], BUGS[1]
    unmeasured = Outcome("y", "ci", 1, [], error="rank_collapse: could not be built")
    text = corpus.table(
        [(a, Outcome("x", "ci", 1, ["variance_growth: m"]), Outcome("y", "ci", 2)), (b, unmeasured, unmeasured)]
    )
    assert text.count("| error (exit 2) |") == 1 and text.count("| error (exit 1) | error (exit 1) |") == 1
    assert text.endswith("Caught by the spec alone: 1 of 2; false alarms on the fixed releases: 0 of 2.")


def test_the_command_line_lists_its_options() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.corpus", "--help"],
        capture_output=True,
        text=True,
        cwd=corpus.ROOT,
        timeout=60,
    )
    assert done.returncode == 0 and "--only" in done.stdout


def test_a_hidden_package_is_not_found_beside_the_release(tmp_path: Path) -> None:
    # (the Mamba releases import beside this environment's `kernels` only with it hidden)
    release, other = tmp_path / "release", tmp_path / "other" / "pkgx"
    release.mkdir()
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    code = "import importlib.util; print(importlib.util.find_spec('pkgx') is None)"
    for hide, hidden in (((), "False"), (("pkgx",), "True")):
        env = corpus.release_env(release, {**os.environ, "PYTHONPATH": str(other.parent)}, hide=hide)
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        assert done.stdout.strip() == hidden, done.stderr
    assert (
        tmp_path / "_hidden-pkgx" / "sitecustomize.py"
    ).read_text() == "import sys\nsys.modules.setdefault('pkgx', None)\n"
