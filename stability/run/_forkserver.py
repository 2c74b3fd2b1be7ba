"""Imported once by the worker forkserver (never by anything else): one thread, one tiny untimed
probe and one tiny Hypothesis run, so that torch's lazy imports and Hypothesis's first-run work
(registering torch's RNG, which runs a full garbage collection) are done before any child is
forked. Every child starts from this state and sets its own thread count. The modules
`$STABILITY_PRELOAD` names (the libraries a run's specs build models from) are imported here too,
so each child finds them imported; one that does not import is left to the child, whose own
import then reports why. Then the warm-up `$STABILITY_WARM_UP` names, if any, runs once
(`stability scan`'s: one model scanned and its row thrown away). Everything alive then (torch,
Hypothesis, the harness, the preloaded libraries: ~190,000 objects without them) is moved out of
the garbage collector's generations (`gc.freeze`), so a child's full collections never walk it
again (they took ~1 s of a ci gate's 24 s of CPU) and its pages stay shared with the server's."""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import warnings

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stability.run.guard import warm_up

torch.set_num_threads(1)
warm_up("cpu")


@settings(max_examples=2, database=None, derandomize=True, deadline=None)
@given(st.integers(0, 1))
def _first_run(_: int) -> None:
    torch.zeros(1)


_first_run()


for _name in filter(None, os.environ.get("STABILITY_PRELOAD", "").split(",")):
    with contextlib.suppress(Exception), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        importlib.import_module(_name.strip())

# `$STABILITY_WARM_UP` (`stability.run.processes.WARM_UP_ENV`): MODULE:FUNCTION:ARGUMENT, run once here,
# its output and any failure dropped: a warm-up that fails leaves each child to do the work itself.
_module, _, _rest = os.environ.get("STABILITY_WARM_UP", "").partition(":")
if _module:
    _function, _, _argument = _rest.partition(":")
    with contextlib.suppress(Exception), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        getattr(importlib.import_module(_module), _function)(_argument)

gc.collect()
gc.freeze()
