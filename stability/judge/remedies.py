"""The built-in remedies for signal propagation at initialisation (`stability.spec.remedy`): what
the literature does about each failure, written as a change to the keys the harness's families
have. `stability suggest` tries each one that applies to a failing spec and keeps those under
which every expectation holds.

Each remedy, the change it makes and what it is meant for:

- `zero_branch` — the change: `space.branch_init = ["zero"]`: every block starts as the identity;
  meant for: gradient arrival, variance, identity, lesion, spectrum, mean shift, rank.
- `shrink_branch` — the change: `block.branch_scale = "1/sqrt(depth)"`; transformer
  `block.residual = "gpt2"`; meant for: the same, and gradient balance.
- `rezero` — the change: `space.branch_init = ["rezero"]`; transformer `block.residual = "rezero"`;
  meant for: as `zero_branch`.
- `skipinit` — the change: `space.branch_init = ["skipinit"]`; transformer
  `block.residual = "skipinit"`; meant for: as `zero_branch`.
- `layerscale` — the change: transformer `block.residual = "layerscale"`; a library config's
  layer-scale key; meant for: as `shrink_branch`.
- `fixup` — the change: zero branches and `block.branch_scale = "1/sqrt(depth)"` (two ReLU layers,
  no norm); meant for: as `zero_branch`.
- `carry_gate` — the change: highway `gate_bias = -ln(L - 1)`: each gate starts at 1/L; meant for:
  arrival, variance, lesion, spectrum, rank.
- `deepnorm` — the change: post-norm transformer `block.residual = "deepnorm"`; meant for: gradient
  balance, arrival, variance.
- `critical_init` — the change: `space.weight_init`: He for ReLU, Glorot for tanh (no transformer);
  meant for: arrival, variance, spectrum.
- `residual_route` — the change: a plain stack as a one-layer pre-activation residual stack; meant
  for: gradient arrival, variance, lesion, spectrum.
- `prenorm` — the change: postnorm → preact; transformer `block.norm_position = "pre"`; meant for:
  identity, gradient balance, arrival, variance.
- `init_range` — the change: a library config's `initializer_range`: the library's
  default ÷ √(2·depth); meant for: gradient arrival, variance, rank.

`residual_route` and `prenorm` change the network's structure (`kind = "structure"`): `suggest`
also tries each composed with every initialisation remedy (`kind = "init"`) that applies to the
network it makes, the route around with its branches at zero, scaled or gated (He et al. 2016).

The remedies for logits that grow in training (qk-norm, soft caps, z-loss, a tied readout) are
`stability.judge.remedies_logits`'s. A remedy changes only the keys it names; the loader validates
the result, so a remedy whose change the spec's family or its other keys refuse is not proposed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from stability.judge.remedies_spec import is_transformer, library_key, library_value
from stability.spec.registry import FAMILIES
from stability.spec.remedy import REMOVE, Remedy, register_remedy

__all__ = ["layerscale_init", "carry_gate_bias"]

# The invariants a family of remedies is meant for.
_SIGNAL = frozenset(
    {
        "gradient_arrival",
        "variance_growth",
        "identity_at_init",
        "lesion",
        "jacobian_spectrum",
        "mean_shift",
        "rank_collapse",
    }
)
_BALANCE = _SIGNAL - {"identity_at_init"} | {"gradient_balance"}
_RESIDUAL = ("postnorm", "preact")


def _can_init(spec: Any, init: str) -> bool:
    """The family accepts `init` as a branch init (a user's factory decides what it means: never
    proposed there) and the space does not already draw only it."""
    if spec.family not in FAMILIES or FAMILIES.get(spec.family).user_code:
        return False
    inits = FAMILIES.get(spec.family).branch_inits
    return (inits is None or init in inits) and list(spec.space.branch_init) != [init]


def layerscale_init(depth: int) -> float:
    """LayerScale's initial λ for a stack of `depth` blocks (Touvron et al. 2021, sec. 3: 0.1 up to
    depth 18, 1e-5 at 24, 1e-6 beyond)."""
    return 0.1 if depth <= 18 else 1e-5 if depth <= 24 else 1e-6


def _deepest(spec: Any) -> int:
    d = spec.space.depth
    return max(d.values) if getattr(d, "values", None) else int(d[1])


_LAYERSCALE_KEYS = ("layer_scale_init_value", "layerscale_value", "ls_init_value", "init_values")


# ----------------------------------------------------------------------------- the branch


def _zero_applies(spec: Any, data: Mapping[str, Any]) -> bool:
    if spec.family == "transformer":
        return _can_init(spec, "zero") and spec.block.residual in ("none", "gpt2") and not spec.block.sigma_reparam
    return spec.family in (*_RESIDUAL, "highway", "dense") and _can_init(spec, "zero")


def _branch_scale_applies(spec: Any, data: Mapping[str, Any]) -> bool:
    if spec.family == "transformer":
        return bool(
            spec.block.residual == "none" and spec.block.norm_position != "post" and spec.block.skip == "identity"
        )
    return spec.family in _RESIDUAL and spec.block.branch_scale == 1.0 and spec.block.skip != "none"


def _branch_scale_edit(spec: Any, data: Mapping[str, Any]) -> dict[str, Any]:
    if spec.family == "transformer":
        return {"block.residual": "gpt2"}
    return {"block.branch_scale": "1/sqrt(depth)"}


def _gain_applies(init: str) -> Any:
    def applies(spec: Any, data: Mapping[str, Any]) -> bool:
        if spec.family == "transformer":
            return (
                spec.block.residual == "none"
                and spec.block.skip == "identity"
                and not spec.block.sigma_reparam
                and "zero" not in spec.space.branch_init
            )
        return spec.family in _RESIDUAL and _can_init(spec, init) and spec.block.skip != "none"

    return applies


def _gain_edit(init: str) -> Any:
    def edit(spec: Any, data: Mapping[str, Any]) -> dict[str, Any]:
        if spec.family == "transformer":
            return {"block.residual": init}
        return {"space.branch_init": [init]}

    return edit


def _layerscale_applies(spec: Any, data: Mapping[str, Any]) -> bool:
    if spec.family == "transformer":
        return (
            spec.block.residual == "none"
            and spec.block.skip == "identity"
            and not spec.block.sigma_reparam
            and "zero" not in spec.space.branch_init
        )
    key = library_key(spec, _LAYERSCALE_KEYS)
    if key is None:
        return False
    now = library_value(spec, key)
    return not (
        isinstance(now, int | float) and not isinstance(now, bool) and 0 < now <= layerscale_init(_deepest(spec))
    )


def _layerscale_edit(spec: Any, data: Mapping[str, Any]) -> dict[str, Any]:
    value = layerscale_init(_deepest(spec))
    if spec.family == "transformer":
        return {"block.residual": "layerscale", "block.layerscale_init": value}
    key = library_key(spec, _LAYERSCALE_KEYS)
    return {f"block.config.{key}": value}


def _deepnorm_applies(spec: Any, data: Mapping[str, Any]) -> bool:
    b = spec.block
    return (
        is_transformer(spec)
        and b.norm_position == "post"
        and b.residual == "none"
        and b.skip == "identity"
        and not b.sigma_reparam
    )


def _fixup_applies(spec: Any, data: Mapping[str, Any]) -> bool:
    """Fixup's rule where the family exposes it: two weight layers per branch (m = 2, so the
    scale L^(-1/(2m-2)) is L^(-1/2)), no norm (Fixup is for networks without one) and a positively
    homogeneous activation, so that the branch's multiplier is the scaling of its first layer."""
    b = spec.block
    return (
        spec.family in _RESIDUAL
        and b.branch_layers == 2
        and b.norm == "none"
        and b.activation in ("relu", "identity")
        and b.skip != "none"
        and b.branch_scale == 1.0
        and _can_init(spec, "zero")
    )


def carry_gate_bias(depth: int) -> float:
    """The highway gate bias b_T = -ln(L - 1) at which each of L blocks' transform gate starts at
    σ(b_T) = 1/L: the carry (1 - 1/L)^L keeps at least 1/4 of the signal at every depth (e^(-1) as
    L grows), as a branch scaled by 1/√L adds 1/L of the variance per block."""
    return float(f"{-math.log(max(depth, 2) - 1):.3g}") + 0.0  # (+ 0.0: -0.0 written as 0.0)


def _carry_applies(spec: Any, data: Mapping[str, Any]) -> bool:
    return bool(spec.family == "highway" and spec.block.gate_bias > carry_gate_bias(_deepest(spec)))


# ----------------------------------------------------------------------------- init and the route around


def _critical(spec: Any) -> str | None:
    """The weight init at the critical point of the spec's activation, where there is one."""
    return {"relu": "kaiming_normal", "tanh": "xavier_normal"}.get(spec.block.activation)


def _critical_applies(spec: Any, data: Mapping[str, Any]) -> bool:
    init = _critical(spec)
    family = spec.family in ("plain", *_RESIDUAL, "highway", "dense")
    return bool(family) and init is not None and list(spec.space.weight_init) != [init]


def _route_applies(spec: Any, data: Mapping[str, Any]) -> bool:
    return spec.family == "plain" and spec.block.layer in ("linear", "conv2d", "tokens")


def _route_edit(spec: Any, data: Mapping[str, Any]) -> dict[str, Any]:
    edit: dict[str, Any] = {"family": "preact", "block.branch_layers": 1}
    if spec.space.input_width is not None:
        edit["block.skip"] = "projection"  # the first block changes the width: the route around needs a projection
    return edit


def _prenorm_applies(spec: Any, data: Mapping[str, Any]) -> bool:
    if spec.family == "postnorm":
        return True
    return is_transformer(spec) and spec.block.norm_position != "pre" and spec.block.norm != "none"


def _prenorm_edit(spec: Any, data: Mapping[str, Any]) -> dict[str, Any]:
    if spec.family == "postnorm":
        return {"family": "preact"}
    edit: dict[str, Any] = {"block.norm_position": "pre"}
    if spec.block.residual == "deepnorm":  # DeepNorm up-weights a post-norm block's skip: it goes with post-norm
        edit["block.residual"] = REMOVE
    return edit


# ----------------------------------------------------------------------------- a library model's config


def _init_range(spec: Any) -> float:
    """The library's own default initializer_range (not the spec's, which may be what is broken)
    ÷ √(2·depth) at the deepest depth drawn."""
    from stability.families.library import resolve
    from stability.families.library_lookup import config_default

    try:
        default = config_default(resolve(spec.options.model, file=spec.path), "initializer_range")
    except Exception:  # the library does not import here: the loader said so
        default = None
    base = (
        float(default) if isinstance(default, int | float) and not isinstance(default, bool) and default > 0 else 0.02
    )  # transformers' usual default
    return float(f"{base / math.sqrt(2 * _deepest(spec)):.3g}")


def _init_range_applies(spec: Any, data: Mapping[str, Any]) -> bool:
    if library_key(spec, ("initializer_range",)) is None:
        return False
    now = library_value(spec, "initializer_range")
    return not (isinstance(now, int | float) and not isinstance(now, bool) and 0 < now <= _init_range(spec))


def _init_range_edit(spec: Any, data: Mapping[str, Any]) -> dict[str, Any]:
    return {"block.config.initializer_range": _init_range(spec)}


_BUILT_IN = (
    Remedy(
        name="zero_branch",
        summary="start every residual branch at zero (the last layer of each branch zeroed), so every block "
        "is the identity at initialisation",
        fixes=_SIGNAL,
        applies=_zero_applies,
        edit=lambda spec, data: {"space.branch_init": ["zero"]},
        kind="init",
        references=(
            "Goyal et al. (2017). Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour. "
            "arXiv:1706.02677 (zero-initialised last norm of each residual block).",
            "Zhang, Dauphin, Ma (2019). Fixup Initialization: Residual Learning Without Normalization. ICLR 2019.",
        ),
    ),
    Remedy(
        name="shrink_branch",
        summary="shrink the branch, not the route around: scale each residual branch by 1/sqrt(depth) "
        "(GPT-2's scaled init for a transformer)",
        fixes=_BALANCE,
        applies=_branch_scale_applies,
        edit=_branch_scale_edit,
        kind="init",
        references=(
            "Hanin, Rolnick (2018). How to Start Training: The Effect of Initialization and Architecture. "
            "NeurIPS 2018.",
            "Radford et al. (2019). Language Models are Unsupervised Multitask Learners (residual "
            "projections scaled by 1/sqrt(N)).",
        ),
    ),
    Remedy(
        name="rezero",
        summary="multiply each residual branch by a learnable scalar started at 0 (ReZero)",
        fixes=_SIGNAL,
        applies=_gain_applies("rezero"),
        edit=_gain_edit("rezero"),
        kind="init",
        references=(
            "Bachlechner et al. (2020). ReZero is All You Need: Fast Convergence at Large Depth. arXiv:2003.04887.",
        ),
    ),
    Remedy(
        name="skipinit",
        summary="multiply each residual branch by a learnable per-channel gain started at 0 (SkipInit)",
        fixes=_SIGNAL,
        applies=_gain_applies("skipinit"),
        edit=_gain_edit("skipinit"),
        kind="init",
        references=(
            "De, Smith (2020). Batch Normalization Biases Residual Blocks Towards the Identity Function in "
            "Deep Networks. NeurIPS 2020.",
        ),
    ),
    Remedy(
        name="layerscale",
        summary="multiply each residual branch by a learnable diagonal started small (LayerScale: 0.1 up to "
        "depth 18, 1e-5 at 24, 1e-6 beyond)",
        fixes=_BALANCE,
        applies=_layerscale_applies,
        edit=_layerscale_edit,
        kind="init",
        references=("Touvron et al. (2021). Going deeper with Image Transformers. ICCV 2021.",),
    ),
    Remedy(
        name="deepnorm",
        summary="DeepNorm: up-weight the skip of each post-norm block by α = (2N)^(1/4) and scale the branch "
        "weights by β = (8N)^(-1/4)",
        fixes=frozenset({"gradient_balance", "gradient_arrival", "variance_growth", "rank_collapse"}),
        applies=_deepnorm_applies,
        edit=lambda spec, data: {"block.residual": "deepnorm"},
        kind="init",
        references=("Wang et al. (2022). DeepNet: Scaling Transformers to 1,000 Layers. arXiv:2203.00555.",),
    ),
    Remedy(
        name="fixup",
        summary="Fixup: the last layer of each branch at zero and the branch scaled by L^(-1/(2m-2)) = 1/sqrt(depth) "
        "for m = 2 layers per branch",
        fixes=_SIGNAL,
        applies=_fixup_applies,
        edit=lambda spec, data: {"space.branch_init": ["zero"], "block.branch_scale": "1/sqrt(depth)"},
        kind="init",
        references=(
            "Zhang, Dauphin, Ma (2019). Fixup Initialization: Residual Learning Without Normalization. ICLR 2019.",
        ),
    ),
    Remedy(
        name="carry_gate",
        summary="open the highway's carry gate: a transform-gate bias of -ln(L - 1), so each of the L gates starts "
        "at 1/L and the carry keeps the signal at every depth",
        fixes=_SIGNAL - {"identity_at_init", "mean_shift"},
        applies=_carry_applies,
        edit=lambda spec, data: {"block.gate_bias": carry_gate_bias(_deepest(spec))},
        kind="init",
        references=(
            "Srivastava, Greff, Schmidhuber (2015). Training Very Deep Networks. NeurIPS 2015 "
            "(a negative transform-gate bias, more negative for deeper networks).",
        ),
    ),
    Remedy(
        name="critical_init",
        summary="initialise at the critical point of the activation: He init for ReLU (σ_w² = 2), Glorot for "
        "tanh (σ_w² = 1 for square layers)",
        fixes=frozenset({"gradient_arrival", "variance_growth", "jacobian_spectrum"}),
        applies=_critical_applies,
        edit=lambda spec, data: {"space.weight_init": [_critical(spec)]},
        kind="init",
        references=(
            "He et al. (2015). Delving Deep into Rectifiers: Surpassing Human-Level Performance on ImageNet "
            "Classification. ICCV 2015.",
            "Schoenholz et al. (2017). Deep Information Propagation. ICLR 2017.",
        ),
    ),
    Remedy(
        name="residual_route",
        summary="add a route around every layer: the plain stack as a residual stack x + F(x) with one layer "
        "per branch",
        fixes=frozenset({"gradient_arrival", "variance_growth", "lesion", "jacobian_spectrum"}),
        applies=_route_applies,
        edit=_route_edit,
        kind="structure",
        references=(
            "He et al. (2016). Identity Mappings in Deep Residual Networks. ECCV 2016.",
            "Veit, Wilber, Belongie (2016). Residual Networks Behave Like Ensembles of Relatively Shallow "
            "Networks. NeurIPS 2016.",
        ),
    ),
    Remedy(
        name="prenorm",
        summary="move the norm off the route around: normalise the branch's input, not the sum (pre-norm)",
        fixes=frozenset({"identity_at_init", "gradient_balance", "gradient_arrival", "variance_growth"}),
        applies=_prenorm_applies,
        edit=_prenorm_edit,
        kind="structure",
        references=(
            "Xiong et al. (2020). On Layer Normalization in the Transformer Architecture. ICML 2020.",
            "He et al. (2016). Identity Mappings in Deep Residual Networks. ECCV 2016.",
        ),
    ),
    Remedy(
        name="init_range",
        summary="a smaller initializer_range in the library's config: the default std ÷ √(2·depth), so every "
        "branch starts small against the residual stream",
        fixes=frozenset({"gradient_arrival", "variance_growth", "rank_collapse", "gradient_balance"}),
        applies=_init_range_applies,
        edit=_init_range_edit,
        kind="init",
        references=(
            "Radford et al. (2019). Language Models are Unsupervised Multitask Learners (residual "
            "projections scaled by 1/sqrt(N)).",
        ),
    ),
)

for _entry in _BUILT_IN:
    register_remedy(_entry)
