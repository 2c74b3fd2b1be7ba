"""The probe search's details in the engine (stability/run/engine.py) beyond tests/test_engine_decisions.py:
the cases it draws (the run's device, pinned examples first, only zero-branch inits for
`identity_at_init`), the failing and passing searches' exact words and fields, a replay's fields
and words, and the depth bisection over a plain (lo, hi) range and down to the smallest admitted
depth. Cases are judged by stand-ins, so nothing is built or probed.
Written from the surviving mutants of the whole-module mutation run (docs/mutation.md)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from spec_support import make_case, make_measurements, make_spec

from stability import parse_spec
from stability.judge.invariants import Verdict
from stability.run import engine
from stability.run.engine import CaseRecord, RunOptions, run_spec
from stability.spec.case import Case, reproduce_command
from stability.spec.schema import Spec

_M = make_measurements(grad_norm=[1.0], act_var=[1.0], act_sq_mean=[1.0])


def _spec(
    extra: str = "", expect: str = "[expect.gradient_arrival]\nlo = 0.05\nhi = 10.0\n", family: str = "plain"
) -> Spec:
    space = f'depth = [1, 12]\nwidth = 4\nbatch = 2\ndevice = ["cpu", "cuda"]\n{extra}\n'
    return make_spec(family, space=space, expect=expect, file="specs/e.toml", name="e", description="d")


def _stand_ins(monkeypatch: pytest.MonkeyPatch, passes: Any, observed: Any = lambda c: float(c.depth)) -> list[Case]:
    """evaluate → a dummy record (recorded), judge → a verdict that passes when `passes(case)`."""
    measured: list[Case] = []

    def evaluate(spec: Spec, c: Case, options: Any = None) -> CaseRecord:
        measured.append(c)
        return CaseRecord(case=c, measurements=_M)

    def judge(spec: Spec, name: str, record: CaseRecord) -> Verdict:
        c = record.case
        return Verdict(
            invariant=name, passed=passes(c), observed=observed(c), bound="≤ 4", block=None, detail=f"depth {c.depth}"
        )

    monkeypatch.setattr(engine, "evaluate", evaluate)
    monkeypatch.setattr(engine, "judge", judge)
    return measured


def test_drawn_and_pinned_cases_are_on_the_runs_device(monkeypatch: pytest.MonkeyPatch) -> None:
    measured = _stand_ins(monkeypatch, lambda c: True)
    (r,) = run_spec(
        _spec('examples = ["depth=7,seed=3"]'), RunOptions(profile="ci", device="cuda")
    ).results  # stand-ins: no GPU needed
    assert (measured[0].depth, measured[0].seed) == (7, 3)  # the pinned case first
    assert len(measured) > 2 and {c.device for c in measured} == {"cuda"}
    assert r.met and r.case is not None and r.case.device == "cuda"


def test_a_failing_search_says_so_word_for_word_at_the_smallest_depth(monkeypatch: pytest.MonkeyPatch) -> None:
    measured = _stand_ins(monkeypatch, lambda c: c.depth < 5)
    r_spec = _spec('examples = ["depth=11,seed=3"]')
    (r,) = run_spec(r_spec, RunOptions(profile="ci")).results
    assert r.case is not None and r.case.depth == 5 and r.case.seed == 3  # bisected from the pinned depth 11
    assert (r.name, r.expect, r.met, r.error) == ("gradient_arrival", "holds", False, None)
    assert isinstance(r.examples, int) and 1 <= r.examples <= len(
        set(measured)
    )  # the search's cases, not the bisection's
    assert r.reproduce == reproduce_command(r_spec, r.case)
    assert (
        r.message
        == f"specs/e.toml::gradient_arrival: expected to hold, but it fails at smallest failing case {r.case}: depth 5"
    )


def test_identity_at_init_draws_only_zero_branch_inits(monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_ins(monkeypatch, lambda c: True)
    drawn: list[Case] = []
    real = engine._applies
    monkeypatch.setattr(engine, "_applies", lambda spec, name, c: drawn.append(c) or real(spec, name, c))
    spec = _spec('branch_init = ["default", "zero"]', "[expect.identity_at_init]\n", family="preact")
    (r,) = run_spec(spec, RunOptions(profile="ci")).results
    assert (
        r.met and len(drawn) >= 5 and {c.branch_init for c in drawn} == {"zero"}
    )  # no draw spent on a case it cannot judge


def test_a_replayed_failure_is_worded_as_a_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_ins(monkeypatch, lambda c: c.depth < 5)
    (r,) = run_spec(_spec(), RunOptions(), case="depth=6").results
    assert r.case is not None and (r.met, r.examples) == (False, 1)
    assert r.message == f"specs/e.toml::gradient_arrival: expected to hold, but it fails at {r.case}: depth 6"


def test_the_depth_bisection_accepts_a_plain_lo_hi_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """`_smallest_depth` reads `constrained` only where the space has it: a (lo, hi) tuple is a range."""
    monkeypatch.setattr(
        engine,
        "judge",
        lambda spec, name, record: Verdict(
            invariant=name, passed=record.case.depth < 6, observed=0.0, bound="", block=None, detail=""
        ),
    )
    spec = SimpleNamespace(space=SimpleNamespace(depth=(2, 16)))
    case = make_case(depth=16, dtype="float32")
    found = engine._smallest_depth(spec, "gradient_arrival", case, lambda c: CaseRecord(case=c, measurements=_M))  # type: ignore[arg-type]
    assert found.depth == 6


def test_a_passing_search_reports_the_case_closest_to_a_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    measured = _stand_ins(
        monkeypatch, lambda c: True, observed=lambda c: 10.5 - 0.5 * c.depth
    )  # nearest hi = 10 at the shallowest
    spec = _spec()
    (r,) = run_spec(spec, RunOptions(profile="ci")).results
    shallowest = min(c.depth for c in measured)
    assert len({c.depth for c in measured}) >= 2 and r.case is not None and r.case.depth == shallowest
    assert (r.name, r.expect, r.met, r.error) == ("gradient_arrival", "holds", True, None)
    assert r.reproduce == reproduce_command(spec, r.case)
    assert (
        r.message == f"specs/e.toml::gradient_arrival: holds on {r.examples} cases; closest to its bound: depth "
        f"{shallowest} at {r.case}"
    )


def test_a_search_where_no_case_applies_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    measured = _stand_ins(monkeypatch, lambda c: True)
    monkeypatch.setattr(engine, "_applies", lambda spec, name, c: False)
    (r,) = run_spec(_spec(expect='[expect.gradient_arrival]\nexpect = "violated"\n'), RunOptions(profile="ci")).results
    assert measured == []
    assert (r.name, r.expect, r.met, r.verdict, r.case, r.examples) == (
        "gradient_arrival",
        "violated",
        False,
        None,
        None,
        0,
    )
    assert (r.message, r.error, r.status) == ("no applicable case was drawn", "no applicable case", "error")


def test_the_constrained_bisection_can_end_at_the_smallest_admitted_depth() -> None:
    spec = parse_spec(
        'name = "e"\ndescription = "d"\nfamily = "plain"\n[space]\ndepth = { values = [2, 4, 9, 12] }\nwidth '
        "= 4\nbatch = "
        "2\n[expect.gradient_arrival]\n",
        file="specs/e.toml",
    )
    judged: list[int] = []

    def judge(spec: Spec, name: str, record: CaseRecord) -> Verdict:
        judged.append(record.case.depth)
        return Verdict(
            invariant=name, passed=False, observed=0.0, bound="", block=None, detail=""
        )  # fails at every depth

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine, "judge", judge)
        found = engine._smallest_depth(
            spec,
            "gradient_arrival",
            make_case(depth=12, dtype="float32"),
            lambda c: CaseRecord(case=c, measurements=_M),
        )
    assert found.depth == 2 and set(judged) <= {2, 4, 9, 12}
