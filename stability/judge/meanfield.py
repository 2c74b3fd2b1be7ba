"""Mean-field predictions for deep stacks at initialisation (Poole et al. 2016; Schoenholz et al. 2017).

A plain stack x_{l+1} = φ(h_l), h_l = W_l x_l + b_l, with W_l ~ N(0, σ_w²/n) and b_l ~ N(0, σ_b²),
is described at infinite width by the pre-activation variance q_l = E[h_l²]:

    q_{l+1} = σ_w² E_z[φ(√q_l z)²] + σ_b²,   z ~ N(0, 1)          (Poole et al. 2016, eq. 3)

whose fixed point is q*, and by the slope of the correlation map at c = 1,

    χ₁ = σ_w² E_z[φ′(√q* z)²]                                   (Schoenholz et al. 2017, eq. 5)

which is also the expected factor by which the squared norm of the gradient grows per block going
down (Schoenholz et al. 2017, eq. 15: E‖∂L/∂x_l‖² = χ₁ E‖∂L/∂x_{l+1}‖²). χ₁ < 1 is the ordered
phase (gradients vanish), χ₁ > 1 the chaotic one (they explode), χ₁ = 1 the edge of chaos.

Depth scale. `MeanField.xi` is ξ = 1/|ln χ₁| (∞ at χ₁ = 1): the number of blocks over which the
expected squared gradient norm changes by a factor e. In the vanishing (ordered) phase it is
exactly Schoenholz et al.'s gradient depth scale ξ_∇ = −1/ln χ₁ (their eq. 16); there the
correlation fixed point is c* = 1 and their correlation depth scale ξ_c = −1/ln χ_{c*} equals
−1/ln χ₁ too, so ξ = ξ_c = ξ_∇. In the chaotic phase c* < 1, ξ_c = −1/ln χ_{c*} differs (it is
finite and it, not ξ, diverges at the transition from above), and −1/ln χ₁ is negative: ξ then
reports the explosion scale 1/ln χ₁. Schoenholz et al. find networks trainable up to depth ≈ 6ξ_c.

Expectations over z ~ N(0, 1) are quadratures (`stability.judge.meanfield_quadrature`) that
integrate ReLU's kink exactly, so ReLU with σ_w² = 2 has χ₁ = 1 to rounding. χ₁ within 1e-12 of 1
counts as critical (ξ = ∞).

Residual stacks (`residual=True`) are the pre-activation stack x_{l+1} = x_l + α(W_l φ(x_l) + b_l)
with one branch layer and no normalisation (Yang & Schoenholz 2017, "Mean field residual networks:
on the edge of chaos", the reduced residual network). The stream's second moment p_l = E[x_l²]
then grows without a fixed point, p_{l+1} = p_l + α²(σ_w² E[φ(√p_l z)²] + σ_b²), so `q_star` is
∞ (or p₀ when every branch is exactly zero); the squared gradient grows per block by

    χ₁ = 1 + α² σ_w² E_z[φ′(√p z)²]

(the cross term 2α gᵀ J_F g has mean zero over the branch weights), evaluated at the input's
p = 1 (`mean_field`) or along the stream (`layer_profile`). For ReLU and the identity the
expectation does not depend on p.

This module is the stack's fixed point and χ₁; the per-block numbers of a finite stack and their
finite-width spread are `stability.judge.meanfield_profile`'s. Its `__all__`, the public
`stability.meanfield`'s, holds the names of both modules and the quadrature's `ACTIVATIONS` and
`gaussian_expectation`. Neither imports more than numpy and the standard library.

References: Poole, Lahiri, Raghu, Sohl-Dickstein, Ganguli (2016), "Exponential expressivity in deep
neural networks through transient chaos", NeurIPS, arXiv:1606.05340. Schoenholz, Gilmer, Ganguli,
Sohl-Dickstein (2017), "Deep Information Propagation", ICLR, arXiv:1611.01232. Yang, Schoenholz
(2017), NeurIPS, arXiv:1712.08969. Brock, De, Smith (2021), "Characterizing signal propagation to
close the performance gap in unnormalized ResNets" (NF-ResNets), ICLR, arXiv:2101.08692. Hanin (2018),
"Which neural net architectures give rise to exploding and vanishing gradients?", NeurIPS,
arXiv:1801.03744.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from stability.judge.meanfield_profile import LayerProfile, layer_profile, log_factor_variance, log_rate_variance
from stability.judge.meanfield_quadrature import (
    ACTIVATIONS,
    Q_MAX,
    Q_TINY,
    activation_function,
    check_arguments,
    gaussian_expectation,
    second_moment,
    slope_moments,
)

__all__ = [
    "ACTIVATIONS",
    "MeanField",
    "LayerProfile",
    "mean_field",
    "chi1",
    "fixed_point",
    "critical_sigma_w2",
    "nf_gain",
    "gaussian_expectation",
    "layer_profile",
    "log_factor_variance",
    "log_rate_variance",
]


@dataclass(frozen=True, kw_only=True)
class MeanField:
    """The mean-field description of one (activation, σ_w², σ_b²) stack; see the module docstring.

    `q_star` is the fixed point of the pre-activation variance (0 or ∞ where the map has no finite
    positive one, as for ReLU with σ_b² = 0 and σ_w² ≠ 2; ∞ for a residual stream). `chi1` is the
    expected per-block factor of the squared gradient norm; `xi` = 1/|ln χ₁| (∞ at χ₁ = 1).
    """

    activation: str
    sigma_w2: float
    sigma_b2: float
    q_star: float
    chi1: float
    xi: float

    @property
    def phase(self) -> str:
        """'ordered' (χ₁ < 1, gradients vanish), 'chaotic' (χ₁ > 1, they explode) or 'critical'."""
        if abs(self.chi1 - 1.0) <= _CRITICAL_RTOL:
            return "critical"
        return "ordered" if self.chi1 < 1.0 else "chaotic"


#: E[φ(√q z)²] = c·q for the positively homogeneous activations: their q map is linear.
_HOMOGENEOUS = {"relu": 0.5, "identity": 1.0}


def fixed_point(
    activation: str,
    *,
    sigma_w2: float,
    sigma_b2: float = 0.0,
    q0: float = 1.0,
    tol: float = 1e-13,
    max_iter: int = 10_000,
) -> float:
    """q* of the map T(q) = σ_w² E[φ(√q z)²] + σ_b² (Poole et al. 2016, eq. 3), the limit of T
    iterated from q0.

    ReLU and the identity have E[φ(√q z)²] = c q (c = 1/2, 1), so T is linear and q* is closed
    form: σ_b²/(1 − cσ_w²) when cσ_w² < 1 (0.0 when σ_b² = 0 too), q0 itself when cσ_w² = 1 and
    σ_b² = 0 (every q is fixed), math.inf otherwise. Other activations iterate T with Steffensen's
    acceleration (Aitken's Δ² on T, T∘T), which converges quadratically at a stable fixed point
    (plain iteration creeps near the order-to-chaos boundary, where T′(q*) → 1); an accelerated
    limit that is not stable (|T′(q*)| > 1) is discarded for the plain iteration's limit.
    """
    check_arguments(activation, sigma_w2, sigma_b2)
    if activation in _HOMOGENEOUS:
        slope = _HOMOGENEOUS[activation] * sigma_w2
        if slope < 1.0:
            return sigma_b2 / (1.0 - slope)
        if slope == 1.0 and sigma_b2 == 0.0:
            return float(q0)
        return math.inf

    def t(q: float) -> float:
        return sigma_w2 * second_moment(activation, q) + sigma_b2

    def plain(q: float) -> float:
        for _ in range(max_iter):
            nxt = t(q)
            if nxt < Q_TINY:
                return 0.0
            if nxt > 1e-3 * Q_MAX and t(nxt) > nxt:
                return math.inf  # as below: without this the iteration settles on the clamp at Q_MAX
            if abs(nxt - q) <= tol * max(q, nxt):
                return nxt
            q = nxt
        return q

    q = float(q0)
    for _ in range(max_iter):
        t1 = t(q)
        t2 = t(t1)
        denom = t2 - 2.0 * t1 + q
        nxt = q - (t1 - q) ** 2 / denom if denom != 0.0 else t2
        if not (math.isfinite(nxt) and nxt > 0.0):
            nxt = t2
        if nxt > 1e-3 * Q_MAX and t(nxt) > nxt:
            return math.inf  # past 10⁵ every activation here is linear or flat: growth does not stop
        if sigma_b2 == 0.0 and nxt < 1e-12 and t(nxt) < nxt:
            return 0.0  # T(q) = σ_w² φ′(0)² q + O(q²) near 0: a slope below 1 collapses q to 0
        if abs(nxt - q) <= tol * max(q, nxt):
            if nxt == 0.0:  # T ≡ 0 (σ_w² = σ_b² = 0): q* = 0, where no relative step can test stability
                return 0.0
            h = 1e-6 * nxt
            if abs(t(nxt + h) - t(nxt - h)) / (2.0 * h) <= 1.0 + 1e-9:
                return nxt
            return plain(float(q0))
        q = nxt
    return q


def _chi_at(activation: str, sigma_w2: float, q: float) -> float:
    return sigma_w2 * slope_moments(activation, q)[0]


def chi1(
    activation: str, *, sigma_w2: float, sigma_b2: float = 0.0, residual: bool = False, branch_scale: float = 1.0
) -> float:
    """χ₁: the expected per-block factor of ‖∂L/∂x‖² at the fixed point (see `mean_field`)."""
    return mean_field(
        activation, sigma_w2=sigma_w2, sigma_b2=sigma_b2, residual=residual, branch_scale=branch_scale
    ).chi1


#: |χ₁ − 1| at or below this is the edge of chaos (the quadrature's rounding is ~1e-16).
_CRITICAL_RTOL = 1e-12


def _xi(chi: float) -> float:
    if chi <= 0.0:
        return 0.0
    if abs(chi - 1.0) <= _CRITICAL_RTOL:
        return math.inf
    return 1.0 / abs(math.log(chi))


def mean_field(
    activation: str, *, sigma_w2: float, sigma_b2: float = 0.0, residual: bool = False, branch_scale: float = 1.0
) -> MeanField:
    """q*, χ₁ and ξ for a plain stack (Schoenholz et al. 2017, eqs. 3, 5, 16), or for the reduced
    residual stack x + α(W φ(x) + b) with α = `branch_scale` (Yang & Schoenholz 2017), whose χ₁ is
    1 + α² σ_w² E[φ′(√p z)²] at the input's p = 1 and whose stream has no fixed point."""
    check_arguments(activation, sigma_w2, sigma_b2)
    if not residual:
        q = fixed_point(activation, sigma_w2=sigma_w2, sigma_b2=sigma_b2)
        chi = _chi_at(activation, sigma_w2, q)
        return MeanField(
            activation=activation, sigma_w2=float(sigma_w2), sigma_b2=float(sigma_b2), q_star=q, chi1=chi, xi=_xi(chi)
        )
    a2 = float(branch_scale) ** 2
    grows = a2 * (sigma_w2 * second_moment(activation, 1.0) + sigma_b2) > 0.0
    chi = 1.0 + a2 * _chi_at(activation, sigma_w2, 1.0)
    return MeanField(
        activation=activation,
        sigma_w2=float(sigma_w2),
        sigma_b2=float(sigma_b2),
        q_star=math.inf if grows else 1.0,
        chi1=chi,
        xi=_xi(chi),
    )


#: σ_w² on the critical line in closed form. The positively homogeneous activations (`_HOMOGENEOUS`)
#: have χ₁ = σ_w² E[φ′(z)²] at every q, and E[φ′(z)²] = E[φ(z)²] = c for them: σ_w² = 1/c at any σ_b².
#: Without bias (σ_b² = 0), an activation with φ(0) = 0 and |φ(x)| < |φ′(0) x| has q* = 0 up to
#: σ_w² = 1/φ′(0)², where χ₁ = σ_w² φ′(0)² = 1, and a q* > 0 with χ₁ > 1 beyond it (Poole et al. 2016,
#: Fig. 1): tanh, with tanh′(0) = 1. GELU has φ(0) = 0 too, but from q = 1 its q grows without bound
#: (GELU is ReLU-like for large inputs) from σ_w² ≈ 2.35 on, well before 1/φ′(0)² = 4: there χ₁ jumps
#: from σ_w²/4 ≈ 0.59 (q* = 0) to ≈ 1.18 (q* = ∞), so its line is searched.
_CRITICAL_WITHOUT_BIAS = {"tanh": 1.0}


def critical_sigma_w2(activation: str, sigma_b2: float = 0.0) -> float:
    """The σ_w² at which a plain stack's χ₁ = 1 (the order-to-chaos boundary for this σ_b²): in
    closed form where one holds (ReLU 2 and the identity 1 at any σ_b²; tanh 1 without bias), else by
    bisection on log σ_w² in [1e-3, 1e4] (χ₁ increases with σ_w² for these activations)."""
    check_arguments(activation, 1.0, sigma_b2)
    if activation in _HOMOGENEOUS:
        return 1.0 / _HOMOGENEOUS[activation]
    if sigma_b2 == 0.0 and activation in _CRITICAL_WITHOUT_BIAS:
        return _CRITICAL_WITHOUT_BIAS[activation]
    lo, hi = math.log(1e-3), math.log(1e4)

    def f(log_w: float) -> float:
        return mean_field(activation, sigma_w2=math.exp(log_w), sigma_b2=sigma_b2).chi1 - 1.0

    if f(lo) > 0 or f(hi) < 0:
        raise ValueError(f"no critical sigma_w2 in [1e-3, 1e4] for {activation} with sigma_b2 = {sigma_b2}")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13:
            break
    return math.exp(0.5 * (lo + hi))


def nf_gain(activation: str) -> float:
    """γ = 1/√Var[φ(z)], z ~ N(0, 1): the NF-ResNet gain that makes Var[γ φ(z)] = 1 (Brock et al.
    2021, §4). ReLU: √(2/(1 − 1/π)) ≈ 1.7139588594; tanh ≈ 1.5939117670."""
    check_arguments(activation, 1.0, 0.0)
    phi = activation_function(activation)
    mean = gaussian_expectation(phi)
    var = gaussian_expectation(lambda x: (phi(x) - mean) ** 2)
    return 1.0 / math.sqrt(var)
