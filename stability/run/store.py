"""The results store of sweeps: one SQLite file (stdlib `sqlite3`), default `.stability/results.sqlite`.

Tables:

- `probes`: one row per probed case, keyed by (inputs hash, code version, point, seed, device);
  the measurements as JSON text. The inputs hash covers everything besides the code that can
  change a number (`stability.run.store_keys.inputs_hash`: the spec's content and a custom spec's
  factory module). A sweep looks every point up here first, so a repeated point is free and an
  interrupted sweep resumes where it stopped. Only measurements are stored (no timings, and never
  a case that was not measured), so a sweep killed and resumed leaves exactly the rows an
  uninterrupted one does.
- `budgets`: the depth budget of each (inputs, slice of the grid, invariant, seeds, depth range,
  device) under one code version, with its deciding case and reproduce command; `stability sweep
  --compare A B` reads two code versions' rows.
- `sweeps`: each sweep's arguments and start/finish times (what `--resume` reruns).

Whose file it is: a file given as `--db` is inspected before anything is written to it, and one
that is not a results store of this schema (the SQLite header's marker) and cannot become one is
refused with one line and left exactly as it was (`stability.run.store_file`). An SQLite error
later on (a damaged file, a read-only one) is one line too.

Concurrency: WAL journal mode (readers never block the writer), a 60 s busy timeout, and one
short transaction per point; within a sweep only the parent process writes, as results arrive from
the workers. Several sweeps may write one file at once.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from stability.run.store_file import (
    APPLICATION_ID,
    DEFAULT_DB,
    MOVE_AWAY,
    SCHEMA_VERSION,
    immutable_uri,
    inspect_store,
    refuse,
    refuse_unwritable,
    write_error,
)

__all__ = [
    "Store",
    "Budget",
    "BudgetKey",
    "StoredBudget",
]

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
    device TEXT NOT NULL,
    budget INTEGER,
    status TEXT NOT NULL,
    deciding_case TEXT,
    detail TEXT,
    reproduce TEXT,
    PRIMARY KEY (spec_hash, code_version, slice, invariant, seeds, depth_range, device)
);
CREATE TABLE IF NOT EXISTS sweeps (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    code_version TEXT NOT NULL,
    argv TEXT NOT NULL,
    started REAL NOT NULL,
    finished REAL
);
"""


#: A depth budget's outcome (`Budget`'s docstring).
BudgetStatus = Literal["found", "at_least", "below", "not applicable"]


@dataclass(frozen=True, kw_only=True)
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
    status: BudgetStatus
    deciding_case: str | None
    detail: str
    reproduce: str | None


#: A stored budget's identity across code versions: (inputs hash, slice, invariant, seeds, depth range, device).
BudgetKey = tuple[str, str, str, str, str, str]
#: What `Store.budgets` gives for a key: (spec name, budget, status, deciding case).
StoredBudget = tuple[str, int | None, str, str | None]


class Store:
    """One SQLite results file. Open with `Store(path)`; close with `close()` (or `with`). A path
    that is not (and cannot become) a results store raises UsageError before anything is written,
    and so does a store that cannot be written, unless `read_only` (what `--compare` opens): a
    store it cannot write is then read without a lock or a journal. `":memory:"` is a store in
    memory (benchmarks, tests)."""

    def __init__(self, path: str | Path = DEFAULT_DB, *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.shown = path
        memory = str(path) == ":memory:"
        ours = False if memory else inspect_store(self.path, path)
        if read_only and not ours and not memory:
            raise refuse(path, "holds no results store yet; run `stability sweep SPEC --over ... --db` with it first")
        frozen = ours and read_only and write_error(self.path) is not None
        if not memory and not frozen and self.path.exists():
            refuse_unwritable(self.path, path)
        try:
            if frozen:
                self.db = sqlite3.connect(immutable_uri(self.path), uri=True, isolation_level=None)
            else:
                if not memory:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                self.db = sqlite3.connect(str(path) if memory else self.path, timeout=60.0, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise refuse(path, f"cannot be opened as a results database ({exc}); give a writable file path") from None
        with self._sql():
            self.db.execute("PRAGMA busy_timeout = 60000")
            if ours:
                self._check_schema()
            if frozen:
                return
            self.db.execute("PRAGMA journal_mode = WAL")
            self.db.execute("PRAGMA synchronous = NORMAL")
            if not ours:
                with self._transaction():  # the marker and the tables at once: no reader sees one without the other
                    self.db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            self.db.execute(statement)
            self._check_schema()

    def _check_schema(self) -> None:
        """The marker as SQLite itself reads it (the file's header can lag behind its WAL)."""
        app = self.db.execute("PRAGMA application_id").fetchone()[0]
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if (app, version) != (APPLICATION_ID, SCHEMA_VERSION):
            raise refuse(
                self.shown,
                f"is not a results store of schema {SCHEMA_VERSION} (application_id {app:#x}, user_version "
                f"{version}); give another --db path",
            )

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    @contextlib.contextmanager
    def _sql(self) -> Iterator[None]:
        """An SQLite error (a damaged file, a read-only one, a full disk) as one line, exit 2."""
        try:
            yield
        except sqlite3.Error as exc:
            raise refuse(
                self.shown, f"the results store cannot be used ({type(exc).__name__}: {exc}); {MOVE_AWAY}"
            ) from None

    # ------------------------------------------------------------------ probes

    def cached(
        self, spec_hash: str, code_version: str, point: str, seeds: Sequence[int], device: str
    ) -> list[dict[str, Any]] | None:
        """The stored rows of every seed of a point, in `seeds` order; None if any seed is missing.
        (The point's rows are read whole and picked here: a list of seeds in the SQL would meet
        SQLite's limit on bound variables.)"""
        with self._sql():
            cur = self.db.execute(
                "SELECT seed, case_text, measurements, error FROM probes WHERE spec_hash = ? AND "
                "code_version = ? AND point = ? AND device = ?",
                (spec_hash, code_version, point, device),
            )
            found = {seed: {"seed": seed, "case": case, "m": m, "error": err} for seed, case, m, err in cur}
        if any(s not in found for s in seeds):
            return None
        return [found[s] for s in seeds]

    def put(
        self, spec_hash: str, code_version: str, spec_name: str, point: str, device: str, rows: Iterable[dict[str, Any]]
    ) -> None:
        """Store a point's measured rows in one transaction. A row that was not measured (refused by
        the memory guard, a setup error, a crash, the time limit) is not a measurement and is never
        kept: the next sweep probes that seed again."""
        values = [
            (spec_hash, code_version, point, r["seed"], device, spec_name, r["case"], r["m"], r["error"])
            for r in rows
            if r["m"] is not None
        ]
        with self._sql(), self._transaction():
            self.db.executemany("INSERT OR REPLACE INTO probes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", values)

    # ------------------------------------------------------------------ budgets

    def put_budgets(
        self,
        spec_hash: str,
        code_version: str,
        seeds: Sequence[int],
        depth_range: tuple[int, int],
        budgets: Iterable[Budget],
        *,
        device: str = "cpu",
    ) -> None:
        """Store budgets; a budget of another device (or seeds, or depth range) is another row."""
        seeds_text, range_text = json.dumps(list(seeds)), f"{depth_range[0]}:{depth_range[1]}"
        values = [
            (
                spec_hash,
                code_version,
                b.spec_name,
                b.slice,
                b.invariant,
                seeds_text,
                range_text,
                device,
                b.budget,
                b.status,
                b.deciding_case,
                b.detail,
                b.reproduce,
            )
            for b in budgets
        ]
        with self._sql(), self._transaction():
            self.db.executemany(
                "INSERT OR REPLACE INTO budgets (spec_hash, code_version, spec_name, slice, invariant, "
                "seeds, depth_range, device, budget, status, deciding_case, detail, reproduce) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                values,
            )

    def code_versions(self) -> list[str]:
        with self._sql():
            return [r[0] for r in self.db.execute("SELECT DISTINCT code_version FROM budgets ORDER BY code_version")]

    def budgets(self, code_version: str) -> dict[BudgetKey, StoredBudget]:
        """{(inputs hash, slice, invariant, seeds, depth range, device): (spec name, budget, status,
        deciding case)} of one code version: keyed by what the budget was measured on, never by
        the spec's name (two specs of one name are two budgets)."""
        with self._sql():
            cur = self.db.execute(
                "SELECT spec_hash, slice, invariant, seeds, depth_range, device, spec_name, budget, status, "
                "deciding_case FROM budgets WHERE code_version = ?",
                (code_version,),
            )
            return {
                (h, s, i, seeds, r, d): (name, budget, status, case)
                for h, s, i, seeds, r, d, name, budget, status, case in cur
            }

    # ------------------------------------------------------------------ sweeps

    def start_sweep(self, code_version: str, argv: list[str]) -> int:
        with self._sql(), self._transaction():
            cur = self.db.execute(
                "INSERT INTO sweeps (code_version, argv, started) VALUES (?, ?, ?)",
                (code_version, json.dumps(argv), time.time()),
            )
        return int(cur.lastrowid or 0)

    def finish_sweep(self, sweep_id: int) -> None:
        with self._sql(), self._transaction():
            self.db.execute("UPDATE sweeps SET finished = ? WHERE id = ?", (time.time(), sweep_id))

    def last_unfinished(self, argv: list[str] | None = None) -> tuple[int, list[str]] | None:
        """The last sweep recorded as started and never finished: (id, its arguments); with `argv`,
        the last one whose arguments are exactly these (None when there is none)."""
        with self._sql():
            rows = self.db.execute("SELECT id, argv FROM sweeps WHERE finished IS NULL ORDER BY id DESC").fetchall()
        for sweep_id, text in rows:
            recorded = json.loads(text)
            if argv is None or recorded == argv:
                return int(sweep_id), recorded
        return None

    def table(self, name: str) -> list[tuple[Any, ...]]:
        """Every row of `probes` or `budgets`, sorted (what tests compare)."""
        if name not in ("probes", "budgets"):
            raise ValueError(name)
        with self._sql():
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
