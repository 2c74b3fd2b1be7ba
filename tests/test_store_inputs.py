"""A results store that never lies, tried from outside: its keys hold every input that can change a
number (the device, a custom spec's factory module), `--compare` compares what was measured on the
same inputs and says when nothing is comparable, and a `--db` that is not a store of this tool (a
foreign SQLite file, a device, a FIFO, another schema, a damaged or immutable file) is refused in
one line and left exactly as it was."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sqlite3
import stat
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from cli_support import Cli
from gate_support import SCALAR_CHAIN

from stability.cli import main
from stability.run.executor import Executor, InProcessExecutor, Job, Outcome
from stability.run.executors import executor_for
from stability.run.grid import parse_axis
from stability.run.store import Budget, Store
from stability.run.store_file import APPLICATION_ID, SCHEMA_VERSION
from stability.run.store_keys import inputs_hash
from stability.run.sweep import run_sweep
from stability.spec.load import load_spec

LINEAR = SCALAR_CHAIN


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() if p.is_file() else b"" for p in sorted(folder.iterdir())}


# ----------------------------------------------------------------------------- keys


class _Failing(Executor):
    """Every point comes back unmeasured (what a CUDA run that ran out of memory sends)."""

    def map(self, jobs: Sequence[Job], *, on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
        out = []
        for job in jobs:
            rows = [{"seed": s, "case": "", "m": None, "error": "CUDA out of memory"} for s in job.seeds]  # type: ignore[attr-defined]
            outcome = Outcome(task=job, result=rows)
            if on_done is not None:
                on_done(outcome)
            out.append(outcome)
        return out


class _OnTheCpu(Executor):
    """Runs a CUDA point's task on the CPU (this machine may have no GPU): the rows are stored
    under the task's device all the same."""

    def map(self, jobs: Sequence[Job], *, on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
        out = []
        for job in jobs:
            (done,) = InProcessExecutor().map([dataclasses.replace(job, device="cpu")])  # type: ignore[type-var]
            outcome = Outcome(task=job, result=done.result)
            if on_done is not None:
                on_done(outcome)
            out.append(outcome)
        return out


def test_a_cuda_sweep_leaves_the_cpu_budget_row_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "spec.toml").write_text(LINEAR, encoding="utf-8")
    spec = load_spec(tmp_path / "spec.toml")
    axes = [parse_axis("depth=1,32")]
    with Store(tmp_path / "r.sqlite") as store:
        cpu = run_sweep(spec, axes, store, InProcessExecutor(), seeds=[0, 1])
        assert [(b.budget, b.status) for b in cpu.budgets] == [(21, "found")]  # 0.9^21 >= 0.1 > 0.9^22
        before = store.table("budgets")
        cuda = run_sweep(spec, axes, store, _Failing(), seeds=[0, 1], device="cuda")
        assert [(b.budget, b.status) for b in cuda.budgets] == [(None, "below")]
        rows = store.table("budgets")
        assert [r for r in rows if r[7] == "cpu"] == before and len(rows) == 2
        assert {r[7] for r in rows} == {"cpu", "cuda"}
        # the CUDA rows are keyed by their device too: a CUDA sweep never reads the CPU's probes
        again = run_sweep(spec, axes, store, _OnTheCpu(), seeds=[0, 1], device="cuda")
        assert again.probed > 0 and [(b.budget, b.status) for b in again.budgets] == [(21, "found")]
        assert "--device cuda" in (again.budgets[0].reproduce or "")


FACTORY_SPEC = """\
name = "custom-chain"
description = "a custom factory whose module may be missing or edited"
family = "custom"
[block]
factory = "stability_hardening_chain:make"
[space]
depth = [1, 8]
width = 4
batch = 2
[expect.gradient_arrival]
lo = 0.1
hi = 10.0
"""

#: y = g·x per block: the gradient ratio is g^L exactly.
CHAIN = """
import torch
from torch import nn


class Gain(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return {gain} * self.w * x


def make(depth, width):
    return nn.Sequential(*[Gain() for _ in range(depth)])
"""


def test_a_custom_spec_swept_before_its_factory_existed_is_probed_again_once_it_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.toml").write_text(FACTORY_SPEC, encoding="utf-8")
    db = tmp_path / "r.sqlite"
    # the CLI refuses the missing module up front, as check does: nothing is stored
    assert main(["sweep", "spec.toml", "--over", "depth=1,32", "--seeds", "1", "--serial", "--db", str(db)]) == 2
    assert (
        "block.factory = 'stability_hardening_chain:make': module 'stability_hardening_chain' was not found"
        in capsys.readouterr().err
    )
    assert not db.exists()
    spec = load_spec(tmp_path / "spec.toml")
    missing = inputs_hash(spec)
    workers = executor_for("workers")  # each point in a fresh process: the module as it is on disk then
    with Store(db) as store:
        first = run_sweep(
            spec, [parse_axis("depth=1,32")], store, workers, seeds=[0]
        )  # the library runs it: every point fails
        assert all(p.failed for p in first.points) and first.budgets[0].status == "below"
        (tmp_path / "stability_hardening_chain.py").write_text(CHAIN.format(gain=0.9), encoding="utf-8")
        assert inputs_hash(spec) != missing
        second = run_sweep(spec, [parse_axis("depth=1,32")], store, workers, seeds=[0])
        assert second.cached == 0 and second.probed > 0
        assert [(b.budget, b.status) for b in second.budgets] == [(21, "found")]
        (tmp_path / "stability_hardening_chain.py").write_text(
            CHAIN.format(gain=0.8), encoding="utf-8"
        )  # an edit of the module
        third = run_sweep(spec, [parse_axis("depth=1,32")], store, workers, seeds=[0])
        assert third.cached == 0 and [(b.budget, b.status) for b in third.budgets] == [
            (10, "found")
        ]  # 0.8^10 >= 0.1 > 0.8^11


def test_a_memory_refused_sweep_is_probed_again_when_the_budget_allows_it(tmp_path: Path) -> None:
    (tmp_path / "spec.toml").write_text(LINEAR, encoding="utf-8")
    spec = load_spec(tmp_path / "spec.toml")
    with Store(tmp_path / "r.sqlite") as store:
        refused = run_sweep(spec, [parse_axis("depth=1,32")], store, InProcessExecutor(), seeds=[0], memory_budget=1)
        assert refused.budgets[0].status == "below" and "refused: this case needs" in refused.budgets[0].detail
        assert store.table("probes") == []
        normal = run_sweep(spec, [parse_axis("depth=1,32")], store, InProcessExecutor(), seeds=[0])
        assert normal.cached == 0 and [(b.budget, b.status) for b in normal.budgets] == [(21, "found")]


def test_a_point_of_many_seeds_is_read_back_whatever_sqlites_variable_limit(tmp_path: Path) -> None:
    seeds = range(40_000)  # more than SQLITE_MAX_VARIABLE_NUMBER (32,766)
    with Store(tmp_path / "r.sqlite") as store:
        store.put(
            "h",
            "v",
            "spec",
            '{"depth":1}',
            "cpu",
            [{"seed": s, "case": f"seed={s}", "m": "{}", "error": None} for s in seeds],
        )
        rows = store.cached("h", "v", '{"depth":1}', list(seeds), "cpu")
        assert rows is not None and [r["seed"] for r in rows] == list(seeds)
        assert store.cached("h", "v", '{"depth":1}', [*seeds, 40_000], "cpu") is None


# ----------------------------------------------------------------------------- compare


def _budget(name: str, budget: int, *, invariant: str = "gradient_arrival", slice_: str = "{}") -> Budget:
    return Budget(
        spec_name=name,
        slice=slice_,
        invariant=invariant,
        budget=budget,
        status="found",
        deciding_case=f"depth={budget + 1},seed=0",
        detail="",
        reproduce=None,
    )


@pytest.fixture
def two_versions(tmp_path: Path) -> Path:
    """Version A: spec content h1 has budget 7. Version B: the same content h1 went down to 3, and
    an edited copy of the spec under the same name (content h2) reached 9; a second invariant of
    h1 went down too (5 → 4), one stayed (6)."""
    db = tmp_path / "r.sqlite"
    with Store(db) as store:
        store.put_budgets(
            "h1",
            "0.1.0+gaaaaaaaaaaaa",
            [0],
            (1, 64),
            [
                _budget("net", 7),
                _budget("net", 5, invariant="variance_growth"),
                _budget("net", 6, slice_='{"width":8}'),
            ],
        )
        store.put_budgets(
            "h1",
            "0.1.0+gbbbbbbbbbbbb",
            [0],
            (1, 64),
            [
                _budget("net", 3),
                _budget("net", 4, invariant="variance_growth"),
                _budget("net", 6, slice_='{"width":8}'),
            ],
        )
        store.put_budgets("h2", "0.1.0+gbbbbbbbbbbbb", [0], (1, 64), [_budget("net", 9)])
        store.put_budgets("h3", "0.1.0+gcccccccccccc", [0], (1, 64), [_budget("other", 9)])
    return db


def test_compare_lists_every_budget_that_went_down_by_spec_content(cli: Cli, two_versions: Path) -> None:
    code, out, err = cli("sweep", "--compare", "0.1.0+gaaaa", "0.1.0+gbbbb", "--db", two_versions)
    assert code == 1, out + err
    lines = [ln for ln in out.splitlines() if "lower" in ln or "higher" in ln]
    assert len(lines) == 2 and all("lower" in ln for ln in lines), out
    assert any("gradient_arrival" in ln and " 7 " in ln and " 3 " in ln for ln in lines), out
    assert any("variance_growth" in ln and " 5 " in ln and " 4 " in ln for ln in lines), out
    assert " 9 " not in out  # the edited copy is another spec content: not compared with h1's 7
    assert (
        "3 compared" in out
        and "not compared: 0 budget(s) stored only under 0.1.0+gaaaaaaaaaaaa and 1 only under 0.1.0+gbbbbbbbbbbbb"
        in out
    )


@pytest.mark.parametrize(
    ("revs", "words"),
    [
        (["", ""], "--compare '': an empty value"),
        (["0", "0"], "--compare 0: names 3 stored code versions"),
        (
            ["0.1.0+gaaaa", "0.1.0+gaaaa"],
            "--compare 0.1.0+gaaaa 0.1.0+gaaaa: both name the code version 0.1.0+gaaaaaaaaaaaa",
        ),
        (
            ["0.1.0+gaaaa", "0.1.0+gcccc"],
            "nothing is comparable: no budget is stored under both 0.1.0+gaaaaaaaaaaaa and 0.1.0+gcccccccccccc",
        ),
        (["0.1.0+gaaaa", "nope"], "--compare nope: no budgets stored for that code version"),
    ],
)
def test_compare_says_when_nothing_is_comparable(cli: Cli, two_versions: Path, revs: list[str], words: str) -> None:
    code, out, err = cli("sweep", "--compare", *revs, "--db", two_versions)
    assert code == 2 and words in err and err.count("\n") == 1 and "Traceback" not in out + err, err
    assert "no budget moved" not in out


# ----------------------------------------------------------------------------- files that are not stores


def _sweep_and_compare(cli: Cli, tmp_path: Path, db: Path) -> list[tuple[int, str]]:
    (tmp_path / "spec.toml").write_text(LINEAR, encoding="utf-8")
    results = []
    for args in (["spec.toml", "--over", "depth=1,2", "--seeds", "1", "--serial", "-q"], ["--compare", "a", "b"]):
        code, out, err = cli("sweep", *args, "--db", db)
        assert "Traceback" not in out + err and err.count("\n") == 1, err
        results.append((code, err))
    return results


def _foreign(path: Path, *, journal: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA journal_mode = {journal}")
        db.execute("CREATE TABLE contacts (name TEXT, phone TEXT)")
        db.execute("INSERT INTO contacts VALUES ('ada', '123')")
    db.close()


@pytest.mark.parametrize("journal", ["DELETE", "WAL"])
def test_another_applications_sqlite_file_is_refused_and_left_byte_identical(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, journal: str
) -> None:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "data"
    folder.mkdir()
    db = folder / "app.sqlite"
    _foreign(db, journal=journal)
    before = _files(folder)
    for code, err in _sweep_and_compare(cli, tmp_path, db):
        assert (
            code == 2 and "is an SQLite database of another application (tables: contacts); it was left as it is" in err
        ), err
    assert _files(folder) == before  # the same bytes, no table added, no -journal, -wal or -shm beside it
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as check:
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == journal.lower()


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (
            lambda p: p.write_text("name,phone\nada,123\n"),
            "is not an SQLite database, so not a results store of stability",
        ),
        (
            lambda p: p.write_bytes(b"SQLite format 3\x00" + bytes(84) + b"\xa5" * 4000),
            "cannot be read as an SQLite database",
        ),
        (
            lambda p: _with_marker(p, application_id=0x12345678, user_version=0),
            "is the SQLite database of another application (application_id 0x12345678)",
        ),
        (
            lambda p: _with_marker(p, application_id=APPLICATION_ID, user_version=99),
            f"is a results store of schema 99, and this stability reads schema {SCHEMA_VERSION}",
        ),
        (lambda p: _old_store(p), "is a results store of an older stability (without a schema marker"),
    ],
    ids=["text", "garbage-after-header", "other-application-id", "other-schema", "older-store"],
)
def test_a_file_that_is_not_a_store_of_this_schema_is_refused_in_one_line(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: Callable[[Path], None], words: str
) -> None:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "data"
    folder.mkdir()
    db = folder / "x.sqlite"
    make(db)
    before = _files(folder)
    for code, err in _sweep_and_compare(cli, tmp_path, db):
        assert code == 2 and words in err, err
    assert _files(folder) == before


def _with_marker(path: Path, *, application_id: int, user_version: int) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (x)")
        db.execute(f"PRAGMA application_id = {application_id}")
        db.execute(f"PRAGMA user_version = {user_version}")
    db.close()


def _old_store(path: Path) -> None:
    """The three tables of a store from before the schema marker, with a row."""
    with sqlite3.connect(path) as db:
        for table in ("probes", "budgets", "sweeps"):
            db.execute(f"CREATE TABLE {table} (x)")
        db.execute("INSERT INTO probes VALUES (1)")
    db.close()


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_device_or_a_fifo_is_refused_and_nothing_is_created_beside_it(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "dev"
    folder.mkdir()
    db = folder / "null"
    if kind == "fifo":
        os.mkfifo(db)
    else:
        try:
            os.mknod(db, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a copy of /dev/null
        except PermissionError:
            pytest.skip("creating a device node needs CAP_MKNOD")
    for code, err in _sweep_and_compare(cli, tmp_path, db):
        assert code == 2 and "is not a regular file (a device, a FIFO or a socket)" in err, err
    assert sorted(p.name for p in folder.iterdir()) == ["null"]  # no null-journal, -wal or -shm


def test_a_damaged_store_is_one_line(cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.toml").write_text(LINEAR, encoding="utf-8")
    db = tmp_path / "r.sqlite"
    spec = load_spec(tmp_path / "spec.toml")
    with Store(db) as store:
        run_sweep(
            spec,
            [parse_axis("depth=1,2,3,4")],
            store,
            InProcessExecutor(),
            seeds=[0, 1, 2, 3],
            version="0.1.0+gaaaaaaaaaaaa",
        )
    with open(db, "r+b") as fh:  # pages 2 to 4 (the tables' b-trees) overwritten
        fh.seek(4096 + 100)
        fh.write(bytes(range(256)) * 48)
    for code, err in _sweep_and_compare(cli, tmp_path, db):
        assert (
            code == 2 and "the results store cannot be used (DatabaseError: database disk image is malformed)" in err
        ), err


def test_an_immutable_store_is_refused_for_a_sweep_in_one_line_and_read_for_compare(
    cli: Cli, two_versions: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "r.sqlite"
    shutil.copy(two_versions, db)
    immutable = (
        shutil.which("chattr") is not None
        and subprocess.run(["chattr", "+i", str(db)], capture_output=True).returncode == 0
    )
    if not immutable:
        if os.geteuid() == 0:
            pytest.skip("root writes through file modes, and chattr +i is not available here")
        db.chmod(0o444)
        folder.chmod(0o555)
    try:
        before = _files(folder)
        (tmp_path / "spec.toml").write_text(LINEAR, encoding="utf-8")
        code, out, err = cli("sweep", "spec.toml", "--over", "depth=1,2", "--seeds", "1", "--serial", "-q", "--db", db)
        why = "Operation not permitted" if immutable else "Permission denied"
        assert (
            code == 2
            and err
            == f"stability: error: --db {db}: cannot be written ({why}); a sweep stores its probes there: "
            "give a writable --db path (only --compare reads a store it cannot write)\n"
        )
        code, out, err = cli("sweep", "--compare", "0.1.0+gaaaa", "0.1.0+gbbbb", "--db", db)
        assert code == 1 and out.count("lower") == 2, out + err
        assert _files(folder) == before  # no -wal, -shm or -journal beside it
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(db)], check=True)
        else:
            folder.chmod(0o755)
            db.chmod(0o644)


def test_a_new_store_is_marked_and_an_empty_file_becomes_one(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    for path in (tmp_path / "new.sqlite", empty):
        Store(path).close()
        header = path.read_bytes()[:100]
        assert (
            int.from_bytes(header[68:72], "big") == APPLICATION_ID
            and int.from_bytes(header[60:64], "big") == SCHEMA_VERSION
        )
        Store(path).close()  # and opens again as a store
