"""The theory invariants: `jacobian_spectrum`, `mean_field` and `lesion`.

Each needs more than the probe's one forward and one backward pass, so its measurement runs after
the probe and only when a spec declares it (its registry entry's `after_probe` and `ensemble`,
stability.judge.catalog); the results go into `Measurements.extra` under the invariant's name, and
the verdicts below are pure functions of that, like those in `stability.judge.invariants`.

- jacobian_spectrum: ⟨σ²⟩ and σ_max² of ∂y/∂x (`stability.measure.jacobian`); the headline is the spread
  σ_max²/⟨σ²⟩, which is 1 for an isometry and grows with depth in a plain ReLU stack.
- mean_field: the measured per-block factor of the squared gradient norm, (g_0/g_L)^{2/L}, against
  the mean-field χ along the stack (`stability.judge.meanfield.layer_profile`), within the finite-width
  band of `stability.judge.meanfield.log_factor_variance`.
- lesion: the largest (or median) relative output change when one block is replaced by the
  identity (`stability.measure.lesion`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from stability.families.gains import KAIMING_GAIN2
from stability.judge import meanfield
from stability.judge.verdict import Verdict
from stability.measure.measurements import Measurements, serializable
from stability.spec.case import Case
from stability.spec.registry import FAMILIES
from stability.spec.schema import Spec

__all__ = [
    "MeanFieldPrediction",
    "mean_field_parameters",
    "jacobian_spectrum",
    "mean_field",
    "lesion",
]


def mean_field_parameters(spec: Spec, case: Case) -> tuple[float, float, float]:
    """(σ_w², σ_b², α) of a case: weight variance × fan-in, bias variance, and the branch scale of
    the family's law (its registry entry's `mean_field`: 0 when the branches are zero at
    initialisation; 1 for a plain stack). nn.Linear's default init draws
    W ~ U(±1/√n) (σ_w² = 1/3) and b ~ U(±1/√n) (σ_b² = 1/(3n)); kaiming uses gain², xavier 2n/(n+n) = 1,
    normal init_std²·n."""
    n = case.width
    kind = case.weight_init
    if kind == "default":
        sw2 = 1.0 / 3.0
    elif kind.startswith("kaiming"):
        sw2 = KAIMING_GAIN2[spec.block.activation]
    elif kind.startswith("xavier"):
        sw2 = 1.0
    else:
        sw2 = spec.space.init_std**2 * n
    sb2 = 1.0 / (3.0 * n) if spec.space.bias_init == "default" else 0.0
    law = FAMILIES.get(spec.family).mean_field
    if law is None:
        raise ValueError(f"family '{spec.family}' has no mean-field law")
    alpha, _ = law(spec, case)
    return sw2, sb2, alpha


@serializable
@dataclass(frozen=True, kw_only=True)
class MeanFieldPrediction:
    """The mean-field prediction for one case's gradient: per-block ln χ_l and the finite-width
    variances v_l of the measured per-block log factor (stability.judge.meanfield.log_factor_variance)."""

    activation: str
    sigma_w2: float
    sigma_b2: float
    branch_scale: float
    residual: bool
    width: int
    log_chi: tuple[float, ...]
    log_var: tuple[float, ...]
    #: Var of the summed log factors: Σ log_var plus the covariance between blocks of a residual stack.
    total_var: float = 0.0

    @property
    def chi(self) -> float:
        """The geometric-mean per-block χ along the stack."""
        return math.exp(sum(self.log_chi) / len(self.log_chi)) if self.log_chi else 1.0


def predict(spec: Spec, case: Case) -> MeanFieldPrediction:
    sw2, sb2, alpha = mean_field_parameters(spec, case)
    law = FAMILIES.get(spec.family).mean_field
    residual = law is not None and law(spec, case)[1]
    prof = meanfield.layer_profile(
        spec.block.activation, sigma_w2=sw2, sigma_b2=sb2, depth=case.depth, residual=residual, branch_scale=alpha
    )
    var = meanfield.log_factor_variance(prof, width=case.width)
    log_chi = tuple(math.log(c) if c > 0 else -math.inf for c in prof.chi)
    total = meanfield.log_rate_variance(prof, width=case.width)
    return MeanFieldPrediction(
        activation=spec.block.activation,
        sigma_w2=sw2,
        sigma_b2=sb2,
        branch_scale=alpha,
        residual=residual,
        width=case.width,
        log_chi=log_chi,
        log_var=var,
        total_var=total,
    )


def _missing(name: str, bound: str) -> Verdict:
    return Verdict(
        invariant=name,
        passed=False,
        observed=math.nan,
        bound=bound,
        block=None,
        detail=f"no {name} measurement: the case was probed without it",
        measured=False,
    )


def jacobian_spectrum(
    m: Measurements, *, max_spread: float = 4.0, mean_lo: float | None = None, mean_hi: float | None = None
) -> Verdict:
    """σ_max²/⟨σ²⟩ ≤ max_spread and ⟨σ²⟩ within [mean_lo, mean_hi] (each side when set)."""
    bound = f"spread ≤ {max_spread:g}" + (
        f", ⟨σ²⟩ in [{mean_lo or 0:g}, {mean_hi or math.inf:g}]" if mean_lo or mean_hi else ""
    )
    sp = m.extra.get("jacobian_spectrum")
    if sp is None:
        return _missing("jacobian_spectrum", bound)
    se = f" ± {sp.mean_sq_se:.2g}" if sp.method == "estimate" else ""
    what = f"⟨σ²⟩ = {sp.mean_sq:.4g}{se}, σ_max² = {sp.max_sq:.4g}, spread {sp.spread:.4g} ({sp.method}, N = {sp.n})"
    extra = {"mean_sq": sp.mean_sq, "mean_sq_se": sp.mean_sq_se, "max_sq": sp.max_sq}
    if not math.isfinite(sp.spread) or sp.spread > max_spread:
        return Verdict(
            invariant="jacobian_spectrum",
            passed=False,
            observed=sp.spread,
            bound=bound,
            block=None,
            detail=f"{what}: spread above {max_spread:g}, far from an isometry",
            extra=extra,
        )
    if mean_lo is not None and sp.mean_sq < mean_lo:
        return Verdict(
            invariant="jacobian_spectrum",
            passed=False,
            observed=sp.spread,
            bound=bound,
            block=None,
            detail=f"{what}: ⟨σ²⟩ below {mean_lo:g} (the gradient shrinks on average)",
            extra=extra,
        )
    if mean_hi is not None and sp.mean_sq > mean_hi:
        return Verdict(
            invariant="jacobian_spectrum",
            passed=False,
            observed=sp.spread,
            bound=bound,
            block=None,
            detail=f"{what}: ⟨σ²⟩ above {mean_hi:g} (the gradient grows on average)",
            extra=extra,
        )
    return Verdict(
        invariant="jacobian_spectrum",
        passed=True,
        observed=sp.spread,
        bound=bound,
        block=None,
        detail=f"{what} within {bound}",
        extra=extra,
    )


def mean_field(m: Measurements, *, k_sigma: float = 4.0) -> Verdict:
    """|ρ̂ − ρ| ≤ Σv/(2L) + k_sigma·√(Σv)/L, ρ̂ = (2/L) ln(g_0/g_L) the measured per-block log factor of
    ‖∂L/∂x‖², ρ = (1/L) Σ ln χ_l the mean-field one, v_l its per-block finite-width variance (the
    first term allows the O(1/n) bias −v_l/2 of the log, the second k_sigma standard deviations).

    Where the engine measured the case's seed ensemble (`m.extra["mean_field_ensemble"]`, (g_0, g_L)
    per network, member 0 the case's own), ρ̂ is the median over the networks: χ is a claim about
    the architecture's distribution, and ln of one network's ratio of two gradient norms has a
    heavy lower tail (a χ²-like norm near 0), so a band of k_sigma Gaussian standard deviations on
    one network is crossed more often than the Gaussian rate (the case depth=9, width=43, batch=1,
    init=normal, seed=4965 of a plain tanh stack, σ_w² = 0.43, lands at −4.34 sd, a one-in-140,000
    event for a Gaussian). A wrong χ moves every member alike, so the median keeps the band's power
    against it."""
    pred = m.extra.get("mean_field")
    if pred is None:
        return _missing("mean_field", f"± {k_sigma:g} sd")
    depth = len(pred.log_chi)
    var = max(pred.total_var, sum(pred.log_var))
    half = (
        sum(pred.log_var) / (2 * depth) + k_sigma * math.sqrt(var) / depth + 1e-6
    )  # 1e-6: float32 rounding of the norms
    rho = sum(pred.log_chi) / depth
    lo, hi = math.exp(rho - half), math.exp(rho + half)
    bound = f"χ = {pred.chi:.4g} in [{lo:.4g}, {hi:.4g}]"
    extra: dict[str, Any] = {
        "predicted": pred.chi,
        "lo": lo,
        "hi": hi,
        "sigma_w2": pred.sigma_w2,
        "sigma_b2": pred.sigma_b2,
    }
    members = m.extra.get("mean_field_ensemble") or [(m.grad_norm[0], m.grad_norm[-1])]
    for k, (g0, gl) in enumerate(members):
        if not (g0 > 0 and gl > 0 and math.isfinite(g0) and math.isfinite(gl)):
            who = "" if k == 0 else f" in network {k + 1} of the {len(members)} of the case's seed ensemble"
            return Verdict(
                invariant="mean_field",
                passed=False,
                observed=math.nan,
                bound=bound,
                block=None,
                detail=f"the gradient norms are not positive and finite{who} (g_0 = {g0:.3g}, g_L = {gl:.3g})",
                extra=extra,
            )
    rhos = [2.0 * math.log(g0 / gl) / depth for g0, gl in members]
    rho_hat = float(statistics.median(rhos))
    measured = math.exp(rho_hat)
    sd = math.sqrt(var) / depth
    z = (rho_hat - rho) / sd if var > 0 else (0.0 if rho_hat == rho else math.inf)
    what = (
        f"measured {measured:.4g} per block (‖∂L/∂x‖² factor, {depth} blocks) vs mean-field χ = {pred.chi:.4g} "
        f"({pred.activation}, σ_w² = {pred.sigma_w2:.4g}, σ_b² = {pred.sigma_b2:.3g}"
        + (f", residual α = {pred.branch_scale:.3g}" if pred.residual else "")
        + f"; {z:+.2f} sd at width {pred.width})"
    )
    if len(members) > 1:
        extra["ensemble"] = {"size": len(members), "values": [math.exp(r) for r in rhos]}
        own = (rhos[0] - rho) / sd if var > 0 else math.nan
        what = (
            f"{what}, the median of {len(members)} networks (from {math.exp(min(rhos)):.4g} to "
            f"{math.exp(max(rhos)):.4g}; this one {math.exp(rhos[0]):.4g}, {own:+.2f} sd)"
        )
    ok = abs(rho_hat - rho) <= half
    return Verdict(
        invariant="mean_field",
        passed=ok,
        observed=measured,
        bound=bound,
        block=None,
        detail=f"{what}: {'within' if ok else 'outside'} [{lo:.4g}, {hi:.4g}]",
        extra=extra,
    )


def lesion(m: Measurements, *, max_change: float = 0.5, statistic: str = "max") -> Verdict:
    """The max (or median) over blocks of ‖f(x) − f_{−l}(x)‖/‖f(x)‖ must be ≤ max_change.

    Where the engine measured the case's seed ensemble (`m.extra["lesion_ensemble"]`, one list of
    changes per network, `stability.measure.ensemble.lesion_ensemble`), the value judged is the median over
    the networks of each one's statistic: Veit et al.'s claim is about the architecture, and one
    small network seeing one input is a noisy sample of it."""
    bound = f"{statistic} ≤ {max_change:g}"
    changes = m.extra.get("lesion")
    if changes is None:
        return _missing("lesion", bound)
    finite = [(c, i) for i, c in enumerate(changes) if not math.isnan(c)]
    if not finite:
        return Verdict(
            invariant="lesion",
            passed=False,
            observed=math.nan,
            bound=bound,
            block=None,
            detail="no block can be replaced by the identity (every block changes the shape)",
            measured=False,
        )
    worst, block = max(finite)
    value = worst if statistic == "max" else statistics.median(c for c, _ in finite)
    what = (
        f"removing block {block} changes the output by {worst:.3g} (relative); median over {len(finite)} "
        f"blocks {statistics.median(c for c, _ in finite):.3g}"
    )
    extra: dict[str, Any] = {"changes": [None if math.isnan(c) else c for c in changes]}
    members = m.extra.get("lesion_ensemble")
    if members and len(members) > 1:
        values = [_lesion_statistic(c, statistic) for c in members]
        live = [v for v in values if not math.isnan(v)]
        if live:
            value = statistics.median(live)
            extra["ensemble"] = {"size": len(members), "values": [None if math.isnan(v) else v for v in values]}
            what = (
                f"{statistic} change {value:.3g}, the median of {len(members)} networks (from "
                f"{min(live):.3g} to {max(live):.3g}); in this one, {what}"
            )
    ok = value <= max_change
    return Verdict(
        invariant="lesion",
        passed=ok,
        observed=value,
        bound=bound,
        block=block,
        detail=f"{what}: {statistic} {'within' if ok else 'above'} {max_change:g}",
        extra=extra,
    )


def _lesion_statistic(changes: list[float], statistic: str) -> float:
    finite = [c for c in changes if not math.isnan(c)]
    if not finite:
        return math.nan
    return max(finite) if statistic == "max" else float(statistics.median(finite))
