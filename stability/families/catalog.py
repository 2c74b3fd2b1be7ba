"""The built-in families, one registry entry each (stability.spec.registry).

Each entry names its builder, the `[block]` keys it reads, the layers it builds, its memory
model (stability.families.memory), its branch inits and, for plain and pre-activation stacks,
its mean-field law. Builders are imported when first called, so validating a spec never imports
torch. A project adds its own family the same way (docs/extending.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from stability.errors import SpecError
from stability.families import memory
from stability.spec import schema as s
from stability.spec.lm_keys import check_transformer_lm
from stability.spec.registry import Family, batch, register_family
from stability.spec.values import ZERO_BRANCH_INITS

__all__: list[str] = []

#: Read by every family: the input kind, and the kernel of conv2d layers.
_EVERY = frozenset({"layer", "kernel_size"})
_LAYERS = frozenset({"activation", "norm", "norm_groups"})
_RESIDUAL = frozenset({"skip", "skip_scale", "projection_spectrum", "branch_layers", "branch_scale"})
_TRANSFORMER = frozenset(
    {
        "skip",
        "norm_position",
        "causal",
        "heads",
        "head_dim",
        "mlp",
        "mlp_ratio",
        "residual",
        "layerscale_init",
        "qk_norm",
        "attn_softcap",
        "sigma_reparam",
    }
)
_ANY_LAYER = ("linear", "conv2d", "tokens")
_NO_ATTENTION = {
    "attention": "has no attention",
    "language_model": 'has no attention, and the language-model run (train.task = "markov") trains a '
    "transformer, a transformers causal LM or a factory's language model",
}


def _builder(name: str) -> Any:
    def build(spec: s.Spec, case: Any, gen: Any) -> Any:
        from stability.families import build as b

        return b.BUILDERS[name](spec, case, gen)

    build.__qualname__ = f"build_{name}"
    return build


def _build_custom(spec: s.Spec, case: Any, gen: Any) -> Any:
    from stability.families.custom import build_custom

    return build_custom(spec, case)


def _no_estimate(spec: s.Spec, case: Any) -> int | None:
    return None


# ----------------------------------------------------------------------------- mean-field laws


def _plain_law(spec: s.Spec, case: Any) -> tuple[float, bool]:
    return 1.0, False


def _preact_law(spec: s.Spec, case: Any) -> tuple[float, bool]:
    """x_(l+1) = x_l + α·W·act(x_l) (Yang & Schoenholz 2017): α from block.branch_scale, 0 when
    the branches are zero at initialisation."""
    if case.branch_init != "default":
        return 0.0, True
    scale = spec.block.branch_scale
    alpha = (
        1.0 / math.sqrt(case.depth)
        if scale == "1/sqrt(depth)"
        else 1.0 / case.depth
        if scale == "1/depth"
        else float(scale)
    )
    return alpha, True


def _preact_law_refusal(spec: s.Spec) -> str | None:
    if spec.block.branch_layers == 1 and spec.block.skip == "identity":
        return None
    return "the mean-field oracle covers one-layer pre-activation residual stacks with an identity skip, not this block"


# ----------------------------------------------------------------------------- family checks


def _check_custom(spec: s.Spec, data: Mapping[str, Any]) -> None:
    f, b = spec.path, spec.block
    if not b.factory:
        raise SpecError(
            f, "block.factory", "is required for family 'custom'", fix='add factory = "package.module:function"'
        )
    mod, sep, fn = b.factory.partition(":")
    if not sep or not mod or not fn.isidentifier():
        raise SpecError(f, "block.factory", 'must look like "package.module:function"', value=b.factory)
    if spec.space.input_width is not None and not (
        spec.space.input_width == spec.space.width and spec.space.width[0] == spec.space.width[1]
    ):
        raise SpecError(
            f,
            "space.input_width",
            "family 'custom' keeps one width throughout",
            value=list(spec.space.input_width),
            fix="remove it",
        )


def _check_one_width(name: str) -> Any:
    def check(spec: s.Spec, data: Mapping[str, Any]) -> None:
        w, iw = spec.space.width, spec.space.input_width
        if iw is not None and not (iw == w and w[0] == w[1]):
            raise SpecError(
                spec.path,
                "space.input_width",
                f"family '{name}' keeps one width throughout",
                value=list(iw),
                fix="remove it",
            )

    return check


def _check_transformer(spec: s.Spec, data: Mapping[str, Any]) -> None:
    from stability.spec.transformer_keys import check_transformer

    check_transformer(spec, data)


# ----------------------------------------------------------------------------- the entries

with batch():
    register_family(
        Family(
            name="plain",
            description="x_{l+1} = act(norm(W x_l)): no route around, the gradient is a product of factors",
            build=_builder("plain"),
            block_keys=_EVERY | _LAYERS,
            layers=_ANY_LAYER,
            estimate=memory.stack_bytes,
            block_bytes=memory.OVERHEAD_PER_BLOCK["plain"],
            zero_branch_inits=frozenset(),
            branch_inits=frozenset({"default"}),
            mean_field=_plain_law,
            lacks={**_NO_ATTENTION},
        )
    )
    for _name, _description in (
        ("postnorm", "x_{l+1} = act(norm(x_l + F(x_l))): original ResNet ordering, norm/act on the route"),
        ("preact", "x_{l+1} = x_l + F(x_l): bare addition, nothing on the route around (He et al. 2016)"),
    ):
        register_family(
            Family(
                name=_name,
                description=_description,
                build=_builder(_name),
                block_keys=_EVERY | _LAYERS | _RESIDUAL,
                layers=_ANY_LAYER,
                estimate=memory.stack_bytes,
                block_bytes=memory.OVERHEAD_PER_BLOCK[_name],
                zero_branch_inits=ZERO_BRANCH_INITS,
                mean_field=_preact_law if _name == "preact" else None,
                mean_field_refusal=_preact_law_refusal if _name == "preact" else None,
                lacks={**_NO_ATTENTION},
            )
        )
    register_family(
        Family(
            name="highway",
            description="x_{l+1} = T*H(x) + (1-T)*x, T = sigmoid(W_T x + b_T): a gated route around",
            build=_builder("highway"),
            block_keys=_EVERY | _LAYERS | {"gate_bias"},
            layers=_ANY_LAYER,
            estimate=memory.stack_bytes,
            block_bytes=memory.OVERHEAD_PER_BLOCK["highway"],
            zero_branch_inits=ZERO_BRANCH_INITS,
            branch_inits=frozenset({"default", "zero"}),
            check=_check_one_width("highway"),
            lacks={**_NO_ATTENTION},
        )
    )
    register_family(
        Family(
            name="dense",
            description="block l reads the concatenation of all earlier outputs, adds `growth` channels",
            build=_builder("dense"),
            block_keys=_EVERY | _LAYERS | {"growth", "transition_every", "compression"},
            layers=_ANY_LAYER,
            estimate=memory.stack_bytes,
            block_bytes=memory.OVERHEAD_PER_BLOCK["dense"],
            zero_branch_inits=frozenset(),
            branch_inits=frozenset({"default", "zero"}),
            check=_check_one_width("dense"),
            lacks={
                **_NO_ATTENTION,
                "same_shape_blocks": "a dense layer adds channels, so it cannot be replaced by the identity",
            },
        )
    )
    register_family(
        Family(
            name="custom",
            description='your own nn.Module from `factory = "package.module:function"`',
            build=_build_custom,
            block_keys=_EVERY | {"factory", "factory_args"},
            layers=_ANY_LAYER,
            estimate=_no_estimate,
            block_bytes=memory.CUSTOM_MIN_PER_BLOCK,
            zero_branch_inits=None,
            check=_check_custom,
            user_code=True,
        )
    )
    register_family(
        Family(
            name="transformer",
            description="x + Attn(norm(x)), then x + MLP(norm(x)) on (B, T, C) tokens: pre-, post- or "
            "sandwich-norm, with the residual schemes of the literature",
            build=_builder("transformer"),
            block_keys=_EVERY | _LAYERS | _TRANSFORMER,
            layers=("tokens",),
            estimate=memory.transformer_bytes,
            block_bytes=memory.OVERHEAD_PER_BLOCK["transformer"],
            zero_branch_inits=ZERO_BRANCH_INITS,
            branch_inits=frozenset({"default", "zero"}),
            check=_check_transformer,
            lm_check=check_transformer_lm,
        )
    )

import stability.families.library_family  # noqa: E402, F401  (family = "library", registered by its own module)
