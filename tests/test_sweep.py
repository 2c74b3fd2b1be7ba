"""`stability sweep`: depth budgets by bisection against closed forms, the store (repeated points
free, kill + resume to the same tables), `--compare`, and the CLI's one-line errors."""

from __future__ import annotations

import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from gate_support import SCALAR_CHAIN
from hypothesis import given
from hypothesis import strategies as st

from stability.cli import main
from stability.report.phase import measure_values
from stability.run.executor import InProcessExecutor
from stability.run.grid import parse_axis
from stability.run.store import Store
from stability.run.sweep import run_sweep
from stability.spec.load import load_spec, parse_spec

#: The scalar chain (gate_support.SCALAR_CHAIN), its variance bounded too.
LINEAR = SCALAR_CHAIN + '[expect.variance_growth]\nmax_growth = "bounded"\nmin_ratio = 0.5\n'


def _write(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_budgets_match_the_closed_form_of_a_scalar_chain(tmp_path: Path) -> None:
    spec = load_spec(_write(tmp_path, LINEAR))
    axes = [parse_axis("depth=1,4,16,64"), parse_axis("init_gain=0.9,0.8")]
    with Store(tmp_path / "r.sqlite") as store:
        result = run_sweep(spec, axes, store, InProcessExecutor(), seeds=[0, 1])
        budgets = {(b.slice, b.invariant): b for b in result.budgets}
        for g in (0.9, 0.8):
            # g^L >= 0.1  <=>  L <= ln 0.1 / ln g;   g^(2L) >= 0.5  <=>  L <= ln 0.5 / (2 ln g)
            arrival = budgets[(f'{{"init_gain":{g}}}', "gradient_arrival")]
            assert arrival.status == "found" and arrival.budget == math.floor(math.log(0.1) / math.log(g))
            growth = budgets[(f'{{"init_gain":{g}}}', "variance_growth")]
            assert growth.budget == math.floor(math.log(0.5) / (2 * math.log(g)))
            assert arrival.deciding_case is not None and f"depth={arrival.budget + 1}," in arrival.deciding_case
            assert (
                arrival.reproduce is not None
                and f"--over depth={arrival.budget + 1} --over init_gain={g}" in arrival.reproduce
            )
        grad, var = measure_values(result, "gradient"), measure_values(result, "variance")
        for depth in (1, 4, 16, 64):
            key = f'{{"depth":{depth},"init_gain":0.8}}'
            assert math.isclose(grad[key], depth * math.log10(0.8), rel_tol=1e-5)
            assert math.isclose(var[key], 2 * depth * math.log10(0.8), rel_tol=1e-5)
        # the bisection probes about log2 of the range per slice, not every depth
        assert len(result.extra_points) <= 2 * 2 * 7
        again = run_sweep(spec, axes, store, InProcessExecutor(), seeds=[0, 1])
        assert again.probed == 0 and [b.budget for b in again.budgets] == [b.budget for b in result.budgets]


def test_a_budget_beyond_the_range_or_below_it_says_so(tmp_path: Path) -> None:
    spec = load_spec(_write(tmp_path, LINEAR.replace("init_gain = 0.9", "init_gain = 1.0")))
    with Store(tmp_path / "r.sqlite") as store:
        result = run_sweep(spec, [parse_axis("depth=1,32")], store, InProcessExecutor(), seeds=[0])
        assert {(b.invariant, b.status, b.budget) for b in result.budgets} == {
            ("gradient_arrival", "at_least", 32),
            ("variance_growth", "at_least", 32),
        }
        spec = load_spec(_write(tmp_path, LINEAR.replace("init_gain = 0.9", "init_gain = 0.01"), "low.toml"))
        result = run_sweep(spec, [parse_axis("depth=1,32")], store, InProcessExecutor(), seeds=[0])
        assert {(b.invariant, b.status) for b in result.budgets} == {
            ("gradient_arrival", "below"),
            ("variance_growth", "below"),
        }


SLOW_FACTORY = """
import time
from torch import nn


def make(depth, width):
    time.sleep(0.1)
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])


def crash_at_3(depth, width):
    if depth == 3:
        import os
        os._exit(3)
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])
"""

CUSTOM = """
name = "custom-{name}"
description = "custom factory"
family = "custom"
[block]
factory = "sweep_test_factories:{name}"
[space]
depth = [1, 8]
width = 4
batch = 2
[expect.gradient_arrival]
lo = 1e-6
hi = 1e6
"""


def _tables(db: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    with Store(db) as store:
        return store.table("probes"), store.table("budgets")


@pytest.mark.slow  # a sweep in a subprocess killed mid-way, resumed, and run again whole
def test_a_sweep_killed_mid_way_resumes_to_the_same_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, SLOW_FACTORY, "sweep_test_factories.py")
    spec = _write(tmp_path, CUSTOM.format(name="make"))
    args = [str(spec), "--over", "depth=1,2,3,4,5,6", "--seeds", "3", "--serial", "-q"]
    killed = tmp_path / "killed.sqlite"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "stability", "sweep", *args, "--db", str(killed)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    rows = 0
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
        try:
            with sqlite3.connect(killed, timeout=5) as db:
                rows = db.execute("SELECT count(*) FROM probes").fetchone()[0]
        except sqlite3.OperationalError:  # not created yet
            continue
        if rows >= 6:  # two points of six stored
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
    assert 6 <= rows < 18
    monkeypatch.chdir(tmp_path)  # the factory module sits beside the spec; the in-process runs find it there too
    assert main(["sweep", "--resume", "--db", str(killed), "--serial", "-q"]) == 0
    whole = tmp_path / "whole.sqlite"
    assert main(["sweep", *args, "--db", str(whole)]) == 0
    probes, budgets = _tables(whole)
    assert len(probes) == 18 and len(budgets) == 1
    assert _tables(killed) == (probes, budgets)
    with Store(killed) as store:
        assert store.last_unfinished() is None  # the resumed sweep is marked finished


def test_compare_lists_budgets_that_moved_and_fails_when_one_went_down(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load_spec(_write(tmp_path, LINEAR))
    db = tmp_path / "r.sqlite"
    with Store(db) as store:
        run_sweep(
            spec, [parse_axis("depth=1,64")], store, InProcessExecutor(), seeds=[0], version="0.1.0+gaaaaaaaaaaaa"
        )
        halved = load_spec(_write(tmp_path, LINEAR.replace("init_gain = 0.9", "init_gain = 0.81"), "halved.toml"))
        # the same spec content under a second code version whose init halves the budget
        import stability.run.store_keys as keys_module

        real = keys_module.spec_hash
        monkeypatch.setattr(keys_module, "spec_hash", lambda s: real(spec))
        run_sweep(
            halved, [parse_axis("depth=1,64")], store, InProcessExecutor(), seeds=[0], version="0.1.0+gbbbbbbbbbbbb"
        )
    capsys.readouterr()
    assert main(["sweep", "--compare", "0.1.0+gaaaa", "0.1.0+gbbbb", "--db", str(db)]) == 1
    out = capsys.readouterr().out
    assert "gradient_arrival" in out and "21" in out and "10" in out and "lower" in out
    assert (
        main(["sweep", "--compare", "0.1.0+gaaaa", "0.1.0+gaaaa", "--db", str(db)]) == 2
    )  # one version against itself compares nothing
    assert "both name the code version 0.1.0+gaaaaaaaaaaaa" in capsys.readouterr().err
    assert main(["sweep", "--compare", "nope", "0.1.0+gaaaa", "--db", str(db)]) == 2
    assert "no budgets stored for that code version" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--over", "depht=2"], 'did you mean "depth"'),
        (["--over", "depth=log:2:8"], "write log:LO:HI:N"),
        (["--seeds", "0"], "at least 1 seed"),
        (["--depth-range", "8:2"], "1 <= LO <= HI"),
        (["--serial", "--workers", "2"], "--serial runs one point at a time"),
        pytest.param(
            ["--serial", "--device", "cuda"],
            "CUDA is not available",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA"),
        ),
    ],
)
def test_bad_usage_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    spec = _write(tmp_path, LINEAR)
    assert main(["sweep", str(spec), *args, "--db", str(tmp_path / "r.sqlite")]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_custom_factory_that_raises_fails_its_points_not_the_sweep(tmp_path: Path) -> None:
    _write(tmp_path, "def broken(depth, width):\n    raise ValueError('no such block')\n", "sweep_test_broken.py")
    spec = load_spec(
        _write(tmp_path, CUSTOM.format(name="make").replace("sweep_test_factories:make", "sweep_test_broken:broken"))
    )
    with Store(tmp_path / "r.sqlite") as store:
        result = run_sweep(spec, [parse_axis("depth=1,2")], store, InProcessExecutor(), seeds=[0])
    assert all(p.failed for p in result.points)
    assert "no such block" in result.points[0].rows[0]["error"]
    assert result.budgets[0].status == "below" and "case not measured" in result.budgets[0].detail


def test_spec_content_not_path_keys_the_store(tmp_path: Path) -> None:
    from stability.run.store_keys import spec_hash

    a = parse_spec(LINEAR, file="a.toml")
    b = parse_spec(LINEAR + "\n# a comment\n", file="elsewhere/b.toml")
    c = parse_spec(LINEAR.replace("batch = 2", "batch = 3"))
    assert spec_hash(a) == spec_hash(b) != spec_hash(c)


@given(st.integers(1, 64), st.integers(0, 4096), st.integers(0, 4096))
def test_bisection_finds_every_threshold_in_about_log2_steps(lo: int, a: int, b: int) -> None:
    """Holds at depth d iff d <= t: the bisection returns t (or says it lies outside [lo, hi])."""
    from stability.run.sweep import _Bisection

    hi = lo + a
    t = b
    bis = _Bisection(lo, hi)
    steps = 0
    while depths := bis.next_depths():
        for d in depths:
            steps += 1
            bis.update(d, d <= t, f"depth={d},seed=0", "")
    budget, status = bis.budget()
    if t >= hi:
        assert (budget, status) == (hi, "at_least")
    elif t < lo:
        assert (budget, status) == (None, "below")
    else:
        assert (budget, status) == (t, "found") and bis.deciding[0] == f"depth={t + 1},seed=0"
    assert steps <= 2 + 2 * max(1, math.ceil(math.log2(hi - lo + 1)))


def test_the_code_version_covers_every_stage_folder_of_the_package(tmp_path: Path) -> None:
    """A stored row is reused only for the same code: an edit (or a new file) in any stage's folder,
    not only the sweep's own, gives another code version."""
    import stability
    from stability import __version__
    from stability.run.store_keys import PACKAGE, code_version

    assert PACKAGE == Path(stability.__file__).resolve().parent
    package = tmp_path / "stability"
    (package / "measure").mkdir(parents=True)
    (package / "run").mkdir()
    (package / "measure" / "probe.py").write_text("x = 1\n")
    (package / "run" / "sweep.py").write_text("y = 1\n")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'stability'\n")

    def git(*args: str) -> str:
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        }
        return subprocess.run(
            ["git", *args], cwd=tmp_path, capture_output=True, text=True, check=True, env=env
        ).stdout.strip()

    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "c")
    clean = code_version(package)
    assert clean == f"{__version__}+g{git('rev-parse', 'HEAD')[:12]}"
    (package / "measure" / "probe.py").write_text("x = 2\n")  # another stage's folder than the sweep's
    edited = code_version.__wrapped__(package)
    assert edited.startswith(clean + ".dirty") and len(edited) == len(clean) + len(".dirty") + 8
    (package / "measure" / "probe.py").write_text("x = 1\n")
    assert code_version.__wrapped__(package) == clean
    (package / "judge").mkdir()
    (package / "judge" / "new.py").write_text("z = 1\n")  # an untracked module
    assert code_version.__wrapped__(package).startswith(clean + ".dirty")


def test_an_installed_copy_is_versioned_by_its_sources_not_by_a_repository_around_it(tmp_path: Path) -> None:
    """Outside the project's own checkout (site-packages, or a copy inside a user's repository)
    the version is the package version plus a hash of the sources: a user's commits say nothing
    about this code, and two builds with one version number must not share stored rows."""
    from stability import __version__
    from stability.run.store_keys import code_version

    site = tmp_path / "venv" / "lib" / "site-packages" / "stability"
    (site / "run").mkdir(parents=True)
    (site / "run" / "sweep.py").write_text("y = 1\n")
    (site / "run" / "__pycache__").mkdir()
    (site / "run" / "__pycache__" / "sweep.cpython-311.pyc").write_bytes(b"cache")
    plain = code_version.__wrapped__(site)  # no repository at all
    assert plain.startswith(f"{__version__}+src") and len(plain) == len(f"{__version__}+src") + 12
    (site / "run" / "__pycache__" / "sweep.cpython-311.pyc").write_bytes(b"another cache")
    assert code_version.__wrapped__(site) == plain  # compiled caches are not the code
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)  # the user's repository around the venv
    assert code_version.__wrapped__(site) == plain
    (site / "run" / "sweep.py").write_text("y = 2\n")
    assert code_version.__wrapped__(site) not in (plain, __version__)


def test_a_sweep_with_only_renders_the_invariants_it_judged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--only keeps some of the spec's invariants: the points hold verdicts for those alone, and the
    HTML's points table has a column for each of them and none for the others (it raised KeyError on
    the first invariant left out)."""
    spec = Path(__file__).resolve().parent.parent / "specs" / "plain_tanh_mlp.toml"
    assert [n for n, _ in load_spec(spec).invariants()][:2] == ["gradient_arrival", "variance_growth"]
    code = main(
        [
            "sweep",
            str(spec),
            "--over",
            "depth=1",
            "--seeds",
            "2",
            "--serial",
            "--only",
            "gradient_arrival",
            "--db",
            str(tmp_path / "r.sqlite"),
            "--html",
            str(tmp_path / "report"),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0 and err == "", out + err
    page = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    points = page.split("<h2>Points</h2>", 1)[1]
    assert "gradient_arrival" in points and "variance_growth" not in points
