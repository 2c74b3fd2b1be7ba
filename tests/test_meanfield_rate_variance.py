"""`log_rate_variance` for a residual stack of a smooth activation (stability/judge/meanfield_profile.py): the sum
of the per-block variances plus the Cauchy–Schwarz covariance 2·Σ_{i<j} a_i a_j √((κ_i − 1)(κ_j − 1))/n,
a_l = α²χ_F,l/(1 + α²χ_F,l), worked by hand on a three-block profile. Written from the surviving
mutants of the mutation check (docs/mutation.md)."""

from __future__ import annotations

import math

import pytest

from stability.judge.meanfield_profile import LayerProfile, log_factor_variance, log_rate_variance


def test_a_residual_tanh_profiles_rate_variance_is_its_formula_by_hand() -> None:
    p = LayerProfile(
        q=(1.0, 2.0, 3.0),
        chi=(2.0, 3.0, 1.5),
        kappa=(3.0, 5.0, 2.0),
        residual=True,
        branch_scale=1.0,
        activation="tanh",
    )
    n = 10
    # per block, α = 1, χ_F = χ − 1: (4χ_F + χ_F²(3κ − 1)) / (n χ²)
    v = (4 + 8) / (n * 4.0), (8 + 4 * 14) / (n * 9.0), (2 + 0.25 * 5) / (n * 2.25)
    assert log_factor_variance(p, width=n) == pytest.approx(v, rel=1e-15, abs=0)
    a = (1 / 2, 2 / 3, 1 / 3)  # χ_F/(1 + χ_F)
    root = (math.sqrt(2.0), 2.0, 1.0)  # √(κ − 1)
    cross = (
        2 * (a[0] * a[1] * root[0] * root[1] + a[0] * a[2] * root[0] * root[2] + a[1] * a[2] * root[1] * root[2]) / n
    )
    assert log_rate_variance(p, width=n) == pytest.approx(sum(v) + cross, rel=1e-14, abs=0)
    plain = LayerProfile(q=p.q, chi=p.chi, kappa=p.kappa, residual=False, branch_scale=1.0, activation="tanh")
    assert log_rate_variance(plain, width=n) == pytest.approx(
        sum((3 * k - 1) / n for k in p.kappa), rel=1e-15, abs=0
    )  # independent blocks
