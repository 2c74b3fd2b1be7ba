"""The weights of a harness-built block: its activation module and the initialisations a case
draws (`space.weight_init`, `space.bias_init`), shared by every family's builder
(`stability.families.build`, `stability.families.transformer`)."""

from __future__ import annotations

from typing import Any, TypeVar

import torch
from torch import nn

from stability.families.gains import NONLINEARITY
from stability.spec.case import Case
from stability.spec.schema import Spec

__all__ = ["activation", "init_weight", "init_all", "zero_parameters", "overwritten", "blank_layer"]

_Layer = TypeVar("_Layer", nn.Linear, nn.Conv2d)

#: Whether `blank_layer` may skip torch's default draws where `overwritten` says they are thrown
#: away (changed only by tests, which compare the networks built both ways bit for bit).
SKIP_DISCARDED_DRAWS = True


def activation(spec: Spec) -> nn.Module:
    act: nn.Module = {
        "relu": nn.ReLU,
        "gelu": nn.GELU,
        "tanh": nn.Tanh,
        "sigmoid": nn.Sigmoid,
        "identity": nn.Identity,
    }[spec.block.activation]()
    return act


def init_weight(spec: Spec, case: Case, w: torch.Tensor, gen: torch.Generator) -> None:
    kind, s = case.weight_init, spec.space
    nl = NONLINEARITY[spec.block.activation]
    with torch.no_grad():
        if kind == "default":
            return
        if kind == "kaiming_normal":
            nn.init.kaiming_normal_(w, nonlinearity=nl, generator=gen)
        elif kind == "kaiming_uniform":
            nn.init.kaiming_uniform_(w, nonlinearity=nl, generator=gen)
        elif kind == "xavier_normal":
            nn.init.xavier_normal_(w, generator=gen)
        elif kind == "xavier_uniform":
            nn.init.xavier_uniform_(w, generator=gen)
        elif kind == "orthogonal":
            nn.init.orthogonal_(w, generator=gen)
        elif kind == "normal":
            nn.init.normal_(w, std=s.init_std, generator=gen)
        elif kind == "identity":  # W = gain · I (Dirac kernel for convolutions)
            if w.dim() == 2:
                nn.init.eye_(w)
            else:
                nn.init.dirac_(w)
            w.mul_(s.init_gain)


def init_all(spec: Spec, case: Case, module: nn.Module, gen: torch.Generator) -> None:
    """Initialise every Linear and Conv2d layer of `module` (itself included), in the order of
    `module.modules()`: the weight by `init_weight`, the bias by `space.bias_init` unless it is
    "default". (A direct walk of `_modules`, in the same order: the generic generator was a fifth
    of this function's time.)"""
    bias = spec.space.bias_init
    with torch.no_grad():
        for m in modules_in_order(module):
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                init_weight(spec, case, m.weight, gen)
                if m.bias is not None and bias != "default":
                    m.bias.fill_(float(bias))


def modules_in_order(root: nn.Module) -> list[nn.Module]:
    """`list(root.modules())`: root first, then each child's subtree in `_modules` order, each
    module once (the first time it is reached)."""
    out: list[nn.Module] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        out.append(m)
        stack.extend(reversed([c for c in m._modules.values() if c is not None]))
    return out


def zero_parameters(layer: nn.Module) -> None:
    with torch.no_grad():
        for p in layer.parameters(recurse=False):
            p.zero_()


def overwritten(spec: Spec, case: Case) -> bool:
    """Whether `init_all` overwrites every weight and bias that torch's default initialisation
    draws in a case's layers: a weight init other than "default" and a constant bias init. Those
    default draws come from torch's global generator, which nothing else in a built-in family
    reads, so when every one of them is thrown away, skipping all of them (`blank_layer`) leaves
    every other value as it was; skipping some (say a bias-free projection's while the branch
    layers keep their default biases) would shift the global stream under the rest, so the rule
    is per case, never per layer."""
    return case.weight_init != "default" and spec.space.bias_init != "default"


def blank_layer(cls: type[_Layer], blank: bool, *args: Any, **kwargs: Any) -> _Layer:
    """`cls(*args, **kwargs)` (nn.Linear or nn.Conv2d), with its parameters left as `torch.empty`
    made them when `blank` (the case is `overwritten`; the caller must then initialise every
    weight and bias): torch's `reset_parameters` is what a layer's constructor spends most of its
    time in (its kaiming-uniform draw: 11 of 27 µs for a 16×16 Linear, 615 of 631 µs at 497×497).
    The layer is a plain instance of `cls`: the constructor runs as torch wrote it, with this one
    instance's `reset_parameters` shadowed for its duration (`torch.nn.utils.skip_init` does the
    same through the meta device, at ~145 µs a layer)."""
    if not (blank and SKIP_DISCARDED_DRAWS):
        return cls(*args, **kwargs)
    layer = cls.__new__(cls)
    layer.__dict__["reset_parameters"] = _nothing  # an instance attribute: found before the class's method
    cls.__init__(layer, *args, **kwargs)
    del layer.__dict__["reset_parameters"]
    return layer


def _nothing() -> None:
    return None
