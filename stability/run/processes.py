"""The process context of the worker executor: a multiprocessing forkserver whose server has
imported torch, Hypothesis and the harness (and run one untimed probe) before any child is forked.

This module imports nothing heavy, so `stability check` can start the server first and let it
import torch while the parent process loads and validates the specs.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
from typing import Any

__all__ = ["PRELOAD", "get_context", "start_server"]

#: Modules the forkserver imports once, before any child is forked (`stability.run._forkserver` sets
#: one thread and runs the warm-up probe).
PRELOAD = ["torch", "hypothesis", "stability.cli", "stability.run.engine", "stability.run.worker", "stability.run._forkserver"]

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


def start_server() -> None:
    """Start the forkserver now; it imports torch in the background."""
    if get_context().get_start_method() == "forkserver":
        multiprocessing.forkserver.ensure_running()
