"""The seam around a model's construction: where a later stage may watch a model being built.

The builders enter `constructing()` around the construction of a model and its library's (or a
user factory's) own init, nothing else: `library_build.build_model` around `construct`, the
`custom` family around the factory's call. Nothing watches by default. A caller that needs to
see the construction (init_conformance records the init each parameter receives,
`stability.measure.init_trace`) sets its watchers for the duration of one build with
`watching(...)`; a watcher is a function returning a context manager, entered around each
construction in the build.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import Any

__all__ = ["constructing", "watching"]

Watcher = Callable[[], AbstractContextManager[Any]]

_WATCHERS: ContextVar[tuple[Watcher, ...]] = ContextVar("stability_construction_watchers", default=())


@contextlib.contextmanager
def constructing() -> Iterator[None]:
    """Entered by a builder around one model's construction and init: every watcher's context."""
    watchers = _WATCHERS.get()
    if not watchers:
        yield
        return
    with contextlib.ExitStack() as stack:
        for w in watchers:
            stack.enter_context(w())
        yield


@contextlib.contextmanager
def watching(*watchers: Watcher) -> Iterator[None]:
    """Watch every construction made inside the `with` block (this thread and context)."""
    token = _WATCHERS.set((*_WATCHERS.get(), *watchers))
    try:
        yield
    finally:
        _WATCHERS.reset(token)
