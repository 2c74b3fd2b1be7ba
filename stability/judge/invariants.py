"""Stage 5: Measurements → Verdicts. Pure functions of one probe's numbers, usable in any test.

Boundary l is the input of block l; boundary L is the stack's output, so "block l" in a message is
the block whose input is boundary l.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np

from stability.judge.entry import entry_apart
from stability.judge.growth import classify_growth, describe_ensemble, ensemble_growth
from stability.judge.verdict import Verdict
from stability.measure.measurements import Measurements
from stability.spec.schema import GROWTH_CLASSES
from stability.spec.values import Growth

__all__ = [
    "Verdict",
    "gradient_arrival",
    "variance_growth",
    "identity_at_init",
    "mean_shift",
    "nonfinite_verdict",
]


def nonfinite_verdict(m: Measurements, invariant: str, bound: str) -> Verdict | None:
    """The violation where the pass met NaN/inf first (every probe invariant's), or None."""
    if m.nonfinite_at is None:
        return None
    b = m.nonfinite_at
    if m.nonfinite_kind == "activation":
        where = (
            f"block {b - 1} produced a non-finite activation (NaN/inf first seen at boundary {b})"
            if b > 0
            else "the input holds NaN/inf"
        )
        block = max(b - 1, 0)
    else:
        where = (
            f"the gradient became non-finite at the input of block {b}"
            if b < m.n_blocks
            else "the output gradient is NaN/inf"
        )
        block = b
    return Verdict(
        invariant=invariant,
        passed=False,
        observed=math.nan,
        bound=bound,
        block=block,
        detail=where + "; lower the learning scale or use a wider dtype",
    )


def gradient_arrival(
    m: Measurements, *, lo: float = 0.1, hi: float = 10.0, include_entry: bool | None = None
) -> Verdict:
    """grad_norm[0] / grad_norm[-1] must lie in [lo, hi]; zero, underflow, NaN or inf is a collapse.

    With the entry apart (`include_entry` false, or unset on a pre-norm stack whose x₀ is its model's
    token embedding: `entry.entry_apart`) the ratio is grad_norm[1] / grad_norm[-1], from block 0's
    output, and the entry factor grad_norm[0] / grad_norm[1] is reported beside it, not bounded."""
    apart = (entry_apart(m) if include_entry is None else not include_entry) and m.n_blocks >= 1
    bound = f"[{lo:g}, {hi:g}]"
    bad = nonfinite_verdict(m, "gradient_arrival", bound)
    if bad is not None:
        return bad
    g = m.grad_norm
    top = g[-1]
    if top == 0:
        return Verdict(
            invariant="gradient_arrival",
            passed=False,
            observed=0.0,
            bound=bound,
            block=m.n_blocks,
            detail="the output gradient is zero; the loss does not depend on the output",
        )
    first_boundary = 1 if apart else 0
    ratios = [v / top for v in g]  # cumulative arrival at each boundary, from the output down
    ratio = ratios[first_boundary]
    extra: dict[str, Any] = {}
    entry_note = ""
    if apart:
        entry = g[0] / g[1] if g[1] > 0 else math.nan
        extra = {"entry": entry if math.isfinite(entry) else None, "judged": "g1/gL"}
        entry_note = (
            f" (g₁/g_L, from block 0's output; the embedding's entry factor g₀/g₁ {entry:.3g} is reported, "
            "not bounded: include_entry = true bounds g₀/g_L)"
        )
    if ratio == 0:
        first = next(i for i in range(len(g) - 1, -1, -1) if g[i] == 0)
        return Verdict(
            invariant="gradient_arrival",
            passed=False,
            observed=0.0,
            bound=bound,
            block=first,
            detail=f"the gradient is exactly zero from the input of block {first} down (collapse)",
            extra=extra,
        )
    if lo <= ratio <= hi:
        with np.errstate(divide="ignore"):
            worst = first_boundary + int(np.argmax(np.abs(np.log(np.asarray(ratios[first_boundary:])))))
        return Verdict(
            invariant="gradient_arrival",
            passed=True,
            observed=ratio,
            bound=bound,
            block=worst,
            detail=f"gradient ratio {ratio:.3g} within {bound}{entry_note}",
            extra=extra,
        )
    side, limit = ("vanishes", lo) if ratio < lo else ("explodes", hi)
    crossed = [
        i for i in range(len(g) - 1, first_boundary - 1, -1) if (ratios[i] < lo if ratio < lo else ratios[i] > hi)
    ]
    first = crossed[0]
    spanned = m.n_blocks - first_boundary
    per_block = ratio ** (1.0 / spanned) if spanned else 1.0
    return Verdict(
        invariant="gradient_arrival",
        passed=False,
        observed=ratio,
        bound=bound,
        block=first,
        detail=f"gradient ratio {_beside(ratio, limit)} {'<' if ratio < lo else '>'} {limit:g}: the gradient {side} "
        f"(crosses the bound at the input of block {first}; {per_block:.4g} per block on average){entry_note}",
        extra=extra,
    )


def _beside(value: float, limit: float) -> str:
    """`value` to 3 significant digits, or as many more as it takes not to print as `limit` (a ratio
    of 1.0049 against a bound of 1 reads "1.0049 > 1", not "1 > 1")."""
    for digits in range(3, 18):
        text = f"{value:.{digits}g}"
        if float(text) != limit:
            return text
    return repr(value)


def variance_growth(
    m: Measurements,
    *,
    max_growth: str = "linear",
    max_ratio: float | None = None,
    min_ratio: float | None = None,
    statistic: str = "variance",
    bounded_ratio: float = 4.0,
) -> Verdict:
    """The activation variance (or second moment) over depth: at most `max_growth`, and its ratio
    to the input's within [min_ratio, max_ratio] at every boundary."""
    if max_growth not in GROWTH_CLASSES:
        raise ValueError(f"max_growth={max_growth!r}: choose one of {', '.join(GROWTH_CLASSES)}")
    parts = [f"growth ≤ {max_growth}"]
    if max_ratio is not None:
        parts.append(f"ratio ≤ {max_ratio:g}")
    if min_ratio is not None:
        parts.append(f"ratio ≥ {min_ratio:g}")
    bound = ", ".join(parts)
    bad = nonfinite_verdict(m, "variance_growth", bound)
    if bad is not None:
        return bad
    values = m.act_var if statistic == "variance" else m.act_sq_mean
    if values[0] == 0:
        return Verdict(
            invariant="variance_growth",
            passed=False,
            observed=math.nan,
            bound=bound,
            block=0,
            detail=f"the input's {statistic} is zero; feed a non-constant input",
        )
    over = next((i for i, v in enumerate(values) if not math.isfinite(v)), None)
    if over is not None:  # the activations are finite (their mean is), but their squares overflow
        block = max(over - 1, 0)
        return Verdict(
            invariant="variance_growth",
            passed=False,
            observed=math.inf,
            bound=bound,
            block=block,
            detail=f"the {statistic} overflows the float range after block {block} (activations beyond ~1e19 "
            "in magnitude); the variance runs away: scale the branches or the init down",
        )
    fit = classify_growth(values, bounded_ratio=bounded_ratio)
    extra: dict[str, Any] = {
        "growth": fit.growth,
        "rate": fit.rate,
        "slope": fit.slope,
        "exponent": fit.exponent,
        "final_ratio": fit.final_ratio,
        "min_ratio": fit.min_ratio,  # the case's own network: what min_ratio and max_ratio bound
        "max_ratio": fit.max_ratio,
    }
    fits = f"{fit.growth} (×{fit.rate:.4g} per block, +{fit.slope:.3g}·s₀ per block)"
    judged: Growth = fit.growth
    ens, why = ensemble_growth(m.extra, statistic, bounded_ratio=bounded_ratio)
    if ens is not None:  # the law is judged on the seed ensemble (stability/judge/growth.py)
        judged = ens.lowest
        extra.update(
            growth=ens.growth,
            lowest=ens.lowest,
            decided=ens.decided,
            rate=ens.rate,
            slope=ens.slope,
            exponent=ens.exponent,
            final_ratio=ens.final_ratio,
            ensemble={"size": ens.size, "chi2": ens.chi2, **ens.spread()},
        )
        fits = describe_ensemble(ens)
    elif why != "no ensemble":
        extra["ensemble"] = {"skipped": why}
    r = fit.ratios
    if GROWTH_CLASSES.index(judged) > GROWTH_CLASSES.index(max_growth):
        shown = ens.ratios if ens is not None else r  # the profile the class was judged on
        first = next((i for i, v in enumerate(shown) if v > bounded_ratio), len(shown) - 1)
        return Verdict(
            invariant="variance_growth",
            passed=False,
            observed=fit.max_ratio,
            bound=bound,
            block=max(first - 1, 0),
            detail=f"{statistic} grows {fits}, worse than {max_growth}; it passes {bounded_ratio:g}× the "
            f"input's after block {max(first - 1, 0)}",
            extra=extra,
        )
    if max_ratio is not None and fit.max_ratio > max_ratio:
        first = next(i for i, v in enumerate(r) if v > max_ratio)
        return Verdict(
            invariant="variance_growth",
            passed=False,
            observed=fit.max_ratio,
            bound=bound,
            block=max(first - 1, 0),
            detail=f"{statistic} ratio {fit.max_ratio:.3g} > {max_ratio:g}, first after block "
            f"{max(first - 1, 0)}; growth {fits}",
            extra=extra,
        )
    if min_ratio is not None and fit.min_ratio < min_ratio:
        first = next(i for i, v in enumerate(r) if v < min_ratio)
        return Verdict(
            invariant="variance_growth",
            passed=False,
            observed=fit.min_ratio,
            bound=bound,
            block=max(first - 1, 0),
            detail=f"{statistic} ratio {fit.min_ratio:.3g} < {min_ratio:g}, first after block "
            f"{max(first - 1, 0)}; growth {fits}",
            extra=extra,
        )
    return Verdict(
        invariant="variance_growth",
        passed=True,
        observed=fit.max_ratio,
        bound=bound,
        block=int(np.argmax(r)),
        detail=f"{statistic} grows {fits}, max ratio {fit.max_ratio:.3g}",
        extra=extra,
    )


def identity_at_init(m: Measurements, *, atol: float = 0.0) -> Verdict:
    """‖f(x) − x‖/‖x‖ ≤ atol and ‖∂L/∂x − ∂L/∂y‖/‖∂L/∂y‖ ≤ atol (the Jacobian is the identity)."""
    bound = "exactly 0 (bit-exact)" if atol == 0 else f"≤ {atol:g}"
    bad = nonfinite_verdict(m, "identity_at_init", bound)
    if bad is not None:
        return bad
    if m.identity_error is None:
        return Verdict(
            invariant="identity_at_init",
            passed=False,
            observed=math.nan,
            bound=bound,
            block=None,
            detail="the output's shape differs from the input's, so the stack cannot be the identity",
        )
    fwd, bwd = m.identity_error, m.input_grad_error if m.input_grad_error is not None else 0.0
    observed = max(fwd, bwd)
    if observed <= atol:
        return Verdict(
            invariant="identity_at_init",
            passed=True,
            observed=observed,
            bound=bound,
            block=None,
            detail="output equals input and input gradient equals output gradient"
            + (" bit-exactly" if observed == 0 else f" (error {observed:.3g})"),
        )
    first = _first_change(m, atol)
    which = "output differs from the input" if fwd > atol else "input gradient differs from the output gradient"
    return Verdict(
        invariant="identity_at_init",
        passed=False,
        observed=observed,
        bound=bound,
        block=first,
        detail=f"{which}: relative error {fwd:.3g} forward, {bwd:.3g} backward; block {first} is the first to "
        "change its input"
        if first is not None
        else f"{which}: relative error {fwd:.3g} forward, {bwd:.3g} backward",
    )


def _first_change(m: Measurements, atol: float) -> int | None:
    """The first block whose output statistics differ from its input's (beyond atol)."""
    for i in range(m.n_blocks):
        for series in (m.act_sq_mean, m.act_var):
            a, b = series[i], series[i + 1]
            if abs(b - a) > atol * max(abs(a), 1e-300) or (atol == 0 and a != b):
                return i
    for i in range(m.n_blocks - 1, -1, -1):
        a, b = m.grad_norm[i + 1], m.grad_norm[i]
        if abs(b - a) > atol * max(abs(a), 1e-300) or (atol == 0 and a != b):
            return i
    return None


def mean_shift(m: Measurements, *, max_ratio: float = 0.25) -> Verdict:
    """ρ_L ≤ max_ratio at the output, ρ = (M − V/(N − 1)) / V from the channel statistics
    (`stability.measure.channels.ChannelStats`, in `m.extra["channels"]`): the mean shift that ReLU
    branches accumulate (Brock, De & Smith 2021), which the whole-tensor variance mixes in.

    Where the engine measured the case's seed ensemble (`m.extra["channel_ensemble"]`, one
    `ChannelProfile` per network, `stability.measure.ensemble.probe_channel_ensemble`), ρ_l is the median
    over the networks of their own ρ_l (each scale-free), so one network's sampling noise is not
    judged as the architecture's mean shift: a median, because ρ of a small network is heavy-tailed
    (a centred tanh stack at width 16, batch 8 drew one network of ρ = 2.1 among seven near 0,
    whose mean was 0.29); the range is reported beside it."""
    bound = f"≤ {max_ratio:g}"
    bad = nonfinite_verdict(m, "mean_shift", bound)
    if bad is not None:
        return bad
    prof = m.extra.get("channels")
    if prof is None:
        return Verdict(
            invariant="mean_shift",
            passed=False,
            observed=math.nan,
            bound=bound,
            block=None,
            detail="channel statistics were not measured; probe with "
            "observers=[stability.measure.channels.ChannelStats()]",
            measured=False,
        )
    members = m.extra.get("channel_ensemble") or [prof]
    per_member = [[p.ratio(i) for i in range(len(p.var))] for p in members]  # (S, L+1)
    rho = [_finite_median([r[i] for r in per_member]) for i in range(len(prof.var))]
    extra: dict[str, Any] = {
        "ratio": [r if math.isfinite(r) else None for r in rho],
        "sq_channel_mean": prof.sq_mean,
        "channel_var": prof.var,
        "whole_var": list(m.act_var),
    }
    final = rho[-1]
    spread = ""
    if len(members) > 1:
        finals = [r[-1] for r in per_member]
        extra["ensemble"] = {"size": len(members), "final_ratio": [r if math.isfinite(r) else None for r in finals]}
        live = [r for r in finals if math.isfinite(r)]
        if live:
            spread = f" (median of {len(members)} networks, from {min(live):.3g} to {max(live):.3g})"
    own = "this network's " if len(members) > 1 else ""
    numbers = (
        f"{own}average squared channel mean {prof.sq_mean[-1]:.3g}, average channel variance {prof.var[-1]:.3g} "
        f"(whole-tensor variance {m.act_var[-1]:.3g}; input {prof.sq_mean[0]:.3g}, {prof.var[0]:.3g})"
    )
    if not math.isfinite(final):
        return Verdict(
            invariant="mean_shift",
            passed=False,
            observed=math.nan,
            bound=bound,
            block=m.n_blocks,
            detail=f"the output's channel variance is zero or undefined: {numbers}",
            extra=extra,
        )
    if final <= max_ratio:
        return Verdict(
            invariant="mean_shift",
            passed=True,
            observed=final,
            bound=bound,
            block=None,
            detail=f"mean shift ρ = {final:.3g}{spread} at the output {bound}: {numbers}",
            extra=extra,
        )
    first = next(i for i, r in enumerate(rho) if math.isfinite(r) and r > max_ratio)
    return Verdict(
        invariant="mean_shift",
        passed=False,
        observed=final,
        bound=bound,
        block=max(first - 1, 0),
        detail=f"mean shift ρ = {final:.3g}{spread} > {max_ratio:g} at the output (first above the bound "
        f"after block {max(first - 1, 0)}): {numbers}; the per-channel offsets grow "
        "inside the variance",
        extra=extra,
    )


def _finite_median(values: list[float]) -> float:
    """The median of the finite values; nan when none is finite."""
    live = [v for v in values if math.isfinite(v)]
    return statistics.median(live) if live else math.nan
