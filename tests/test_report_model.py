"""stability/run/report_model.py: the JSON report's one schema. Every field written by the writer
(stability/report/formats.py) is read back by `read_report` to the same value and the same bytes;
and the bytes a run writes are the bytes the writer wrote before the schema was a model (a report
generated then, tests/data/report/expected.json; the shipped specs' ci gate, by digest)."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from stability.cli import main
from stability.run.report_model import (
    SCHEMA_VERSION,
    CaseEntry,
    CompareRow,
    ComparisonEntry,
    DeltaEntry,
    FactoryProvenance,
    InvariantEntry,
    Provenance,
    Report,
    SpecEntry,
    read_report,
)

DATA = Path(__file__).resolve().parent / "data"
ROOT = DATA.parent.parent


def normalised(data: dict[str, Any]) -> dict[str, Any]:
    """A report with what differs from run to run set aside: every `seconds`, at any depth (a
    spec's, a case's, the init recording's in a case's measurements), and the harness's code
    version (which changes with every edit of the package)."""

    def timeless(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: 0 if k == "seconds" else timeless(v) for k, v in x.items()}
        return [timeless(v) for v in x] if isinstance(x, list) else x

    data = timeless(json.loads(json.dumps(data)))
    for spec in data["specs"]:
        if spec.get("provenance"):
            spec["provenance"]["harness"] = "(the harness's code version)"
    return data


def _every_field() -> Report:
    """A report with every field set, in every form a value takes: NaN and ±inf, ints and floats,
    None where it may be, the keys written only when set (errors, baseline, suggestions)."""
    verdict = InvariantEntry(
        name="gradient_arrival",
        expect="holds",
        met=False,
        status="failed",
        verdict="violated",
        observed=math.inf,
        bound="[0.1, 10]",
        block=3,
        detail="the gradient explodes",
        extra={"ratios": [1.0, math.nan, -math.inf], "growth": "exponential", "n": 4},
        measured=True,
        case={"depth": 4, "width": 8, "seed": 0},
        examples=9,
        message="expected to hold, but it fails",
        reproduce="stability check s.toml --case depth=4",
        error=None,
    )
    unjudged = InvariantEntry(
        name="identity_at_init",
        expect="violated",
        met=True,
        status="not_applicable",
        verdict=None,
        observed=None,
        bound=None,
        block=None,
        detail=None,
        extra={},
        measured=None,
        case=None,
        examples=0,
        message="n/a: not a zero branch init",
        reproduce=None,
        error="why it was not judged",
    )
    spec = SpecEntry(
        name="s",
        file="specs/s.toml",
        family="custom",
        description="d",
        met=False,
        verdict="fail",
        profile="ci",
        seconds=1.25,
        output="a line\n",
        provenance=Provenance(
            spec="0123456789abcdef", factory=FactoryProvenance(module="specs/f.py", sha256=None), harness="h"
        ),
        invariants=[verdict, unjudged],
        cases=[
            CaseEntry(case={"depth": 4}, error=None, seconds=0, measurements={"grad_norm": [1.0, math.nan]}),
            CaseEntry(case={"depth": 5}, error="refused: over the memory budget", seconds=0.5, measurements=None),
        ],
        suggestions={"ranked": ["zero_branch"], "seconds": 2.0},
    )
    comparison = ComparisonEntry(
        file="base.json",
        failed=True,
        deltas=[
            DeltaEntry(
                file="specs/s.toml",
                spec="s",
                invariant="gradient_arrival",
                case="depth=4",
                before=1.0,
                after=math.inf,
                change=math.inf,
                limit=0.1,
                status="drift",
                why="rose, toward its bound, by more than the drift limit",
            ),
            DeltaEntry(
                file="specs/s.toml",
                spec="s",
                invariant="identity_at_init",
                case="depth=1",
                before=0.0,
                after=None,
                change=None,
                limit=math.inf,
                status="not_comparable",
                why="no number to compare",
            ),
        ],
        changed={"specs/s.toml": ["the spec's content"]},
        new=["specs/t.toml::lesion"],
    )
    return Report(met=False, interrupted=True, seconds=3, specs=[spec], errors=["t.toml: bad"], baseline=comparison)


def test_every_field_round_trips_to_the_same_value_and_the_same_bytes() -> None:
    report = _every_field()
    text = report.text()
    back = read_report(text)
    assert back.text() == text
    data = json.loads(text)  # standard JSON: the non-finite numbers are strings
    entry = data["specs"][0]["invariants"][0]
    assert entry["observed"] == "inf" and entry["extra"]["ratios"] == [1.0, "nan", "-inf"]
    assert data["baseline"]["deltas"][1]["limit"] == "inf" and data["seconds"] == 3  # an int stays an int
    assert list(data) == ["schema_version", "met", "interrupted", "seconds", "specs", "errors", "baseline"]
    assert data["schema_version"] == SCHEMA_VERSION
    # field by field, every model: each value as it is written (a JSON object's NaN is "nan" both ways)
    pairs = [
        (back.specs[0], report.specs[0]),
        (back.baseline, report.baseline),
        *zip(back.specs[0].invariants, report.specs[0].invariants, strict=True),
        *zip(back.specs[0].cases, report.specs[0].cases, strict=True),
        *zip(
            back.baseline.deltas if back.baseline else [],
            report.baseline.deltas if report.baseline else [],
            strict=True,
        ),
    ]
    for got, want in pairs:
        assert type(got) is type(want)
        for name in type(want).model_fields:
            assert _written(getattr(got, name)) == _written(getattr(want, name)), (type(want).__name__, name)
    verdict = back.specs[0].invariants[0].verdict_of()
    assert verdict is not None and verdict.observed == math.inf and not verdict.passed and verdict.block == 3
    assert math.isnan(verdict.extra["ratios"][1]) and verdict.extra["ratios"][2] == -math.inf
    assert back.specs[0].invariants[1].verdict_of() is None and back.specs[0].invariants[1].case_of() is None


def _written(value: Any) -> str:
    """A field's value as the report writes it."""
    from pydantic import BaseModel

    from stability.numbers import json_safe

    if isinstance(value, list):
        value = [v.model_dump() if isinstance(v, BaseModel) else v for v in value]
    return json.dumps(value.model_dump() if isinstance(value, BaseModel) else json_safe(value))


def test_keys_written_only_when_set_are_left_out_otherwise() -> None:
    bare = Report(met=True, specs=[SpecEntry(name="s", file="s.toml", invariants=[])])
    data = json.loads(bare.text())
    assert "errors" not in data and "baseline" not in data and "suggestions" not in data["specs"][0]
    assert Report(met=True, specs=[], errors=[]).to_data()["errors"] == []  # an empty list is a value


def test_a_compare_row_round_trips() -> None:
    row = CompareRow(
        file="z.toml",
        spec="zoo-x",
        invariant="variance_growth",
        case="depth=4",
        shown="depth=4",
        before=1.7,
        after=math.nan,
        change=None,
        limit=0.1,
        status="not_comparable",
        why="no number to compare",
        direction=None,
        toward_bound=None,
        reproduce="stability check z.toml --case depth=4",
    )
    data = json.loads(json.dumps(row.to_data()))
    assert data["after"] == "nan" and list(data)[:5] == ["file", "spec", "invariant", "case", "shown"]
    back = CompareRow.model_validate(data)
    assert back.to_data() == row.to_data() and math.isnan(back.after or 0.0)


@pytest.mark.parametrize(
    "text, says",
    [
        ("[]", "not a stability JSON report of schema_version 2"),
        ('{"schema_version": 1, "specs": []}', "not a stability JSON report of schema_version 2"),
        ('{"schema_version": 2}', "specs: Field required"),
        ('{"schema_version": 2, "specs": [{"file": "x", "name": "n", "invariants": [{}]}]}', "name: Field required"),
        (
            '{"schema_version": 2, "specs": [{"file": "x", "name": "n", "invariants": '
            '[{"name": "g", "expect": "maybe", "met": true}]}]}',
            "specs[0].invariants[0].expect: Input should be 'holds' or 'violated'",
        ),
    ],
)
def test_what_is_not_a_report_is_one_line_saying_where(text: str, says: str) -> None:
    with pytest.raises(ValueError) as info:
        read_report(text)
    assert says in str(info.value) and "\n" not in str(info.value)


def test_the_report_begins_as_the_outputs_check_recognises_its_own() -> None:
    """stability/report/outputs.py replaces a file only when it begins as this writer's report."""
    import re

    from stability.report import outputs

    text = Report(met=True, specs=[]).text().encode()
    assert re.match(outputs._SIGNATURES["JSON"], text)


def test_a_report_written_before_the_model_reads_back_to_its_own_bytes() -> None:
    """tests/data/report/expected.json is `stability check report --json b.json --baseline a.json`
    over tests/data/report/*.toml, written by the writer before its schema was a model."""
    text = (DATA / "report" / "expected.json").read_text(encoding="utf-8")
    report = read_report(text)
    assert report.text() == text
    assert [s.name for s in report.specs] == ["report-fails", "report-holds"] and report.baseline is not None


def _run(folder: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.chdir(folder)
    return main(["check", "report", "--profile", "ci", "--in-process", "-q", *args])


@pytest.mark.slow
def test_a_run_writes_the_bytes_it_wrote_before_the_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same run as tests/data/report/expected.json, on this code: the same bytes, once the
    seconds and the harness's code version are set aside."""
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    (tmp_path / "report").mkdir()
    for spec in ("holds.toml", "fails.toml"):
        shutil.copy(DATA / "report" / spec, tmp_path / "report" / spec)
    assert _run(tmp_path, monkeypatch, "--json", "a.json") == 1
    assert _run(tmp_path, monkeypatch, "--json", "b.json", "--baseline", "a.json") == 1
    got = json.dumps(normalised(json.loads((tmp_path / "b.json").read_text(encoding="utf-8"))), indent=2) + "\n"
    assert got == (DATA / "report" / "expected.json").read_text(encoding="utf-8")


def digests(data: dict[str, Any]) -> dict[str, Any]:
    def digest(value: Any) -> str:
        return hashlib.sha256((json.dumps(value, indent=2) + "\n").encode()).hexdigest()[:16]

    data = normalised(data)
    return {
        "report": digest({k: v for k, v in data.items() if k != "specs"}),
        "specs": {s["file"]: digest(s) for s in data["specs"]},
    }


@pytest.mark.slow
def test_the_ci_gate_writes_the_report_it_wrote_before_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`stability check specs --profile ci --json` (.ci/run's gate), spec by spec, against the
    digests of the report main wrote before the schema was a model (tests/data/ci_gate_digests.json;
    minutes: nightly). A spec whose numbers change on purpose changes its digest: regenerate the
    file with `digests` from a run of the gate, and say why in the commit."""
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.chdir(ROOT)
    out = tmp_path / "gate.json"
    assert main(["check", "specs", "--profile", "ci", "-q", "--json", str(out)]) == 0
    want = json.loads((DATA / "ci_gate_digests.json").read_text(encoding="utf-8"))
    got = digests(json.loads(out.read_text(encoding="utf-8")))
    assert {f: d for f, d in got["specs"].items() if want["specs"].get(f) != d} == {}
    assert sorted(got["specs"]) == sorted(want["specs"]) and got["report"] == want["report"]


def test_the_digests_are_of_the_normalised_report() -> None:
    text = (DATA / "report" / "expected.json").read_text(encoding="utf-8")
    data = json.loads(text)
    assert normalised(data) == data  # the fixture is normalised already
    moved = json.loads(text)
    moved["specs"][0]["seconds"] = 12.5
    moved["specs"][1]["cases"][0]["measurements"]["grad_norm"][0] += 1e-12
    assert digests(moved)["specs"]["report/fails.toml"] == digests(data)["specs"]["report/fails.toml"]
    assert digests(moved)["specs"]["report/holds.toml"] != digests(data)["specs"]["report/holds.toml"]
