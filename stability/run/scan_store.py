"""Where `stability scan` keeps its rows: a table of the results store (`stability.run.store`, the
same SQLite file and the same checks of whose file a `--db` path is), one row per (library, its
release, the harness's code version, model name), the row as JSON text.

`--resume` reads the names already stored for the same library release and code version and skips
them; a row is written as soon as its model is done, in one short transaction, so an interrupted
scan keeps every row it finished. The table is created where it is missing (a store written before
scans existed gains it; older releases of the harness ignore it).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from stability.run.scan_rows import ScanRow
from stability.run.store import Store
from stability.run.store_file import MOVE_AWAY, refuse

__all__ = ["ScanStore"]

_TABLE = """
CREATE TABLE IF NOT EXISTS scan_rows (
    library TEXT NOT NULL,
    release TEXT NOT NULL,
    code_version TEXT NOT NULL,
    name TEXT NOT NULL,
    row TEXT NOT NULL,
    PRIMARY KEY (library, release, code_version, name)
)
"""


class ScanStore:
    """The scan's table in a results store (the module docstring). Use as a context manager."""

    def __init__(self, path: str | Path) -> None:
        self.store = Store(path)
        self.shown = path
        with self._sql():
            self.store.db.execute(_TABLE)

    def __enter__(self) -> ScanStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    @contextmanager
    def _sql(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise refuse(
                self.shown, f"the scan's rows cannot be stored ({type(exc).__name__}: {exc}); {MOVE_AWAY}"
            ) from None

    def put(self, release: str, code_version: str, row: ScanRow) -> None:
        """Store one row (replacing the same model's row of the same release and code)."""
        with self._sql():
            self.store.db.execute("BEGIN IMMEDIATE")
            try:
                self.store.db.execute(
                    "INSERT OR REPLACE INTO scan_rows VALUES (?, ?, ?, ?, ?)",
                    (row.library, release, code_version, row.name, json.dumps(row.to_dict(), allow_nan=False)),
                )
                self.store.db.execute("COMMIT")
            except BaseException:
                self.store.db.execute("ROLLBACK")
                raise

    def rows(self, library: str, release: str, code_version: str) -> dict[str, ScanRow]:
        """The stored rows of one library release under one code version, by model name."""
        with self._sql():
            cur = self.store.db.execute(
                "SELECT name, row FROM scan_rows WHERE library = ? AND release = ? AND code_version = ?",
                (library, release, code_version),
            )
            return {name: ScanRow.from_dict(json.loads(text)) for name, text in cur}
