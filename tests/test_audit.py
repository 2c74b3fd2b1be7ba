"""stability/run/audit.py: the parent judges again every case a worker judged, and a reported outcome
that the measurements contradict becomes an error naming the case."""

from __future__ import annotations

import dataclasses

from stability import RunOptions, parse_spec, run_spec
from stability.run.audit import rejudge
from stability.run.engine import SpecResult

SPEC = """
name = "audited"
description = "a plain sigmoid stack: the gradient vanishes from depth 6 on"
family = "plain"
[block]
activation = "sigmoid"
[space]
depth = [1, 12]
width = 4
batch = 2
[expect.gradient_arrival]
expect = "{expect}"
lo = 0.001
hi = 1000.0
"""


def _run(expect: str) -> SpecResult:
    return run_spec(parse_spec(SPEC.format(expect=expect), file="specs/audited.toml"), RunOptions(profile="ci"))


def test_an_honest_result_is_left_as_it_is() -> None:
    for expect in ("holds", "violated"):
        result = _run(expect)
        before = [dataclasses.replace(r) for r in result.results]
        assert rejudge(result, replay=False) is None
        assert result.results == before


def test_a_failure_reported_as_met_is_caught_on_its_deciding_case() -> None:
    result = _run("holds")
    (r,) = result.results
    assert not r.met and r.verdict is not None and not r.verdict.passed
    forged = dataclasses.replace(r, met=True, verdict=dataclasses.replace(r.verdict, passed=True))
    result.results = [forged]
    line = rejudge(result, replay=False)
    assert line is not None and f"case {r.case} fails when judged again" in line
    (now,) = result.results
    assert (
        not now.met and now.error == line and now.case == r.case and now.verdict is not None and not now.verdict.passed
    )


def test_a_met_expectation_is_caught_on_any_case_it_judged() -> None:
    result = _run("holds")
    (r,) = result.results
    passing = next(c for c in r.judged if result.cases[c].measurements is not None and c != r.case and c.depth < 4)
    hidden = dataclasses.replace(
        r,
        met=True,
        case=passing,
        verdict=dataclasses.replace(r.verdict, passed=True) if r.verdict else None,
        message="holds",
        error=None,
        reproduce=None,
    )  # a forged result: deciding case a passing one, every judged case kept
    result.results = [hidden]
    line = rejudge(result, replay=False)
    assert line is not None and "fails it when judged again" in line


def test_a_violation_reported_for_a_case_that_holds_is_caught() -> None:
    result = _run("violated")
    (r,) = result.results
    assert r.met
    passing = next(c for c in r.judged if c.depth == 1)
    forged = dataclasses.replace(r, case=passing)  # claims the shallowest case breaks it: it does not
    result.results = [forged]
    line = rejudge(result, replay=False)
    assert line is not None and f"case {passing} passes when judged again" in line and not result.results[0].met
