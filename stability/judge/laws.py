"""The number a law predicts, for a failing verdict to print next to the number measured.

Where the spec fixes enough of the network, the expected second moment and gradient over depth
follow from a per-layer recursion (He et al. 2015 for the weight variance and the ReLU's ½; He et
al. 2016 and Balduzzi et al. 2017 for residual sums; De & Smith 2020 for normalised branches):

- weight gain g = fan_in · Var(W): kaiming (He) 2 for ReLU, (5/3)² for tanh, 1 for identity;
  xavier 2·fan_in/(fan_in + fan_out); orthogonal 1; normal fan_in·init_std²; identity init_gain²;
  PyTorch's default (kaiming_uniform with a = √5) 1/3; a bias b adds b² (its default init, uniform
  on ±1/√fan_in, adds 1/(3·fan_in)) to each unit's second moment;
- activation factor φ = E[act(h)²]/E[h²] for symmetric h: ½ for ReLU, 1 for identity (other
  activations are not scale-free; their law comes from a mean-field computation, `MEANFIELD_HOOK`);
- plain `x ↦ act(W x)` multiplies the second moment q by g·φ per block, and the squared gradient
  norm by g·φ as well (E[act′²] = φ for ReLU and identity): ratios (gφ)^L and (gφ)^(L/2);
- pre-activation residual `x ↦ λ·x + α·F(x)`, F with k layers and no norm: q_{l+1} = (λ² + α²(gφ)^k)·q_l,
  the same factor for the squared gradient; with a norm before each layer the branch's second
  moment no longer depends on q: q_{l+1} = λ²q_l + α²·gφ, and the norm's Jacobian scales the
  branch's gradient by 1/√q_l, so the squared gradient gains λ² + α²gφ/q_l per block; with λ = 1
  the product telescopes to q_L/q_0 (1 + Lα² for He init and unit input).

All linear layers (conv2d borders are left out: 'same' padding drops taps at the edge, so the law
there needs the spatial size). Expectations over the weights at the stated width; a finite-width
network scatters around them (stability/judge/growth.py), which is why the law is shown, not judged.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stability.families.gains import KAIMING_GAIN2
from stability.spec.case import Case
from stability.spec.registry import FAMILIES
from stability.spec.schema import Spec

__all__ = ["Law", "variance_law", "gradient_law", "annotate", "MEANFIELD_HOOK"]

#: Set by a mean-field module (Schoenholz et al. 2017) to supply χ₁, the per-block factor of the
#: squared gradient, for stacks whose activation is not scale-free: (spec, case) → χ₁ or None.
#: Unset, such stacks get no law.
MEANFIELD_HOOK: Callable[[Spec, Case], float | None] | None = None

_PHI = {"relu": 0.5, "identity": 1.0}


@dataclass(frozen=True)
class Law:
    """A predicted ratio at the output over the input, with the formula that gave it."""

    quantity: str  # "E[x_L²]/E[x_0²]" or "g_0/g_L"
    predicted: float
    formula: str  # e.g. "(1 + α²)^L = 2^12"
    source: str  # the paper the recursion is from


def _weight_gain(spec: Spec, case: Case, fan_in: int, fan_out: int) -> float | None:
    kind = case.weight_init
    if kind in ("kaiming_normal", "kaiming_uniform"):
        return KAIMING_GAIN2[spec.block.activation]
    if kind in ("xavier_normal", "xavier_uniform"):
        return 2.0 * fan_in / (fan_in + fan_out)
    if kind == "orthogonal":
        return 1.0 if fan_out >= fan_in else fan_out / fan_in
    if kind == "normal":
        return fan_in * spec.space.init_std**2
    if kind == "identity":
        return spec.space.init_gain**2
    if kind == "default":
        return 1.0 / 3.0
    return None


def _bias_second_moment(spec: Spec, fan_in: int) -> float:
    b = spec.space.bias_init
    return 1.0 / (3.0 * fan_in) if b == "default" else float(b) ** 2


def _branch_scale(spec: Spec, case: Case) -> float | None:
    if case.branch_init in ("zero", "rezero", "skipinit"):
        return 0.0
    s = spec.block.branch_scale
    if s == "1/sqrt(depth)":
        return 1.0 / math.sqrt(case.depth)
    if s == "1/depth":
        return 1.0 / case.depth
    return float(s)


def _residual(spec: Spec, case: Case) -> bool | None:
    """Whether the family's law is a residual one (its registry entry's `mean_field`: plain stacks
    and pre-activation residual stacks have one); None when it has no law."""
    law = FAMILIES.get(spec.family).mean_field if spec.family in FAMILIES else None
    return None if law is None else law(spec, case)[1]


def _applicable(spec: Spec, case: Case) -> bool:
    return (
        spec.block.layer == "linear"
        and (case.input_width is None or case.input_width == case.width)
        and _residual(spec, case) is not None
    )


def _recursion(spec: Spec, case: Case, q0: float) -> tuple[float, float, str, str] | None:
    """(q_L/q_0, (g_0/g_L)², formula, source) for the scale-free cases the module docstring lists."""
    if not _applicable(spec, case) or spec.block.activation not in _PHI:
        return None
    w, depth, phi = case.width, case.depth, _PHI[spec.block.activation]
    g = _weight_gain(spec, case, w, w)
    if g is None or not q0 > 0:
        return None
    bias = _bias_second_moment(spec, w)
    if not _residual(spec, case):
        if spec.block.norm != "none":
            return None
        factor = g * phi
        q = q0
        for _ in range(depth):
            q = phi * (g * q + bias)  # E[(Wx + b)²] = g·q + b², then the activation keeps φ of it
        return q / q0, factor**depth, f"(g·φ)^L = ({g:.4g}·{phi:g})^{depth}", "He et al. 2015, eq. 10"
    if spec.block.skip not in ("identity", "scaled") or spec.block.norm == "group":
        return None
    lam2 = 1.0 if spec.block.skip == "identity" else float(spec.block.skip_scale or 0.0) ** 2
    alpha = _branch_scale(spec, case)
    if alpha is None:
        return None
    a2, k = alpha * alpha, spec.block.branch_layers
    q, grad2 = q0, 1.0
    if spec.block.norm == "none":
        for _ in range(depth):
            branch = q * phi  # act(x): x is a symmetric sum at every boundary
            for layer in range(k):
                branch = g * branch + bias
                if layer < k - 1:
                    branch *= phi
            grad2 *= lam2 + a2 * (g * phi) ** k
            q = lam2 * q + a2 * branch
        formula = f"(λ² + α²(g·φ)^k)^L with λ² = {lam2:g}, α = {alpha:.4g}, g·φ = {g * phi:.4g}, k = {k}, L = {depth}"
        return q / q0, grad2, formula, "He et al. 2016; Balduzzi et al. 2017"
    branch = g * phi + bias  # norm → unit second moment, act → φ, last layer → g·φ (+ b²)
    for _ in range(depth):
        if not q > 0:
            return None  # λ = 0 and α = 0: nothing is left to normalise, and the norm's Jacobian is undefined
        grad2 *= lam2 + a2 * g * phi / q
        q = lam2 * q + a2 * branch
    formula = (
        f"q_L = λ²q + α²(g·φ + b²) per block from q_0 = {q0:.4g}: λ² = {lam2:g}, α = {alpha:.4g}, g·φ = "
        f"{g * phi:.4g}, L = {depth}"
    )
    return q / q0, grad2, formula, "De & Smith 2020; Brock et al. 2021"


def variance_law(spec: Spec, case: Case, q0: float) -> Law | None:
    """The expected second-moment ratio E[x_L²]/E[x_0²], given the input's second moment q0."""
    r = _recursion(spec, case, q0)
    if r is None:
        return None
    return Law("E[x_L²]/E[x_0²]", r[0], r[2], r[3])


def gradient_law(spec: Spec, case: Case, q0: float) -> Law | None:
    """The expected gradient ratio g_0/g_L = √(E‖∂L/∂x_0‖²/E‖∂L/∂x_L‖²)."""
    r = _recursion(spec, case, q0)
    if r is not None:
        return Law("g_0/g_L", math.sqrt(r[1]), r[2], r[3])
    if MEANFIELD_HOOK is not None:
        chi = MEANFIELD_HOOK(spec, case)
        if chi is not None and chi > 0:
            return Law(
                "g_0/g_L", chi ** (case.depth / 2), f"χ₁^(L/2) = {chi:.4g}^({case.depth}/2)", "Schoenholz et al. 2017"
            )
    return None


def annotate(spec: Spec, case: Case, verdict: Any, measurements: Any) -> Any:
    """A failing verdict with the law's prediction appended to its detail (and to `extra["law"]`)
    where a law applies; anything else unchanged."""
    if verdict.passed or measurements is None or measurements.nonfinite_at is not None:
        return verdict
    q0 = measurements.act_sq_mean[0]
    if verdict.invariant == "variance_growth":
        law = variance_law(spec, case, q0)
        measured = measurements.act_sq_mean[-1] / q0 if q0 > 0 else math.nan
    elif verdict.invariant == "gradient_arrival":
        law = gradient_law(spec, case, q0)
        measured = measurements.gradient_ratio
    else:
        return verdict
    if law is None or not math.isfinite(measured):
        return verdict
    off = measured / law.predicted if law.predicted > 0 else math.inf
    text = (
        f"; the law predicts {law.quantity} = {law.predicted:.4g} [{law.formula}; {law.source}], measured "
        f"{measured:.4g} ({off:.3g}× the law)"
    )
    extra = {
        **verdict.extra,
        "law": {
            "quantity": law.quantity,
            "predicted": law.predicted,
            "measured": measured,
            "formula": law.formula,
            "source": law.source,
        },
    }
    return dataclasses.replace(verdict, detail=verdict.detail + text, extra=extra)
