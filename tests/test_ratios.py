"""benchmarks/ratios.py's verdict on target (a): the median's distribution-free interval and the
rule that judges it, against closed forms (the binomial sums written out)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "ratios", Path(__file__).resolve().parent.parent / "benchmarks" / "ratios.py"
)  # not a package on every test path
assert _spec is not None and _spec.loader is not None
ratios = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ratios)
median_interval, ratio_verdict = ratios.median_interval, ratios.ratio_verdict


def test_five_values_give_the_full_range_at_its_own_coverage() -> None:
    assert median_interval([1.12, 1.06, 1.19, 1.09, 1.10]) == (
        1.06,
        1.19,
        1 - 2 / 32,
    )  # 93.75%: 5 values cannot reach 95%


def test_nine_values_drop_one_at_each_end() -> None:
    lo, hi, coverage = median_interval([9.0, 1.0, 8.0, 2.0, 7.0, 3.0, 6.0, 4.0, 5.0])
    assert (lo, hi) == (2.0, 8.0)
    assert coverage == 1 - 2 * (1 + 9) / 512  # 0.9609; [x(3), x(7)] covers 1 − 2·46/512 = 0.82


def test_twenty_values_keep_the_sixth_to_the_fifteenth() -> None:
    below6 = sum(math.comb(20, i) for i in range(6))
    assert below6 == 1 + 20 + 190 + 1140 + 4845 + 15504
    lo, hi, coverage = median_interval([float(i) for i in range(1, 21)])
    assert (lo, hi) == (6.0, 15.0)
    assert coverage == pytest.approx(1 - 2 * 21700 / 2**20, rel=1e-15, abs=0.0)  # 0.9586 ≥ 0.95; k = 7 gives 0.885


def test_a_lower_coverage_narrows_the_interval_and_one_value_is_its_own_interval() -> None:
    assert median_interval([float(i) for i in range(1, 10)], coverage=0.8) == (3.0, 7.0, 1 - 2 * 46 / 512)
    assert median_interval([1.3]) == (1.3, 1.3, 0.0)
    with pytest.raises(ValueError):
        median_interval([])


def test_the_target_is_met_missed_or_undecided_by_the_whole_interval() -> None:
    assert ratio_verdict(1.02, 1.10, 1.10) is True
    assert ratio_verdict(1.101, 1.2, 1.10) is False
    assert ratio_verdict(1.06, 1.19, 1.10) == "undecided"
    assert ratio_verdict(1.10, 1.10, 1.10) is True


def test_thread_counts_and_clocks_are_parsed_or_refused_in_one_line() -> None:
    import argparse

    assert ratios._counts("1,2") == (1, 2) and ratios._counts("4") == (4,)
    assert ratios._clocks("cpu,wall") == ("cpu", "wall") and ratios._clocks("wall") == ("wall",)
    for bad, parse in (
        ("0", ratios._counts),
        ("two", ratios._counts),
        ("", ratios._counts),
        ("gpu", ratios._clocks),
        ("cpu,gpu", ratios._clocks),
    ):
        with pytest.raises(argparse.ArgumentTypeError, match=repr(bad)):
            parse(bad)


def test_each_regime_is_judged_against_its_own_target() -> None:
    """Nine processes whose ratios are 1.00 … 1.16 (the interval [x(2), x(8)] = [1.02, 1.14]):
    undecided against glibc's-defaults target of 1.10, met against the churn-free 1.15."""
    values = [1.00, 1.02, 1.04, 1.06, 1.08, 1.10, 1.12, 1.14, 1.16]
    runs = [{"probe": v, "bare": 1.0, "bare_freed": 1.0} for v in values]
    ratios.ROWS.clear()
    for regime, env, target in ratios.REGIMES:
        ratios._overhead_row(regime, env, target, 2, "wall", "net", runs)
    (glibc, churn_free) = ratios.ROWS
    assert [r[2:4] for r in ratios.ROWS] == [("≤ 1.10×", "undecided"), ("≤ 1.15×", "yes")]
    assert "2 threads, wall time" in glibc[0] and "MALLOC_MMAP_THRESHOLD_" in churn_free[0]
    assert "1.080×" in glibc[1] and "[1.020, 1.140]" in glibc[1]
    ratios.ROWS.clear()
