"""The distributions an init declares, and the sampling theory that judges one parameter against
one (pure: no torch; the statistics come from `stability.measure.init_stats`).

A parameter of n elements drawn i.i.d. from a declared law with mean μ, variance σ² and fourth
central moment μ₄ is judged on four statistics, each against its own sampling distribution under
the law, at a per-test level `level` (two-sided; `stability.judge.init_conformance` splits the
case's false-alarm level over every test it makes, Bonferroni):

- **mean** x̄: N(μ, σ²/n) (exact for a normal law, the central limit theorem otherwise);
- **variance** s² (the unbiased sample variance): σ²·χ²_ν/ν, the scaled chi-square whose first two
  moments are those of s² — Var(s²) = σ⁴·(2/(n−1) + (κ−3)/n), κ = μ₄/σ⁴ (Cramér 1946, §27.4) — so
  ν = n − 1 exactly for a normal law (Cochran's theorem) and ν = 2/(2/(n−1) + (κ−3)/n) otherwise
  (Satterthwaite 1946); its quantiles by Wilson and Hilferty (1931);
- **max** and **min**: exact order statistics, P(max ≤ x) = F(x)ⁿ and P(min ≥ x) = (1 − F(x))ⁿ, so
  a law truncated where it should not be (a max short of what n draws reach), an outlier, or a
  value outside a bounded law's support is caught from two numbers. A trunc_normal's min of
  exactly a (max of exactly b) is the sampler's own: torch's and timm's `trunc_normal_` draw
  u = U(2Φ(α) − 1, 2Φ(β) − 1) and return clamp(μ + σ√2·erfinv(u), a, b), and the uniform's end
  (its lowest float on the CPU, [from, to); its highest on CUDA) gives erfinv(±1) = ±∞, clamped to
  the bound: an atom of mass about 2⁻²⁴ (float32's resolution) at each end, so a weight of 10⁵
  elements truncated at ±2 with σ = 0.02 (100σ) holds a value of exactly −2 about once in 170
  draws. Such a min (max) is judged against the atom, P(min = a) = 1 − (1 − 2⁻²⁴)ⁿ, and the one
  element at it is left out of the mean and the variance (a 100σ value moves them past their
  bounds on its own);
- a **constant** (norm weights, zero biases, layer-scale values) is exact: min = max = the value,
  up to the parameter's dtype's rounding (one unit in the last place).

Where a test cannot be made (n = 1 for the variance; σ = 0), it is not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

__all__ = ["LAWS", "Law", "Check", "check_parameter", "tests_for"]

#: The laws a rule may declare, with the parameters each takes (`stability.judge.init_conformance`).
LAWS: dict[str, tuple[str, ...]] = {
    "normal": ("mean", "std"),
    "trunc_normal": ("mean", "std", "a", "b"),
    "uniform": ("a", "b"),
    "constant": ("value",),
    "any": (),
}

_N = NormalDist()
_SQRT2 = math.sqrt(2.0)
#: The mass `trunc_normal_` puts at each bound: a float32 uniform draw at its end (module docstring).
END_ATOM = 2.0**-24


def _phi(x: float) -> float:
    return 0.0 if math.isinf(x) else math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / _SQRT2)


def _sf(x: float) -> float:
    return 0.5 * math.erfc(x / _SQRT2)


def _ppf_low(q: float) -> float:
    """Φ⁻¹(q), accurate for small q."""
    return -math.inf if q <= 0 else math.inf if q >= 1 else _N.inv_cdf(q)


def _ppf_high(q: float) -> float:
    """x with 1 − Φ(x) = q, accurate for small q."""
    return -_ppf_low(q)


@dataclass(frozen=True)
class Law:
    """A declared law: `kind` (a key of LAWS) and its parameters, resolved to numbers. For
    trunc_normal, `mean` and `std` are those of the normal before truncation to [a, b] (torch's
    `trunc_normal_`); `constant` has `value`."""

    kind: str
    mean: float = 0.0
    std: float = 0.0
    a: float = -math.inf
    b: float = math.inf
    value: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in LAWS:
            raise ValueError(f"unknown law {self.kind!r}; known: {', '.join(LAWS)}")

    # -- moments ------------------------------------------------------------------------------

    def _standard(self) -> tuple[float, float, float]:
        """(α, β, Z) of a truncated normal in standard units."""
        al, be = (self.a - self.mean) / self.std, (self.b - self.mean) / self.std
        z = _sf(al) - _sf(be) if al > 0 else _cdf(be) - _cdf(al)
        return al, be, z

    def moments(self) -> tuple[float, float, float]:
        """(mean, variance, fourth central moment) of the law."""
        if self.kind == "normal":
            return self.mean, self.std**2, 3 * self.std**4
        if self.kind == "uniform":
            w = self.b - self.a
            return (self.a + self.b) / 2, w * w / 12, w**4 / 80
        if self.kind == "constant":
            return self.value, 0.0, 0.0
        if self.kind == "trunc_normal":
            al, be, z = self._standard()
            # raw moments of the standard truncated normal: m_k = (k−1)·m_{k−2} + (α^{k−1}φ(α) − β^{k−1}φ(β))/Z
            m = [1.0, (_phi(al) - _phi(be)) / z]
            for k in range(2, 5):
                ta = 0.0 if math.isinf(al) else al ** (k - 1) * _phi(al)
                tb = 0.0 if math.isinf(be) else be ** (k - 1) * _phi(be)
                m.append((k - 1) * m[k - 2] + (ta - tb) / z)
            mu = m[1]
            var = m[2] - mu * mu
            mu4 = m[4] - 4 * mu * m[3] + 6 * mu * mu * m[2] - 3 * mu**4
            return self.mean + self.std * mu, var * self.std**2, mu4 * self.std**4
        raise ValueError(f"law {self.kind!r} has no moments")

    # -- the distribution function, in tail-accurate forms ------------------------------------

    def quantile_low(self, q: float) -> float:
        """x with F(x) = q (accurate for small q)."""
        if self.kind == "normal":
            return self.mean + self.std * _ppf_low(q)
        if self.kind == "uniform":
            return self.a + q * (self.b - self.a)
        al, be, z = self._standard()
        return self.mean + self.std * (_ppf_low(_cdf(al) + q * z) if al <= 0 else _ppf_high(_sf(al) - q * z))

    def quantile_high(self, q: float) -> float:
        """x with 1 − F(x) = q (accurate for small q)."""
        if self.kind == "normal":
            return self.mean + self.std * _ppf_high(q)
        if self.kind == "uniform":
            return self.b - q * (self.b - self.a)
        al, be, z = self._standard()
        return self.mean + self.std * (_ppf_high(_sf(be) + q * z) if be >= 0 else _ppf_low(_cdf(be) - q * z))

    def cdf(self, x: float) -> float:
        """F(x), accurate where it is small."""
        if self.kind == "normal":
            return _cdf((x - self.mean) / self.std)
        if self.kind == "uniform":
            return min(max((x - self.a) / (self.b - self.a), 0.0), 1.0)
        al, be, z = self._standard()
        t = min(max((x - self.mean) / self.std, al), be)
        return (_cdf(t) - _cdf(al)) / z if al <= 0 else (_sf(al) - _sf(t)) / z

    def sf(self, x: float) -> float:
        """1 − F(x), accurate where it is small."""
        if self.kind == "normal":
            return _sf((x - self.mean) / self.std)
        if self.kind == "uniform":
            return min(max((self.b - x) / (self.b - self.a), 0.0), 1.0)
        al, be, z = self._standard()
        t = min(max((x - self.mean) / self.std, al), be)
        return (_sf(t) - _sf(be)) / z if be >= 0 else (_cdf(be) - _cdf(t)) / z

    def describe(self) -> str:
        if self.kind == "normal":
            return f"N({self.mean:.4g}, {self.std:.4g}²)"
        if self.kind == "trunc_normal":
            return f"N({self.mean:.4g}, {self.std:.4g}²) truncated to [{self.a:.4g}, {self.b:.4g}]"
        if self.kind == "uniform":
            return f"U({self.a:.4g}, {self.b:.4g})"
        if self.kind == "constant":
            return f"= {self.value:.6g}"
        return "any (not judged)"


def _chi2_quantile(nu: float, z: float) -> float:
    """The quantile of χ²_ν at standard-normal quantile z (Wilson, Hilferty 1931)."""
    c = 2.0 / (9.0 * nu)
    return nu * max(1.0 - c + z * math.sqrt(c), 0.0) ** 3


@dataclass(frozen=True)
class Check:
    """One statistic of one parameter against its law: the observed value, the interval the law
    allows at the test's level, whether it lies inside, and its two-sided p-value under the law."""

    statistic: str
    observed: float
    lo: float
    hi: float
    expected: float
    p: float
    level: float

    @property
    def passed(self) -> bool:
        return self.lo <= self.observed <= self.hi

    @property
    def excess(self) -> float:
        """How close the statistic came to failing: log p / log level (0 at p = 1, 1 at the
        test's level, above 1 beyond it; inf for a constant that differs)."""
        if self.p <= 0:
            return math.inf
        return max(math.log(min(self.p, 1.0)) / math.log(self.level), 0.0)


def _two_sided(prob_below: float) -> float:
    return min(1.0, 2 * min(prob_below, 1 - prob_below))


def tests_for(law: Law, n: int) -> int:
    """The number of tests `check_parameter` makes of a parameter of n elements under `law`."""
    if law.kind == "any" or n == 0:
        return 0
    if law.kind == "constant":
        return 1
    return 3 + (n >= 2)


def check_parameter(
    law: Law, *, n: int, mean: float, var: float, lo: float, hi: float, eps: float, level: float
) -> list[Check]:
    """The checks of one parameter's statistics (n elements, their mean, unbiased variance, min and
    max; `eps` its dtype's machine epsilon) against `law` at the per-test two-sided `level`."""
    if law.kind == "any" or n == 0:
        return []
    if law.kind == "constant":
        v, tol = law.value, eps * abs(law.value)
        worst = hi if abs(hi - v) >= abs(lo - v) else lo
        exact = abs(lo - v) <= tol and abs(hi - v) <= tol
        return [Check("value", worst, v - tol, v + tol, v, 1.0 if exact else 0.0, level)]
    mu, sigma2, mu4 = law.moments()
    sigma = math.sqrt(sigma2)
    pad = eps * max(
        [abs(mu) + 10 * sigma] + [abs(x) for x in (law.a, law.b) if math.isfinite(x)]
    )  # the dtype's rounding of the values
    # The sampler's atoms (module docstring): a bound hit exactly is one element at it, left out of
    # the mean and the variance (n − 1 draws of the law remain; more at the bound inflate the variance).
    atoms, drawn = {}, n
    if law.kind == "trunc_normal":
        atoms = {
            end: x
            for end, x, seen in (("min", law.a, lo), ("max", law.b, hi))
            if math.isfinite(x) and abs(seen - x) <= pad
        }
    for x in atoms.values():
        if n >= 2:
            left = mean + (mean - x) / (n - 1)
            ss = max(
                var * (n - 1) - (x - mean) * (x - left), 0.0
            )  # the sum of squared deviations, x removed (Welford's update reversed)
            n, mean = n - 1, left
            var = ss / (n - 1) if n >= 2 else 0.0
    z = _N.inv_cdf(1 - level / 2)
    se = sigma / math.sqrt(n)
    out = [Check("mean", mean, mu - z * se, mu + z * se, mu, math.erfc(abs(mean - mu) / se / _SQRT2), level)]
    if n >= 2:
        kappa = mu4 / sigma2**2 if sigma2 > 0 else 3.0
        nu = 2.0 / (2.0 / (n - 1) + (kappa - 3.0) / n)
        c = 2.0 / (9.0 * nu)
        zv = ((max(var, 0.0) / sigma2) ** (1 / 3) - (1 - c)) / math.sqrt(c)  # Wilson-Hilferty: ~N(0, 1)
        out.append(
            Check(
                "variance",
                var,
                sigma2 * _chi2_quantile(nu, -z) / nu,
                sigma2 * _chi2_quantile(nu, z) / nu,
                sigma2,
                math.erfc(abs(zv) / _SQRT2),
                level,
            )
        )
    # Order statistics: P(max ≤ x) = F(x)^n, P(min ≥ x) = (1 − F(x))^n; each end at level/2, so that
    # max and min are two-sided tests at `level` each. A bound hit exactly is judged as its atom:
    # P(the bound is hit) = 1 − (1 − 2⁻²⁴)ⁿ.
    q_far = -math.expm1(math.log1p(-level / 2) / n)  # the tail mass beyond the max's upper end
    q_near = -math.expm1(math.log(level / 2) / n)  # the tail mass beyond its lower end
    median = -math.expm1(-math.log(2) / n)  # the tail mass beyond the median of the max
    at_end = _two_sided(-math.expm1(drawn * math.log1p(-END_ATOM)))
    if "max" in atoms:
        out.append(Check("max", hi, law.b - pad, law.b + pad, law.quantile_high(median), at_end, level))
    else:
        below_max = math.exp(n * math.log1p(-min(law.sf(hi), 1.0))) if law.sf(hi) < 1 else 0.0  # P(max ≤ observed)
        out.append(
            Check(
                "max",
                hi,
                law.quantile_high(q_near),
                law.quantile_high(q_far) + pad,
                law.quantile_high(median),
                _two_sided(below_max),
                level,
            )
        )
    if "min" in atoms:
        out.append(Check("min", lo, law.a - pad, law.a + pad, law.quantile_low(median), at_end, level))
    else:
        above_min = math.exp(n * math.log1p(-min(law.cdf(lo), 1.0))) if law.cdf(lo) < 1 else 0.0  # P(min ≥ observed)
        out.append(
            Check(
                "min",
                lo,
                law.quantile_low(q_far) - pad,
                law.quantile_low(q_near),
                law.quantile_low(median),
                _two_sided(above_min),
                level,
            )
        )
    return out
