"""The weights of a harness-built block: its activation module and the initialisations a case
draws (`space.weight_init`, `space.bias_init`), shared by every family's builder
(`stability.families.build`, `stability.families.transformer`)."""

from __future__ import annotations

import torch
from torch import nn

from stability.families.gains import NONLINEARITY
from stability.spec.case import Case
from stability.spec.schema import Spec

__all__ = ["activation", "init_weight", "init_all", "zero_parameters"]


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
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            init_weight(spec, case, m.weight, gen)
            if m.bias is not None and spec.space.bias_init != "default":
                with torch.no_grad():
                    m.bias.fill_(float(spec.space.bias_init))


def zero_parameters(layer: nn.Module) -> None:
    with torch.no_grad():
        for p in layer.parameters(recurse=False):
            p.zero_()
