"""The process context of the worker executor: a multiprocessing forkserver whose server has
imported torch, Hypothesis and the harness (and run one untimed probe) before any child is forked.

This module imports nothing heavy, so `stability check` can start the server first and let it
import torch while the parent process loads and validates the specs.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
from collections.abc import Sequence
from typing import Any

__all__ = ["PRELOAD", "PRELOAD_ENV", "WARM_UP_ENV", "get_context", "start_server"]

#: Modules the forkserver imports once, before any child is forked (`stability.run._forkserver` sets
#: one thread and runs the warm-up probe).
PRELOAD = [
    "torch",
    "hypothesis",
    "stability.cli",
    "stability.run.engine",
    "stability.run.worker",
    "stability.run._forkserver",
]

_context: Any = None


def get_context() -> Any:
    """The forkserver context (spawn where there is no forkserver), with the preload set."""
    global _context
    if _context is None:
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        _context = multiprocessing.get_context(method)
        if method == "forkserver":
            _context.set_forkserver_preload(PRELOAD)
    return _context


#: The environment variable that names, comma-separated, the modules the forkserver imports
#: besides `PRELOAD` (a library the run's specs build models from; `stability.run._forkserver`).
PRELOAD_ENV = "STABILITY_PRELOAD"


#: The environment variable that names a warm-up the forkserver runs once after its imports, as
#: `MODULE:FUNCTION:ARGUMENT` (`FUNCTION(ARGUMENT)`; `stability.run._forkserver`): `stability scan`'s
#: one model scanned and thrown away, so that no child pays for that first run's imports again.
WARM_UP_ENV = "STABILITY_WARM_UP"


def start_server(preload: Sequence[str] = (), *, warm_up: str | None = None) -> None:
    """Start the forkserver now; it imports torch, and the modules `preload` names (the families'
    `preload` of the run's specs, `stability.spec.load.preload_modules`), in the background, once
    for every child it forks, then runs `warm_up` (`WARM_UP_ENV`: set for the server's start only,
    so no later process of this one inherits it). A server already running keeps what it imported."""
    if preload:
        os.environ[PRELOAD_ENV] = ",".join(
            dict.fromkeys([*filter(None, os.environ.get(PRELOAD_ENV, "").split(",")), *preload])
        )
    if get_context().get_start_method() != "forkserver":
        return
    before = os.environ.pop(WARM_UP_ENV, None)
    if warm_up:
        os.environ[WARM_UP_ENV] = warm_up
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        os.environ.pop(WARM_UP_ENV, None)
        if before is not None:
            os.environ[WARM_UP_ENV] = before
