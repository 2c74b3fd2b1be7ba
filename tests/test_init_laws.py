"""stability.judge.init_laws: the laws' moments and tails in closed form, the false-alarm rate of
each statistic over many seeds of a correctly drawn tensor, and the power against planted errors."""

from __future__ import annotations

import math

import pytest
import torch
from approx_support import approx

from stability.judge.init_laws import Law, check_parameter
from stability.judge.init_laws import tests_for as count_tests


def _stats(t: torch.Tensor) -> dict[str, float]:
    d = t.double().reshape(-1)
    return {
        "n": d.numel(),
        "mean": float(d.mean()),
        "var": float(d.var(correction=1)) if d.numel() > 1 else 0.0,
        "lo": float(d.min()),
        "hi": float(d.max()),
    }


def _judge(law: Law, t: torch.Tensor, level: float = 1e-8) -> list:
    return check_parameter(law, **_stats(t), eps=float(torch.finfo(t.dtype).eps), level=level)


def _failed(law: Law, t: torch.Tensor, level: float = 1e-8) -> set[str]:
    return {c.statistic for c in _judge(law, t, level) if not c.passed}


# ----------------------------------------------------------------------------- closed forms


def test_a_normal_truncated_at_two_sigma_has_the_std_timm_divides_by() -> None:
    # Var = 1 − 2·β·φ(β)/Z at β = 2, Z = Φ(2) − Φ(−2): timm's variance_scaling_ divides by 0.87962566103423978
    mean, var, _ = Law("trunc_normal", std=1.0, a=-2.0, b=2.0).moments()
    z = math.erf(2 / math.sqrt(2))
    assert mean == pytest.approx(0.0, abs=1e-15)
    assert var == pytest.approx(1 - 4 * math.exp(-2) / math.sqrt(2 * math.pi) / z, rel=1e-12, abs=0.0)
    assert math.sqrt(var) == pytest.approx(0.87962566103423978, rel=1e-12, abs=0.0)


def test_truncated_moments_match_a_quadrature() -> None:
    law = Law("trunc_normal", mean=0.3, std=1.5, a=-1.0, b=4.0)
    xs = torch.linspace(-1.0, 4.0, 200_001, dtype=torch.float64)
    w = torch.exp(-0.5 * ((xs - 0.3) / 1.5) ** 2)
    w = w / torch.trapezoid(w, xs)
    m1 = float(torch.trapezoid(w * xs, xs))
    var = float(torch.trapezoid(w * (xs - m1) ** 2, xs))
    mu4 = float(torch.trapezoid(w * (xs - m1) ** 4, xs))
    got = law.moments()
    assert got[0] == approx(m1, rel=1e-8) and got[1] == approx(var, rel=1e-8) and got[2] == approx(mu4, rel=1e-7)


def test_a_truncation_far_out_is_the_normal() -> None:
    t, n = Law("trunc_normal", std=0.02, a=-2.0, b=2.0), Law("normal", std=0.02)
    assert t.moments() == pytest.approx(n.moments(), rel=1e-12, abs=0.0)
    assert t.quantile_high(1e-9) == pytest.approx(n.quantile_high(1e-9), rel=1e-9, abs=0.0)


def test_uniform_moments_and_tails() -> None:
    law = Law("uniform", a=-1.0, b=3.0)
    assert law.moments() == pytest.approx((1.0, 16 / 12, 4**4 / 80))
    assert law.cdf(0.0) == pytest.approx(0.25) and law.sf(2.0) == pytest.approx(0.25)
    assert law.quantile_low(0.25) == pytest.approx(0.0) and law.quantile_high(0.25) == pytest.approx(2.0)


def test_the_tails_are_accurate_far_out() -> None:
    law = Law("normal", mean=1.0, std=2.0)
    assert law.sf(1.0 + 2.0 * 8) == pytest.approx(
        0.5 * math.erfc(8 / math.sqrt(2)), rel=1e-12, abs=0.0
    )  # 6.2e-16: 1 − cdf would be 0
    assert law.quantile_high(law.sf(1.0 + 2.0 * 7)) == approx(15.0, rel=1e-9)
    assert law.quantile_low(law.cdf(1.0 - 2.0 * 7)) == approx(-13.0, rel=1e-9)


def test_the_max_interval_is_the_exact_order_statistic() -> None:
    # P(max ≤ x) = F(x)^n: the interval's ends have F(lo)^n = level/2 and 1 − F(hi)^n = level/2
    law, n, level = Law("normal", std=1.0), 1000, 1e-3
    checks = {
        c.statistic: c for c in check_parameter(law, n=n, mean=0.0, var=1.0, lo=-3.0, hi=3.0, eps=0.0, level=level)
    }
    mx = checks["max"]
    assert (1 - law.sf(mx.lo)) ** n == approx(level / 2, rel=1e-6)
    assert 1 - (1 - law.sf(mx.hi)) ** n == approx(level / 2, rel=1e-6)
    assert law.cdf(checks["min"].hi) == approx(law.sf(mx.lo), rel=1e-9)  # symmetric


def test_the_variance_test_has_n_minus_1_degrees_under_a_normal_law() -> None:
    # the interval is σ²·χ²_ν(p)/ν with ν = n − 1 (Wilson-Hilferty quantiles); at n = 101 and z = 1.96
    # the chi-square 2.5% and 97.5% quantiles are 74.22 and 129.56 (tables)
    (_, var, *_) = check_parameter(
        Law("normal", std=1.0), n=101, mean=0.0, var=1.0, lo=-2.0, hi=2.0, eps=0.0, level=0.05
    )
    assert var.lo * 100 == approx(74.22, rel=2e-3) and var.hi * 100 == approx(129.56, rel=2e-3)


def test_a_constant_is_exact_up_to_its_dtypes_rounding() -> None:
    law = Law("constant", value=1e-5)
    assert not _failed(law, torch.full((64,), 1e-5))  # float32(1e-5) ≠ 1e-5, within one unit in the last place
    assert _failed(law, torch.full((64,), 1e-5) * (1 + 4e-7)) == {"value"}
    assert _failed(Law("constant", value=0.0), torch.zeros(8)) == set()
    bias = torch.zeros(8)
    bias[3] = 1e-30
    assert _failed(Law("constant", value=0.0), bias) == {"value"}
    assert (
        count_tests(law, 64) == 1
        and count_tests(Law("normal", std=1.0), 64) == 4
        and count_tests(Law("normal", std=1.0), 1) == 3
    )


# ----------------------------------------------------------------------------- false alarms over many seeds

LAWS = [
    Law("normal", mean=0.0, std=0.02),
    Law("uniform", a=-0.0625, b=0.0625),
    Law("trunc_normal", std=1.0 / 0.87962566103423978, a=-2 / 0.87962566103423978, b=2 / 0.87962566103423978),
    Law("normal", mean=1.0, std=1e-6),
]


def _draw(law: Law, shape: tuple[int, int], g: torch.Generator) -> torch.Tensor:
    if law.kind == "uniform":
        return torch.empty(shape, dtype=torch.float64).uniform_(law.a, law.b, generator=g)
    if law.kind == "trunc_normal":  # torch's trunc_normal_ (inverse CDF of a uniform over [F(a), F(b)])
        t = torch.empty(shape, dtype=torch.float64)
        out = torch.stack(
            [torch.nn.init.trunc_normal_(row, mean=law.mean, std=law.std, a=law.a, b=law.b, generator=g) for row in t]
        )
        return out
    return torch.randn(shape, dtype=torch.float64, generator=g) * law.std + law.mean


@pytest.mark.parametrize("law", LAWS, ids=lambda law: law.describe())
@pytest.mark.parametrize("n", [24, 512])
def test_each_statistic_false_alarms_at_most_at_its_level(law: Law, n: int) -> None:
    """Over 4000 seeds of a correctly drawn tensor, each statistic rejects at its level (within
    binomial noise: 4000 draws at level 0.01 give 40 ± 6.3; the bound is level + 4 sd)."""
    seeds, level = 4000, 0.01
    g = torch.Generator().manual_seed(1234 + n)
    x = _draw(law, (seeds, n), g)
    rejected: dict[str, int] = {}
    for row in x:
        for c in check_parameter(
            law,
            n=n,
            mean=float(row.mean()),
            var=float(row.var()),
            lo=float(row.min()),
            hi=float(row.max()),
            eps=0.0,
            level=level,
        ):
            rejected[c.statistic] = rejected.get(c.statistic, 0) + (not c.passed)
    ceiling = seeds * level + 4 * math.sqrt(seeds * level)
    assert all(k <= ceiling for k in rejected.values()), rejected
    if n >= 512:  # not a test that never fires either: the exact ones are at their level
        assert rejected["max"] >= seeds * level / 3 and rejected["min"] >= seeds * level / 3, rejected


def test_a_correct_tensor_never_fails_at_the_cases_level_over_many_seeds() -> None:
    g = torch.Generator().manual_seed(7)
    law = Law("normal", std=0.02)
    for _ in range(300):
        assert not _failed(law, torch.randn(128 * 128, generator=g) * 0.02, level=1e-6 / 400)


# ----------------------------------------------------------------------------- power against planted errors


def test_a_std_off_by_twice_is_caught_from_about_a_hundred_elements() -> None:
    # at level 1e-8 the variance's interval at ν = n − 1 is (WH) [0.28, 2.6]·σ² at n = 64 and [0.44, 1.9]·σ² at n = 128
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        assert "variance" in _failed(Law("normal", std=0.02), torch.randn(64, generator=g) * 0.04)
        assert "variance" in _failed(Law("normal", std=0.04), torch.randn(128, generator=g) * 0.02)


def test_a_missing_depth_scaling_is_caught() -> None:
    # GPT-2's c_proj at initializer_range instead of initializer_range/√(2·n_layer), n_layer = 1: a √2 in std
    g = torch.Generator().manual_seed(0)
    declared = Law("normal", std=0.02 / math.sqrt(2))
    assert "variance" in _failed(declared, torch.randn(128, 128, generator=g) * 0.02)
    assert not _failed(declared, torch.randn(128, 128, generator=g) * 0.02 / math.sqrt(2))


def test_a_non_zero_mean_or_bias_is_caught() -> None:
    g = torch.Generator().manual_seed(0)
    assert "mean" in _failed(Law("normal", std=0.02), torch.randn(512, 128, generator=g) * 0.02 + 0.002)
    assert _failed(Law("constant", value=0.0), torch.empty(128).uniform_(-0.1, 0.1, generator=g)) == {"value"}


def test_a_truncated_draw_where_a_normal_is_declared_is_caught_by_its_max() -> None:
    g = torch.Generator().manual_seed(0)
    t = torch.nn.init.trunc_normal_(torch.empty(128 * 128), std=0.02, a=-0.04, b=0.04, generator=g)
    failed = _failed(Law("normal", std=0.02), t / float(t.std()) * 0.02)  # the same std: only the tails tell
    assert {"max", "min"} <= failed


def test_the_samplers_clamp_at_a_far_bound_is_its_atom_not_an_outlier() -> None:
    """torch's trunc_normal_ maps the uniform's lowest draw to erfinv(−1) = −∞, clamped to a: with
    a 100σ away (timm's default a = −2 at σ = 0.02) that value is the atom at a, not a 100σ draw
    of the normal; a value short of the bound is still an outlier."""
    from stability.judge.init_laws import END_ATOM

    law = Law("trunc_normal", std=0.02, a=-2.0, b=2.0)
    g = torch.Generator().manual_seed(0)
    w = torch.nn.init.trunc_normal_(torch.empty(128 * 1000), std=0.02, generator=g)
    assert not _failed(law, w)
    w[3], w[7] = -2.0, 2.0  # each end's atom (the CPU's uniform reaches its lower end, CUDA's its upper)
    checks = {c.statistic: c for c in _judge(law, w)}
    assert checks["min"].passed and checks["max"].passed
    assert checks["min"].p == approx(2 * (1 - (1 - END_ATOM) ** w.numel()), rel=1e-6)
    w[3] = -1.9  # inside the support, but 95σ out: no sampler gives it
    assert {"min", "variance"} <= _failed(law, w)
    w[3], w[11] = -2.0, -2.0  # two at the bound (once in 10⁴ such draws): the second one inflates the variance
    assert _failed(law, w) == {"variance"}
    assert "min" in _failed(
        Law("normal", std=0.02), torch.cat([w[4:], torch.tensor([-2.0])])
    )  # a normal has no atom at −2


def test_an_outlier_and_a_value_outside_a_bounded_law_are_caught() -> None:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(4096, generator=g) * 0.02
    w[17] = 0.2  # 10σ
    assert "max" in _failed(Law("normal", std=0.02), w)
    u = torch.empty(4096).uniform_(-0.0625, 0.0625, generator=g)
    assert not _failed(Law("uniform", a=-0.0625, b=0.0625), u)
    u[5] = 0.0626
    assert "max" in _failed(Law("uniform", a=-0.0625, b=0.0625), u)
    assert "min" in _failed(Law("uniform", a=-0.0625, b=0.0625), torch.empty(4096).uniform_(-0.03, 0.0625, generator=g))


def _chi2_quantile_exact(nu: float, p: float) -> float:
    """The χ²_ν quantile at p from its distribution function (the regularised incomplete gamma), by bisection."""
    lo, hi = 0.0, 10.0 * nu
    for _ in range(200):
        mid = (lo + hi) / 2
        if (
            float(
                torch.special.gammainc(
                    torch.tensor(nu / 2, dtype=torch.float64), torch.tensor(mid / 2, dtype=torch.float64)
                )
            )
            < p
        ):
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def test_the_variance_test_of_a_uniform_law_has_satterthwaites_degrees() -> None:
    # a uniform law has κ = 9/5, so Var(s²) = σ⁴·(2/(n−1) − 1.2/n) and ν = 2/(2/(n−1) − 1.2/n) = 246.3 at
    # n = 101: the interval is σ²·χ²_ν(p)/ν at ν = 246.3, narrower than the normal law's ν = 100
    law, n = Law("uniform", a=-1.0, b=1.0), 101
    sigma2 = 1.0 / 3.0
    nu = 2.0 / (2.0 / (n - 1) - 1.2 / n)
    (_, var, *_) = check_parameter(law, n=n, mean=0.0, var=sigma2, lo=-0.99, hi=0.99, eps=0.0, level=0.05)
    assert var.lo / sigma2 == approx(_chi2_quantile_exact(nu, 0.025) / nu, rel=1e-3)
    assert var.hi / sigma2 == approx(_chi2_quantile_exact(nu, 0.975) / nu, rel=1e-3)


def test_a_bound_hit_exactly_leaves_the_other_draws_mean_and_variance() -> None:
    """The element at a trunc_normal's bound is taken out of the mean and the variance: what is
    judged is exactly the statistics of the n − 1 other elements."""
    g = torch.Generator().manual_seed(3)
    rest = torch.nn.init.trunc_normal_(torch.empty(49, dtype=torch.float64), std=1.0, a=-2.0, b=2.0, generator=g)
    for bound in (-2.0, 2.0):
        w = torch.cat([rest, torch.tensor([bound], dtype=torch.float64)])
        checks = {c.statistic: c for c in _judge(Law("trunc_normal", std=1.0, a=-2.0, b=2.0), w)}
        assert checks["mean"].observed == pytest.approx(float(rest.mean()), rel=1e-12, abs=1e-15)
        assert checks["variance"].observed == pytest.approx(float(rest.var()), rel=1e-12, abs=0.0)


def test_the_tests_counted_are_the_checks_made() -> None:
    # the case's level is alpha over this count (Bonferroni): a variance test exists from n = 2
    for law in (
        Law("normal", std=1.0),
        Law("uniform", a=-1.0, b=1.0),
        Law("trunc_normal", std=1.0, a=-2.0, b=2.0),
        Law("constant", value=0.5),
        Law("any"),
    ):
        for n in (1, 2, 3, 64):
            made = check_parameter(law, n=n, mean=0.0, var=0.5 if n >= 2 else 0.0, lo=-0.5, hi=0.5, eps=0.0, level=1e-3)
            assert count_tests(law, n) == len(made), (law, n)
