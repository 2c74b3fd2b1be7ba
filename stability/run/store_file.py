"""Whose file a `--db` path is, decided before anything is written to it. A results store
(`stability.run.store`) carries the SQLite header fields `application_id` (`APPLICATION_ID`) and
`user_version` (`SCHEMA_VERSION`). A file given as `--db` is inspected from its stat and its first
100 bytes (and, for an SQLite file without the marker, a read-only, lock-free look at its table
names): a folder, a device, a FIFO or a socket, a file that is not SQLite, another application's
database, a store of another schema or of an older release without the marker is refused with one
line (a UsageError, exit 2) and left exactly as it was (no table added, no journal file, the
journal mode unchanged). A missing file, an empty file or an empty SQLite database becomes a new
store.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import urllib.parse
from pathlib import Path

from stability.errors import UsageError

__all__ = [
    "DEFAULT_DB",
    "APPLICATION_ID",
    "SCHEMA_VERSION",
    "MOVE_AWAY",
    "refuse",
    "inspect_store",
    "immutable_uri",
    "write_error",
    "check_store",
    "refuse_unwritable",
]

DEFAULT_DB = ".stability/results.sqlite"

#: The SQLite header's application_id of a results store: the bytes "StbR".
APPLICATION_ID = int.from_bytes(b"StbR", "big")
#: The layout of the store's tables (`stability.run.store`; the header's user_version). 1 was
#: the layout before the marker.
SCHEMA_VERSION = 2
#: The tables of a store written before the marker existed (schema 1).
_OLD_TABLES = {"probes", "budgets", "sweeps"}

MOVE_AWAY = "give another --db path, or move that file away (its rows are only a cache of probes)"


def refuse(path: str | Path, why: str) -> UsageError:
    return UsageError(f"--db {path}: {why}")


def inspect_store(path: Path, shown: str | Path) -> bool:
    """Whether `path` is a results store already (True) or becomes a new one (False), decided from
    its stat, its header and its table names without writing anything; a file that must not be
    touched raises UsageError."""
    if not str(shown).strip():
        raise refuse(repr(str(shown)), f"the path is empty; give a file path such as {DEFAULT_DB}")
    if str(shown).endswith(("/", os.sep)):
        raise refuse(shown, f"names a folder; give a file path such as {Path(shown) / 'results.sqlite'}")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise refuse(shown, f"cannot be checked ({exc.strerror}); give a file path you can write") from None
    if stat.S_ISDIR(mode):
        raise refuse(shown, f"is a folder; give a file path such as {Path(shown) / 'results.sqlite'}")
    if not stat.S_ISREG(mode):
        raise refuse(
            shown, "is not a regular file (a device, a FIFO or a socket); give a file path for the results store"
        )
    try:
        with open(path, "rb") as fh:
            header = fh.read(100)
    except OSError as exc:
        raise refuse(shown, f"cannot be read ({exc.strerror}); give a file path you can read and write") from None
    if not header:
        return False  # an empty file: a new store
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        raise refuse(
            shown,
            "is not an SQLite database, so not a results store of stability; it was left as it is: give "
            "another --db path",
        )
    user_version = int.from_bytes(header[60:64], "big")
    application_id = int.from_bytes(header[68:72], "big")
    if application_id == APPLICATION_ID:
        if user_version != SCHEMA_VERSION:
            raise refuse(
                shown,
                f"is a results store of schema {user_version}, and this stability reads schema "
                f"{SCHEMA_VERSION}; {MOVE_AWAY}",
            )
        return True
    if application_id != 0:
        raise refuse(
            shown,
            f"is the SQLite database of another application (application_id {application_id:#x}); it was left "
            "as it is: give another --db path",
        )
    tables = _tables(path, shown)
    if not tables and user_version == 0:
        return False  # an empty SQLite database: a new store
    if tables == _OLD_TABLES:
        raise refuse(
            shown,
            f"is a results store of an older stability (without a schema marker; its rows may be stale); {MOVE_AWAY}",
        )
    listed = ", ".join(sorted(tables)) or f"none; user_version {user_version}"
    raise refuse(
        shown,
        f"is an SQLite database of another application (tables: {listed}); it was left as it is: give another "
        "--db path",
    )


def immutable_uri(path: Path) -> str:
    """An SQLite URI that reads `path` with no lock and no journal: no -journal, -wal or -shm file
    is created beside it and nothing is written."""
    return f"file:{urllib.parse.quote(str(path.resolve()))}?mode=ro&immutable=1"


def write_error(path: Path) -> OSError | None:
    """Why `path` (an existing regular file) cannot be opened for writing (None when it can):
    opening changes nothing, and catches what file modes do not show (`chattr +i`, a read-only mount)."""
    try:
        with open(path, "r+b"):
            return None
    except OSError as exc:
        return exc


def _tables(path: Path, shown: str | Path) -> set[str]:
    """The table names of an SQLite file, read through `immutable_uri`."""
    try:
        with contextlib.closing(sqlite3.connect(immutable_uri(path), uri=True)) as db:
            return {
                r[0]
                for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
            }
    except sqlite3.Error as exc:
        raise refuse(
            shown, f"cannot be read as an SQLite database ({exc}); it was left as it is: give another --db path"
        ) from None


def check_store(path: str | Path) -> None:
    """Refuse (UsageError) a `--db` path that is not and cannot become a results store, creating
    and changing nothing: what a command checks before it starts a cluster."""
    if str(path) == ":memory:":
        return
    inspect_store(Path(path), path)
    if Path(path).exists():
        refuse_unwritable(Path(path), path)
        return
    folder = Path(path).parent
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise refuse(path, f"{folder} is not a folder this process can create the store in; give a writable file path")


def refuse_unwritable(path: Path, shown: str | Path) -> None:
    problem = write_error(path)
    if problem is not None:
        raise refuse(
            shown,
            f"cannot be written ({problem.strerror}); a sweep stores its probes there: give a writable --db "
            "path (only --compare reads a store it cannot write)",
        )
