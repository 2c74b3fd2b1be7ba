"""How close each built-in invariant's passing case came to failing (its registry entry's
`severity`, bigger is closer: a search that finds no failure reports the case of largest
severity), and what the thorough profile steers the search toward (`targets`, Hypothesis's
`target`) (stability.judge.catalog).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from stability.spec import schema as s

__all__ = [
    "ratio_severity",
    "stream_severity",
    "lower_is_closer",
    "size_severity",
    "mean_field_severity",
    "init_severity",
    "log10_targets",
    "plain_targets",
    "arrival_targets",
    "mean_field_targets",
]


def ratio_severity(v: Any, e: s.GradientArrival) -> float:
    """Closeness to either end of [lo, hi] on a log scale."""
    if not v.observed > 0:
        return math.inf
    return -min(math.log(v.observed / e.lo), math.log(e.hi / v.observed))


def stream_severity(v: Any, e: s.ResidualStream) -> float:
    """Closeness to failing of the stream's bounded numbers (the gradient ratio g₁/g_L, and the entry
    factor, the output variance and the block change where the spec bounds them): on a log scale,
    the largest over them of the distance past the nearest end of its band (negative inside), so a
    case that breaks any band is further gone than one inside every band."""
    if not v.observed > 0:
        return math.inf
    bands = {
        "stream": (e.lo, e.hi),
        "entry": (e.entry_lo, e.entry_hi),
        "variance": (e.variance_lo, e.variance_hi),
        "change": (None, e.max_block_change),
    }
    closeness = []
    for key, (low, high) in bands.items():
        if (low is None and high is None) or (key != "stream" and key not in v.extra):
            continue
        value = v.observed if key == "stream" else v.extra[key]
        if value is None or not math.isfinite(value) or value < 0 or (value == 0 and low):
            return math.inf
        if value == 0:  # an upper bound only (the block change of identity blocks): as far inside as can be
            continue
        closeness.append(
            max(math.log(low / value) if low else -math.inf, math.log(value / high) if high else -math.inf)
        )
    return max(closeness, default=-math.inf)


def lower_is_closer(v: Any, e: Any) -> float:
    return -v.observed if math.isfinite(v.observed) else math.inf


def size_severity(v: Any, e: Any) -> float:
    """The headline number's size (a training invariant's slope magnitude, loss ratio, mean residual)."""
    return abs(v.observed) if math.isfinite(v.observed) else math.inf


def mean_field_severity(v: Any, e: Any) -> float:
    if v.observed > 0 and v.extra.get("predicted", 0) > 0:
        return abs(math.log(v.observed / v.extra["predicted"]))
    return v.observed if math.isfinite(v.observed) else math.inf


def init_severity(v: Any, e: Any) -> float:
    """For a passing case, the statistic closest to its tolerance (1 at the tolerance, so at most 1);
    for a failing one, 1 plus the count of parameters off the declared init (more is worse, and
    every failing case is further gone than any passing one); an unmeasured case, infinity."""
    if not math.isfinite(v.observed):
        return math.inf
    if v.observed > 0:
        return 1.0 + float(v.observed)
    return float(v.extra.get("worst_excess", 0.0))


def log10_targets(label: str) -> Any:
    def targets(v: Any) -> Sequence[tuple[float, str]]:
        return [(math.log10(v.observed), label)] if math.isfinite(v.observed) and v.observed > 0 else []

    return targets


def plain_targets(label: str, sign: float = 1.0) -> Any:
    def targets(v: Any) -> Sequence[tuple[float, str]]:
        return [(sign * v.observed, label)] if math.isfinite(v.observed) and v.observed > 0 else []

    return targets


def arrival_targets(v: Any) -> Sequence[tuple[float, str]]:
    if not (math.isfinite(v.observed) and v.observed > 0):
        return []
    return [
        (-math.log10(v.observed), "vanishing gradient (log10)"),
        (math.log10(v.observed), "exploding gradient (log10)"),
    ]


def mean_field_targets(v: Any) -> Sequence[tuple[float, str]]:
    if math.isfinite(v.observed) and v.observed > 0 and v.extra.get("predicted", 0) > 0:
        return [(abs(math.log(v.observed / v.extra["predicted"])), "mean-field mismatch (log)")]
    return []
