"""Stage 1: what a spec is: the pydantic models of the spec format (every table and key, its type
and range, unknown keys forbidden), its constants and its JSON Schema. Reading a file into these
models, and the checks across keys, are `stability.spec.load`'s.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, PlainValidator, WithJsonSchema, create_model
from pydantic.json_schema import SkipJsonSchema

from stability.errors import did_you_mean

__all__ = [
    "Spec",
    "Block",
    "Space",
    "Expect",
    "GradientArrival",
    "VarianceGrowth",
    "IdentityAtInit",
    "JacobianSpread",
    "MeanFieldRate",
    "Lesion",
    "Train",
    "UpdateSize",
    "Trainability",
    "ResidualSize",
    "MeanShift",
    "ResidualStream",
    "spec_schema",
    "Expectation",
    "rebuild",
    "DEFAULT_SIZE",
    "GROWTH_CLASSES",
    "ZERO_BRANCH_INITS",
    "IntSpace",
    "RankCollapse",
    "AttentionEntropy",
    "GradientBalance",
]

LayerKind = Literal["linear", "conv2d", "tokens"]
Activation = Literal["relu", "gelu", "tanh", "sigmoid", "identity"]
Norm = Literal["batch", "layer", "rms", "group", "none"]
Skip = Literal["identity", "projection", "scaled", "norm", "none"]
BranchInit = Literal["default", "zero", "rezero", "skipinit"]
WeightInit = Literal[
    "default",
    "kaiming_normal",
    "kaiming_uniform",
    "xavier_normal",
    "xavier_uniform",
    "orthogonal",
    "normal",
    "identity",
]
DType = Literal["float32", "float64", "bfloat16", "float16"]
NormPosition = Literal["pre", "post", "sandwich"]
Residual = Literal["none", "deepnorm", "rezero", "skipinit", "layerscale", "gpt2"]
Device = Literal["cpu", "cuda"]
Growth = Literal["decaying", "bounded", "linear", "polynomial", "exponential"]
ExpectKind = Literal["holds", "violated"]

GROWTH_CLASSES: tuple[str, ...] = get_args(Growth)
#: Branch inits under which every branch of a built-in residual family outputs exactly zero at
#: initialisation (the built-in families' `zero_branch_inits`, stability.families.catalog).
ZERO_BRANCH_INITS: frozenset[str] = frozenset({"zero", "rezero", "skipinit"})
#: The spatial size of conv2d inputs and the token count of (B, T, C) inputs when `[space]` leaves them out.
DEFAULT_SIZE = 8


class IntSpace(tuple[int, int]):
    """The values an integer key of `[space]` may take: `(lo, hi)` as a tuple (the smallest and
    largest drawable value), plus `values` (an explicit sorted set) or `multiple_of` (a step from
    0), so a strategy draws only valid values and a replayed case is checked for membership."""

    values: tuple[int, ...] | None
    multiple_of: int

    def __new__(cls, lo: int, hi: int, *, values: tuple[int, ...] | None = None, multiple_of: int = 1) -> IntSpace:
        self = super().__new__(cls, (lo, hi))
        self.values = values
        self.multiple_of = multiple_of
        return self

    @property
    def constrained(self) -> bool:
        return self.values is not None or self.multiple_of > 1

    def admits(self, value: int) -> bool:
        """Whether `value` is one the space can draw."""
        if self.values is not None:
            return value in self.values
        return self[0] <= value <= self[1] and value % self.multiple_of == 0

    def describe(self) -> str:
        """The set in the spec's own syntax, for messages: `[lo, hi]`, `{ values = [...] }`, …"""
        if self.values is not None:
            return "{ values = [" + ", ".join(map(str, self.values)) + "] }"
        if self.multiple_of > 1:
            return f"{{ range = [{self[0]}, {self[1]}], multiple_of = {self.multiple_of} }}"
        return f"[{self[0]}, {self[1]}]"

    def __repr__(self) -> str:
        return self.describe() if self.constrained else tuple.__repr__(self)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles with its constraints (specs travel to worker processes)."""
        return (_int_space, (self[0], self[1], self.values, self.multiple_of))


def _int_space(lo: int, hi: int, values: tuple[int, ...] | None, multiple_of: int) -> IntSpace:
    return IntSpace(lo, hi, values=values, multiple_of=multiple_of)


_INT_FORMS = "expected an integer or a [lo, hi] pair of integers, or a table { values = [...] } or { range = [lo, hi], multiple_of = m }"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_range(value: Any) -> Any:
    """`n`, `[lo, hi]` (inclusive), `{ values = [a, b, …] }` or `{ range = [lo, hi], multiple_of = m }`
    → an `IntSpace`. With `multiple_of`, lo and hi become the first and last multiple inside."""
    if isinstance(value, bool):
        raise ValueError(_INT_FORMS)
    if isinstance(value, int):
        return IntSpace(value, value)
    if isinstance(value, (list, tuple)):
        if len(value) != 2 or not all(_is_int(v) for v in value):
            raise ValueError(_INT_FORMS)
        lo, hi = value
        if lo > hi:
            raise ValueError(f"empty range: lo {lo} > hi {hi}; write [{hi}, {lo}]")
        return IntSpace(lo, hi)
    if isinstance(value, dict):
        unknown = sorted(set(value) - {"values", "range", "multiple_of"})
        if unknown:
            raise ValueError(f"unknown key '{unknown[0]}' in the table{did_you_mean(unknown[0], ['values', 'range', 'multiple_of'])}; {_INT_FORMS}")
        if "values" in value:
            if set(value) != {"values"}:
                raise ValueError("{ values = [...] } lists every value already; remove range/multiple_of")
            vals = value["values"]
            if not isinstance(vals, list) or not vals or not all(_is_int(v) for v in vals):
                raise ValueError("values must be a non-empty list of integers, e.g. { values = [64, 128, 256] }")
            ordered = tuple(sorted(set(vals)))
            return IntSpace(ordered[0], ordered[-1], values=ordered)
        if "range" not in value:
            raise ValueError("a table needs `values` or `range`, e.g. { range = [16, 256], multiple_of = 16 }")
        lo, hi = _int_range(value["range"])
        step = value.get("multiple_of", 1)
        if not _is_int(step) or step < 1:
            raise ValueError(f"multiple_of must be an integer ≥ 1 (got {step!r})")
        first, last = -(-lo // step) * step, (hi // step) * step
        if first > last:
            raise ValueError(f"no multiple of {step} lies in [{lo}, {hi}]; use e.g. range = [{max(step, first - step)}, {first}]")
        return IntSpace(first, last, multiple_of=step)
    raise ValueError(_INT_FORMS)


def _positive_range(value: Any) -> Any:
    space = _int_range(value)
    lo, hi = space
    if lo < 1:
        if space.constrained:
            raise ValueError(f"must be at least 1 (got {lo}); drop {lo} from the set")
        raise ValueError(f"must be at least 1 (got {lo}); use a range like [1, {max(hi, 1)}]")
    return space


def _seed_range(value: Any) -> Any:
    space = _int_range(value)
    lo, hi = space
    if lo < 0 or hi >= 2**63:
        raise ValueError("seeds must lie in [0, 2**63 - 1]")
    return space


def _nonempty_list(value: Any) -> Any:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and not value:
        raise ValueError("must name at least one choice")
    return value


def _range_schema(minimum: int) -> WithJsonSchema:
    one = {"type": "integer", "minimum": minimum}
    pair = {"type": "array", "items": one, "minItems": 2, "maxItems": 2}
    values = {"type": "object", "properties": {"values": {"type": "array", "items": one, "minItems": 1}}, "required": ["values"], "additionalProperties": False}
    stepped = {
        "type": "object",
        "properties": {"range": {"anyOf": [one, pair]}, "multiple_of": {"type": "integer", "minimum": 1}},
        "required": ["range"],
        "additionalProperties": False,
    }
    return WithJsonSchema(
        {
            "anyOf": [one, pair, values, stepped],
            "description": "n, an inclusive [lo, hi] range, { values = [...] }, or { range = [lo, hi], multiple_of = m }",
        }
    )


def _dump_space(space: tuple[int, int]) -> Any:
    """An `IntSpace` (or a default plain pair) in the spec's own syntax, for `model_dump`."""
    if not isinstance(space, IntSpace):
        return [space[0], space[1]]
    if space.values is not None:
        return {"values": list(space.values)}
    if space.multiple_of > 1:
        return {"range": [space[0], space[1]], "multiple_of": space.multiple_of}
    return [space[0], space[1]]


IntRange = Annotated[IntSpace, PlainValidator(_positive_range), PlainSerializer(_dump_space), _range_schema(1)]
SeedRange = Annotated[IntSpace, PlainValidator(_seed_range), PlainSerializer(_dump_space), _range_schema(0)]


def _choices(kind: Any) -> Any:
    one = {"enum": list(get_args(kind))}
    schema = {"anyOf": [one, {"type": "array", "items": one, "minItems": 1}], "description": "one choice or a list"}
    return Annotated[list[kind], BeforeValidator(_nonempty_list), WithJsonSchema(schema)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


def _branch_scale(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError('expected a number or "1/sqrt(depth)" or "1/depth"')
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return float(value)
    if value in ("1/sqrt(depth)", "1/depth"):
        return value
    raise ValueError('expected a number or "1/sqrt(depth)" or "1/depth"' + did_you_mean(value, ["1/sqrt(depth)", "1/depth"]))


def _float_pair(value: Any) -> Any:
    """A TOML array `[a, b]` → (a, b): strict mode accepts only a tuple for a tuple field."""
    if isinstance(value, list) and len(value) == 2:
        return tuple(value)
    return value


def _bias_init(value: Any) -> Any:
    if value == "default":
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return float(value)
    raise ValueError('expected a number or "default"')


class Block(_Model):
    """The block's structure and options. Which keys apply depends on the family."""

    layer: LayerKind = "linear"
    activation: Activation = "relu"
    norm: Norm = "none"
    norm_groups: int = Field(default=8, ge=1)
    skip: Skip = "identity"
    skip_scale: float | None = None
    projection_spectrum: Annotated[tuple[float, float], BeforeValidator(_float_pair)] | None = None
    branch_layers: int = Field(default=2, ge=1, le=2)
    branch_scale: Annotated[float | str, BeforeValidator(_branch_scale)] = 1.0
    gate_bias: float = -2.0
    growth: int = Field(default=8, ge=1)
    transition_every: int = Field(default=0, ge=0)
    compression: float = Field(default=1.0, gt=0.0, le=1.0)
    kernel_size: int = Field(default=3, ge=1)
    factory: str | None = None
    factory_args: dict[str, Any] = Field(default_factory=dict)
    norm_position: NormPosition = "pre"
    causal: bool = False
    heads: int | None = Field(default=None, ge=1)
    head_dim: int | None = Field(default=None, ge=1)
    mlp: bool = True
    mlp_ratio: float = Field(default=4.0, gt=0.0)
    residual: Residual = "none"
    layerscale_init: float = Field(default=0.1, gt=0.0)
    # The transformer's training-stability options (cross-key checks: stability.spec.lm_keys).
    #: LayerNorm or RMSNorm on each head's queries and keys before their dot product (Dehghani et al. 2023).
    qk_norm: Literal["none", "layer", "rms"] = "none"
    #: Attention logits s → cap·tanh(s/cap) before the softmax (Gemma 2 team 2024).
    attn_softcap: float | None = Field(default=None, gt=0.0)
    #: Every linear layer of attention and MLP as W·γ/σ(W), σ its spectral norm (Zhai et al. 2023).
    sigma_reparam: bool = False


class Space(_Model):
    """The search space cases are drawn from. Ranges are inclusive `[lo, hi]` or a single value."""

    depth: IntRange
    width: IntRange
    batch: IntRange = (8, 8)  # type: ignore[assignment]  # a plain pair: what the JSON schema shows as the default
    spatial: IntRange | None = None
    input_width: IntRange | None = None
    weight_init: _choices(WeightInit) = ["default"]  # type: ignore[valid-type]
    init_std: float = Field(0.02, gt=0.0)
    init_gain: float = 1.0
    bias_init: Annotated[float | str, BeforeValidator(_bias_init)] = "default"
    branch_init: _choices(BranchInit) = ["default"]  # type: ignore[valid-type]
    dtype: _choices(DType) = ["float32"]  # type: ignore[valid-type]
    device: _choices(Device) = ["cpu", "cuda"]  # type: ignore[valid-type]
    seed: SeedRange = (0, 2**16 - 1)  # type: ignore[assignment]
    examples: list[str] = Field(default_factory=list)
    tokens: IntRange | None = None


class Expectation(_Model):
    """The keys every `[expect.NAME]` table has; an invariant's own model derives from it."""

    expect: ExpectKind = "holds"
    #: The cases this invariant applies to: case key → the values it applies to (e.g.
    #: { branch_init = ["zero"] }); unnamed keys are unrestricted. Default: every case (on a
    #: built-in family identity_at_init also needs a zero-branch init). See stability.spec.applicability.
    applies_when: dict[str, list[str | int]] | None = None
    #: How far the observed number may move, either way, relative (0.1 = 10%), before
    #: `stability check --baseline` fails the change (stability.report.baseline; inf = never).
    drift: float = Field(0.1, ge=0.0)


class GradientArrival(Expectation):
    """grad_norm[0] / grad_norm[-1] must lie in [lo, hi]."""

    lo: float = Field(0.1, gt=0.0)
    hi: float = Field(10.0, gt=0.0)


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
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        if not 1 <= value[0] < value[1]:
            raise ValueError(f"must be [shallow, deep] with 1 <= shallow < deep (got {value}); write [{min(value)}, {max(value)}]")
        return tuple(value)
    raise ValueError("expected [shallow, deep], two depths, e.g. [4, 32]")


def _widths(value: Any) -> Any:
    if isinstance(value, list) and len(value) >= 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        if value != sorted(set(value)) or value[0] < 1:
            raise ValueError(f"must be at least two increasing positive widths (got {value}); write {sorted(set(v for v in value if v >= 1))}")
        return value
    raise ValueError("expected a list of at least two widths, e.g. [64, 128, 256, 512]")


DepthPair = Annotated[tuple[int, int], BeforeValidator(_depth_pair), WithJsonSchema({"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2, "maxItems": 2})]


class UpdateSize(Expectation):
    """The coordinate check: |slope| of log RMS(Δh) against log width ≤ max_abs_slope."""

    widths: Annotated[list[int], BeforeValidator(_widths), WithJsonSchema({"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2})]
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


class Probe(_Model):
    loss: Literal["projection", "sum"] = "projection"
    mode: Literal["train", "eval"] = "train"
    checkpoint_every: int = Field(default=0, ge=0)
    #: Training flag of every module but the batch-statistics norms (dropout, attention dropout,
    #: stochastic depth): "off" measures the network's deterministic function; "on" one dropout
    #: draw, seeded from the case. Independent of `mode`, which sets the norms.
    dropout: Literal["on", "off"] = "off"
    #: Seeds the variance-growth law is judged on (the case's and ensemble − 1 derived ones;
    #: stability/judge/growth.py). 1 judges the case's own profile alone.
    ensemble: int = Field(default=8, ge=1, le=256)
    #: The profiles whose search judges the spec's probe invariants; in the others they are skipped
    #: and say so (a replayed `--case` runs in any profile). `train.profiles` does the same for
    #: the training invariants.
    profiles: Annotated[list[Literal["ci", "dev", "thorough"]], BeforeValidator(_nonempty_list)] = ["ci", "dev", "thorough"]
    #: The cases the ci profile judges (case strings, `"depth=2"`; keys left out take the corner
    #: value): where given, the ci search draws no other case, so a spec whose cases are costly
    #: (a library model and its seed ensemble) has a fixed, small ci cost. dev and thorough try
    #: them first, then search.
    ci_cases: list[str] = Field(default_factory=list)


class Train(_Model):
    """The optimizer run of the training invariants (stability.measure.train): every run is full-batch on
    a fixed synthetic set drawn from the case's seed, so it replays bit-exactly on the CPU."""

    steps: int = Field(ge=1, le=10_000)
    optimizer: Literal["sgd", "adam", "adamw"] = "sgd"
    lr: float = Field(gt=0.0)
    warmup: int = Field(0, ge=0)
    parametrization: Literal["sp", "mup"] = "sp"
    base_width: int = Field(64, ge=1)
    task: Literal["teacher", "labels", "markov"] = "teacher"
    samples: int = Field(64, ge=1, le=65_536)
    input_dim: int = Field(16, ge=1)
    outputs: int = Field(4, ge=1)
    seconds: float = Field(30.0, gt=0.0)
    profiles: Annotated[list[Literal["ci", "dev", "thorough"]], BeforeValidator(_nonempty_list)] = ["ci", "dev", "thorough"]
    cases: int = Field(3, ge=1, le=100)
    # The language-model run, task = "markov" (stability.measure.lm_train; cross-key checks: stability.spec.lm_keys).
    #: The token task: an order-`order` Markov chain over `vocab` tokens, rows softmax(concentration·g), g ~ N(0, I).
    vocab: int = Field(64, ge=2, le=512)
    order: int = Field(1, ge=1, le=4)
    concentration: float = Field(2.0, ge=0.0, le=100.0)
    #: Sequences held out from training, on which the final loss is measured.
    eval_sequences: int = Field(64, ge=1, le=4096)
    #: AdamW (Loshchilov & Hutter 2019): β₁, β₂, ε, and a weight decay `coupled` (θ ← θ − η_t·λ·θ, as
    #: torch.optim.AdamW) or `independent` of the learning rate (θ ← θ − s_t·λ·θ, s_t the schedule's factor).
    betas: Annotated[tuple[float, float], BeforeValidator(_float_pair)] = (0.9, 0.999)
    eps: float = Field(1e-8, gt=0.0)
    weight_decay: float = Field(0.0, ge=0.0)
    decay: Literal["coupled", "independent"] = "coupled"
    #: The gradient's global norm clipped to this (none when unset).
    clip: float | None = Field(None, gt=0.0)
    #: After the linear warm-up: a constant rate, or cosine decay to min_lr_ratio·lr at the last step.
    schedule: Literal["constant", "cosine"] = "constant"
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0)
    #: The output z-loss coefficient: loss += z_loss·mean(log² Z) (Chowdhery et al. 2022, PaLM).
    z_loss: float = Field(0.0, ge=0.0)
    #: Output logits z → cap·tanh(z/cap) (Gemma 2 team 2024); none when unset.
    logit_softcap: float | None = Field(None, gt=0.0)
    #: The readout shares the token embedding's weights (logits = h·Eᵀ/√width).
    tied: bool = False
    #: The run's measurements (attention logits and entropy, log Z, gradient and update RMS) every this many steps.
    record_every: int = Field(1, ge=1)


if TYPE_CHECKING:  # the built-in invariants' fields, for type checkers; at run time `rebuild` makes the model

    class Expect(_Model):
        gradient_arrival: GradientArrival | None
        variance_growth: VarianceGrowth | None
        identity_at_init: IdentityAtInit | None
        rank_collapse: RankCollapse | None
        attention_entropy: AttentionEntropy | None
        gradient_balance: GradientBalance | None
        jacobian_spectrum: JacobianSpread | None
        mean_field: MeanFieldRate | None
        lesion: Lesion | None
        update_size: UpdateSize | None
        trainability: Trainability | None
        residual_size: ResidualSize | None
        mean_shift: MeanShift | None
        residual_stream: ResidualStream | None

        def __getattr__(self, name: str) -> Any: ...  # a plugin's invariants

else:

    class Expect(_Model):
        """The `[expect]` table: one optional field per registered invariant. Rebuilt by `rebuild`
        whenever an invariant is registered (stability.spec.registry); until the built-in catalogue
        is registered it has none."""


#: The names of the registered families (a `Literal` after `rebuild`).
FamilyName = str


class Spec(_Model):
    """A validated spec. `path` is where it was read from ('<string>' when parsed from text).
    `options` holds the family's own `[block]` keys (its `Family.options` model), when it has any."""

    name: str = Field(min_length=1)
    description: str
    family: FamilyName
    block: Block = Block()
    space: Space
    expect: Expect
    probe: Probe = Probe()
    path: str = "<string>"
    train: Train | None = None
    options: Annotated[Any, SkipJsonSchema()] = None

    def invariants(self) -> list[tuple[str, Expectation]]:
        """(name, expectation) for every registered invariant the spec declares, in the order they were registered."""
        from stability.spec.registry import INVARIANTS

        return [(n, e) for n in INVARIANTS.names() if (e := getattr(self.expect, n, None)) is not None]


class _ExpectBase(_Model):
    """What every rebuilt `Expect` derives from: it pickles as its declared tables, rebuilt with the
    `Expect` of the process that reads it, so a spec made before the registry changed (a plugin or a
    test registered an invariant) still pickles, and a worker reads it with its own registry."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_expect_from, ({name: getattr(self, name) for name in type(self).model_fields if getattr(self, name) is not None},))


def _expect_from(tables: dict[str, Any]) -> Any:
    return globals()["Expect"](**tables)


def rebuild(invariants: Iterable[Any], families: Iterable[Any]) -> None:
    """Rebuild `Expect` (one field per registered invariant) and the family names of `Spec` from
    the registries (`stability.spec.registry` calls this when an entry is registered). The new
    `Expect` replaces this module's, so pickled specs name the current one."""
    fields: dict[str, Any] = {entry.name: (entry.expectation | None, None) for entry in invariants}
    model = create_model("Expect", __base__=_ExpectBase, __module__=__name__, __doc__=Expect.__doc__, **fields)
    model.__qualname__ = "Expect"
    names = tuple(f.name for f in families)
    family_names: Any = Literal[names] if names else str
    globals().update(Expect=model, FamilyName=family_names)  # what pickles of specs name
    fields_ = Spec.__pydantic_fields__
    fields_["expect"].annotation = model
    fields_["family"].annotation = family_names
    Spec.model_rebuild(force=True)


def spec_schema() -> dict[str, Any]:
    """The JSON Schema of the spec format (for editors and TOML language servers): every
    registered invariant's `[expect.NAME]` table, every family, and the families' own `[block]` keys."""
    from stability.spec.registry import FAMILIES

    schema = Spec.model_json_schema()
    schema["properties"].pop("path", None)
    schema["properties"].pop("options", None)
    block = schema.get("$defs", {}).get("Block")
    for fam in FAMILIES:
        if fam.options is None or block is None:
            continue
        own = fam.options.model_json_schema()
        for key, prop in own.get("properties", {}).items():
            block["properties"].setdefault(key, {**prop, "description": f"family '{fam.name}' only" + (f": {prop['description']}" if prop.get("description") else "")})
        for name, definition in own.get("$defs", {}).items():
            schema.setdefault("$defs", {}).setdefault(name, definition)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "stability spec"
    schema["description"] = "A stability spec file: the architecture, its search space and the invariants it must satisfy."
    return schema
