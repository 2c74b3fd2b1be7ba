"""The explanations of the theory checks (`stability.judge.theory_checks`): jacobian_spectrum,
mean_field and lesion (stability.judge.explanations). The mean_field text tabulates chi_1 for the
builder's inits when it is shown.
"""

from __future__ import annotations

from stability.families.gains import KAIMING_GAIN2
from stability.judge.references import refs
from stability.spec.registry import Explanation

__all__ = ["THEORY_EXPLANATIONS"]


def _mean_field_computes() -> str:
    """The mean_field text, with chi_1 computed for the builder's inits (the prediction a spec gets)."""
    from stability.judge.meanfield import ACTIVATIONS, mean_field

    rows = []
    for act in ACTIVATIONS:
        k = mean_field(act, sigma_w2=KAIMING_GAIN2[act]).chi1
        x = mean_field(act, sigma_w2=1.0).chi1
        d = mean_field(act, sigma_w2=1.0 / 3.0).chi1
        rows.append(f"    {act:<9} kaiming {k:8.4f}   xavier {x:8.4f}   default {d:8.4f}")
    table = "\n".join(rows)
    return f"""\
A plain stack x_(l+1) = act(W x_l + b), W ~ N(0, sigma_w2/n), b ~ N(0, sigma_b2), is described at
infinite width by the pre-activation variance q_l (q_(l+1) = sigma_w2 E[act(sqrt(q_l) z)^2] + sigma_b2,
Poole et al. 2016) and the per-block factor of the squared gradient norm

    chi_l = sigma_w2 E[act'(sqrt(q_l) z)^2]        (Schoenholz et al. 2017, eq. 5)

computed by Gaussian quadrature along the stack from the input's E[x^2] = 1 (one-layer
pre-activation residual stacks: chi_l = 1 + a^2 sigma_w2 E[act'^2], Yang & Schoenholz 2017). The
spec's init gives sigma_w2 (kaiming gain^2, xavier 1, normal init_std^2 n, default 1/3) and
sigma_b2 (the default bias 1/(3n), or 0). The measured factor is (g_0/g_L)^(2/L). At width n the
per-block log factor has variance v_l = (3 kappa_l - 1)/n, kappa = E[act'^4]/E[act'^2]^2 (5/n for
ReLU, Hanin 2018), and mean ln chi_l - v_l/2, so the invariant holds when

    |ln(measured) - mean ln chi_l| <= sum(v_l)/(2L) + k_sigma sqrt(sum(v_l))/L

The measured factor judged is the median over the case's seed ensemble ([probe] ensemble, 8 by
default: one network's log factor has a heavy lower tail at small batches), and the message prints
it next to the prediction, with the case's own network. chi_1 at the fixed point for the
builder's inits with sigma_b2 = 0 (below 1 the gradient vanishes, above 1 it explodes):

{table}"""


THEORY_EXPLANATIONS: dict[str, Explanation] = {
    "jacobian_spectrum": Explanation(
        summary="the input-output Jacobian is close to an isometry: its singular values are not spread out",
        computes="""\
Measured after the probe, only when the spec declares it. J = dy/dx of the whole batch map (for
blocks that act per example, the union of the per-example Jacobians). With N = batch x input size:

    mean s2   = tr(J^T J) / N    Hutchinson: the mean of |J v|^2 / N over `probes` Gaussian v,
                                 forward-mode products (torch.func.jvp); standard error
                                 sqrt(2 sum s^4 / K) / N, reported from the sample
    max s2    = largest s^2      power iteration on J^T J (jvp, then vjp); a lower bound that
                                 converges as (s_2/s_1)^(2k)
    spread    = max s2 / mean s2 which must satisfy  spread <= max_spread
                                 (and mean_lo <= mean s2 <= mean_hi when set)

With `exact = true` J is formed (torch.func.jacrev) and torch.linalg.svdvals gives every singular
value; only for N <= 4096. Predictions (Pennington, Schoenholz & Ganguli 2017): a zero-branch
residual stack is J = I (spread 1); an orthogonal linear stack is an exact isometry; a plain ReLU
stack at criticality keeps mean s2 = 1 but the variance of s2 over the spectrum grows as 2L
(Gaussian weights) or L (orthogonal weights), so the spread grows with depth.""",
        fails="""\
- A plain stack: every block multiplies the Jacobian by W D, and the spectrum of a product of L
  random matrices spreads out with L even when its mean is kept at 1 (ReLU with kaiming init).
- Full-size residual branches: I + J_F has singular values far from 1 once J_F is not small.
- Off criticality the mean itself drifts (mean_lo / mean_hi catch it).""",
        fixes="""\
- Orthogonal weights with an activation that is linear near 0 (tanh at small weight variance)
  approach dynamical isometry; ReLU cannot reach it (Pennington et al. 2017).
- Residual branches that start small or at zero (branch_scale = "1/sqrt(depth)", ReZero,
  SkipInit) keep J close to I.""",
        references=refs("pennington", "identity", "rezero"),
    ),
    "mean_field": Explanation(
        summary="the gradient's per-block growth matches the mean-field prediction chi_1",
        computes=_mean_field_computes,  # a table computed when shown (~0.1 s of quadrature)
        fails="""\
- The stack is not what the oracle models: a normalisation layer, or a custom init the spec
  maps to another variance (the prediction is for the unnormalised stack).
- Very narrow or very deep stacks, where the O(1/width) first-order band no longer describes
  the spread (it is conservative for batches, which average some of it out).
- A bug in the init: the measured factor then follows another sigma_w2.""",
        fixes="""\
- Choose sigma_w2 on the critical line (chi_1 = 1; stability.judge.meanfield.critical_sigma_w2):
  kaiming init for ReLU, sigma_w2 near 1.76 for tanh with sigma_b2 = 0.05.
- Keep the depth within a few times xi = 1/|ln chi_1| (Schoenholz et al.: trainable to about
  6 xi).""",
        references=refs("poole", "schoenholz", "hanin", "yang"),
    ),
    "lesion": Explanation(
        summary="removing one block barely changes the output (residual stacks)",
        computes="""\
Measured after the probe, only when the spec declares it. For every block l the block is
replaced by the identity (its input passed on unchanged; for a residual block the branch is
dropped and the route around kept) and the rest of the stack rerun:

    change_l = |f(x) - f_without_l(x)| / |f(x)|         (Frobenius norms over the batch)
    holds when max_l change_l <= max_change   (statistic = "max"; or the median)

A block that changes the shape (a dense layer, a widening first block) cannot be removed and is
skipped. For a linear residual chain with branches a*Q (Q orthogonal) the expected squared change
is a^2 / (1 + a^2) for every block; a plain stack loses every path through the removed layer.""",
        fails="""\
- A plain stack: every path runs through every layer, so removing one changes the output by
  about as much as the output itself (Veit et al. 2016).
- Residual branches as large as the route around: each then carries half the signal.""",
        fixes="""\
- Residual blocks with small branches at initialisation (branch_scale = "1/sqrt(depth)",
  ReZero, SkipInit, zero-initialised last layers).""",
        references=refs("veit", "identity"),
    ),
}
