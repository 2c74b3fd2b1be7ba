"""The results store of sweeps: one SQLite file (stdlib `sqlite3`), default `.stability/results.sqlite`.

Tables:

- `probes`: one row per probed case, keyed by (spec content hash, code version, point, seed,
  device); the measurements as JSON text, or the reason the case was not measured. A sweep looks
  every point up here first, so a repeated point is free and an interrupted sweep resumes where it
  stopped. Only deterministic values are stored here (no timings), so a sweep killed and resumed
  leaves exactly the rows an uninterrupted one does.
- `budgets`: the depth budget of each (spec, slice of the grid, invariant, seeds, depth range)
  under one code version, with its deciding case and reproduce command; `stability sweep
  --compare A B` reads two code versions' rows.
- `sweeps`: each sweep's arguments and start/finish times (what `--resume` reruns).

Concurrency: WAL journal mode (readers never block the writer), a 60 s busy timeout, and one
short transaction per point; within a sweep only the parent process writes, as results arrive from
the workers. Several sweeps may write one file at once.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stability.errors import UsageError

__all__ = ["Store", "Budget", "DEFAULT_DB"]

DEFAULT_DB = ".stability/results.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS probes (
    spec_hash TEXT NOT NULL,
    code_version TEXT NOT NULL,
    point TEXT NOT NULL,
    seed INTEGER NOT NULL,
    device TEXT NOT NULL,
    spec_name TEXT NOT NULL,
    case_text TEXT NOT NULL,
    measurements TEXT,
    error TEXT,
    PRIMARY KEY (spec_hash, code_version, point, seed, device)
);
CREATE TABLE IF NOT EXISTS budgets (
    spec_hash TEXT NOT NULL,
    code_version TEXT NOT NULL,
    spec_name TEXT NOT NULL,
    slice TEXT NOT NULL,
    invariant TEXT NOT NULL,
    seeds TEXT NOT NULL,
    depth_range TEXT NOT NULL,
    budget INTEGER,
    status TEXT NOT NULL,
    deciding_case TEXT,
    detail TEXT,
    reproduce TEXT,
    PRIMARY KEY (spec_hash, code_version, slice, invariant, seeds, depth_range)
);
CREATE TABLE IF NOT EXISTS sweeps (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    code_version TEXT NOT NULL,
    argv TEXT NOT NULL,
    started REAL NOT NULL,
    finished REAL
);
"""


@dataclass(frozen=True)
class Budget:
    """The largest depth at which an invariant holds on every seed of the ensemble.

    `status`: "found" (holds at `budget`, fails at `budget + 1`), "at_least" (holds at the top
    of the depth range: the budget is `budget` or more), "below" (fails already at the smallest
    depth; `budget` is None), "not applicable" (the invariant does not apply to these cases).
    """

    spec_name: str
    slice: str
    invariant: str
    budget: int | None
    status: str
    deciding_case: str | None
    detail: str
    reproduce: str | None


class Store:
    """One SQLite results file. Open with `Store(path)`; close with `close()` (or `with`)."""

    def __init__(self, path: str | Path = DEFAULT_DB) -> None:
        self.path = Path(path)
        if self.path.exists() and self.path.is_dir():
            raise UsageError(f"--db {path}: is a folder; give a file path such as {Path(path) / 'results.sqlite'}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None)
            self.db.execute("PRAGMA busy_timeout = 60000")
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.execute("PRAGMA synchronous = NORMAL")
            self.db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise UsageError(f"--db {path}: cannot be opened as a results database ({exc}); give a writable file path") from None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------ probes

    def cached(self, spec_hash: str, code_version: str, point: str, seeds: Sequence[int], device: str) -> list[dict[str, Any]] | None:
        """The stored rows of every seed of a point, in `seeds` order; None if any seed is missing."""
        marks = ",".join("?" * len(seeds))
        cur = self.db.execute(
            f"SELECT seed, case_text, measurements, error FROM probes WHERE spec_hash = ? AND code_version = ? AND point = ? AND device = ? AND seed IN ({marks})",
            (spec_hash, code_version, point, device, *seeds),
        )
        found = {seed: {"seed": seed, "case": case, "m": m, "error": err} for seed, case, m, err in cur}
        if len(found) != len(set(seeds)):
            return None
        return [found[s] for s in seeds]

    def put(self, spec_hash: str, code_version: str, spec_name: str, point: str, device: str, rows: Iterable[dict[str, Any]]) -> None:
        """Store a point's measured rows in one transaction. A row that was not measured (refused by
        the memory guard, a setup error, a crash, the time limit) is not a measurement and is never
        kept: the next sweep probes that seed again."""
        values = [(spec_hash, code_version, point, r["seed"], device, spec_name, r["case"], r["m"], r["error"]) for r in rows if r["m"] is not None]
        with self._transaction():
            self.db.executemany("INSERT OR REPLACE INTO probes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", values)

    # ------------------------------------------------------------------ budgets

    def put_budgets(self, spec_hash: str, code_version: str, seeds: Sequence[int], depth_range: tuple[int, int], budgets: Iterable[Budget]) -> None:
        seeds_text, range_text = json.dumps(list(seeds)), f"{depth_range[0]}:{depth_range[1]}"
        values = [(spec_hash, code_version, b.spec_name, b.slice, b.invariant, seeds_text, range_text, b.budget, b.status, b.deciding_case, b.detail, b.reproduce) for b in budgets]
        with self._transaction():
            self.db.executemany("INSERT OR REPLACE INTO budgets VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", values)

    def code_versions(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT DISTINCT code_version FROM budgets ORDER BY code_version")]

    def budgets(self, code_version: str) -> dict[tuple[str, str, str, str, str], tuple[int | None, str, str | None]]:
        """{(spec_name, slice, invariant, seeds, depth_range): (budget, status, deciding case)} of one code version."""
        cur = self.db.execute(
            "SELECT spec_name, slice, invariant, seeds, depth_range, budget, status, deciding_case FROM budgets WHERE code_version = ?",
            (code_version,),
        )
        return {(a, b, c, d, e): (f, g, h) for a, b, c, d, e, f, g, h in cur}

    # ------------------------------------------------------------------ sweeps

    def start_sweep(self, code_version: str, argv: list[str]) -> int:
        with self._transaction():
            cur = self.db.execute("INSERT INTO sweeps (code_version, argv, started) VALUES (?, ?, ?)", (code_version, json.dumps(argv), time.time()))
        return int(cur.lastrowid or 0)

    def finish_sweep(self, sweep_id: int) -> None:
        with self._transaction():
            self.db.execute("UPDATE sweeps SET finished = ? WHERE id = ?", (time.time(), sweep_id))

    def last_unfinished(self) -> tuple[int, list[str]] | None:
        row = self.db.execute("SELECT id, argv FROM sweeps WHERE finished IS NULL ORDER BY id DESC LIMIT 1").fetchone()
        return None if row is None else (int(row[0]), json.loads(row[1]))

    def table(self, name: str) -> list[tuple[Any, ...]]:
        """Every row of `probes` or `budgets`, sorted (what tests compare)."""
        if name not in ("probes", "budgets"):
            raise ValueError(name)
        return sorted(self.db.execute(f"SELECT * FROM {name}").fetchall(), key=repr)

    def _transaction(self) -> Any:
        return _Transaction(self.db)


class _Transaction:
    """BEGIN IMMEDIATE … COMMIT (ROLLBACK on error): takes the write lock up front, so two writers
    wait for each other (up to the busy timeout) instead of failing half-way."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, *rest: object) -> None:
        self.db.execute("ROLLBACK" if kind is not None else "COMMIT")


def budget_text(b: Budget) -> str:
    """A depth budget as the terminal table and the HTML report both show it."""
    if b.status == "found":
        return str(b.budget)
    if b.status == "at_least":
        return f"≥ {b.budget}"
    if b.status == "below":
        return "fails at the smallest depth"
    return "not applicable"
