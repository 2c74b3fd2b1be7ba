"""A judged invariant on one case, as data (no torch): `Verdict`, and the one rule of what counts
as evidence.

A verdict is *evidence* when the invariant was measured on the case and gave a number: a judge
that could not measure (no observer ran, no attention probabilities were seen, no block has a
parameter, no block can be removed, the run diverged before anything was recorded) returns
`measured=False`, and a NaN observation (an undefined ratio, a non-finite activation) is no number
either. Only evidence decides an expectation: a negative control (`expect = "violated"`) is met
only by a verdict that is evidence and fails, and `holds` only by ones that are evidence and pass,
so nothing is ever met by what was not measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from stability.measure.measurements import decode, encode

__all__ = ["Verdict", "is_evidence"]


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """One invariant judged on one case: the headline number, the bound, and where it was decided."""

    invariant: str
    passed: bool
    observed: float
    bound: str
    block: int | None
    detail: str
    extra: dict[str, Any] = field(default_factory=dict)
    #: False when the judge could not measure what it judges (see the module docstring).
    measured: bool = True

    def __str__(self) -> str:
        mark = "holds" if self.passed else "violated"
        return f"{self.invariant} {mark}: {self.detail}"

    def to_dict(self) -> dict[str, Any]:
        """Plain data (`extra` through `stability.measure.measurements.encode`)."""
        return {
            "invariant": self.invariant,
            "passed": bool(self.passed),
            "observed": float(self.observed),
            "bound": self.bound,
            "block": self.block,
            "detail": self.detail,
            "extra": encode(self.extra),
            "measured": bool(self.measured),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        return cls(
            invariant=str(data["invariant"]),
            passed=bool(data["passed"]),
            observed=float(data["observed"]),
            bound=str(data["bound"]),
            block=None if data["block"] is None else int(data["block"]),
            detail=str(data["detail"]),
            extra=decode(data.get("extra", {})),
            measured=bool(data.get("measured", True)),
        )


def is_evidence(v: Verdict) -> bool:
    """Whether `v` may decide an expectation: measured, with a number (±inf counts: a value
    beyond the float range was measured as such; NaN does not)."""
    return v.measured and not math.isnan(v.observed)
