"""Growth laws: of one profile (`classify_growth`: one network's per-boundary statistic relative
to its input's), and judged on an ensemble of seeds: S profiles s_{s,l} (one per seed, one value
per boundary) → the growth class the data support, the spread, and whether depth sufficed to decide.

Why an ensemble. At finite width a single network's variance profile is a random walk in log
space: each block multiplies the variance by an independent random factor whose log has a
spread of order 1/width (Hanin & Rolnick 2018, "How to start training: the effect of
initialization and architecture"; Hanin 2018, "Which neural net architectures give rise to
exploding and vanishing gradients?"). One seed's noise then looks like a law: a search that looks
for the noisiest seed, then shrinks toward small depths, ends up calling 1, 0.79, 1.07, 1.67, …
"exponential". A law is a statement about the distribution over seeds, so it is fitted to an
ensemble.

What is averaged. The profile classified is the seed average of the log-ratios,
ȳ_l = mean_s log(s_{s,l} / s_{s,0}) (the geometric-mean profile R_l = exp ȳ_l), not the mean of the
ratios: the fluctuations are multiplicative (log-normal to first order, Hanin & Rolnick 2018), so
in log space they are additive and roughly symmetric, a mean over seeds has a standard error the
ensemble itself estimates, and one seed with a large excursion cannot dominate the average as it
dominates the arithmetic mean of heavy-tailed ratios. An exponential law gᴸ is exponential in
either average (E log r_l = l·E log g); a linear law is, if anything, bent further below the
exponential by the log (E log r ≤ log E r), so this choice cannot manufacture exponentials.

The models. Three laws, each with a free amplitude A (the first block may change the shape of the
input's distribution, e.g. a ReLU on a Gaussian input, so r_1 need not sit on the law):
linear R_l = A(1 + a·l) with a ≥ 0, exponential R_l = A·gˡ, power law R_l = A(1 + c·lᵖ) with
c > 0, 0.1 ≤ p ≤ 6 (the model the transformer profile 1 + 0.012·l^1.94 needs; the classifier used to
weigh only exponential against linear). With a free amplitude the laws predict the log-increments
d_l = ȳ_l − ȳ_{l−1} for l = 2 … L, and those are what is fitted: the increments of different
blocks are independent draws (each block has its own weights), so weighted least squares with the
ensemble's per-block variance v_l/S is the likelihood, and a model's χ² is comparable across
models. The power law has one parameter more and pays 2 (Akaike 1974).

The decision. Every model within `DECISION_CHI2` of the best is *plausible*. The reported class is
the best model's (the power law's class is "polynomial" when p > 1.5, else "linear"); the verdict
uses the *least severe plausible* class, so a stack fails "at most linear" only when the linear law
is rejected by more than the threshold. With L ≤ 2 there is at most one increment, which every
model fits: depth too small to tell, the verdict says "undecided at this depth" and passes (the
search then needs a deeper case to show a violation, so the depth bisection cannot "find" an
exponential at depth 2 from noise). `DECISION_CHI2` = 16 (a likelihood ratio of e⁸ ≈ 3,000) was
chosen from measurement: tests/test_growth.py draws ≥ 100 cases of linear-on-average stacks and of
the shipped exponential controls and checks the false-class rates it gives (≤ 1% and 0%).

Decaying and bounded are judged on the averaged profile R with the single-seed thresholds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stability.spec.schema import GROWTH_CLASSES
from stability.spec.values import Growth

__all__ = [
    "GrowthFit",
    "classify_growth",
    "EnsembleGrowth",
    "classify_ensemble",
    "ensemble_growth",
    "describe_ensemble",
    "enough_members",
    "DECISION_CHI2",
    "MIN_DECIDABLE_DEPTH",
]

#: χ² margin by which a model must beat another before the other is ruled out.
DECISION_CHI2 = 16.0
#: Akaike's penalty for the power law's extra parameter.
_EXTRA_PARAMETER = 2.0
#: Below this depth no increment beyond the first block exists to tell the laws apart.
MIN_DECIDABLE_DEPTH = 3
_TINY = 1e-300
#: The largest power-law exponent fitted (see the module docstring).
_MAX_EXPONENT = 3.0

_Array = NDArray[np.float64]


@dataclass(frozen=True, kw_only=True)
class GrowthFit:
    """How a per-boundary statistic grows over depth, relative to the input's."""

    growth: Growth
    ratios: list[float]  # s_l / s_0
    max_ratio: float
    min_ratio: float
    final_ratio: float
    rate: float  # per-block factor exp(slope of log r_l vs l)
    slope: float  # slope of r_l vs l (least squares): the linear growth per block
    exponent: float | None  # p in r_l − 1 ∝ l^p (log-log fit), None when r never exceeds 1


def classify_growth(values: list[float], *, bounded_ratio: float = 4.0) -> GrowthFit:
    """Classify the growth of `values` (one per boundary) as decaying, bounded, linear, polynomial
    or exponential.

    With r_l = s_l / s_0: *decaying* if r_L < 1/bounded_ratio; *bounded* if max r ≤ bounded_ratio.
    Otherwise two one-parameter models are fitted by least squares, both through r_0 = 1: linear
    r = 1 + a·l and exponential r = gˡ, and their residuals are compared in log space (where the
    noise of a finite-width network is roughly even across depth); *exponential* if gˡ leaves
    less than half the linear model's residual (a shallow noisy stack cannot tell them apart),
    else *polynomial* or *linear* by the exponent p of r_l − 1 ∝ lᵖ (linear when p ≤ 1.5). Every
    point counts, so one noisy block cannot flip the class. A single block shows no shape: with
    L = 1 both models fit exactly and the growth is called linear.
    """
    s = np.asarray(values, dtype=np.float64)
    r = s / s[0]
    L = len(r) - 1
    depth = np.arange(L + 1, dtype=np.float64)
    pos = r > 0
    rate = float(np.exp(np.polyfit(depth[pos], np.log(r[pos]), 1)[0])) if pos.sum() >= 2 else math.nan
    slope = float(np.polyfit(depth, r, 1)[0]) if L >= 1 else 0.0
    above = (depth >= 1) & (r > 1)
    exponent = float(np.polyfit(np.log(depth[above]), np.log(r[above] - 1), 1)[0]) if above.sum() >= 2 else None
    max_r, min_r, final = float(r.max()), float(r.min()), float(r[-1])
    growth: Growth
    if (r == 0).any() or final < 1.0 / bounded_ratio:
        growth = "decaying"
    elif max_r <= bounded_ratio:
        growth = "bounded"
    else:
        l, logr = depth[pos], np.log(r[pos])  # noqa: E741 (l: the boundary index, as in the papers)
        ll = float((l * l).sum())
        a = max(float((l * (r[pos] - 1)).sum()) / ll, 0.0)  # r = 1 + a·l
        b = float((l * logr).sum()) / ll  # log r = b·l
        sse_linear = float(((logr - np.log1p(a * l)) ** 2).sum())
        sse_exponential = float(((logr - b * l) ** 2).sum())
        if sse_exponential < 0.5 * sse_linear:  # clearly better, not within a few blocks' noise
            growth = "exponential"
        elif exponent is not None and exponent > 1.5:
            growth = "polynomial"
        else:
            growth = "linear"
    return GrowthFit(
        growth=growth,
        ratios=r.tolist(),
        max_ratio=max_r,
        min_ratio=min_r,
        final_ratio=final,
        rate=rate,
        slope=slope,
        exponent=exponent,
    )


@dataclass(frozen=True, kw_only=True)
class EnsembleGrowth:
    """The growth class of an ensemble's seed-averaged profile, with its spread."""

    growth: Growth  # the best-fitting class
    lowest: Growth  # the least severe class the data cannot rule out; verdicts compare this one
    size: int  # seeds in the ensemble
    ratios: list[float]  # R_l = exp(mean_s log r_{s,l}), the geometric-mean profile
    lo: list[float]  # min over seeds of r_{s,l}
    hi: list[float]  # max over seeds of r_{s,l}
    q25: list[float]  # quartiles over seeds of r_{s,l}
    q75: list[float]
    rate: float  # per-block factor of the averaged profile, R_L^(1/L)
    slope: float  # least-squares slope of R_l against l: the linear growth per block
    exponent: float | None  # p of the power-law fit (None when no fit was made)
    chi2: dict[str, float] = field(default_factory=dict)  # per model, when fitted

    @property
    def decided(self) -> bool:
        return self.growth == self.lowest

    @property
    def max_ratio(self) -> float:
        return max(self.ratios)

    @property
    def final_ratio(self) -> float:
        return self.ratios[-1]

    def spread(self) -> dict[str, list[float]]:
        """Per-boundary spread over the seeds (for reports and the HTML band)."""
        return {"min": self.lo, "q25": self.q25, "mean_log": self.ratios, "q75": self.q75, "max": self.hi}


def enough_members(depth: int, *, bounded_ratio: float = 4.0) -> Callable[[list[list[float]]], bool]:
    """For a sequential ensemble (`stability.measure.ensemble.probe_ensemble_until_decided`): whether
    the members' profiles so far are enough, because `classify_ensemble` decides on them, or because
    at a depth below `MIN_DECIDABLE_DEPTH` every law fits and no number of seeds can decide."""

    def enough(profiles: list[list[float]]) -> bool:
        return depth < MIN_DECIDABLE_DEPTH or classify_ensemble(profiles, bounded_ratio=bounded_ratio).decided

    return enough


def classify_ensemble(
    profiles: Sequence[Sequence[float]], *, bounded_ratio: float = 4.0, threshold: float = DECISION_CHI2
) -> EnsembleGrowth:
    """Classify the growth of S ≥ 2 profiles of one architecture (one per seed; one value per
    boundary, each divided by its own boundary-0 value). See the module docstring for the laws,
    the average and the decision rule."""
    s = np.asarray(profiles, dtype=np.float64)  # (S, L+1)
    if s.ndim != 2 or s.shape[0] < 2 or s.shape[1] < 1:
        raise ValueError(f"classify_ensemble needs at least 2 profiles of at least one value each; got shape {s.shape}")
    if not np.all(s[:, 0] > 0):
        raise ValueError("classify_ensemble: every profile's boundary-0 value must be positive")
    r = s / s[:, :1]  # (S, L+1)
    y = np.log(np.maximum(r, _TINY))  # (S, L+1); a collapsed boundary counts as 1e-300
    n_seeds, n_bound = r.shape
    depth = n_bound - 1
    mean_log = y.mean(axis=0)  # (L+1,)
    big = np.exp(mean_log)
    q25, q75 = np.quantile(r, [0.25, 0.75], axis=0)
    rate = float(math.exp(mean_log[-1] / depth)) if depth else 1.0
    slope = float(np.polyfit(np.arange(n_bound, dtype=np.float64), big, 1)[0]) if depth else 0.0
    common = dict(
        size=n_seeds,
        ratios=big.tolist(),
        lo=r.min(axis=0).tolist(),
        hi=r.max(axis=0).tolist(),
        q25=q25.tolist(),
        q75=q75.tolist(),
        rate=rate,
        slope=slope,
    )
    if bool((r <= 0).any()) or big[-1] < 1.0 / bounded_ratio:
        return EnsembleGrowth(growth="decaying", lowest="decaying", exponent=None, **common)
    if big.max() <= bounded_ratio:
        return EnsembleGrowth(growth="bounded", lowest="bounded", exponent=None, **common)
    if depth < MIN_DECIDABLE_DEPTH:  # no increment beyond the first block: every law fits
        return EnsembleGrowth(
            growth="linear" if depth < 2 else _best_guess(big), lowest="linear", exponent=None, **common
        )
    inc = np.diff(y, axis=1)[:, 1:]  # (S, L−1): d_{s,l} for l = 2 … L
    ls = np.arange(2, depth + 1, dtype=np.float64)  # (L−1,)
    d = inc.mean(axis=0)
    v = inc.var(axis=0, ddof=1)
    # Shrink each block's variance halfway to the pooled one: with S − 1 degrees of freedom a
    # single block's estimate can be several times too small by chance, and would then dominate χ².
    v = 0.5 * v + 0.5 * float(v.mean())
    w = n_seeds / np.maximum(v, 1e-12 * max(float((d * d).mean()), _TINY))  # 1 / (standard error²)
    chi2, exponent = _fits(d, w, ls)
    scores = {"exponential": chi2["exponential"], "linear": chi2["linear"], "power": chi2["power"] + _EXTRA_PARAMETER}
    power_class: Growth = "polynomial" if exponent > 1.5 else "linear"
    classes: dict[str, Growth] = {"exponential": "exponential", "linear": "linear", "power": power_class}
    best = min(scores.values())
    plausible = [k for k, v_ in scores.items() if v_ <= best + threshold]
    lowest = min((classes[k] for k in plausible), key=GROWTH_CLASSES.index)
    growth: Growth
    if "linear" in plausible:  # not faster than linear beyond doubt: report the best fit, judge by the lowest
        growth = classes[min(scores, key=lambda k: scores[k])]
    else:  # faster than linear: exponential unless the power law fits clearly better
        growth = "exponential" if "exponential" in plausible else power_class
    return EnsembleGrowth(growth=growth, lowest=lowest, exponent=exponent, chi2=chi2, **common)


def ensemble_growth(
    extra: Mapping[str, Any], statistic: str, *, bounded_ratio: float = 4.0
) -> tuple[EnsembleGrowth | None, str]:
    """The ensemble's growth from a probe's `Measurements.extra` ("ensemble", stability/measure/ensemble.py),
    using only the members whose profile is finite and positive at boundary 0; (None, why) when
    there is no ensemble or fewer than two such members."""
    ens = extra.get("ensemble")
    if ens is None:
        return None, "no ensemble"
    usable = [p for p in ens.profiles(statistic) if p and p[0] > 0 and all(math.isfinite(v) for v in p)]
    if len(usable) < 2:
        return None, f"{len(usable)} of {ens.size} ensemble members have a finite profile"
    return classify_ensemble(usable, bounded_ratio=bounded_ratio), ""


def describe_ensemble(g: EnsembleGrowth) -> str:
    """The class, rate and spread of an ensemble in one phrase, for a verdict's detail."""
    head = f"{g.growth} (×{g.rate:.4g} per block, +{g.slope:.3g}·s₀ per block"
    if g.exponent is not None and g.growth == "polynomial":
        head += f", ∝ l^{g.exponent:.2f}"
    head += f"; mean of {g.size} seeds, final ratio {g.final_ratio:.3g} in [{g.lo[-1]:.3g}, {g.hi[-1]:.3g}])"
    if not g.decided:
        depth = len(g.ratios) - 1
        if depth < MIN_DECIDABLE_DEPTH:
            head += (
                f"; undecided at this depth (depth {depth} is too small to tell {g.lowest} from "
                f"{g.growth}: judged {g.lowest})"
            )
        elif GROWTH_CLASSES.index(g.lowest) <= GROWTH_CLASSES.index("linear"):
            head += (
                f"; undecided at this depth ({g.lowest} … {g.growth} fit within the ensemble's noise: "
                f"judged {g.lowest})"
            )
        else:
            head += f"; {g.lowest} is not ruled out at this depth (judged {g.lowest})"
    return head


def _best_guess(big: _Array) -> Growth:
    """At depth 2 (one increment past the first block): which law the averaged profile is closer
    to, for the report only; the verdict treats the depth as undecided."""
    step = math.log(big[2] / big[1])
    return "exponential" if step > math.log(2.0) else "linear"  # a linear law grows at most ×2 from l = 1 to 2


def _fits(d: _Array, w: _Array, ls: _Array) -> tuple[dict[str, float], float]:
    """Weighted least-squares fits of the three laws' log-increments to d (at blocks ls).

    Exponential: d_l = log g (closed form: the weighted mean). Linear: d_l = log((1 + a·l)/(1 + a·(l−1))),
    a ≥ 0 (a → ∞ is R ∝ l). Power law: d_l = log((1 + c·lᵖ)/(1 + c·(l−1)ᵖ)). The one-dimensional
    searches run on a log grid of the scale parameter and are refined by golden sections.
    """
    b = float((w * d).sum() / w.sum())
    chi_exp = float((w * (d - b) ** 2).sum())

    def chi(scale: _Array, powers: tuple[_Array, _Array]) -> _Array:  # (G,): the misfit of each scale
        c = scale[:, None]
        law: _Array = np.log1p(c * powers[0]) - np.log1p(c * powers[1])  # (G, L−1): log-increments
        out: _Array = ((law - d) ** 2 * w).sum(axis=1)
        return out

    def best_scale(p: float) -> tuple[float, float]:
        powers = (ls**p, (ls - 1) ** p)  # once per exponent: the scale searches below call chi ~45 times
        grid = np.concatenate(([0.0], np.exp(np.linspace(-16.0, 16.0, 161))))
        values = chi(grid, powers)
        k = int(np.argmin(values))
        if k == 0:
            return 0.0, float(values[0])
        lo_u, hi_u = math.log(grid[max(k - 1, 1)]), math.log(grid[min(k + 1, len(grid) - 1)])
        u = _golden(lambda t: float(chi(np.array([math.exp(t)]), powers)[0]), lo_u, hi_u)
        return math.exp(u), float(chi(np.array([math.exp(u)]), powers)[0])

    _, chi_lin = best_scale(1.0)
    ps = np.linspace(0.1, _MAX_EXPONENT, 30)
    on_grid = [best_scale(float(p))[1] for p in ps]
    k = int(np.argmin(on_grid))
    p_refined = _golden(lambda p: best_scale(p)[1], float(ps[max(k - 1, 0)]), float(ps[min(k + 1, len(ps) - 1)]))
    candidates = [
        (best_scale(p_refined)[1], p_refined),
        (on_grid[k], float(ps[k])),
        (chi_lin, 1.0),
    ]  # p = 1 is the linear law
    chi_pow, p_best = min(candidates)
    return {"exponential": chi_exp, "linear": chi_lin, "power": chi_pow}, float(p_best)


def _golden(fn: Callable[[float], float], a: float, b: float, *, steps: int = 40) -> float:
    """The minimiser of a unimodal fn on [a, b] by golden-section search."""
    g = (math.sqrt(5.0) - 1.0) / 2.0
    c, e = b - g * (b - a), a + g * (b - a)
    fc, fe = fn(c), fn(e)
    for _ in range(steps):
        if fc < fe:
            b, e, fe = e, c, fc
            c = b - g * (b - a)
            fc = fn(c)
        else:
            a, c, fc = c, e, fe
            e = a + g * (b - a)
            fe = fn(e)
    return (a + b) / 2.0
