"""What `stability suggest` found, as data (no torch): `Numbers` (one unmet expectation before and
after a remedy), `Attempt` (one remedy tried) and `Suggestions` (a spec's attempts, ranked). The
computation that fills them is `stability.run.suggest`'s; the reports render them
(`stability.report.suggest`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from stability.run.results import InvariantResult
from stability.spec.remedy import REMOVE, Change

__all__ = ["Numbers", "Attempt", "Suggestions"]


@dataclass(kw_only=True)
class Numbers:
    """One unmet expectation before and after a remedy: its number at the deciding case, the same
    case replayed under the remedy, and the remedied spec's own search (its closest-to-failing case)."""

    invariant: str
    case: str
    bound: str
    before: float
    after: float | None = None
    after_case: str | None = None
    closest: float | None = None
    closest_case: str | None = None
    examples: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Numbers:
        return cls(**dict(data))


#: What a remedy tried did: every expectation met under it, one not met, or the edited spec refused.
AttemptStatus = Literal["holds", "fails", "refused"]


@dataclass(kw_only=True)
class Attempt:
    """One remedy tried on the spec: its changes and diff, and what it did (`status`: "holds" when
    every expectation is met under it, "fails" when one is not, "refused" when the loader refuses
    the edited spec)."""

    remedy: str
    summary: str
    references: tuple[str, ...]
    changes: list[Change]
    diff: str
    text: str
    status: AttemptStatus = "fails"
    detail: str = ""
    numbers: list[Numbers] = field(default_factory=list)
    margin: tuple[float, ...] = ()
    seconds: float = 0.0

    @property
    def held(self) -> bool:
        return self.status == "holds"

    def changed(self) -> str:
        """The changes in one line: `block.norm_position = "pre"`, `space.branch_init = ["zero"]`."""
        return ", ".join(_change_text(c) for c in self.changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "remedy": self.remedy,
            "summary": self.summary,
            "references": list(self.references),
            "changes": [c.to_dict() for c in self.changes],
            "diff": self.diff,
            "status": self.status,
            "detail": self.detail,
            "numbers": [n.to_dict() for n in self.numbers],
            "margin": [m if math.isfinite(m) else None for m in self.margin],
            "seconds": self.seconds,
        }


def _change_text(c: Change) -> str:
    if c.after is REMOVE:
        return f"{c.key} removed"
    return f"{c.key} = {_toml(c.after)}"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(kw_only=True)
class Suggestions:
    """What `suggest` found for one spec: the unmet expectations, every remedy tried (in the order
    tried) and the ones that hold, ranked (`ranked[0]` is the best)."""

    path: str
    name: str
    profile: str
    failing: list[InvariantResult]
    attempts: list[Attempt]
    seconds: float = 0.0
    family: str = ""
    #: Unmet expectations no remedy is for (a negative control that was not violated, ...).
    unfixable: list[str] = field(default_factory=list)

    @property
    def ranked(self) -> list[Attempt]:
        """The remedies that hold, best first: fewest changed keys, then the smallest sum over the
        fixed invariants of the remedy's rank by that invariant's margin (a rank, so invariants of
        different scales weigh alike), then registry order."""
        held = [a for a in self.attempts if a.held]
        order = {a.remedy: i for i, a in enumerate(self.attempts)}
        ranks = {a.remedy: 0 for a in held}
        for k in range(len(self.failing)):
            column = sorted({a.margin[k] for a in held if k < len(a.margin)})
            for a in held:
                ranks[a.remedy] += column.index(a.margin[k]) if k < len(a.margin) else len(column)
        return sorted(held, key=lambda a: (len(a.changes), ranks[a.remedy], order[a.remedy]))

    @property
    def best(self) -> Attempt | None:
        ranked = self.ranked
        return ranked[0] if ranked else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "name": self.name,
            "profile": self.profile,
            "family": self.family,
            "failing": [r.name for r in self.failing],
            "unfixable": list(self.unfixable),
            "ranked": [a.remedy for a in self.ranked],
            "attempts": [a.to_dict() for a in self.attempts],
            "seconds": self.seconds,
        }
