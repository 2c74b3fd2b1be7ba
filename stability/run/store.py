"""The results store of sweeps: one SQLite file (stdlib `sqlite3`), default `.stability/results.sqlite`.

Tables:

- `probes`: one row per probed case, keyed by (inputs hash, code version, point, seed, device);
  the measurements as JSON text. The inputs hash covers everything besides the code that can
  change a number (`stability.run.sweep.inputs_hash`: the spec's content and a custom spec's
  factory module). A sweep looks every point up here first, so a repeated point is free and an
  interrupted sweep resumes where it stopped. Only measurements are stored (no timings, and never
  a case that was not measured), so a sweep killed and resumed leaves exactly the rows an
  uninterrupted one does.
- `budgets`: the depth budget of each (inputs, slice of the grid, invariant, seeds, depth range,
  device) under one code version, with its deciding case and reproduce command; `stability sweep
  --compare A B` reads two code versions' rows.
- `sweeps`: each sweep's arguments and start/finish times (what `--resume` reruns).

Whose file it is. A store carries the SQLite header fields `application_id` (`APPLICATION_ID`) and
`user_version` (`SCHEMA_VERSION`). A file given as `--db` is inspected before anything is written
to it, from its stat and its first 100 bytes (and, for an SQLite file without the marker, a
read-only, lock-free look at its table names): a folder, a device, a FIFO or a socket, a file that
is not SQLite, another application's database, a store of another schema or of an older release
without the marker is refused with one line (a UsageError, exit 2) and left exactly as it was (no
table added, no journal file, the journal mode unchanged). A missing file, an empty file or an
empty SQLite database becomes a new store. An SQLite error later on (a damaged file, a read-only
one) is one line too.

Concurrency: WAL journal mode (readers never block the writer), a 60 s busy timeout, and one
short transaction per point; within a sweep only the parent process writes, as results arrive from
the workers. Several sweeps may write one file at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stability.errors import UsageError

__all__ = ["Store", "Budget", "check_store", "DEFAULT_DB", "APPLICATION_ID", "SCHEMA_VERSION", "BudgetKey", "StoredBudget"]

DEFAULT_DB = ".stability/results.sqlite"

#: The SQLite header's application_id of a results store: the bytes "StbR".
APPLICATION_ID = int.from_bytes(b"StbR", "big")
#: The layout of the tables below (the header's user_version). 1 was the layout before the marker.
SCHEMA_VERSION = 2
#: The tables of a store written before the marker existed (schema 1).
_OLD_TABLES = {"probes", "budgets", "sweeps"}

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


#: A stored budget's identity across code versions: (inputs hash, slice, invariant, seeds, depth range, device).
BudgetKey = tuple[str, str, str, str, str, str]
#: What `Store.budgets` gives for a key: (spec name, budget, status, deciding case).
StoredBudget = tuple[str, int | None, str, str | None]


_MOVE_AWAY = "give another --db path, or move that file away (its rows are only a cache of probes)"


def _refuse(path: str | Path, why: str) -> UsageError:
    return UsageError(f"--db {path}: {why}")


def _inspect(path: Path, shown: str | Path) -> bool:
    """Whether `path` is a results store already (True) or becomes a new one (False), decided from
    its stat, its header and its table names without writing anything; a file that must not be
    touched raises UsageError."""
    if not str(shown).strip():
        raise _refuse(repr(str(shown)), f"the path is empty; give a file path such as {DEFAULT_DB}")
    if str(shown).endswith(("/", os.sep)):
        raise _refuse(shown, f"names a folder; give a file path such as {Path(shown) / 'results.sqlite'}")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise _refuse(shown, f"cannot be checked ({exc.strerror}); give a file path you can write") from None
    if stat.S_ISDIR(mode):
        raise _refuse(shown, f"is a folder; give a file path such as {Path(shown) / 'results.sqlite'}")
    if not stat.S_ISREG(mode):
        raise _refuse(shown, "is not a regular file (a device, a FIFO or a socket); give a file path for the results store")
    try:
        with open(path, "rb") as fh:
            header = fh.read(100)
    except OSError as exc:
        raise _refuse(shown, f"cannot be read ({exc.strerror}); give a file path you can read and write") from None
    if not header:
        return False  # an empty file: a new store
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        raise _refuse(shown, "is not an SQLite database, so not a results store of stability; it was left as it is: give another --db path")
    user_version = int.from_bytes(header[60:64], "big")
    application_id = int.from_bytes(header[68:72], "big")
    if application_id == APPLICATION_ID:
        if user_version != SCHEMA_VERSION:
            raise _refuse(shown, f"is a results store of schema {user_version}, and this stability reads schema {SCHEMA_VERSION}; {_MOVE_AWAY}")
        return True
    if application_id != 0:
        raise _refuse(shown, f"is the SQLite database of another application (application_id {application_id:#x}); it was left as it is: give another --db path")
    tables = _tables(path, shown)
    if not tables and user_version == 0:
        return False  # an empty SQLite database: a new store
    if tables == _OLD_TABLES:
        raise _refuse(shown, f"is a results store of an older stability (without a schema marker; its rows may be stale); {_MOVE_AWAY}")
    listed = ", ".join(sorted(tables)) or f"none; user_version {user_version}"
    raise _refuse(shown, f"is an SQLite database of another application (tables: {listed}); it was left as it is: give another --db path")


def _immutable_uri(path: Path) -> str:
    """An SQLite URI that reads `path` with no lock and no journal: no -journal, -wal or -shm file
    is created beside it and nothing is written."""
    return f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro&immutable=1"


def _writable(path: Path) -> OSError | None:
    """Why `path` (an existing regular file) cannot be opened for writing (None when it can):
    opening changes nothing, and catches what file modes do not show (`chattr +i`, a read-only mount)."""
    try:
        with open(path, "r+b"):
            return None
    except OSError as exc:
        return exc


def _tables(path: Path, shown: str | Path) -> set[str]:
    """The table names of an SQLite file, read through `_immutable_uri`."""
    try:
        with contextlib.closing(sqlite3.connect(_immutable_uri(path), uri=True)) as db:
            return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
    except sqlite3.Error as exc:
        raise _refuse(shown, f"cannot be read as an SQLite database ({exc}); it was left as it is: give another --db path") from None


def check_store(path: str | Path) -> None:
    """Refuse (UsageError) a `--db` path that is not and cannot become a results store, creating
    and changing nothing: what a command checks before it starts a cluster."""
    if str(path) == ":memory:":
        return
    _inspect(Path(path), path)
    if Path(path).exists():
        _refuse_unwritable(Path(path), path)
        return
    folder = Path(path).parent
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise _refuse(path, f"{folder} is not a folder this process can create the store in; give a writable file path")


def _refuse_unwritable(path: Path, shown: str | Path) -> None:
    problem = _writable(path)
    if problem is not None:
        raise _refuse(shown, f"cannot be written ({problem.strerror}); a sweep stores its probes there: give a writable --db path (only --compare reads a store it cannot write)")


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
        ours = False if memory else _inspect(self.path, path)
        if read_only and not ours and not memory:
            raise _refuse(path, "holds no results store yet; run `stability sweep SPEC --over ... --db` with it first")
        frozen = ours and read_only and _writable(self.path) is not None
        if not memory and not frozen and self.path.exists():
            _refuse_unwritable(self.path, path)
        try:
            if frozen:
                self.db = sqlite3.connect(_immutable_uri(self.path), uri=True, isolation_level=None)
            else:
                if not memory:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                self.db = sqlite3.connect(str(path) if memory else self.path, timeout=60.0, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise _refuse(path, f"cannot be opened as a results database ({exc}); give a writable file path") from None
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
            raise _refuse(self.shown, f"is not a results store of schema {SCHEMA_VERSION} (application_id {app:#x}, user_version {version}); give another --db path")

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
            raise _refuse(self.shown, f"the results store cannot be used ({type(exc).__name__}: {exc}); {_MOVE_AWAY}") from None

    # ------------------------------------------------------------------ probes

    def cached(self, spec_hash: str, code_version: str, point: str, seeds: Sequence[int], device: str) -> list[dict[str, Any]] | None:
        """The stored rows of every seed of a point, in `seeds` order; None if any seed is missing.
        (The point's rows are read whole and picked here: a list of seeds in the SQL would meet
        SQLite's limit on bound variables.)"""
        with self._sql():
            cur = self.db.execute(
                "SELECT seed, case_text, measurements, error FROM probes WHERE spec_hash = ? AND code_version = ? AND point = ? AND device = ?",
                (spec_hash, code_version, point, device),
            )
            found = {seed: {"seed": seed, "case": case, "m": m, "error": err} for seed, case, m, err in cur}
        if any(s not in found for s in seeds):
            return None
        return [found[s] for s in seeds]

    def put(self, spec_hash: str, code_version: str, spec_name: str, point: str, device: str, rows: Iterable[dict[str, Any]]) -> None:
        """Store a point's measured rows in one transaction. A row that was not measured (refused by
        the memory guard, a setup error, a crash, the time limit) is not a measurement and is never
        kept: the next sweep probes that seed again."""
        values = [(spec_hash, code_version, point, r["seed"], device, spec_name, r["case"], r["m"], r["error"]) for r in rows if r["m"] is not None]
        with self._sql(), self._transaction():
            self.db.executemany("INSERT OR REPLACE INTO probes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", values)

    # ------------------------------------------------------------------ budgets

    def put_budgets(self, spec_hash: str, code_version: str, seeds: Sequence[int], depth_range: tuple[int, int], budgets: Iterable[Budget], *, device: str = "cpu") -> None:
        """Store budgets; a budget of another device (or seeds, or depth range) is another row."""
        seeds_text, range_text = json.dumps(list(seeds)), f"{depth_range[0]}:{depth_range[1]}"
        values = [(spec_hash, code_version, b.spec_name, b.slice, b.invariant, seeds_text, range_text, device, b.budget, b.status, b.deciding_case, b.detail, b.reproduce) for b in budgets]
        with self._sql(), self._transaction():
            self.db.executemany(
                "INSERT OR REPLACE INTO budgets (spec_hash, code_version, spec_name, slice, invariant, seeds, depth_range, device, budget, status, deciding_case, detail, reproduce) "
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
                "SELECT spec_hash, slice, invariant, seeds, depth_range, device, spec_name, budget, status, deciding_case FROM budgets WHERE code_version = ?",
                (code_version,),
            )
            return {(h, s, i, seeds, r, d): (name, budget, status, case) for h, s, i, seeds, r, d, name, budget, status, case in cur}

    # ------------------------------------------------------------------ sweeps

    def start_sweep(self, code_version: str, argv: list[str]) -> int:
        with self._sql(), self._transaction():
            cur = self.db.execute("INSERT INTO sweeps (code_version, argv, started) VALUES (?, ?, ?)", (code_version, json.dumps(argv), time.time()))
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
