"""The engine's training path (stability/run/engine.py, run_training) with the optimizer run replaced by
a stand-in that returns chosen verdicts: which case is reported, the words, the counts and an
untrained case, without training anything. Written from the mutation check (docs/mutation.md)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from spec_support import SPECS, training_spec

from stability import RunOptions, run_spec
from stability.judge.invariants import Verdict
from stability.run import training as ti
from stability.spec.case import Case
from stability.spec.schema import Spec

#: What every message names for this spec's trainability (compare_depths = [4, 32], width 64).
RUNS = " (optimizer runs at depths 4 and 32, width 64)"


def _spec(expect: str = "violated", profiles: tuple[str, ...] = ("thorough",)) -> Spec:
    return training_spec(expect=expect, profiles=profiles)


def _stand_in(
    monkeypatch: pytest.MonkeyPatch, judge: Callable[[Case], tuple[Verdict | None, str | None]]
) -> list[Case]:
    seen: list[Case] = []

    def evaluate(spec: Spec, name: str, case: Case, **_: Any) -> tuple[Verdict | None, str | None]:
        seen.append(case)
        return judge(case)

    monkeypatch.setattr(ti, "evaluate", evaluate)
    return seen


def _v(passed: bool, observed: float) -> Verdict:
    return Verdict(
        invariant="trainability",
        passed=passed,
        observed=observed,
        bound="≤ 1.25",
        block=None,
        detail=f"ratio {observed:g}",
    )


def test_an_untrained_replayed_case_is_not_met_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in(monkeypatch, lambda c: (None, "the run took longer than 60 s"))
    (r,) = run_spec(_spec(), RunOptions(profile="ci"), case="depth=4").results
    assert (r.met, r.error, r.expect, r.examples, r.status) == (
        False,
        "the run took longer than 60 s",
        "violated",
        1,
        "error",
    )
    assert r.verdict is not None and r.verdict.passed is False and math.isnan(r.verdict.observed)
    assert r.verdict.detail == "case not trained: the run took longer than 60 s"
    assert (
        r.message == "specs/t.toml::trainability: expected to be violated, but the violation was not measured at "
        f"{r.case}: case not trained: the run took longer than 60 s{RUNS}"
    )


def test_a_replayed_case_is_worded_as_a_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in(monkeypatch, lambda c: (_v(False, 2.0), None))
    (r,) = run_spec(_spec("holds"), RunOptions(), case="depth=4").results
    assert (r.met, r.expect, r.examples, r.error) == (False, "holds", 1, None)
    assert r.message == f"specs/t.toml::trainability: expected to hold, but it fails at {r.case}: ratio 2{RUNS}"
    assert r.reproduce is not None and "depth=4" in r.reproduce


def test_outside_its_profiles_the_invariant_is_skipped_without_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _stand_in(monkeypatch, lambda c: (_v(True, 1.0), None))
    (r,) = run_spec(_spec(), RunOptions(profile="ci")).results
    assert (r.met, r.skipped, r.examples, r.verdict, r.case, r.status) == (True, True, 0, None, None, "skipped")
    assert (
        r.message == "specs/t.toml::trainability: skipped in profile ci (train.profiles = thorough); run it with "
        "--profile thorough"
    )
    assert seen == []


def test_a_search_with_no_failure_reports_the_largest_headline_number(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _stand_in(monkeypatch, lambda c: (_v(True, -0.1 * c.depth), None))  # |observed| largest at the deepest case
    (r,) = run_spec(_spec("holds", ("ci",)), RunOptions(profile="ci")).results
    assert r.met and r.expect == "holds" and r.error is None
    assert r.examples == len(set(seen)) and r.examples >= 2
    deepest = max(c.depth for c in seen)
    assert (
        r.case is not None
        and r.case.depth == deepest
        and r.verdict is not None
        and r.verdict.observed == pytest.approx(-0.1 * deepest, rel=1e-15, abs=0)
    )
    assert r.message.startswith(f"specs/t.toml::trainability: holds on {r.examples} cases; closest to its bound: ")


def test_a_search_that_finds_a_failure_reports_it_unshrunk(monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in(monkeypatch, lambda c: (_v(c.depth < 4, float(c.depth)), None))
    (r,) = run_spec(_spec("violated", ("ci",)), RunOptions(profile="ci")).results
    assert (
        r.met
        and r.name == "trainability"
        and r.expect == "violated"
        and r.case is not None
        and r.case.depth >= 4
        and r.error is None
    )
    assert r.verdict is not None and not r.verdict.passed
    assert (
        r.message == f"specs/t.toml::trainability: violated as expected at {r.case}: ratio {r.case.depth:g}{RUNS}"
    )  # worded like a replay
    _stand_in(monkeypatch, lambda c: (None, "boom") if c.depth >= 4 else (_v(True, 1.0), None))
    (r,) = run_spec(_spec("violated", ("ci",)), RunOptions(profile="ci")).results
    assert not r.met and r.error == "boom" and r.verdict is not None and r.verdict.detail == "case not trained: boom"


def test_a_search_hypothesis_refuses_is_an_error_result_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    from hypothesis import strategies as st

    from stability.run import engine

    seen = _stand_in(monkeypatch, lambda c: (_v(True, 1.0), None))
    monkeypatch.setattr(engine, "cases", lambda spec, **_: st.nothing())
    (r,) = run_spec(_spec("holds", ("ci",)), RunOptions(profile="ci")).results
    assert (r.met, r.verdict, r.case, r.examples, r.status) == (False, None, None, 0, "error") and seen == []
    assert r.error and "empty strategy" in r.error  # Hypothesis's own words
    assert r.message == f"the search failed: {r.error}"


def test_a_listed_profile_other_than_thorough_draws_train_cases_cases(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _stand_in(monkeypatch, lambda c: (_v(True, 1.0), None))
    run_spec(_spec("holds", ("ci",)), RunOptions(profile="ci"))
    assert 1 <= len(set(seen)) <= 3  # train.cases = 3 (ten times as many only in thorough)


def test_training_search_is_generate_only_and_tries_pinned_cases_first(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _stand_in(monkeypatch, lambda c: (_v(False, 2.0), None))
    spec = _spec("holds", ("ci",))
    (r,) = run_spec(spec, RunOptions(profile="ci")).results
    assert len(set(seen)) == 1  # no shrinking: the first failing case is the one reported
    assert r.message == f"specs/t.toml::trainability: expected to hold, but it fails at {r.case}: ratio 2{RUNS}"
    pinned = training_spec(profiles=["ci"], edit={"space.examples": ["depth=5,seed=7"]})
    seen.clear()
    run_spec(pinned, RunOptions(profile="ci"))
    assert seen[0].depth == 5 and seen[0].seed == 7


def test_replayed_training_case_that_meets_and_a_skipped_ones_name(monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in(monkeypatch, lambda c: (_v(True, 1.0), None))
    (r,) = run_spec(_spec("holds"), RunOptions(), case="depth=4").results
    assert r.met and r.message == f"specs/t.toml::trainability: holds at {r.case}: ratio 1{RUNS}"
    (s,) = run_spec(_spec(), RunOptions(profile="ci")).results
    assert s.name == "trainability" and s.skipped


def test_the_message_names_the_depths_and_widths_the_optimizer_ran() -> None:
    """The case names one depth and one width; trainability's compare_depths trains others, and
    update_size trains every width it lists (their registry entries' `train_cases`)."""
    from stability.run.training import trained_text
    from stability.spec.case import corner_case
    from stability.spec.load import load_spec

    spec = _spec()
    assert trained_text(spec, "trainability", corner_case(spec, depth=4)) == RUNS
    mup = load_spec(SPECS / "mup_update_size.toml")
    assert (
        trained_text(mup, "update_size", corner_case(mup))
        == " (optimizer runs at depth 3, widths 64, 128, 256 and 512)"
    )
    one = _spec().model_copy(
        update={
            "expect": _spec().expect.model_copy(
                update={"trainability": _spec().expect.trainability.model_copy(update={"compare_depths": None})}
            )
        }
    )  # type: ignore[union-attr]
    assert trained_text(one, "trainability", corner_case(one, depth=5)) == " (optimizer runs at depth 5, width 64)"
