"""`approx`: pytest.approx for a check that states a relative tolerance and no absolute one.

pytest.approx's default absolute tolerance (1e-12) overrides a relative one on small numbers:
`pytest.approx(0.5**40, rel=1e-12)` passes 0 and twice the value. This `approx` is pytest.approx,
except that it refuses such a check (it must say `abs=`, usually `abs=0.0`, which checks `rel`
alone). tests/test_approx_support.py keeps every `pytest.approx(..., rel=...)` without `abs=` out of
the suite, so a relative check either goes through here or states its absolute tolerance."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from typing import Any

import pytest

__all__ = ["approx"]


def _scalars(expected: object) -> Iterator[float]:
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        yield float(expected)
    elif isinstance(expected, dict):
        for v in expected.values():
            yield from _scalars(v)
    elif isinstance(expected, (list, tuple)):
        for v in expected:
            yield from _scalars(v)


def approx(expected: Any, rel: float | None = None, abs: float | None = None, nan_ok: bool = False) -> Any:
    """pytest.approx(expected, rel, abs, nan_ok), refusing a relative tolerance that the default
    absolute one (1e-12) would override on one of the expected numbers: such a check must say
    `abs=`. The error names the calling line."""
    if abs is None and rel is not None:
        for v in _scalars(expected):
            if v != 0.0 and math.isfinite(v) and math.fabs(v) * rel < 1e-12:
                caller = sys._getframe(1)
                where = f"{caller.f_code.co_filename}:{caller.f_lineno}"
                raise AssertionError(
                    f"{where}: approx({v!r}, rel={rel!r}) is checked to 1e-12 absolute, not to rel: "
                    "give abs= (abs=0.0 checks rel alone)"
                )
    return pytest.approx(expected, rel=rel, abs=abs, nan_ok=nan_ok)
