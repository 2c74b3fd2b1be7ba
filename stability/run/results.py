"""What a run produces, as data (no torch, no Hypothesis): `CaseRecord` (one case built and
probed), `InvariantResult` (one expectation decided) and `SpecResult` (a spec's results and the
cases they were decided on). Every path makes these (`stability check` in workers or in this
process, the pytest plugin, the sweep's points) and the reports render them; the judging that fills
them is `stability.run.conclude`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from stability.judge.verdict import Verdict
from stability.measure.measurements import Measurements
from stability.spec.case import Case
from stability.spec.schema import Spec
from stability.spec.values import ExpectKind

__all__ = ["CaseRecord", "InvariantResult", "SpecResult", "OUTPUT_LINES", "Status"]

#: What became of an expectation: met, unmet (a failure, or an error that stopped its judging), not
#: applicable to the case it was replayed on, or skipped in this profile.
Status = Literal["ok", "failed", "error", "not_applicable", "skipped"]

#: Lines of a failing spec's captured output the terminal and pytest show (JSON keeps all that was kept).
OUTPUT_LINES = 20


@dataclass(kw_only=True)
class CaseRecord:
    """One case: what was measured on it, or why it could not be measured."""

    case: Case
    measurements: Measurements | None
    error: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain data (the measurements through `Measurements.to_dict`): what a worker sends."""
        return {
            "case": self.case.as_dict(),
            "measurements": None if self.measurements is None else self.measurements.to_dict(),
            "error": self.error,
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaseRecord:
        m = data["measurements"]
        return cls(
            case=Case.from_dict(data["case"]),
            measurements=None if m is None else Measurements.from_dict(m),
            error=data.get("error"),
            seconds=float(data.get("seconds", 0.0)),
        )


@dataclass(kw_only=True)
class InvariantResult:
    """One (spec, invariant) pair: was the expectation met, and which case decided it."""

    name: str
    expect: ExpectKind
    met: bool
    verdict: Verdict | None
    case: Case | None
    examples: int
    message: str
    reproduce: str | None = None
    error: str | None = None
    #: False when the replayed case lies outside the cases the invariant applies to: then `met` is
    #: True (nothing was judged), `verdict` is None and `status` is "not_applicable".
    applicable: bool = True
    skipped: bool = False  # not run in this profile (outside probe.profiles or train.profiles)
    #: The cases judged for this invariant, in order (the parent judges probe invariants again:
    #: stability.run.audit; a training invariant's are the cases it trained).
    judged: tuple[Case, ...] = ()
    #: Wall seconds judging it took in the process that ran it (its probes or optimizer runs that
    #: another invariant of the spec had not already taken), and of those, the seconds spent
    #: shrinking a failure (from the first failing case found to the smallest one).
    seconds: float = 0.0
    shrink_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain data: what a worker sends the parent."""
        return {
            "name": self.name,
            "expect": self.expect,
            "met": bool(self.met),
            "verdict": None if self.verdict is None else self.verdict.to_dict(),
            "case": None if self.case is None else self.case.as_dict(),
            "examples": int(self.examples),
            "message": self.message,
            "reproduce": self.reproduce,
            "error": self.error,
            "applicable": bool(self.applicable),
            "skipped": bool(self.skipped),
            "judged": [c.as_dict() for c in self.judged],
            "seconds": float(self.seconds),
            "shrink_seconds": float(self.shrink_seconds),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> InvariantResult:
        expect = data["expect"]
        if expect not in ("holds", "violated"):
            raise ValueError(f"not an expectation: expect={expect!r:.80}")
        return cls(
            name=str(data["name"]),
            expect=expect,
            met=bool(data["met"]),
            verdict=None if data["verdict"] is None else Verdict.from_dict(data["verdict"]),
            case=None if data["case"] is None else Case.from_dict(data["case"]),
            examples=int(data["examples"]),
            message=str(data["message"]),
            reproduce=data.get("reproduce"),
            error=data.get("error"),
            applicable=bool(data.get("applicable", True)),
            skipped=bool(data.get("skipped", False)),
            judged=tuple(Case.from_dict(c) for c in data.get("judged", ())),
            seconds=float(data.get("seconds", 0.0)),
            shrink_seconds=float(data.get("shrink_seconds", 0.0)),
        )

    @property
    def status(self) -> Status:
        if not self.applicable:
            return "not_applicable"
        if self.skipped:
            return "skipped"
        return "ok" if self.met else ("error" if self.error else "failed")


@dataclass(kw_only=True)
class SpecResult:
    spec: Spec
    results: list[InvariantResult]
    cases: dict[Case, CaseRecord] = field(default_factory=dict)
    seconds: float = 0.0
    profile: str = "dev"
    #: What the spec's own code (factory, blocks) wrote to stdout and stderr in its worker process,
    #: bounded (stability/run/worker.py); empty when nothing was written or capture was off.
    output: str = ""
    #: Every probed case judged on every declared probe invariant: case → {invariant: its verdict,
    #: or None where the invariant does not apply} (`stability.run.conclude.case_verdicts`; the
    #: reports draw these and judge nothing themselves).
    verdicts: dict[Case, dict[str, Verdict | None]] = field(default_factory=dict)
    #: The remedies tried for its unmet expectations (`stability.run.suggest.Suggestions`), when
    #: the run was asked for them (`stability check --suggest`); the reports show them beside the failures.
    suggestions: Any = None

    @property
    def met(self) -> bool:
        return all(r.met for r in self.results)
