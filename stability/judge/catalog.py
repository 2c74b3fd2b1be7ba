"""The built-in invariants, one registry entry each (stability.spec.registry).

Each entry maps its `[expect.NAME]` table onto its judge (here, with the entries), names what it
needs measured (`stability.judge.catalog_measurements`), which cases it applies to and what it asks
of a spec (`catalog_checks`), and how the search ranks its passing cases (`catalog_severity`).
Judges and measurements that need torch are imported when first called, so listing, explaining
and validating specs never import it.
The language-model invariants (`attention_logits` … `lr_sensitivity`) are registered the same way
by `stability.judge.lm_catalog`, imported at the end. A project adds its own invariant the same way (docs/extending.md).
"""

from __future__ import annotations

from typing import Any

from stability.judge.catalog_bands import ARRIVAL_BANDS, STREAM_BANDS, VARIANCE_BANDS
from stability.judge.catalog_checks import (
    check_arrival,
    check_identity,
    check_init,
    check_jacobian,
    check_mean_field,
    check_stream,
    check_tokens,
    check_training,
    check_variance,
    zero_branch,
)
from stability.judge.catalog_measurements import (
    attention_observers,
    channel_ensemble,
    channel_observers,
    depth_variants,
    entry_after,
    form_observers,
    init_after,
    init_construction,
    jacobian_after,
    lesion_after,
    lesion_ensemble,
    mean_field_after,
    mean_field_ensemble,
    rank_observers,
    stream_ensemble,
    train_memory,
    training_runs,
    variance_ensemble,
    width_variants,
)
from stability.judge.catalog_severity import (
    arrival_targets,
    init_severity,
    log10_targets,
    lower_is_closer,
    mean_field_severity,
    mean_field_targets,
    plain_targets,
    ratio_severity,
    size_severity,
    stream_severity,
)
from stability.judge.explanations import EXPLANATIONS
from stability.spec import schema as s
from stability.spec.init_expect import InitConformance
from stability.spec.registry import Invariant, batch, register_invariant

__all__: list[str] = []


# ----------------------------------------------------------------------------- judges


def _gradient_arrival(m: Any, e: s.GradientArrival) -> Any:
    from stability.judge.invariants import gradient_arrival

    return gradient_arrival(m, lo=e.lo, hi=e.hi, include_entry=e.include_entry)


def _variance_growth(m: Any, e: s.VarianceGrowth) -> Any:
    from stability.judge.invariants import variance_growth

    return variance_growth(
        m,
        max_growth=e.max_growth,
        max_ratio=e.max_ratio,
        min_ratio=e.min_ratio,
        statistic=e.statistic,
        bounded_ratio=e.bounded_ratio,
    )


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


# ----------------------------------------------------------------------------- training


def _train_update_size(spec: s.Spec, e: s.UpdateSize, case: Any, cache: dict[Any, Any]) -> Any:
    from stability.judge.train_invariants import update_size
    from stability.measure.train_update import update_sweep

    return update_size(update_sweep(spec, case, e.widths), max_abs_slope=e.max_abs_slope, at=e.at)


def _train_trainability(spec: s.Spec, e: s.Trainability, case: Any, cache: dict[Any, Any]) -> Any:
    from stability.judge.train_invariants import trainability

    return trainability(
        training_runs(spec, e, case, cache),
        max_loss_ratio=e.max_loss_ratio,
        compare_depths=e.compare_depths,
        max_depth_ratio=e.max_depth_ratio,
    )


def _train_residual_size(spec: s.Spec, e: s.ResidualSize, case: Any, cache: dict[Any, Any]) -> Any:
    from stability.judge.train_invariants import residual_size

    return residual_size(
        training_runs(spec, e, case, cache),
        max_mean=e.max_mean,
        compare_depths=e.compare_depths,
        max_depth_ratio=e.max_depth_ratio,
    )


_TRAIN_REFUSAL = "it is judged on an optimizer run (stability check runs it), not on the probe a sweep point takes"


# ----------------------------------------------------------------------------- the entries


def _entry(name: str, **fields: Any) -> Invariant:
    return Invariant(name=name, explanation=EXPLANATIONS[name], summary=EXPLANATIONS[name].summary, **fields)


with batch():
    register_invariant(
        _entry(
            "gradient_arrival",
            expectation=s.GradientArrival,
            label="gradient ratio ‖∂L/∂x₀‖ / ‖∂L/∂x_L‖ (from x₁ on a pre-norm token model, the entry apart)",
            judge=_gradient_arrival,
            observers=form_observers,
            after_probe=entry_after,
            check=check_arrival,
            severity=ratio_severity,
            targets=arrival_targets,
            bands=ARRIVAL_BANDS,
        )
    )
    register_invariant(
        _entry(
            "variance_growth",
            expectation=s.VarianceGrowth,
            label="largest ratio of a boundary's variance (or E[x²]) to the input's",
            judge=_variance_growth,
            check=check_variance,
            ensemble=variance_ensemble,
            targets=log10_targets("variance growth (log10 ratio)"),
            bands=VARIANCE_BANDS,
        )
    )
    register_invariant(
        _entry(
            "identity_at_init",
            expectation=s.IdentityAtInit,
            label="relative identity error, max of forward and backward",
            judge=_identity_at_init,
            applies=zero_branch,
            applies_reason="is not a zero-branch init",
            check=check_identity,
            targets=plain_targets("identity error"),
        )
    )
    register_invariant(
        _entry(
            "rank_collapse",
            expectation=s.RankCollapse,
            label="output tokens' mean pairwise cosine similarity",
            judge=_rank_collapse,
            check=check_tokens("rank_collapse"),
            observers=rank_observers,
            targets=plain_targets("rank_collapse"),
        )
    )
    register_invariant(
        _entry(
            "attention_entropy",
            expectation=s.AttentionEntropy,
            label="lowest normalised attention entropy (over blocks and heads)",
            judge=_attention_entropy,
            check=check_tokens("attention_entropy"),
            needs=frozenset({"attention"}),
            observers=attention_observers,
            severity=lower_is_closer,
            targets=plain_targets("attention_entropy", -1.0),
        )
    )
    register_invariant(
        _entry(
            "gradient_balance",
            expectation=s.GradientBalance,
            label="spread max/min of the per-block parameter-gradient norms",
            judge=_gradient_balance,
            targets=plain_targets("gradient_balance"),
        )
    )
    register_invariant(
        _entry(
            "jacobian_spectrum",
            expectation=s.JacobianSpread,
            label="Jacobian spread σ_max² / ⟨σ²⟩",
            judge=_jacobian_spectrum,
            check=check_jacobian,
            needs=frozenset({"blocks_alone"}),
            after_probe=jacobian_after,
            targets=log10_targets("Jacobian spread (log10)"),
        )
    )
    register_invariant(
        _entry(
            "mean_field",
            expectation=s.MeanFieldRate,
            label="measured per-block factor of ‖∂L/∂x‖² (median of the seed ensemble)",
            judge=_mean_field,
            check=check_mean_field,
            after_probe=mean_field_after,
            ensemble=mean_field_ensemble,
            severity=mean_field_severity,
            targets=mean_field_targets,
        )
    )
    register_invariant(
        _entry(
            "lesion",
            expectation=s.Lesion,
            label="relative output change when one block is removed",
            judge=_lesion,
            needs=frozenset({"same_shape_blocks"}),
            after_probe=lesion_after,
            ensemble=lesion_ensemble,
            targets=plain_targets("lesion change"),
        )
    )
    for _name, _model, _train, _cases, _label in (
        (
            "update_size",
            s.UpdateSize,
            _train_update_size,
            width_variants,
            "largest |slope| of log RMS(Δh) against log width",
        ),
        ("trainability", s.Trainability, _train_trainability, depth_variants, "final loss / initial loss"),
        (
            "residual_size",
            s.ResidualSize,
            _train_residual_size,
            depth_variants,
            "mean relative residual ‖x_(l+1) − x_l‖/‖x_l‖ after the run",
        ),
    ):
        register_invariant(
            _entry(
                _name,
                expectation=_model,
                label=_label,
                phase="training",
                train=_train,
                train_cases=_cases,
                memory=train_memory(_cases),
                check=check_training,
                severity=size_severity,
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
            check=check_init,
            after_probe=init_after,
            construction=init_construction,
            severity=init_severity,
        )
    )
    register_invariant(
        _entry(
            "mean_shift",
            expectation=s.MeanShift,
            label="mean shift ρ at the output (squared channel mean / channel variance)",
            judge=_mean_shift,
            observers=channel_observers,
            ensemble=channel_ensemble,
            targets=plain_targets("mean shift (squared channel mean / channel variance)"),
        )
    )

    register_invariant(
        _entry(
            "residual_stream",
            expectation=s.ResidualStream,
            label="stream gradient ratio ‖∂L/∂x₁‖ / ‖∂L/∂x_L‖ (median of the seed ensemble)",
            judge=_residual_stream,
            check=check_stream,
            ensemble=stream_ensemble,
            severity=stream_severity,
            targets=arrival_targets,
            bands=STREAM_BANDS,
        )
    )

from stability.judge import lm_catalog as _lm_catalog  # noqa: E402,F401  (the five language-model invariants, after these)
