"""The numbers the built-in invariants bound by bands a measurement sets (their registry entries'
`bands`, stability.spec.registry.Band): how each is read off a verdict, one value per network the
verdict judged. `stability calibrate` (stability.run.calibrate) asks these and nothing else, so a
plugin's invariant declares its own bands the same way and is calibrated too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from stability.spec.registry import Band

__all__ = ["ARRIVAL_BANDS", "VARIANCE_BANDS", "STREAM_BANDS"]


def _observed(v: Any) -> Sequence[float]:
    """The verdict's own number: the case's one network."""
    return [float(v.observed)] if v.measured else [math.nan]


def _extra(key: str) -> Any:
    def read(v: Any) -> Sequence[float]:
        value = (v.extra or {}).get(key)
        return [float(value)] if isinstance(value, int | float) else [math.nan]

    return read


def _members(key: str) -> Any:
    """residual_stream's number `key` on each network of the case's seed ensemble (`per_member`)."""

    def read(v: Any) -> Sequence[float]:
        members = ((v.extra or {}).get("per_member") or {}).get(key)
        if not members:
            return [math.nan]
        return [math.nan if x is None else float(x) for x in members]

    return read


ARRIVAL_BANDS = (Band(number="ratio", label="gradient ratio g₀/g_L", values=_observed, lo="lo", hi="hi"),)
VARIANCE_BANDS = (
    Band(number="min_ratio", label="smallest Var(x_l)/Var(x₀)", values=_extra("min_ratio"), lo="min_ratio"),
    Band(number="max_ratio", label="largest Var(x_l)/Var(x₀)", values=_extra("max_ratio"), hi="max_ratio"),
)
STREAM_BANDS = (
    Band(number="stream", label="g₁/g_L", values=_members("stream"), lo="lo", hi="hi"),
    Band(number="entry", label="g₀/g₁", values=_members("entry"), lo="entry_lo", hi="entry_hi"),
    Band(
        number="variance",
        label="Var(x_L)/Var(x₀)/L^p",
        values=_members("variance"),
        lo="variance_lo",
        hi="variance_hi",
    ),
    Band(number="change", label="block change", values=_members("change"), hi="max_block_change"),
)
