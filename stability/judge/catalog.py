"""The built-in invariants, one registry entry each (stability.spec.registry).

Each entry maps its `[expect.NAME]` table onto its judge, names what it needs measured, how the
search ranks its passing cases and which cases it applies to. Judges and measurements that need
torch are imported when first called, so listing, explaining and validating specs never import it.
The language-model invariants (`attention_logits` … `lr_sensitivity`) are registered the same way
by `stability.judge.lm_catalog`, imported at the end. A project adds its own invariant the same way (docs/extending.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from stability.errors import SpecError
from stability.judge.explanations import EXPLANATIONS
from stability.spec import schema as s
from stability.spec.init_expect import InitConformance
from stability.spec.registry import FAMILIES, Invariant, batch, register_invariant

__all__: list[str] = []


# ----------------------------------------------------------------------------- judges


def _gradient_arrival(m: Any, e: s.GradientArrival) -> Any:
    from stability.judge.invariants import gradient_arrival

    return gradient_arrival(m, lo=e.lo, hi=e.hi)


def _variance_growth(m: Any, e: s.VarianceGrowth) -> Any:
    from stability.judge.invariants import variance_growth

    return variance_growth(m, max_growth=e.max_growth, max_ratio=e.max_ratio, min_ratio=e.min_ratio, statistic=e.statistic, bounded_ratio=e.bounded_ratio)


def _identity_at_init(m: Any, e: s.IdentityAtInit) -> Any:
    from stability.judge.invariants import identity_at_init

    return identity_at_init(m, atol=e.atol)


def _rank_collapse(m: Any, e: s.RankCollapse) -> Any:
    from stability.judge.token_invariants import rank_collapse

    return rank_collapse(m, max_similarity=e.max_similarity)


def _attention_entropy(m: Any, e: s.AttentionEntropy) -> Any:
    from stability.judge.token_invariants import attention_entropy

    return attention_entropy(m, min_entropy=e.min_entropy)


def _gradient_balance(m: Any, e: s.GradientBalance) -> Any:
    from stability.judge.token_invariants import gradient_balance

    return gradient_balance(m, max_spread=e.max_spread)


def _jacobian_spectrum(m: Any, e: s.JacobianSpread) -> Any:
    from stability.judge.theory_checks import jacobian_spectrum

    return jacobian_spectrum(m, max_spread=e.max_spread, mean_lo=e.mean_lo, mean_hi=e.mean_hi)


def _mean_field(m: Any, e: s.MeanFieldRate) -> Any:
    from stability.judge.theory_checks import mean_field

    return mean_field(m, k_sigma=e.k_sigma)


def _lesion(m: Any, e: s.Lesion) -> Any:
    from stability.judge.theory_checks import lesion

    return lesion(m, max_change=e.max_change, statistic=e.statistic)


def _init_conformance(m: Any, e: Any) -> Any:
    from stability.judge.init_conformance import init_conformance

    return init_conformance(m, e)


def _mean_shift(m: Any, e: s.MeanShift) -> Any:
    from stability.judge.invariants import mean_shift

    return mean_shift(m, max_ratio=e.max_ratio)


def _residual_stream(m: Any, e: s.ResidualStream) -> Any:
    from stability.judge.stream import residual_stream

    return residual_stream(
        m,
        lo=e.lo,
        hi=e.hi,
        entry_lo=e.entry_lo,
        entry_hi=e.entry_hi,
        variance_lo=e.variance_lo,
        variance_hi=e.variance_hi,
        variance_exponent=e.variance_exponent,
        max_block_change=e.max_block_change,
    )


# ----------------------------------------------------------------------------- what they need measured


def _rank_observers(spec: s.Spec) -> list[Any]:
    from stability.judge.token_invariants import RankCollapseObserver

    return [RankCollapseObserver()] if spec.block.layer == "tokens" else []


def _attention_observers(spec: s.Spec) -> list[Any]:
    from stability.judge.token_invariants import AttentionEntropyObserver

    return [AttentionEntropyObserver()] if spec.block.layer == "tokens" else []


def _channel_observers(spec: s.Spec) -> list[Any]:
    from stability.measure.channels import ChannelStats

    return [ChannelStats()]


def _jacobian_after(ctx: Any) -> Mapping[str, Any]:
    from stability.families.build import derive_seed
    from stability.measure.jacobian import jacobian_spectrum

    js = ctx.spec.expect.jacobian_spectrum
    return {"jacobian_spectrum": jacobian_spectrum(ctx.blocks, ctx.x, probes=js.probes, iterations=js.iterations, seed=derive_seed(ctx.case.seed, 3), exact=js.exact)}


def _mean_field_after(ctx: Any) -> Mapping[str, Any]:
    from stability.judge.theory_checks import predict

    return {"mean_field": predict(ctx.spec, ctx.case)}


def _lesion_after(ctx: Any) -> Mapping[str, Any]:
    from stability.measure.lesion import network_lesion

    return {"lesion": network_lesion(ctx.net, ctx.x)}


def _init_after(ctx: Any) -> Mapping[str, Any]:
    """The statistics of every parameter at init, of the model as the library built it (a library
    model's whole model, the shipped-width factors divided out; else the blocks)."""
    from stability.measure.init_stats import declared_config, init_record

    run = ctx.net.model if ctx.net is not None else None
    model, rescaled = (run.model, run.rescaled) if run is not None else (ctx.blocks, {})
    config: dict[str, Any] = {}
    if ctx.spec.family == "library":
        from stability.families.library import fill
        from stability.families.library_family import library_model

        config = fill(library_model(ctx.spec).config, ctx.case.as_dict())
    return {"init_conformance": init_record(model, declared_config(model, config), rescaled)}


def _variance_ensemble(ctx: Any) -> Mapping[str, Any]:
    """The growth law is judged on the case's seed ensemble, grown until it is decided
    (stability.judge.growth); the members are shared with mean_field."""
    from stability.judge.growth import enough_members
    from stability.measure.ensemble import probe_ensemble_until_decided

    if ctx.size <= 1:
        return {}
    vg = ctx.spec.expect.variance_growth
    ens = probe_ensemble_until_decided(ctx.spec, ctx.case, ctx.m, size=ctx.size, enough=enough_members(ctx.case.depth, bounded_ratio=vg.bounded_ratio))
    ctx.shared["probe_ensemble"] = ens
    return {"ensemble": ens}


def _mean_field_ensemble(ctx: Any) -> Mapping[str, Any]:
    from stability.measure.ensemble import probe_ensemble

    if ctx.size <= 1:
        return {}
    ens = ctx.shared.get("probe_ensemble") or probe_ensemble(ctx.spec, ctx.case, ctx.m, size=ctx.size)
    ctx.shared["probe_ensemble"] = ens
    return {"mean_field_ensemble": [(g[0], g[-1]) for g in ens.grad_norm]}


def _stream_ensemble(ctx: Any) -> Mapping[str, Any]:
    """residual_stream judges the ensemble's medians: variance_growth's members where it measured
    them (they carry each member's gradient norms), else an ensemble of its own, shared."""
    from stability.measure.ensemble import probe_ensemble

    if ctx.size <= 1 or "ensemble" in ctx.m.extra:
        return {}
    ens = ctx.shared.get("probe_ensemble") or probe_ensemble(ctx.spec, ctx.case, ctx.m, size=ctx.size)
    ctx.shared["probe_ensemble"] = ens
    return {"stream_ensemble": ens}


def _lesion_ensemble(ctx: Any) -> Mapping[str, Any]:
    from stability.measure.ensemble import lesion_ensemble

    if ctx.size <= 1 or "lesion" not in ctx.m.extra:
        return {}
    return {"lesion_ensemble": lesion_ensemble(ctx.spec, ctx.case, ctx.m.extra["lesion"], size=ctx.size)}


def _channel_ensemble(ctx: Any) -> Mapping[str, Any]:
    from stability.measure.ensemble import probe_channel_ensemble

    if ctx.size <= 1:
        return {}
    return {"channel_ensemble": probe_channel_ensemble(ctx.spec, ctx.case, ctx.m, size=ctx.size)}


# ----------------------------------------------------------------------------- training


def _train_update_size(spec: s.Spec, e: s.UpdateSize, case: Any, cache: dict[Any, Any]) -> Any:
    from stability.judge.train_invariants import update_size
    from stability.measure.train_update import update_sweep

    return update_size(update_sweep(spec, case, e.widths), max_abs_slope=e.max_abs_slope, at=e.at)


def _runs(spec: s.Spec, e: Any, case: Any, cache: dict[Any, Any]) -> list[Any]:
    """One optimizer run per compared depth, shared by trainability and residual_size (`cache`)."""
    import dataclasses

    from stability.measure.train import train_case

    runs = []
    for v in _depth_variants(e, case):
        key = (dataclasses.replace(v, depth=0), v.depth)
        if key not in cache:
            cache[key] = train_case(spec, v)
        runs.append(cache[key])
    return runs


def _depth_variants(e: Any, case: Any) -> list[Any]:
    import dataclasses

    depths = list(e.compare_depths) if e.compare_depths is not None else [case.depth]
    return [dataclasses.replace(case, depth=d) for d in depths]


def _width_variants(e: s.UpdateSize, case: Any) -> list[Any]:
    import dataclasses

    return [dataclasses.replace(case, width=w) for w in e.widths]


def _train_trainability(spec: s.Spec, e: s.Trainability, case: Any, cache: dict[Any, Any]) -> Any:
    from stability.judge.train_invariants import trainability

    return trainability(_runs(spec, e, case, cache), max_loss_ratio=e.max_loss_ratio, compare_depths=e.compare_depths, max_depth_ratio=e.max_depth_ratio)


def _train_residual_size(spec: s.Spec, e: s.ResidualSize, case: Any, cache: dict[Any, Any]) -> Any:
    from stability.judge.train_invariants import residual_size

    return residual_size(_runs(spec, e, case, cache), max_mean=e.max_mean, compare_depths=e.compare_depths, max_depth_ratio=e.max_depth_ratio)


def _train_memory(variants: Any) -> Any:
    """The largest of the runs one case trains one after another (stability.measure.train_memory)."""

    def memory(spec: s.Spec, e: Any, case: Any) -> int | None:
        from stability.measure.train_memory import train_bytes

        sizes = [train_bytes(spec, v) for v in variants(e, case)]
        return None if any(n is None for n in sizes) else max(n for n in sizes if n is not None)

    return memory


_TRAIN_REFUSAL = "it is judged on an optimizer run (stability check runs it), not on the probe a sweep point takes"


def _check_training(spec: s.Spec) -> None:
    """Shared by the training invariants: the run needs `[train]` and a built-in family's blocks."""
    declared = [n for n, _ in spec.invariants() if _is_training(n)]
    if spec.train is None:
        raise SpecError(spec.path, "train", f"is required by expect.{declared[0]} (the optimizer run it judges)", fix="add [train] with steps = 100, lr = 0.01 (see docs/training.md)")
    if FAMILIES.get(spec.family).user_code:
        raise SpecError(
            spec.path,
            f"expect.{declared[0]}",
            "is checked on the built-in families only (the run adds an input layer and a readout to the family's blocks)",
            fix="remove it, or describe the network with a built-in family",
        )


def _is_training(name: str) -> bool:
    from stability.spec.registry import INVARIANTS

    return name in INVARIANTS and INVARIANTS.get(name).training


# ----------------------------------------------------------------------------- severities and targets


def _ratio_severity(v: Any, e: s.GradientArrival) -> float:
    """Closeness to either end of [lo, hi] on a log scale."""
    if not v.observed > 0:
        return math.inf
    return -min(math.log(v.observed / e.lo), math.log(e.hi / v.observed))


def _stream_severity(v: Any, e: s.ResidualStream) -> float:
    """Closeness to failing of the stream's bounded numbers (the gradient ratio g₁/g_L, and the entry
    factor, the output variance and the block change where the spec bounds them): on a log scale,
    the largest over them of the distance past the nearest end of its band (negative inside), so a
    case that breaks any band is further gone than one inside every band."""
    if not v.observed > 0:
        return math.inf
    bands = {"stream": (e.lo, e.hi), "entry": (e.entry_lo, e.entry_hi), "variance": (e.variance_lo, e.variance_hi), "change": (None, e.max_block_change)}
    closeness = []
    for key, (low, high) in bands.items():
        if (low is None and high is None) or (key != "stream" and key not in v.extra):
            continue
        value = v.observed if key == "stream" else v.extra[key]
        if value is None or not math.isfinite(value) or value < 0 or (value == 0 and low):
            return math.inf
        if value == 0:  # an upper bound only (the block change of identity blocks): as far inside as can be
            continue
        closeness.append(max(math.log(low / value) if low else -math.inf, math.log(value / high) if high else -math.inf))
    return max(closeness, default=-math.inf)


def _lower_is_closer(v: Any, e: Any) -> float:
    return -v.observed if math.isfinite(v.observed) else math.inf


def _size_severity(v: Any, e: Any) -> float:
    """The headline number's size (a training invariant's slope magnitude, loss ratio, mean residual)."""
    return abs(v.observed) if math.isfinite(v.observed) else math.inf


def _mean_field_severity(v: Any, e: Any) -> float:
    if v.observed > 0 and v.extra.get("predicted", 0) > 0:
        return abs(math.log(v.observed / v.extra["predicted"]))
    return v.observed if math.isfinite(v.observed) else math.inf


def _init_severity(v: Any, e: Any) -> float:
    """For a passing case, the statistic closest to its tolerance (1 at the tolerance, so at most 1);
    for a failing one, 1 plus the count of parameters off the declared init (more is worse, and
    every failing case is further gone than any passing one); an unmeasured case, infinity."""
    if not math.isfinite(v.observed):
        return math.inf
    if v.observed > 0:
        return 1.0 + float(v.observed)
    return float(v.extra.get("worst_excess", 0.0))


def _log10(label: str) -> Any:
    def targets(v: Any) -> Sequence[tuple[float, str]]:
        return [(math.log10(v.observed), label)] if math.isfinite(v.observed) and v.observed > 0 else []

    return targets


def _plain(label: str, sign: float = 1.0) -> Any:
    def targets(v: Any) -> Sequence[tuple[float, str]]:
        return [(sign * v.observed, label)] if math.isfinite(v.observed) and v.observed > 0 else []

    return targets


def _arrival_targets(v: Any) -> Sequence[tuple[float, str]]:
    if not (math.isfinite(v.observed) and v.observed > 0):
        return []
    return [(-math.log10(v.observed), "vanishing gradient (log10)"), (math.log10(v.observed), "exploding gradient (log10)")]


def _mean_field_targets(v: Any) -> Sequence[tuple[float, str]]:
    if math.isfinite(v.observed) and v.observed > 0 and v.extra.get("predicted", 0) > 0:
        return [(abs(math.log(v.observed / v.extra["predicted"])), "mean-field mismatch (log)")]
    return []


# ----------------------------------------------------------------------------- applicability and spec checks


def _zero_branch(spec: s.Spec) -> Mapping[str, Sequence[Any]] | None:
    """identity_at_init applies to the family's zero-branch inits (with a branch at zero a residual
    block is the identity by construction, He et al. 2016); a family that decides what its
    branch_init means (a user's factory) has no such rule."""
    inits = FAMILIES.get(spec.family).zero_branch_inits
    return None if inits is None else {"branch_init": sorted(inits)}


def _check_identity(spec: s.Spec) -> None:
    inits = FAMILIES.get(spec.family).zero_branch_inits
    if inits is None:
        return
    if not inits:
        raise SpecError(spec.path, "expect.identity_at_init", f"family '{spec.family}' has no branch to zero, so it is never the identity by construction", fix="remove it")
    if not inits & set(spec.space.branch_init):
        raise SpecError(
            spec.path,
            "space.branch_init",
            "identity_at_init is checked on zero-branch cases, and this space has none",
            value=spec.space.branch_init,
            fix=f"add one of {', '.join(repr(i) for i in sorted(inits))}",
        )


def _check_tokens(name: str) -> Any:
    def check(spec: s.Spec) -> None:
        if spec.block.layer != "tokens":
            raise SpecError(spec.path, f"expect.{name}", "is measured over tokens, and this spec has no token inputs", fix='set block.layer = "tokens" (with space.tokens), or remove it')
        tokens = spec.space.tokens or (s.DEFAULT_SIZE, s.DEFAULT_SIZE)
        if tokens[0] < 2:
            raise SpecError(spec.path, "space.tokens", f"{name} compares tokens, so it needs at least 2", value=list(spec.space.tokens or ()), fix=f"start the range at 2 ([2, {max(tokens[1], 2)}])")

    return check


def _check_jacobian(spec: s.Spec) -> None:
    js = spec.expect.jacobian_spectrum
    if js is not None and js.mean_lo is not None and js.mean_hi is not None and js.mean_lo > js.mean_hi:
        raise SpecError(spec.path, "expect.jacobian_spectrum.mean_lo", f"is above mean_hi = {js.mean_hi}", value=js.mean_lo, fix="swap mean_lo and mean_hi")


def _check_mean_field(spec: s.Spec) -> None:
    from stability.spec.theory_keys import check_mean_field

    check_mean_field(spec)


def _check_init(spec: s.Spec) -> None:
    from stability.judge.init_conformance import check_table_name

    ic = spec.expect.init_conformance
    problem = check_table_name(ic.table)
    if problem:
        raise SpecError(spec.path, "expect.init_conformance.table", problem, value=ic.table)
    if spec.family != "library" and not FAMILIES.get(spec.family).user_code and not ic.rules:
        raise SpecError(
            spec.path,
            "expect.init_conformance",
            f"family '{spec.family}' draws its init from the spec's own [space] keys, and no rule table declares it",
            fix='add rows: rules = [{ module = "Linear", param = "weight", law = "normal", std = "...", source = "..." }]',
        )


def _check_arrival(spec: s.Spec) -> None:
    ga = spec.expect.gradient_arrival
    if ga is not None and ga.lo > ga.hi:
        raise SpecError(spec.path, "expect.gradient_arrival.lo", f"is above hi = {ga.hi}", value=ga.lo, fix="swap lo and hi")


def _check_stream(spec: s.Spec) -> None:
    rs = spec.expect.residual_stream
    if rs is None:
        return
    for low, high in (("lo", "hi"), ("entry_lo", "entry_hi"), ("variance_lo", "variance_hi")):
        a, b = getattr(rs, low), getattr(rs, high)
        if a is not None and b is not None and a > b:
            raise SpecError(spec.path, f"expect.residual_stream.{low}", f"is above {high} = {b}", value=a, fix=f"swap {low} and {high}")


def _check_variance(spec: s.Spec) -> None:
    vg = spec.expect.variance_growth
    if vg is not None and vg.min_ratio is not None and vg.max_ratio is not None and vg.min_ratio > vg.max_ratio:
        raise SpecError(spec.path, "expect.variance_growth.min_ratio", f"is above max_ratio = {vg.max_ratio}", value=vg.min_ratio)


# ----------------------------------------------------------------------------- the entries


def _entry(name: str, **fields: Any) -> Invariant:
    return Invariant(name=name, explanation=EXPLANATIONS[name], summary=EXPLANATIONS[name].summary, **fields)


with batch():
    register_invariant(
        _entry(
            "gradient_arrival",
            expectation=s.GradientArrival,
            label="gradient ratio ‖∂L/∂x₀‖ / ‖∂L/∂x_L‖",
            judge=_gradient_arrival,
            check=_check_arrival,
            severity=_ratio_severity,
            targets=_arrival_targets,
        )
    )
    register_invariant(
        _entry(
            "variance_growth",
            expectation=s.VarianceGrowth,
            label="largest ratio of a boundary's variance (or E[x²]) to the input's",
            judge=_variance_growth,
            check=_check_variance,
            ensemble=_variance_ensemble,
            targets=_log10("variance growth (log10 ratio)"),
        )
    )
    register_invariant(
        _entry(
            "identity_at_init",
            expectation=s.IdentityAtInit,
            label="relative identity error, max of forward and backward",
            judge=_identity_at_init,
            applies=_zero_branch,
            applies_reason="is not a zero-branch init",
            check=_check_identity,
            targets=_plain("identity error"),
        )
    )
    register_invariant(
        _entry(
            "rank_collapse",
            expectation=s.RankCollapse,
            label="output tokens' mean pairwise cosine similarity",
            judge=_rank_collapse,
            check=_check_tokens("rank_collapse"),
            observers=_rank_observers,
            targets=_plain("rank_collapse"),
        )
    )
    register_invariant(
        _entry(
            "attention_entropy",
            expectation=s.AttentionEntropy,
            label="lowest normalised attention entropy (over blocks and heads)",
            judge=_attention_entropy,
            check=_check_tokens("attention_entropy"),
            needs=frozenset({"attention"}),
            observers=_attention_observers,
            severity=_lower_is_closer,
            targets=_plain("attention_entropy", -1.0),
        )
    )
    register_invariant(
        _entry(
            "gradient_balance",
            expectation=s.GradientBalance,
            label="spread max/min of the per-block parameter-gradient norms",
            judge=_gradient_balance,
            targets=_plain("gradient_balance"),
        )
    )
    register_invariant(
        _entry(
            "jacobian_spectrum",
            expectation=s.JacobianSpread,
            label="Jacobian spread σ_max² / ⟨σ²⟩",
            judge=_jacobian_spectrum,
            check=_check_jacobian,
            needs=frozenset({"blocks_alone"}),
            after_probe=_jacobian_after,
            targets=_log10("Jacobian spread (log10)"),
        )
    )
    register_invariant(
        _entry(
            "mean_field",
            expectation=s.MeanFieldRate,
            label="measured per-block factor of ‖∂L/∂x‖² (median of the seed ensemble)",
            judge=_mean_field,
            check=_check_mean_field,
            after_probe=_mean_field_after,
            ensemble=_mean_field_ensemble,
            severity=_mean_field_severity,
            targets=_mean_field_targets,
        )
    )
    register_invariant(
        _entry(
            "lesion",
            expectation=s.Lesion,
            label="relative output change when one block is removed",
            judge=_lesion,
            needs=frozenset({"same_shape_blocks"}),
            after_probe=_lesion_after,
            ensemble=_lesion_ensemble,
            targets=_plain("lesion change"),
        )
    )
    for _name, _model, _train, _cases, _label in (
        ("update_size", s.UpdateSize, _train_update_size, _width_variants, "largest |slope| of log RMS(Δh) against log width"),
        ("trainability", s.Trainability, _train_trainability, _depth_variants, "final loss / initial loss"),
        ("residual_size", s.ResidualSize, _train_residual_size, _depth_variants, "mean relative residual ‖x_(l+1) − x_l‖/‖x_l‖ after the run"),
    ):
        register_invariant(
            _entry(
                _name,
                expectation=_model,
                label=_label,
                phase="training",
                train=_train,
                train_cases=_cases,
                memory=_train_memory(_cases),
                check=_check_training,
                severity=_size_severity,
                sweep_refusal=_TRAIN_REFUSAL,
                needs=frozenset({"blocks_alone"}),
            )
        )
    register_invariant(
        _entry(
            "init_conformance",
            expectation=InitConformance,
            label="parameters whose init breaks the model's declared rule",
            judge=_init_conformance,
            check=_check_init,
            after_probe=_init_after,
            severity=_init_severity,
        )
    )
    register_invariant(
        _entry(
            "mean_shift",
            expectation=s.MeanShift,
            label="mean shift ρ at the output (squared channel mean / channel variance)",
            judge=_mean_shift,
            observers=_channel_observers,
            ensemble=_channel_ensemble,
            targets=_plain("mean shift (squared channel mean / channel variance)"),
        )
    )

    register_invariant(
        _entry(
            "residual_stream",
            expectation=s.ResidualStream,
            label="stream gradient ratio ‖∂L/∂x₁‖ / ‖∂L/∂x_L‖ (median of the seed ensemble)",
            judge=_residual_stream,
            check=_check_stream,
            ensemble=_stream_ensemble,
            severity=_stream_severity,
            targets=_arrival_targets,
        )
    )

from stability.judge import lm_catalog as _lm_catalog  # noqa: E402,F401  (the five language-model invariants, after these)
