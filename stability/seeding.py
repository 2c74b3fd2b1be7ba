"""The global generators a user's code may draw from besides torch's: Python's `random` and
NumPy's legacy `numpy.random`. A factory that draws per-block gains with `random.gauss`, or a block
that drops paths with `numpy.random.rand`, would otherwise make a case depend on whatever ran
before it, so that a printed `--case` command did not reproduce its verdict. `seeded(seed)` seeds
both from the case's own stream for the duration of a build or a probe and puts their previous
states back afterwards (the library's callers keep their own sequences), as
`torch.random.fork_rng` does for torch's generators.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import numpy as np

__all__ = ["seeded"]


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed `random` and `numpy.random` from `seed` inside the block; restore their states after."""
    py_state = random.getstate()
    np_state = np.random.get_state()
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
