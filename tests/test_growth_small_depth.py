"""`classify_ensemble` at depth 2 (stability/growth.py): undecided, with the report's best guess
from the one increment past the first block (×2 is the most a linear law grows from l = 1 to 2).
Written from the mutation check (docs/mutation.md)."""

from __future__ import annotations

from stability.growth import MIN_DECIDABLE_DEPTH, classify_ensemble


def test_depth_two_is_undecided_and_guesses_from_the_second_step() -> None:
    assert MIN_DECIDABLE_DEPTH == 3
    fast = classify_ensemble([[1.0, 2.0, 5.0], [1.0, 2.0, 5.0]])  # ×2.5 from l = 1 to 2
    assert (fast.growth, fast.lowest, fast.decided) == ("exponential", "linear", False)
    slow = classify_ensemble([[1.0, 3.0, 5.9], [1.0, 3.0, 5.9]])  # ×1.97
    assert (slow.growth, slow.lowest) == ("linear", "linear")
    one = classify_ensemble([[1.0, 9.0], [1.0, 9.0]])  # one block: no shape at all
    assert (one.growth, one.lowest) == ("linear", "linear")
