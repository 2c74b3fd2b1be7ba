"""The mean-field numbers of one finite stack, block by block, and their finite-width spread
(stability.judge.meanfield).

`layer_profile` iterates the variance map `depth` times from the input's second moment, before
any fixed point is reached (Poole et al. 2016, eq. 3; the residual stream of Yang & Schoenholz
2017), and gives each block's q, χ and κ = E[φ′⁴]/E[φ′²]². `log_factor_variance` and
`log_rate_variance` turn κ into the variance, to first order in 1/width, of the measured
per-block log factor of ‖∂L/∂x‖² and of the whole stack's (Hanin 2018), the band
`stability.judge.theory_checks` judges the `mean_field` invariant in. This module imports only
the standard library and the quadrature of `stability.judge.meanfield_quadrature`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stability.judge.meanfield_quadrature import check_arguments, second_moment, slope_moments

__all__ = ["LayerProfile", "layer_profile", "log_factor_variance", "log_rate_variance"]


@dataclass(frozen=True, kw_only=True)
class LayerProfile:
    """Mean-field numbers for blocks l = 0 … L−1 of one finite stack.

    q[l]: the pre-activation variance of block l's layer (plain) or the stream's second moment
    at block l's input (residual); chi[l]: the expected factor E‖∂L/∂x_l‖² / E‖∂L/∂x_{l+1}‖²;
    kappa[l] = E[φ′⁴]/E[φ′²]² at q[l], which sets the finite-width spread (`log_factor_variance`).
    """

    q: tuple[float, ...]
    chi: tuple[float, ...]
    kappa: tuple[float, ...]
    residual: bool
    branch_scale: float
    activation: str = ""


def layer_profile(
    activation: str,
    *,
    sigma_w2: float,
    sigma_b2: float = 0.0,
    depth: int,
    input_second_moment: float = 1.0,
    residual: bool = False,
    branch_scale: float = 1.0,
) -> LayerProfile:
    """The per-block q, χ and κ of a stack of `depth` blocks fed an input with E[x₀²] given, before
    any fixed point is reached (Poole et al. 2016, eq. 3, iterated `depth` times).

    Plain: q_l = σ_w² a_l + σ_b², a_{l+1} = E[φ(√q_l z)²], a_0 = E[x₀²]; χ_l = σ_w² E[φ′(√q_l z)²].
    Residual (x + α(W φ(x) + b)): p_0 = E[x₀²], p_{l+1} = p_l + α²(σ_w² E[φ(√p_l z)²] + σ_b²);
    χ_l = 1 + α² σ_w² E[φ′(√p_l z)²].
    """
    check_arguments(activation, sigma_w2, sigma_b2)
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
    qs: list[float] = []
    chis: list[float] = []
    kappas: list[float] = []
    a2 = float(branch_scale) ** 2
    second = float(input_second_moment)
    for _ in range(depth):
        q = second if residual else sigma_w2 * second + sigma_b2
        m2, m4 = slope_moments(activation, q)
        qs.append(q)
        kappas.append(m4 / (m2 * m2) if m2 > 0 else 1.0)
        if residual:
            chis.append(1.0 + a2 * sigma_w2 * m2)
            second = q + a2 * (sigma_w2 * second_moment(activation, q) + sigma_b2)
        else:
            chis.append(sigma_w2 * m2)
            second = second_moment(activation, q)
    return LayerProfile(
        q=tuple(qs),
        chi=tuple(chis),
        kappa=tuple(kappas),
        residual=residual,
        branch_scale=float(branch_scale),
        activation=activation,
    )


def log_factor_variance(profile: LayerProfile, *, width: int) -> tuple[float, ...]:
    """Var[ln(‖∂L/∂x_l‖² / ‖∂L/∂x_{l+1}‖²)] per block at width n, to first order in 1/n, for one
    example with Gaussian weights (the bound for a batch, whose examples average some of it out).

    Plain block: g_l = Wᵀ D g_{l+1} with D = diag φ′(h_l). Given v = D g_{l+1}, Wᵀv has n i.i.d.
    N(0, σ_w²‖v‖²/n) entries, so ‖Wᵀv‖²/‖v‖² = σ_w² χ²_n/n: Var ln = 2/n. With a_i = φ′(h_i)²
    independent of b_i = g_i² (the gradient-independence assumption of Schoenholz et al. 2017) and
    g Gaussian (E[b²]/E[b]² = 3), the delta method gives Var ln(Σ a_i b_i / Σ b_i) = 3(κ − 1)/n,
    κ = E[a²]/E[a]². Together v_l = (3κ_l − 1)/n; ReLU (κ = 2) gives 5/n, Hanin's (2018) constant.
    The mean of the log factor is ln χ_l − v_l/2 to the same order.

    Residual block: g_l = g + α D Wᵀ g. The cross term 2α gᵀDWᵀg/‖g‖² has variance 4α²χ_F/n
    (χ_F = σ_w² E[φ′²]) and α²‖DWᵀg‖²/‖g‖² has variance α⁴χ_F²(3κ − 1)/n, uncorrelated (odd in W),
    so v_l = (4α²χ_F + α⁴χ_F²(3κ − 1)) / (n (1 + α²χ_F)²).
    """
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    out: list[float] = []
    a2 = profile.branch_scale**2
    for chi, kappa in zip(profile.chi, profile.kappa, strict=True):
        if profile.residual:
            chi_f = (chi - 1.0) / a2 if a2 > 0 else 0.0
            out.append((4 * a2 * chi_f + a2 * a2 * chi_f * chi_f * (3 * kappa - 1)) / (width * chi * chi))
        else:
            out.append((3 * kappa - 1) / width)
    return tuple(out)


def log_rate_variance(profile: LayerProfile, *, width: int) -> float:
    """Var[ln(‖∂L/∂x_0‖² / ‖∂L/∂x_L‖²)] at width n, first order in 1/n: Σ_l v_l
    (`log_factor_variance`) plus, for a residual stack, the covariance between blocks.

    In a plain stack every block draws fresh pre-activations, so the per-block factors are
    independent. In a residual stack the stream x_l changes little from block to block, so the
    masks D_l = φ′(x_l) are correlated, and with them the part of each factor that comes from the
    mean of D_l² over the n units: block l's log factor holds a_l·δ_l, a_l = α²χ_F,l/(1 + α²χ_F,l),
    δ_l = mean_j(D²_lj)/E[D_l²] − 1, Var δ_l = (κ_l − 1)/n (already in v_l). For ReLU,
    Cov(δ_l, δ_m) = (2/π) arcsin(ρ_lm)/n with ρ_lm = √(p_l/p_m) (l < m) the correlation of the
    stream at the two blocks (the branches add uncorrelated increments) and P(x_l > 0, x_m > 0) =
    1/4 + arcsin(ρ)/(2π). For other activations the Cauchy–Schwarz bound √((κ_l − 1)(κ_m − 1))/n
    is used (conservative); the identity has κ = 1 and no such term.
    """
    total = float(sum(log_factor_variance(profile, width=width)))
    if not profile.residual or profile.branch_scale == 0.0:
        return total
    a2 = profile.branch_scale**2
    weights = [((c - 1.0) / (1.0 + (c - 1.0))) if a2 > 0 else 0.0 for c in profile.chi]  # α²χ_F / (1 + α²χ_F)
    relu = profile.activation == "relu"
    depth = len(profile.chi)
    for i in range(depth):
        for j in range(i + 1, depth):
            if relu:
                rho = min(1.0, math.sqrt(profile.q[i] / profile.q[j])) if profile.q[j] > 0 else 1.0
                cov = (2.0 / math.pi) * math.asin(rho) / width
            else:
                cov = math.sqrt(max(profile.kappa[i] - 1.0, 0.0) * max(profile.kappa[j] - 1.0, 0.0)) / width
            total += 2.0 * weights[i] * weights[j] * cov
    return total
