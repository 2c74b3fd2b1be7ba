"""The JSON report's schema, defined once: pydantic models of what `stability check --json` writes
(`Report` → `SpecEntry` → `InvariantEntry`, `CaseEntry`; the comparison with a baseline,
`ComparisonEntry` → `DeltaEntry`), and of the rows `stability zoo --compare` writes
(`CompareRow`). The writer (`stability.report.formats.to_json`, `Comparison.to_json`,
`stability.report.release_side`) builds these and writes `to_data()`; every reader
(`stability.report.baseline_load`, `stability zoo --compare`, the library matrix) parses through
them (`read_report`, `CompareRow.model_validate`), as pytest's `reports.py` has one `_to_json` and
one `_from_json`.

A float JSON cannot hold is written as "nan", "inf" or "-inf" and read back as a float
(`stability.numbers`); an integer stays an integer, so the bytes a run writes are what
`json.dumps` wrote of the same values. The objects a model does not own (a case's values, its
measurements, a verdict's `extra`, a spec's suggestions) are plain JSON objects here, each owned by
its own type's `to_dict`. This module belongs to the run stage, beside the results it serialises,
so that a run's reader (stability.run.releases) and the reports both parse through it.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)

from stability.judge.verdict import Verdict
from stability.numbers import from_json_number, from_json_safe, json_number, json_safe
from stability.run.results import Status
from stability.spec.case import Case
from stability.spec.values import ExpectKind

__all__ = [
    "SCHEMA_VERSION",
    "JsonFloat",
    "Report",
    "SpecEntry",
    "InvariantEntry",
    "CaseEntry",
    "Provenance",
    "FactoryProvenance",
    "ComparisonEntry",
    "DeltaEntry",
    "CompareRow",
    "DeltaStatus",
    "read_report",
]

#: 2: a case's `measurements` is `Measurements.to_dict` (every field, `extra` included; 1 kept a subset).
SCHEMA_VERSION = 2

#: A number of a report: an int or a float as given; NaN and ±inf written as "nan", "inf", "-inf".
JsonFloat = Annotated[int | float, BeforeValidator(from_json_number), PlainSerializer(json_number, return_type=Any)]
#: A JSON object another type owns (`Case.as_dict`, `Measurements.to_dict`, a verdict's `extra`, …),
#: its floats written as `JsonFloat`s are; read back as the file holds it ("nan" stays a string until
#: its owner reads it: `InvariantEntry.verdict_of`).
JsonObject = Annotated[dict[Any, Any], PlainSerializer(json_safe, return_type=Any)]

#: A baseline entry compared: moved past its drift limit (fails), within it, or not comparable.
DeltaStatus = Literal["drift", "within", "not_comparable"]


class ReportModel(BaseModel):
    """The base of every model here: keys it does not know are ignored (a newer report still reads),
    and `omitted` fields are left out of `to_data()` while they are None."""

    model_config = ConfigDict(extra="ignore")
    #: Keys written only when they hold a value.
    omitted: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _leave_out(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if not (v is None and k in self.omitted)}

    def to_data(self) -> dict[str, Any]:
        """Plain data for `json.dumps`, in field order."""
        return self.model_dump()


class FactoryProvenance(ReportModel):
    module: str | None = None
    sha256: str | None = None


class Provenance(ReportModel):
    """What a spec's numbers depend on (`stability.report.provenance.provenance`)."""

    spec: str | None = None
    factory: FactoryProvenance | None = None
    harness: str | None = None


class InvariantEntry(ReportModel):
    """One expectation of a spec, as judged (`stability.run.results.InvariantResult` and its verdict)."""

    name: str
    expect: ExpectKind
    met: bool
    status: Status = "ok"
    verdict: Literal["holds", "violated"] | None = None
    observed: JsonFloat | None = None
    bound: str | None = None
    block: int | None = None
    detail: str | None = None
    extra: JsonObject = {}
    measured: bool | None = None
    case: JsonObject | None = None
    examples: int = 0
    message: str = ""
    reproduce: str | None = None
    error: str | None = None

    def verdict_of(self) -> Verdict | None:
        """The verdict it records (None where none was judged), its numbers read back as floats."""
        if self.verdict is None:
            return None
        return Verdict(
            invariant=self.name,
            passed=self.verdict == "holds",
            observed=math.nan if self.observed is None else float(self.observed),
            bound=self.bound or "",
            block=self.block,
            detail=self.detail or "",
            extra=from_json_safe(self.extra),
            measured=True if self.measured is None else self.measured,
        )

    def case_of(self) -> Case | None:
        return None if self.case is None else Case.from_dict(self.case)


class CaseEntry(ReportModel):
    """One probed case: its values, its measurements (`Measurements.to_dict`) or its error."""

    case: JsonObject
    error: str | None = None
    seconds: JsonFloat = 0.0
    measurements: JsonObject | None = None


class SpecEntry(ReportModel):
    """One spec of a run: its expectations, every case probed, and what its numbers depend on."""

    name: str
    file: str
    family: str = ""
    description: str = ""
    met: bool = False
    verdict: Literal["pass", "fail"] = "fail"
    profile: str = ""
    seconds: JsonFloat = 0.0
    output: str = ""
    provenance: Provenance | None = None
    invariants: list[InvariantEntry]
    cases: list[CaseEntry] = []
    #: `stability check --suggest`: the remedies tried for its unmet expectations (`Suggestions.to_dict`).
    suggestions: JsonObject | None = None
    omitted: ClassVar[frozenset[str]] = frozenset({"suggestions"})


class DeltaEntry(ReportModel):
    """One baseline entry compared (`stability.report.baseline.Delta`)."""

    file: str
    spec: str
    invariant: str
    case: str
    before: JsonFloat | None
    after: JsonFloat | None
    change: JsonFloat | None
    limit: JsonFloat | None
    status: DeltaStatus
    why: str


class ComparisonEntry(ReportModel):
    """The comparison with a baseline (`stability.report.baseline.Comparison`)."""

    file: str
    failed: bool
    deltas: list[DeltaEntry]
    changed: dict[str, list[str]] = {}
    new: list[str] = []


class Report(ReportModel):
    """A JSON report: whether the run met every expectation, and each spec's entry."""

    schema_version: int = SCHEMA_VERSION
    #: A run that judged nothing is not a pass (the CLI exits 5 for it).
    met: bool = False
    interrupted: bool = False
    seconds: JsonFloat = 0.0
    specs: list[SpecEntry]
    #: Spec files that could not be read or validated, specs that could not run.
    errors: list[str] | None = None
    baseline: ComparisonEntry | None = None
    omitted: ClassVar[frozenset[str]] = frozenset({"errors", "baseline"})

    def text(self) -> str:
        """The report file's text."""
        return json.dumps(self.to_data(), indent=2) + "\n"


class CompareRow(ReportModel):
    """One row of `stability zoo --compare`'s compare.json: an expectation's number on side B
    against side A's on the same case, by the baseline rule."""

    file: str
    spec: str
    invariant: str
    case: str
    shown: str
    before: JsonFloat | None
    after: JsonFloat | None
    change: JsonFloat | None
    limit: JsonFloat | None
    status: DeltaStatus
    why: str
    direction: Literal["up", "down"] | None
    toward_bound: bool | None
    reproduce: str = ""


def read_report(data: str | bytes | Any) -> Report:
    """A JSON report (its text, or the data `json.loads` made of it) as a `Report`. Anything else
    is a ValueError whose message is one line: what is wrong, and where."""
    if isinstance(data, (str, bytes)):
        data = json.loads(data)
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"not a stability JSON report of schema_version {SCHEMA_VERSION}")
    try:
        return Report.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".")
        raise ValueError(f"{where}: {first['msg']}") from None
