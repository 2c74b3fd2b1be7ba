"""Lesions at initialisation: how much the stack's output changes when one block is removed.

Veit, Wilber & Belongie (2016), "Residual Networks Behave Like Ensembles of Relatively Shallow
Networks", NeurIPS, arXiv:1605.06431, §4: deleting one block of a residual network barely changes
its output, because every path that skips the block survives; deleting a layer of a plain network
removes every path. Removing block l means replacing it by the identity (its input is passed on
unchanged), so for a residual block x + F(x) the branch is dropped and the route around kept:

    change_l = ‖f(x) − f_{−l}(x)‖ / ‖f(x)‖,   f_{−l} = B_{L−1} ∘ … ∘ B_{l+1} ∘ B_{l−1} ∘ … ∘ B_0

over the whole batch (Frobenius norms). A block whose output shape differs from its input's (a
dense layer, a widening first block) cannot be replaced by the identity and gets NaN.

Cost: one forward pass keeps the boundary tensors h_0 … h_L (no gradients), then lesion l reruns
blocks l+1 … L−1 from h_l: L(L−1)/2 block evaluations in all. Batch norm layers in train mode run
without updating their running statistics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from stability.families.build import Network
from stability.measure.jacobian import no_running_stats

__all__ = ["lesion_changes", "network_lesion"]


def lesion_changes(blocks: nn.Module | Sequence[nn.Module], x: torch.Tensor) -> list[float]:
    """change_l for every block l (NaN where the block changes the shape); see the module docstring."""
    mods: list[nn.Module] = (
        list(blocks)
        if not isinstance(blocks, nn.Module) or isinstance(blocks, (nn.Sequential, nn.ModuleList))
        else [blocks]
    )
    root = nn.ModuleList(mods)
    out: list[float] = []
    with torch.no_grad(), no_running_stats(root):
        hs = [x]  # boundary tensors h_0 … h_L
        for b in mods:
            hs.append(b(hs[-1]))
        y = hs[-1].double()
        y_norm = float(y.norm())
        for i in range(len(mods)):
            if hs[i].shape != hs[i + 1].shape:
                out.append(math.nan)
                continue
            h = hs[i]  # block i removed: its input goes on unchanged
            for b in mods[i + 1 :]:
                h = b(h)
            diff = float((y - h.double()).norm())
            out.append(diff / y_norm if y_norm > 0 else (0.0 if diff == 0 else math.inf))
    return out


def network_lesion(net: Network, x: torch.Tensor | None) -> list[float]:
    """`lesion_changes` of a built network: its blocks on `x`, or, when its blocks run inside a
    model's own forward (`net.model`), through that forward (`forward.lesion_changes_in_model`)."""
    if net.model is not None:
        from stability.measure.forward import lesion_changes_in_model

        return lesion_changes_in_model(net.model)
    if x is None:
        raise ValueError("a network of blocks is lesioned on an input tensor x")
    return lesion_changes(net.blocks, x)
