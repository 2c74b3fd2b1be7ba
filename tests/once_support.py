"""A module fixture's work done once per test run, not once per xdist worker.

`pytest -n 2` hands a module's tests to both workers, and a module-scoped fixture then runs in each
of them: a fixture that runs `stability check` or pytest in a subprocess for ten seconds costs twice
that. `once_per_run` runs the work in the first worker that asks, under a file lock in the folder
the run's workers share, and hands every later caller the pickled result (pytest-xdist's documented
recipe: "Making session-scoped fixtures execute only once"). A failure is not stored: the next
caller tries again and fails the same way."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from filelock import FileLock

__all__ = ["once_per_run"]

T = TypeVar("T")


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], T]) -> T:
    """`make(folder)`'s result, computed once per pytest run: `folder` is a fresh folder every
    worker can read (the files `make` writes there stay for the tests), the result must pickle."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # popen-gwN's parent: the run's
    folder = root / f"once-{name}"
    done = root / f"once-{name}.pickle"
    with FileLock(str(root / f"once-{name}.lock")):
        if done.exists():
            result: T = pickle.loads(done.read_bytes())
            return result
        folder.mkdir(exist_ok=True)
        result = make(folder)
        done.write_bytes(pickle.dumps(result))
        return result
