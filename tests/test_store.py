"""The results store: WAL mode, all-or-nothing points, concurrent writers that never corrupt it, and the
sweep `--resume` picks (the last unfinished sweep, not the oldest)."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from stability.errors import UsageError
from stability.run.store import Store


def _rows(seeds: range, tag: str) -> list[dict[str, object]]:
    return [{"seed": s, "case": f"depth=1,seed={s}", "m": f'{{"tag":"{tag}"}}', "error": None} for s in seeds]


def test_a_point_is_cached_only_when_every_seed_is_stored(tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as store:
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        store.put("h", "v1", "spec", '{"depth":1}', "cpu", _rows(range(2), "a"))
        assert store.cached("h", "v1", '{"depth":1}', [0, 1], "cpu") == _rows(range(2), "a")
        assert store.cached("h", "v1", '{"depth":1}', [0, 1, 2], "cpu") is None  # seed 2 missing
        assert store.cached("h", "v2", '{"depth":1}', [0, 1], "cpu") is None  # another code version
        assert store.cached("other", "v1", '{"depth":1}', [0, 1], "cpu") is None  # another spec content


def _writer(path: str, tag: str, n: int) -> None:
    with Store(path) as store:
        for i in range(n):
            store.put("h", tag, "spec", f'{{"depth":{i}}}', "cpu", _rows(range(4), tag))


def test_two_processes_writing_at_once_leave_every_row_and_an_intact_file(tmp_path: Path) -> None:
    path = str(tmp_path / "r.sqlite")
    Store(path).close()
    ctx = multiprocessing.get_context("fork")  # the children inherit the imports: nothing but SQLite runs in them
    procs = [ctx.Process(target=_writer, args=(path, tag, 60)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("SELECT code_version, count(*) FROM probes GROUP BY code_version ORDER BY 1").fetchall() == [
            ("a", 240),
            ("b", 240),
        ]


def test_a_folder_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is a folder"):
        Store(tmp_path)


def test_resume_picks_the_last_unfinished_sweep_not_the_oldest(tmp_path: Path) -> None:
    with Store(tmp_path / "s.sqlite") as store:
        args = ["sweep", "a.toml", "--over", "depth=1,2"]
        first = store.start_sweep("v", args)
        second = store.start_sweep("v", ["sweep", "b.toml", "--over", "depth=1"])
        third = store.start_sweep("v", args)
        fourth = store.start_sweep("v", ["sweep", "c.toml"])
        assert first < second < third < fourth
        store.finish_sweep(fourth)
        assert store.last_unfinished() == (third, args)
        assert store.last_unfinished(args) == (third, args)
        store.finish_sweep(third)
        assert store.last_unfinished() == (second, ["sweep", "b.toml", "--over", "depth=1"])
        assert store.last_unfinished(args) == (first, args)
