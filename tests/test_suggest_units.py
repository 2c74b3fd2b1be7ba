"""What `stability suggest` counts as fixed, with an executor that runs nothing (stability/run/suggest.py):
each job's outcome is written by the test, so every path of the replay and the confirmation is a
unit test; and the parts that need no run (the expectations offered remedies, a case mapped into
the remedied space). tests/test_suggest.py runs the remedies for real."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from stability.judge.verdict import Verdict
from stability.run.engine import RunOptions
from stability.run.results import InvariantResult, SpecResult
from stability.run.suggest import failing_expectations, map_case, suggest
from stability.spec.case import corner_case
from stability.spec.load import load_spec, parse_spec

PLAIN = """\
name = "plain-tanh"
description = "a plain tanh stack"
family = "plain"

[block]
activation = "tanh"

[space]
depth = [2, 12]
width = { values = [16, 32, 64] }
batch = 4
weight_init = ["xavier_normal", "orthogonal"]

[expect.gradient_arrival]
lo = 0.5
hi = 2.0

[expect.variance_growth]
max_growth = "linear"
"""

NAME = "gradient_arrival"


def _verdict(observed: float, passed: bool, name: str = NAME) -> Verdict:
    return Verdict(invariant=name, passed=passed, observed=observed, bound="[0.5, 2]", block=None, detail="d")


def _result(name: str = NAME, *, met: bool, case: Any = None, **kw: Any) -> InvariantResult:
    observed = kw.pop("observed", 1.0 if met else 0.01)
    verdict = kw.pop("verdict", _verdict(observed, met, name))
    return InvariantResult(
        name=name, expect="holds", met=met, verdict=verdict, case=case, examples=3, message=f"{name}: m", **kw
    )


Script = Callable[[Any], tuple[str | None, list[InvariantResult]]]


class Scripted:
    """An executor whose outcomes the test writes: `script(job)` → (error, results)."""

    def __init__(self, script: Script) -> None:
        self.script = script

    def map(self, jobs: list[Any], *, on_done: Any = None) -> list[Any]:
        out = []
        for job in jobs:
            error, results = self.script(job)
            out.append(SimpleNamespace(error=error, result=SimpleNamespace(results=results, profile="ci")))
        return out


def _suggest(tmp_path: Path, script: Script, *, both: bool = False) -> Any:
    """`suggest` on PLAIN whose gradient_arrival failed (and with `both`, its variance_growth too)."""
    path = tmp_path / "plain.toml"
    path.write_text(PLAIN, encoding="utf-8")
    spec = load_spec(path)
    case = corner_case(spec)
    growth = _result("variance_growth", met=not both, case=case if both else None)
    first = SpecResult(spec=spec, results=[_result(met=False, case=case), growth])
    first.profile = "ci"
    return suggest(str(path), options=RunOptions(profile="ci"), executor=Scripted(script), result=first)  # type: ignore[arg-type]


def _replay(job: Any) -> bool:
    return job.case is not None


def test_a_remedy_holds_only_where_its_replay_and_its_search_both_judge_and_meet_every_expectation(
    tmp_path: Path,
) -> None:
    def script(job: Any) -> tuple[str | None, list[InvariantResult]]:
        if _replay(job):
            return None, [_result(met=True, case=job.case)]
        return None, [_result(met=True), _result("variance_growth", met=True)]

    s = _suggest(tmp_path, script)
    assert s.ranked and all(a.held for a in s.ranked)


@pytest.mark.parametrize(
    ("what", "detail"),
    [
        ("replay not applicable", "at the failing case"),
        ("replay errored", "at the failing case: the worker died"),
        ("search skipped", "judged no case (not applicable or skipped)"),
        ("another expectation broken", "over the whole case set: variance_growth: m"),
        ("search errored", "the edited spec could not run"),
    ],
)
def test_a_remedy_that_judges_nothing_or_breaks_something_is_not_fixed(tmp_path: Path, what: str, detail: str) -> None:
    def script(job: Any) -> tuple[str | None, list[InvariantResult]]:
        if _replay(job):
            if what == "replay not applicable":
                return None, [_result(met=True, case=job.case, verdict=None, applicable=False)]
            if what == "replay errored":
                return "the worker died", [_result(met=True, case=job.case)]
            return None, [_result(met=True, case=job.case)]
        if what == "search skipped":
            return None, [_result(met=True, verdict=None, skipped=True), _result("variance_growth", met=True)]
        if what == "another expectation broken":
            return None, [_result(met=True), _result("variance_growth", met=False)]
        return "a spec error", [_result(met=True), _result("variance_growth", met=True)]

    s = _suggest(tmp_path, script)
    assert s.attempts and s.ranked == [], [(a.remedy, a.status) for a in s.attempts]
    assert all(detail in a.detail for a in s.attempts if a.status == "fails"), [a.detail for a in s.attempts]


def test_the_margin_is_each_fixed_invariant_s_severity_and_none_where_it_has_no_verdict(tmp_path: Path) -> None:
    """The margin ranks remedies of equal changes: per fixed invariant, the severity of its closest
    case (negative inside its bounds: 1.0 in [0.5, 2] is log 2 inside); an invariant the search
    gave no verdict has no margin (infinite: ranked last), which the JSON writes as null."""

    def script(job: Any) -> tuple[str | None, list[InvariantResult]]:
        if _replay(job):
            return None, [_result(met=True, case=job.case), _result("variance_growth", met=True, case=job.case)]
        if job.spec.family == "preact":  # the residual routes: no verdict for gradient_arrival
            return None, [_result(met=True, verdict=None), _result("variance_growth", met=True)]
        return None, [_result(met=True, observed=1.0), _result("variance_growth", met=True)]

    s = _suggest(tmp_path, script, both=True)
    assert [r.name for r in s.failing] == [NAME, "variance_growth"]
    margins = {a.remedy: a.margin for a in s.attempts if a.held}
    assert (
        margins["critical_init"][0] == pytest.approx(-math.log(2.0), rel=1e-9, abs=0.0)
        and len(margins["critical_init"]) == 2
    )
    routed = [a for a in s.attempts if a.remedy.startswith("residual_route")]
    assert routed and all(a.margin[0] == math.inf and len(a.margin) == 2 for a in routed)
    assert all(a.to_dict()["margin"][0] is None for a in routed)
    json.dumps([a.to_dict() for a in s.attempts], allow_nan=False)  # no bare Infinity in the JSON


# ----------------------------------------------------------------------------- no run needed


def test_the_expectations_offered_remedies_are_the_judged_unmet_holds() -> None:
    results = [
        _result(met=False),
        dataclasses.replace(_result("variance_growth", met=False), expect="violated"),  # a negative control
        _result("jacobian", met=False, skipped=True),
        _result("lesion", met=True),
    ]
    got = failing_expectations(SpecResult(spec=None, results=results))  # type: ignore[arg-type]
    assert [r.name for r in got] == [NAME]


def test_a_case_is_mapped_to_the_first_choice_and_the_nearest_value_the_remedied_space_offers() -> None:
    spec = parse_spec(PLAIN, file="x.toml")
    edited = parse_spec(PLAIN.replace('["xavier_normal", "orthogonal"]', '["orthogonal", "xavier_normal"]'), file="x")
    narrowed = parse_spec(
        PLAIN.replace(
            'weight_init = ["xavier_normal", "orthogonal"]', 'weight_init = ["kaiming_normal", "orthogonal"]'
        ).replace("[16, 32, 64]", "[16, 48]"),
        file="x",
    )
    case = dataclasses.replace(corner_case(spec), width=32, weight_init="xavier_normal")
    assert map_case(case, edited) == case  # every value still offered: unchanged
    got = map_case(case, narrowed)
    assert (got.weight_init, got.width) == (
        "kaiming_normal",
        16,
    )  # its first choice; 32 is as near 16 as 48: the smaller


def _held(name: str, margin: tuple[float, ...], keys: int = 1) -> Any:
    from stability.run.suggestions import Attempt
    from stability.spec.remedy import MISSING, Change

    changes = [Change(f"block.k{i}", MISSING, i) for i in range(keys)]
    return Attempt(remedy=name, summary="s", references=("r",), changes=changes, diff="", text="", status="holds",
                   detail="", numbers=[], margin=margin)  # fmt: skip


def _order(*attempts: Any, invariants: int) -> list[str]:
    from stability.run.suggestions import Suggestions

    failing = [SimpleNamespace(name=f"inv{k}") for k in range(invariants)]
    found = Suggestions(path="x.toml", name="x", profile="ci", failing=failing, attempts=list(attempts))  # type: ignore[arg-type]
    assert found.best is (found.ranked[0] if found.ranked else None)
    return [a.remedy for a in found.ranked]


def test_a_missing_margin_ranks_last_and_tied_margins_share_a_rank() -> None:
    """A remedy without a margin for an invariant takes the rank after every remedy that has one;
    remedies tied on a margin share its rank, and the next margin's rank is the next one (ranks
    of the distinct margins), so a, b tied at 0.1 and c at 0.2 rank 0, 0, 1."""
    assert _order(_held("short", (0.1,)), _held("whole", (0.1, 0.5)), invariants=2) == ["whole", "short"]
    a, b, c = _held("a", (0.1, 9.0)), _held("b", (0.1, 8.0)), _held("c", (0.2, 1.0))
    # ranks: a 0 + 2, b 0 + 1, c 1 + 0: b and c tie at 1 (the order tried puts b first), then a;
    # with a rank per margin, not per distinct margin, c would be 2 + 0 and tie a
    assert _order(a, b, c, invariants=2) == ["b", "c", "a"]
