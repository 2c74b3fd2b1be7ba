"""The `[expect.NAME]` tables of the built-in invariants: the keys every table has (`Expectation`:
holds or violated, where it applies, its drift) and each invariant's own bounds. The registry
(stability.spec.registry) names which model each invariant reads; `Expect`, one field per
registered invariant, is assembled from them in stability.spec.schema.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema

from stability.spec.values import ExpectKind, Growth, StrictModel


class Expectation(StrictModel):
    """The keys every `[expect.NAME]` table has; an invariant's own model derives from it."""

    expect: ExpectKind = "holds"
    #: The cases this invariant applies to: case key → the values it applies to (e.g.
    #: { branch_init = ["zero"] }); unnamed keys are unrestricted. Default: every case (on a
    #: built-in family identity_at_init also needs a zero-branch init). See stability.spec.applicability.
    applies_when: dict[str, list[str | int]] | None = None
    #: How far the observed number may move, either way, relative (0.1 = 10%), before
    #: `stability check --baseline` fails the change (stability.report.baseline; inf = never).
    drift: float = Field(0.1, ge=0.0, allow_inf_nan=True)


class GradientArrival(Expectation):
    """grad_norm[0] / grad_norm[-1] must lie in [lo, hi]; on a pre-norm token model, grad_norm[1] /
    grad_norm[-1], its embedding's entry factor reported beside (unless `include_entry`)."""

    lo: float = Field(0.1, gt=0.0)
    hi: float = Field(10.0, gt=0.0)
    #: Whether the ratio spans block 0's input x₀: unset, it does except on a pre-norm stack whose
    #: x₀ is the model's own token embedding (stability.judge.stream.entry_apart); true, always
    #: (g₀/g_L); false, never (g₁/g_L, the entry factor g₀/g₁ reported beside).
    include_entry: bool | None = None


class VarianceGrowth(Expectation):
    """Growth of the activation variance (or second moment) over depth."""

    statistic: Literal["variance", "second_moment"] = "variance"
    max_growth: Growth = "linear"
    max_ratio: float | None = Field(None, gt=0.0)
    min_ratio: float | None = Field(None, gt=0.0)
    bounded_ratio: float = Field(4.0, gt=1.0)


class IdentityAtInit(Expectation):
    """‖f(x) − x‖/‖x‖ ≤ atol and ‖g_in − g_out‖/‖g_out‖ ≤ atol for zero-branch cases."""

    atol: float = Field(0.0, ge=0.0)


class RankCollapse(Expectation):
    """Mean pairwise cosine similarity of the output tokens ≤ max_similarity (Dong et al. 2021)."""

    max_similarity: float = Field(0.9, gt=-1.0, le=1.0)


class AttentionEntropy(Expectation):
    """min over blocks and heads of the mean normalised attention-row entropy ≥ min_entropy (Zhai et al. 2023)."""

    min_entropy: float = Field(0.5, ge=0.0, le=1.0)


class GradientBalance(Expectation):
    """max / min of the per-block parameter-gradient norms ≤ max_spread (Xiong et al. 2020)."""

    max_spread: float = Field(10.0, ge=1.0)


class JacobianSpread(Expectation):
    """σ_max² / ⟨σ²⟩ of the input–output Jacobian ≤ max_spread, and ⟨σ²⟩ in [mean_lo, mean_hi] when set
    (Pennington, Schoenholz & Ganguli 2017). Measured after the probe, only when declared."""

    max_spread: float = Field(4.0, ge=1.0)
    mean_lo: float | None = Field(None, gt=0.0)
    mean_hi: float | None = Field(None, gt=0.0)
    probes: int = Field(16, ge=2, le=1024)
    iterations: int = Field(50, ge=1, le=10_000)
    exact: bool = False


class MeanFieldRate(Expectation):
    """The measured per-block factor of ‖∂L/∂x‖² matches the mean-field χ within k_sigma finite-width
    standard deviations (Schoenholz et al. 2017; the band is stability.judge.meanfield.log_factor_variance)."""

    k_sigma: float = Field(4.0, gt=0.0)


class Lesion(Expectation):
    """Removing one block (replacing it by the identity) changes the output by at most max_change,
    relative (Veit et al. 2016), over the blocks' maximum or median."""

    max_change: float = Field(0.5, gt=0.0)
    statistic: Literal["max", "median"] = "max"


def _depth_pair(value: Any) -> Any:
    """`compare_depths = [shallow, deep]` → (shallow, deep), shallow < deep."""
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        if not 1 <= value[0] < value[1]:
            raise ValueError(
                f"must be [shallow, deep] with 1 <= shallow < deep (got {value}); write [{min(value)}, {max(value)}]"
            )
        return tuple(value)
    raise ValueError("expected [shallow, deep], two depths, e.g. [4, 32]")


def _widths(value: Any) -> Any:
    if (
        isinstance(value, list)
        and len(value) >= 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        if value != sorted(set(value)) or value[0] < 1:
            raise ValueError(
                f"must be at least two increasing positive widths (got {value}); write "
                f"{sorted(set(v for v in value if v >= 1))}"
            )
        return value
    raise ValueError("expected a list of at least two widths, e.g. [64, 128, 256, 512]")


DepthPair = Annotated[
    tuple[int, int],
    BeforeValidator(_depth_pair),
    WithJsonSchema({"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2, "maxItems": 2}),
]


class UpdateSize(Expectation):
    """The coordinate check: |slope| of log RMS(Δh) against log width ≤ max_abs_slope."""

    widths: Annotated[
        list[int],
        BeforeValidator(_widths),
        WithJsonSchema({"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2}),
    ]
    max_abs_slope: float = Field(0.25, gt=0.0)
    at: Literal["all", "output"] = "all"


class Trainability(Expectation):
    """A short run: finite loss, final/initial ≤ max_loss_ratio; with compare_depths, the deeper
    stack's final loss ≤ max_depth_ratio × the shallower one's."""

    max_loss_ratio: float | None = Field(None, gt=0.0)
    compare_depths: DepthPair | None = None
    max_depth_ratio: float = Field(1.0, gt=0.0)


class ResidualSize(Expectation):
    """After the run, the blocks' relative change ‖x_(l+1) − x_l‖/‖x_l‖ (mean over blocks) ≤ max_mean;
    with compare_depths, the deeper stack's mean ≤ max_depth_ratio × the shallower one's."""

    max_mean: float | None = Field(None, gt=0.0)
    compare_depths: DepthPair | None = None
    max_depth_ratio: float = Field(1.0, gt=0.0)


class ResidualStream(Expectation):
    """The residual stream after its entry (stability.judge.stream): the gradient ratio over the
    blocks g₁/g_L within [lo, hi]; where given, the entry factor g₀/g₁ (what block 0 does to a
    stream that enters at the embedding's scale) within [entry_lo, entry_hi], the output's
    variance Var(x_L)/Var(x₀)/L^variance_exponent within [variance_lo, variance_hi] (exponent 0:
    bounded in depth, as a depth-scaled init intends), and every block's change of the stream
    at most max_block_change (a layer scale's near-identity blocks). Judged on the median of the
    case's seed ensemble."""

    lo: float = Field(0.1, gt=0.0)
    hi: float = Field(10.0, gt=0.0)
    entry_lo: float | None = Field(None, gt=0.0)
    entry_hi: float | None = Field(None, gt=0.0)
    variance_lo: float | None = Field(None, gt=0.0)
    variance_hi: float | None = Field(None, gt=0.0)
    variance_exponent: float = Field(0.0, ge=0.0, le=4.0)
    max_block_change: float | None = Field(None, gt=0.0)


class MeanShift(Expectation):
    """At the output, the average squared channel mean beyond sampling noise, relative to the
    average channel variance, ρ = (M − V/(N − 1)) / V, must be ≤ max_ratio (Brock, De & Smith 2021;
    stability/measure/channels.py). 0.25 lets the per-channel offsets carry at most a fifth of the second
    moment (ρ/(1 + ρ)); one ReLU of a standard normal already gives ρ ≈ 0.47."""

    max_ratio: float = Field(0.25, gt=0.0)
