"""Stage 1: what a spec is: the pydantic models of the spec format's tables (`[block]`, `[space]`,
`[probe]`, `[train]`, and `Expect`, one `[expect.NAME]` field per registered invariant, rebuilt
from the registries) and the `Spec` they make. The value types of its keys are in
`stability.spec.values`, the built-in invariants' tables in `stability.spec.expectations` (both
re-exported here, the surface a plugin's own expectation derives from), the JSON Schema in
`stability.spec.json_schema`. Reading a file into these models is `stability.spec.load`'s, the
checks across keys `stability.spec.combinations`'.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BeforeValidator, Field, create_model
from pydantic.json_schema import SkipJsonSchema

from stability.spec.expectations import (
    AttentionEntropy,
    Expectation,
    GradientArrival,
    GradientBalance,
    IdentityAtInit,
    JacobianSpread,
    Lesion,
    MeanFieldRate,
    MeanShift,
    RankCollapse,
    ResidualSize,
    ResidualStream,
    Trainability,
    UpdateSize,
    VarianceGrowth,
)
from stability.spec.values import (
    DEFAULT_SIZE,
    GROWTH_CLASSES,
    Activation,
    BiasInit,
    BranchInit,
    BranchScale,
    Device,
    DType,
    FloatPair,
    IntRange,
    IntSpace,
    LayerKind,
    Norm,
    NormPosition,
    Residual,
    SeedRange,
    Skip,
    StrictModel,
    WeightInit,
    choices,
    nonempty_list,
)

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
    "Expectation",
    "rebuild",
    "DEFAULT_SIZE",
    "GROWTH_CLASSES",
    "IntSpace",
    "RankCollapse",
    "AttentionEntropy",
    "GradientBalance",
    "BranchInit",
    "DType",
    "WeightInit",
]


class Block(StrictModel):
    """The block's structure and options. Which keys apply depends on the family."""

    layer: LayerKind = "linear"
    activation: Activation = "relu"
    norm: Norm = "none"
    norm_groups: int = Field(default=8, ge=1)
    skip: Skip = "identity"
    skip_scale: float | None = None
    projection_spectrum: FloatPair | None = None
    branch_layers: int = Field(default=2, ge=1, le=2)
    branch_scale: BranchScale = 1.0
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


class Space(StrictModel):
    """The search space cases are drawn from. Ranges are inclusive `[lo, hi]` or a single value."""

    depth: IntRange
    width: IntRange
    batch: IntRange = (8, 8)  # type: ignore[assignment]  # a plain pair: what the JSON schema shows as the default
    spatial: IntRange | None = None
    input_width: IntRange | None = None
    weight_init: choices(WeightInit) = ["default"]  # type: ignore[valid-type]
    init_std: float = Field(0.02, gt=0.0)
    init_gain: float = 1.0
    bias_init: BiasInit = "default"
    branch_init: choices(BranchInit) = ["default"]  # type: ignore[valid-type]
    dtype: choices(DType) = ["float32"]  # type: ignore[valid-type]
    device: choices(Device) = ["cpu", "cuda"]  # type: ignore[valid-type]
    seed: SeedRange = (0, 2**16 - 1)  # type: ignore[assignment]
    examples: list[str] = Field(default_factory=list)
    tokens: IntRange | None = None


class Probe(StrictModel):
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
    profiles: Annotated[list[Literal["ci", "dev", "thorough"]], BeforeValidator(nonempty_list)] = [
        "ci",
        "dev",
        "thorough",
    ]
    #: The cases the ci profile judges (case strings, `"depth=2"`; keys left out take the corner
    #: value): where given, the ci search draws no other case, so a spec whose cases are costly
    #: (a library model and its seed ensemble) has a fixed, small ci cost. dev and thorough try
    #: them first, then search.
    ci_cases: list[str] = Field(default_factory=list)
    #: The per-case time limit, in seconds, that this spec's cases need at least (a model probed at
    #: its shipped size takes minutes): the run's limit (`--case-timeout`, default 120 s) is raised
    #: to it for this spec's cases, never lowered; a run without a limit (`--case-timeout 0`) keeps none.
    case_timeout: float | None = Field(default=None, gt=0.0, allow_inf_nan=False)
    #: The torch intra-op threads this spec's cases run with at least (a model probed at its
    #: shipped size is hours of arithmetic on one core): the run's threads (`--threads`, default
    #: 1) are raised to it while its cases run, never lowered. The numbers are those of this many
    #: threads on every machine, as with `--threads`.
    threads: int | None = Field(default=None, ge=1, le=1024)


class Train(StrictModel):
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
    profiles: Annotated[list[Literal["ci", "dev", "thorough"]], BeforeValidator(nonempty_list)] = [
        "ci",
        "dev",
        "thorough",
    ]
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
    betas: FloatPair = (0.9, 0.999)
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

    class Expect(StrictModel):
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

    class Expect(StrictModel):
        """The `[expect]` table: one optional field per registered invariant. Rebuilt by `rebuild`
        whenever an invariant is registered (stability.spec.registry); until the built-in catalogue
        is registered it has none."""


#: The names of the registered families (a `Literal` after `rebuild`).
FamilyName = str


class Spec(StrictModel):
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
        return [(n, e) for n in type(self.expect).model_fields if (e := getattr(self.expect, n)) is not None]


class _ExpectBase(StrictModel):
    """What every rebuilt `Expect` derives from: it pickles as its declared tables, rebuilt with the
    `Expect` of the process that reads it, so a spec made before the registry changed (a plugin or a
    test registered an invariant) still pickles, and a worker reads it with its own registry."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _expect_from,
            ({name: getattr(self, name) for name in type(self).model_fields if getattr(self, name) is not None},),
        )


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
