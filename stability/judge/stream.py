"""Stage 5 for `residual_stream`: the residual stream after its entry, from the probe's boundary
numbers (no measurement of its own: g_l = ‖∂L/∂x_l‖, Var(x_l) and E[x_l²] at every boundary, which
the one forward and backward pass already records).

Why the entry is apart. A library language model's stream enters block 0 at its embedding's scale
(N(0, 0.02²) per element in GPT-2, Llama, Mistral, …), while each branch at the shipped width adds
O(1): block 0 lifts the stream by 25–50×, and its norms multiply the gradient at x₀ by about that
factor (a norm's Jacobian is 1/rms of what it reads). That factor is a property of the embedding's
init, not of the stack, and it puts `gradient_arrival`'s ratio g₀/g_L above any one-decade band at
depth 1. Here it is reported, and bounded where the spec says so, by itself:

    entry    e = g₀ / g₁                          in [entry_lo, entry_hi]   (where given)
    stream   s = g₁ / g_L                         in [lo, hi]
    variance v = Var(x_L) / Var(x₀) / L^p          in [variance_lo, variance_hi] (where given)
    change   c = max_l max(|√(E[x_{l+1}²]/E[x_l²]) − 1|, |g_l/g_{l+1} − 1|)   ≤ max_block_change

so g₀/g_L = e·s exactly. `p = variance_exponent`: 0 bounds the output's variance in depth (what a
residual projection scaled by 1/√(2N) intends, Radford et al. 2019: N blocks each add 1/N of a
unit), 1 bounds its growth per block (each of the L blocks adds O(1): E[x_L²] ≈ E[x₀²] + L·c). The
block change is zero for an identity block and of the order of the layer scale for a block
x + γ·F(x) with small γ (Touvron et al. 2021: init_values 1e-5 … 1e-6 intend near-identity
blocks); it reads the boundary statistics, so it is a lower bound on the block's distance from
the identity, exact for a block that scales its input.

Each number is a property of the architecture's distribution over seeds, so each is judged on the
median over the case's seed ensemble (`[probe] ensemble`: the case's network and S − 1 others of
its architecture; stability.measure.ensemble), with the range beside it; with no ensemble, on the
case's own network.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from stability.judge.verdict import Verdict
from stability.measure.measurements import Measurements

__all__ = ["StreamNumbers", "stream_numbers", "residual_stream"]

StreamNumbers = dict[str, float]


def stream_numbers(
    grad_norm: Sequence[float],
    act_var: Sequence[float],
    act_sq_mean: Sequence[float],
    *,
    variance_exponent: float = 0.0,
) -> StreamNumbers:
    """The four numbers of one network (the module docstring); nan where a denominator is 0."""
    g, v, q = list(grad_norm), list(act_var), list(act_sq_mean)
    L = len(g) - 1

    def div(a: float, b: float) -> float:
        return a / b if b > 0 and math.isfinite(a) and math.isfinite(b) else math.nan

    change = 0.0
    for i in range(L):
        fwd = div(q[i + 1], q[i])
        bwd = div(g[i], g[i + 1])
        parts = [abs(math.sqrt(fwd) - 1) if fwd >= 0 else math.nan, abs(bwd - 1)]
        change = math.nan if any(math.isnan(x) for x in parts) or math.isnan(change) else max(change, *parts)
    return {
        "entry": div(g[0], g[1]) if L >= 1 else math.nan,
        "stream": div(g[1], g[L]) if L >= 1 else math.nan,
        "variance": div(v[L], v[0]) / (L**variance_exponent) if L >= 1 else math.nan,
        "change": change if L >= 1 else math.nan,
    }


def _members(m: Measurements) -> tuple[list[list[float]], list[list[float]], list[list[float]]]:
    """(grad_norm, act_var, act_sq_mean) of every network the case measured: the seed ensemble
    where one was probed (variance_growth's, grown until decided, or this invariant's own), else
    the case's network alone."""
    for key in ("ensemble", "stream_ensemble"):
        ens = m.extra.get(key)
        if ens is not None and getattr(ens, "grad_norm", None):
            return list(ens.grad_norm), list(ens.act_var), list(ens.act_sq_mean)
    return [list(m.grad_norm)], [list(m.act_var)], [list(m.act_sq_mean)]


def _median(values: list[float]) -> float:
    live = [x for x in values if not math.isnan(x)]
    return statistics.median(live) if len(live) == len(values) and live else math.nan


def residual_stream(
    m: Measurements,
    *,
    lo: float = 0.1,
    hi: float = 10.0,
    entry_lo: float | None = None,
    entry_hi: float | None = None,
    variance_lo: float | None = None,
    variance_hi: float | None = None,
    variance_exponent: float = 0.0,
    max_block_change: float | None = None,
) -> Verdict:
    """The verdict on the four numbers' medians (the module docstring); the headline is the stream's gradient ratio."""
    from stability.judge.invariants import nonfinite_verdict

    per = f"/L^{variance_exponent:g}" if variance_exponent else ""
    parts = [f"g₁/g_L in [{lo:g}, {hi:g}]"]
    if entry_lo is not None or entry_hi is not None:
        parts.append(f"g₀/g₁ in [{entry_lo or 0:g}, {entry_hi if entry_hi is not None else math.inf:g}]")
    if variance_lo is not None or variance_hi is not None:
        parts.append(
            f"Var(x_L)/Var(x₀){per} in [{variance_lo or 0:g}, {variance_hi if variance_hi is not None else math.inf:g}]"
        )
    if max_block_change is not None:
        parts.append(f"block change ≤ {max_block_change:g}")
    bound = "; ".join(parts)
    bad = nonfinite_verdict(m, "residual_stream", bound)
    if bad is not None:
        return bad
    if m.grad_norm[-1] == 0:
        return Verdict(
            invariant="residual_stream",
            passed=False,
            observed=0.0,
            bound=bound,
            block=m.n_blocks,
            detail="the output gradient is zero; the loss does not depend on the output",
        )
    grads, variances, squares = _members(m)
    each = [
        stream_numbers(g, v, q, variance_exponent=variance_exponent)
        for g, v, q in zip(grads, variances, squares, strict=True)
    ]
    size = len(each)
    med = {k: _median([n[k] for n in each]) for k in ("entry", "stream", "variance", "change")}
    spread = {k: [n[k] if math.isfinite(n[k]) else None for n in each] for k in med}
    extra: dict[str, Any] = {
        **{k: med[k] if math.isfinite(med[k]) else None for k in med},
        "members": size,
        "per_member": spread,
    }

    def shown(key: str) -> str:
        if size == 1 or not math.isfinite(med[key]):
            return f"{med[key]:.4g}"
        live = [n[key] for n in each]
        return f"{med[key]:.4g} (median of {size} networks, {min(live):.3g} to {max(live):.3g})"

    checks: list[tuple[str, str, float, float | None, float | None]] = [
        ("stream", "stream gradient ratio g₁/g_L", med["stream"], lo, hi)
    ]
    if entry_lo is not None or entry_hi is not None:
        checks.append(("entry", "entry factor g₀/g₁", med["entry"], entry_lo, entry_hi))
    if variance_lo is not None or variance_hi is not None:
        checks.append(("variance", f"output variance Var(x_L)/Var(x₀){per}", med["variance"], variance_lo, variance_hi))
    if max_block_change is not None:
        checks.append(("change", "largest block change", med["change"], None, max_block_change))
    broken = []
    for key, label, value, low, high in checks:
        if not math.isfinite(value):
            broken.append(f"{label} is undefined (a zero variance or gradient at a boundary)")
        elif low is not None and value < low:
            broken.append(f"{label} {shown(key)} < {low:g}")
        elif high is not None and value > high:
            broken.append(f"{label} {shown(key)} > {high:g}")
    reported = [f"{label} {shown(key)}" for key, label, _, _, _ in checks]
    free = "" if "entry" in [c[0] for c in checks] else f"; entry factor g₀/g₁ {shown('entry')} (reported, not bounded)"
    if broken:
        return Verdict(
            invariant="residual_stream",
            passed=False,
            observed=med["stream"],
            bound=bound,
            block=None,
            detail="; ".join(broken) + f" (all: {', '.join(reported)}){free}",
            extra=extra,
        )
    return Verdict(
        invariant="residual_stream",
        passed=True,
        observed=med["stream"],
        bound=bound,
        block=None,
        detail="; ".join(reported) + " within the bounds" + free,
        extra=extra,
    )
