"""stability/run/suggestions.py: the ranking of the remedies that hold (`Suggestions.ranked`, what
`best`, `--out`, `check --suggest` and the reports take first) and the JSON of attempts.

The rule (docs/suggest.md, "What it runs", step 5): fewest changed keys first; then the margin,
the sum over the fixed invariants of each remedy's rank by its closest-to-failing case's severity
(smaller severity: farther from the bound, better), so invariants of different scales weigh alike;
then the order tried. A remedy that did not hold is never ranked.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

from stability.run.suggestions import Attempt, Suggestions
from stability.spec.remedy import MISSING, Change


def _attempt(name: str, keys: int, margin: tuple[float, ...], status: str = "holds") -> Attempt:
    changes = [Change(f"block.k{i}", MISSING, i) for i in range(keys)]
    return Attempt(
        remedy=name,
        summary="s",
        references=("r",),
        changes=changes,
        diff="",
        text="",
        status=status,
        detail="",
        numbers=[],
        margin=margin,
    )


def _ranked(*attempts: Attempt, invariants: int = 1) -> list[str]:
    failing = [SimpleNamespace(name=f"inv{k}") for k in range(invariants)]  # only their count is read
    found = Suggestions(path="x.toml", name="x", profile="ci", failing=failing, attempts=list(attempts))  # type: ignore[arg-type]
    return [a.remedy for a in found.ranked]


def test_fewer_changes_rank_first_whatever_the_margin() -> None:
    """A one-key remedy whose closest case came near its bound ranks above a two-key remedy that
    stayed far from it."""
    assert _ranked(_attempt("two_keys", 2, (0.1,)), _attempt("one_key", 1, (5.0,))) == ["one_key", "two_keys"]
    assert _ranked(_attempt("three", 3, (0.0,)), _attempt("two", 2, (1.0,)), _attempt("one", 1, (9.0,))) == [
        "one",
        "two",
        "three",
    ]


def test_among_equal_changes_the_one_farther_from_its_bound_first() -> None:
    """The margin is the severity of the closest case (bigger: closer to failing), so the smaller
    ranks first."""
    assert _ranked(_attempt("near", 1, (5.0,)), _attempt("far", 1, (0.1,))) == ["far", "near"]
    assert _ranked(_attempt("a", 1, (2.0,)), _attempt("b", 1, (3.0,)), _attempt("c", 1, (1.0,))) == ["c", "a", "b"]


def test_a_tie_keeps_the_order_tried() -> None:
    assert _ranked(_attempt("first", 1, (1.0,)), _attempt("second", 1, (1.0,))) == ["first", "second"]
    assert _ranked(_attempt("b", 2, (0.5,)), _attempt("a", 2, (0.5,))) == ["b", "a"]


def test_invariants_of_different_scales_weigh_alike_by_rank() -> None:
    """Ranks, not raw severities, are summed: a is best on the first invariant and worst on the
    second (0 + 2), b second and middle (1 + 1), c worst and best (2 + 0); every sum is 2, so the
    order tried decides. Raw sums (1000.1, 999.2, 998.3) would put c first for the second
    invariant's scale alone."""
    a, b, c = _attempt("a", 1, (0.1, 1000.0)), _attempt("b", 1, (0.2, 999.0)), _attempt("c", 1, (0.3, 998.0))
    assert _ranked(a, b, c, invariants=2) == ["a", "b", "c"]
    d = _attempt("d", 1, (0.15, 997.0))  # second on the first invariant, best on the second: 1 + 0
    assert _ranked(a, b, c, d, invariants=2)[0] == "d"


def test_an_undefined_margin_ranks_last_among_equal_changes() -> None:
    """A plugin's invariant without a severity gives an infinite margin: it ranks after every
    finite one, never before."""
    assert _ranked(_attempt("unknown", 1, (math.inf,)), _attempt("known", 1, (9.0,))) == ["known", "unknown"]


def test_what_did_not_hold_is_never_ranked_and_best_is_the_first() -> None:
    held, failed = _attempt("held", 2, (3.0,)), _attempt("failed", 1, (), "fails")
    refused = _attempt("refused", 1, (), "refused")
    failing = [SimpleNamespace(name="gradient_arrival")]
    s = Suggestions(path="x.toml", name="x", profile="ci", failing=failing, attempts=[failed, refused, held])  # type: ignore[arg-type]
    assert [a.remedy for a in s.ranked] == ["held"] and s.best is held
    assert s.to_dict()["ranked"] == ["held"]
    assert Suggestions(path="x.toml", name="x", profile="ci", failing=failing, attempts=[failed]).best is None  # type: ignore[arg-type]
