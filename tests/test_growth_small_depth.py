"""`classify_ensemble` at depth 2 (stability/judge/growth.py): undecided, with the report's best guess
from the one increment past the first block (×2 is the most a linear law grows from l = 1 to 2).
Written from the mutation check (docs/mutation.md)."""

from __future__ import annotations

from stability.judge.growth import MIN_DECIDABLE_DEPTH, classify_ensemble


def test_depth_two_is_undecided_and_guesses_from_the_second_step() -> None:
    assert MIN_DECIDABLE_DEPTH == 3
    fast = classify_ensemble([[1.0, 2.0, 5.0], [1.0, 2.0, 5.0]])  # ×2.5 from l = 1 to 2
    assert (fast.growth, fast.lowest, fast.decided) == ("exponential", "linear", False)
    slow = classify_ensemble([[1.0, 3.0, 5.9], [1.0, 3.0, 5.9]])  # ×1.97
    assert (slow.growth, slow.lowest) == ("linear", "linear")
    one = classify_ensemble([[1.0, 9.0], [1.0, 9.0]])  # one block: no shape at all
    assert (one.growth, one.lowest) == ("linear", "linear")


def test_a_collapsed_boundary_is_decaying_and_a_zero_start_is_refused() -> None:
    import pytest

    g = classify_ensemble(
        [[1.0, 0.0, 5.0, 10.0], [1.0, 2.0, 5.0, 10.0]]
    )  # one member collapses to exactly 0 in the middle
    assert g.growth == "decaying" and g.lowest == "decaying"
    with pytest.raises(ValueError, match="boundary-0 value must be positive"):
        classify_ensemble([[0.0, 1.0], [1.0, 2.0]])


def test_the_ensemble_description_names_the_exponent_and_why_it_is_undecided() -> None:
    from stability.judge.growth import EnsembleGrowth, describe_ensemble

    common = dict(
        size=4,
        ratios=[1.0, 2.0, 5.0, 9.0],
        lo=[1.0, 1.8, 4.0, 8.0],
        hi=[1.0, 2.2, 6.0, 10.0],
        q25=[1.0] * 4,
        q75=[1.0] * 4,
        rate=2.08,
        slope=2.7,
    )
    poly = EnsembleGrowth(growth="polynomial", lowest="polynomial", exponent=1.87, **common)  # type: ignore[arg-type]
    assert (
        describe_ensemble(poly)
        == "polynomial (×2.08 per block, +2.7·s₀ per block, ∝ l^1.87; mean of 4 seeds, final ratio 9 in [8, 10])"
    )
    at_min = EnsembleGrowth(growth="exponential", lowest="linear", exponent=None, **common)  # type: ignore[arg-type]  # depth 3 = MIN_DECIDABLE_DEPTH
    assert describe_ensemble(at_min).endswith(
        "; undecided at this depth (linear … exponential fit within the ensemble's noise: judged linear)"
    )


def test_an_exact_power_law_gives_its_exponent_precisely() -> None:
    import numpy as np
    import pytest

    depth = np.arange(0, 33, dtype=np.float64)
    law = 1.0 + 0.05 * depth**2.23
    g = classify_ensemble(
        [law, law]
    )  # no noise: the golden-section search must land on 2.23, between grid points 0.1 apart
    assert g.exponent == pytest.approx(2.23, abs=1e-3)


def test_only_a_polynomial_description_names_its_exponent() -> None:
    from stability.judge.growth import EnsembleGrowth, describe_ensemble

    common = dict(
        size=2,
        ratios=[1.0, 2.0, 3.0, 4.0],
        lo=[1.0] * 4,
        hi=[1.0] * 4,
        q25=[1.0] * 4,
        q75=[1.0] * 4,
        rate=1.59,
        slope=1.0,
    )
    assert "∝ l^" not in describe_ensemble(EnsembleGrowth(growth="linear", lowest="linear", exponent=1.1, **common))  # type: ignore[arg-type]


def test_channel_stats_with_nothing_observed_is_an_empty_profile() -> None:
    from stability.measure.channels import ChannelStats

    obs = ChannelStats()
    obs.start([])
    prof = obs.finish()
    assert (prof.sq_mean, prof.var, prof.grand_mean, prof.count) == ([], [], [], [])
