"""The rows of `stability scan`: one per model a library registers, as data that crosses the worker
boundary, the store and the JSON report (`to_dict` / `from_dict`, round-trip tested).

A row says whether the model was built and judged, and if not why (named); the rung of the ladder
its config was reduced by (`stability.families.library_reduce`); every deviation of its recorded
init from what it declares (parameter group, recorded law, declared law, source); every parameter
group's recorded law (what `--compare` diffs); and its residual stream's numbers at each depth
(`stability.judge.stream.stream_numbers`), or why they were not measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

__all__ = ["Status", "Deviation", "RecordedLaw", "StreamAt", "ScanRow", "STREAM_KEYS", "BUILT"]

Status = Literal["judged", "not built", "failed", "timed out"]

#: The statuses of a model that was built and whose init was judged.
BUILT: tuple[Status, ...] = ("judged",)

#: The residual stream's numbers (stability.judge.stream): entry g₀/g₁, stream g₁/g_L, Var(x_L)/Var(x₀), block change.
STREAM_KEYS: tuple[str, ...] = ("entry", "stream", "variance", "change")


@dataclass(frozen=True, kw_only=True)
class Deviation:
    """One parameter group (layer indices as `*`) whose recorded init is not the one declared."""

    parameter: str
    recorded: str
    declared: str
    source: str
    rule: str = ""


@dataclass(frozen=True, kw_only=True)
class RecordedLaw:
    """The law one parameter group received at init as a reader sees it (`law`), with every
    parameter at full precision (`exact`: what two releases are compared by), and the code that
    wrote it."""

    parameter: str
    law: str
    exact: str = ""
    writer: str = ""


@dataclass(frozen=True, kw_only=True)
class StreamAt:
    """The residual stream's numbers at one depth (None: not a number), or why they were not measured."""

    depth: int
    numbers: dict[str, float | None] = field(default_factory=dict)
    error: str | None = None


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of `data` that are fields of `cls` (a `--json` report adds each deviation's triage)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _num(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else float(x)


@dataclass(frozen=True, kw_only=True)
class ScanRow:
    """One model of a library, scanned (the module docstring)."""

    library: str
    name: str
    status: Status
    also: tuple[str, ...] = ()
    reason: str | None = None
    model: str | None = None
    rung: str | None = None
    parameters: int | None = None
    config: str | None = None
    modality: str | None = None
    judged: int = 0
    init_note: str | None = None
    deviations: tuple[Deviation, ...] = ()
    laws: tuple[RecordedLaw, ...] | None = None
    stream: tuple[StreamAt, ...] = ()
    seconds: float = 0.0

    @property
    def built(self) -> bool:
        return self.status in BUILT

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["also"] = list(self.also)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ScanRow:
        laws = data.get("laws")
        return cls(
            library=str(data["library"]),
            name=str(data["name"]),
            status=data["status"],
            also=tuple(str(x) for x in data.get("also") or ()),
            reason=data.get("reason"),
            model=data.get("model"),
            rung=data.get("rung"),
            parameters=data.get("parameters"),
            config=data.get("config"),
            modality=data.get("modality"),
            judged=int(data.get("judged") or 0),
            init_note=data.get("init_note"),
            deviations=tuple(Deviation(**_known(Deviation, d)) for d in data.get("deviations") or ()),
            laws=None if laws is None else tuple(RecordedLaw(**_known(RecordedLaw, x)) for x in laws),
            stream=tuple(
                StreamAt(
                    depth=int(s["depth"]),
                    numbers={k: _num(v) for k, v in (s.get("numbers") or {}).items()},
                    error=s.get("error"),
                )
                for s in data.get("stream") or ()
            ),
            seconds=float(data.get("seconds") or 0.0),
        )
