"""The engine's training search (stability/run/engine.py, run_training) beyond tests/test_engine_training.py:
what it hands the optimizer run (time limit, memory budget, the cache shared by a spec's training
invariants), the profile's settings it searches with (derandomized in ci, ten times the cases in
thorough, `--seed`, no shrinking), the device of every case, and each field of the results it
returns. The optimizer run is a stand-in that records its arguments and returns chosen verdicts.
Written from the surviving mutants of the whole-module mutation run (docs/mutation.md)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from spec_support import training_spec

from stability import RunOptions, run_spec
from stability.judge.invariants import Verdict
from stability.run import engine
from stability.run import training as ti
from stability.spec.case import Case
from stability.spec.schema import Spec

#: What every message names for this spec's trainability (compare_depths = [4, 32], width 64).
RUNS = " (optimizer runs at depths 4 and 32, width 64)"


def _spec(
    expect: str = "holds", profiles: tuple[str, ...] = ("ci", "dev", "thorough"), examples: tuple[str, ...] = ()
) -> Spec:
    """The shipped degradation spec on both devices (`examples`: its pinned cases)."""
    edit = {"space.device": ["cpu", "cuda"]} | ({"space.examples": list(examples)} if examples else {})
    return training_spec(expect=expect, profiles=profiles, edit=edit)


Judge = Callable[[Case], tuple[Verdict | None, str | None]]


def _stand_in(monkeypatch: pytest.MonkeyPatch, judge: Judge) -> list[tuple[Case, dict[str, Any]]]:
    """Replace the optimizer run; returns the (case, keyword arguments) of every call, in order."""
    calls: list[tuple[Case, dict[str, Any]]] = []

    def evaluate(spec: Spec, name: str, case: Case, **kwargs: Any) -> tuple[Verdict | None, str | None]:
        calls.append((case, kwargs))
        return judge(case)

    monkeypatch.setattr(ti, "evaluate", evaluate)
    return calls


def _v(passed: bool, observed: float) -> Verdict:
    return Verdict(
        invariant="trainability",
        passed=passed,
        observed=observed,
        bound="≤ 1.25",
        block=None,
        detail=f"ratio {observed:g}",
    )


def _passes(c: Case) -> tuple[Verdict | None, str | None]:
    return _v(True, 1.0), None


def test_the_run_gets_the_options_limits_and_one_cache_per_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _stand_in(monkeypatch, _passes)
    options = RunOptions(profile="ci", case_timeout=7.5, memory_budget=12345)
    run_spec(_spec(), options, case="depth=4")
    ((_, kwargs),) = calls
    assert kwargs["case_timeout"] == 7.5 and kwargs["memory_budget"] == 12345
    assert isinstance(kwargs["cache"], dict)  # a fresh dict when none is given, never None
    shared: dict[Any, Any] = {"kept": 1}
    calls.clear()
    spec = _spec()
    r = engine.run_training(spec, "trainability", spec.expect.trainability, options, "ci", cache=shared)
    assert r.met and calls and all(kw["cache"] is shared for _, kw in calls)  # the caller's cache itself
    calls.clear()
    engine.run_training(spec, "trainability", spec.expect.trainability, options, "ci")
    assert calls and all(isinstance(kw["cache"], dict) for _, kw in calls)
    assert len({id(kw["cache"]) for _, kw in calls}) == 1  # one cache for the whole search


def test_an_untrained_case_has_the_invariants_name_and_no_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in(monkeypatch, lambda c: (None, "out of memory"))
    (r,) = run_spec(_spec(), RunOptions(), case="depth=4").results
    assert r.verdict == Verdict(
        invariant="trainability",
        passed=False,
        observed=r.verdict.observed if r.verdict else 0.0,
        bound="",
        block=None,
        detail="case not trained: out of memory",
        measured=False,
    )
    assert r.verdict is not None and math.isnan(r.verdict.observed)


def test_a_skipped_invariant_keeps_its_expectation_and_lists_every_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in(monkeypatch, _passes)
    (r,) = run_spec(_spec("violated", ("thorough", "dev")), RunOptions(profile="ci")).results
    assert (r.name, r.expect, r.met, r.skipped) == ("trainability", "violated", True, True)
    assert (
        r.message == "specs/t.toml::trainability: skipped in profile ci (train.profiles = thorough, dev); run it with "
        "--profile thorough"
    )


def _drawn(monkeypatch: pytest.MonkeyPatch, options: RunOptions, spec: Spec | None = None) -> list[Case]:
    calls = _stand_in(monkeypatch, _passes)
    run_spec(spec or _spec(), options)
    return [c for c, _ in calls]


def test_ci_searches_derandomized_and_a_seed_fixes_the_dev_search(monkeypatch: pytest.MonkeyPatch) -> None:
    first = _drawn(monkeypatch, RunOptions(profile="ci"))
    assert len(first) == 3 and _drawn(monkeypatch, RunOptions(profile="ci")) == first  # the ci profile's derandomize
    seeded = _drawn(monkeypatch, RunOptions(profile="dev", seed=5))
    assert _drawn(monkeypatch, RunOptions(profile="dev", seed=5)) == seeded
    assert _drawn(monkeypatch, RunOptions(profile="dev", seed=6)) != seeded  # the seed chooses the draw


@pytest.mark.parametrize(("profile", "examples"), [("ci", 3), ("dev", 3), ("thorough", 30)])
def test_the_search_asks_for_train_cases_examples_ten_times_in_thorough(
    monkeypatch: pytest.MonkeyPatch, profile: str, examples: int
) -> None:
    import hypothesis

    made: list[hypothesis.settings] = []
    real = hypothesis.settings

    def spy(*args: Any, **kwargs: Any) -> hypothesis.settings:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(hypothesis, "settings", spy)  # run_training imports it when called
    drawn = _drawn(monkeypatch, RunOptions(profile=profile, seed=0))
    ((s,),) = [made]
    assert s.max_examples == examples and 1 <= len(drawn) <= examples  # train.cases = 3
    assert tuple(s.phases) == (hypothesis.Phase.explicit, hypothesis.Phase.generate) and s.database is None
    assert s.derandomize == (profile == "ci") and s.deadline is None  # the rest from the profile


def test_every_drawn_and_pinned_case_is_on_the_runs_device(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec(examples=("depth=5,seed=7",))
    drawn = _drawn(monkeypatch, RunOptions(profile="ci", device="cuda"), spec)  # the stand-in needs no GPU
    assert (drawn[0].depth, drawn[0].seed) == (5, 7)  # the pinned case first
    assert len(drawn) == 4 and {c.device for c in drawn} == {"cuda"}


def test_the_search_stops_at_the_first_failure_without_shrinking(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _stand_in(monkeypatch, lambda c: (_v(c.depth < 3, float(c.depth)), None))
    spec = training_spec(expect="holds", profiles=["ci"], edit={"train.cases": 20})
    (r,) = run_spec(spec, RunOptions(profile="ci")).results
    drawn = [c for c, _ in calls]
    assert r.case is not None and r.case.depth >= 3
    assert drawn.index(r.case) == len(drawn) - 1  # nothing is tried after the first failing case
    assert r.examples == len(drawn) and r.name == "trainability" and r.expect == "holds"


def test_a_refused_search_keeps_the_invariants_name_and_expectation(monkeypatch: pytest.MonkeyPatch) -> None:
    from hypothesis import strategies as st

    _stand_in(monkeypatch, _passes)
    monkeypatch.setattr(engine, "cases", lambda spec, **_: st.nothing())
    (r,) = run_spec(_spec("violated"), RunOptions(profile="ci")).results
    assert (r.name, r.expect, r.met) == ("trainability", "violated", False)


def test_a_search_that_runs_no_case_is_an_error_not_a_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _stand_in(monkeypatch, _passes)
    monkeypatch.setattr(
        engine, "given", lambda strategy: lambda test: lambda: None
    )  # a search that never calls the test
    (r,) = run_spec(_spec("violated"), RunOptions(profile="ci")).results
    assert calls == []
    assert (r.name, r.expect, r.met, r.verdict, r.case, r.examples) == (
        "trainability",
        "violated",
        False,
        None,
        None,
        0,
    )
    assert (r.message, r.error, r.status) == ("no case was drawn", "no case", "error")


def test_the_reported_passing_case_is_the_one_with_the_largest_headline_magnitude(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _stand_in(
        monkeypatch, lambda c: (_v(True, -0.1 * (10 - c.depth)), None)
    )  # largest |observed| at the shallowest
    (r,) = run_spec(_spec(), RunOptions(profile="ci", seed=3)).results
    drawn = [c for c, _ in calls]
    shallowest = min(c.depth for c in drawn)
    assert len({c.depth for c in drawn}) >= 2 and r.case is not None and r.case.depth == shallowest
    assert (
        r.message == f"specs/t.toml::trainability: holds on {len(drawn)} cases; closest to its bound: ratio "
        f"{-0.1 * (10 - shallowest):g} at {r.case}{RUNS}"
    )


def test_a_non_finite_headline_number_is_the_one_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    distinct: list[Case] = []

    def judge(c: Case) -> tuple[Verdict | None, str | None]:
        distinct.append(c)
        return _v(True, math.nan if len(distinct) == 2 else 1.0), None  # the second case drawn has no number

    _stand_in(monkeypatch, judge)
    (r,) = run_spec(_spec(), RunOptions(profile="ci")).results
    assert len(distinct) == 3 and r.case == distinct[1]


def test_a_negative_control_no_case_broke_says_how_many_were_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in(monkeypatch, lambda c: (_v(True, 2.0), None))
    (r,) = run_spec(_spec("violated"), RunOptions(profile="ci")).results
    assert not r.met and r.case is not None
    assert (
        r.message == "specs/t.toml::trainability: expected to be violated, but no case among 3 broke it; closest: "
        f"ratio 2 at {r.case}{RUNS}"
    )
