"""Path lengths in a residual stack: how much of the input gradient travels through k branches.

Veit, Wilber & Belongie (2016), arXiv:1605.06431, §3: a stack of L residual blocks y = Π(I + F_l)x
unrolls into 2^L paths, a path through k branches being one of the C(L, k) ordered products of k
branch maps. For blocks linear in their input (y = S x + F x with linear F; the seeds' own
example) scaling every branch by one scalar gate t makes the input gradient a polynomial in t,

    c(t) = ∂L/∂x = Σ_{k=0}^{L} t^k c_k,     c_k = Σ_{|P| = k} (product of the k branch Jacobians on P)ᵀ r

so c_k, the part of the gradient carried by paths through exactly k branches, is the k-th Fourier
coefficient of c on the unit circle: with t_j = e^{2πi j/(L+1)}, j = 0 … L,

    c_k = (1/(L+1)) Σ_j c(t_j) e^{−2πi jk/(L+1)}        (a discrete Fourier transform: exact for a
                                                           degree-L polynomial, and well conditioned)

Each c(t_j) is one backward pass through the gated stack (the gate sits in the graph, so the
backward pass carries it; the 2^L paths are never enumerated). The stack is evaluated in complex128
on a copy of the blocks. For blocks that are not linear in their input, c(t) is not a polynomial
and the coefficients alias; `path_gradient_components` is exact only for linear blocks.

Closed form (tested): with branches α Q_l, Q_l Haar-orthogonal and independent, every product of
k of them is orthogonal, so each path's contribution has norm α^k ‖r‖ and distinct paths are
uncorrelated: E‖c_k‖² = C(L, k) α^{2k} ‖r‖². The share of the squared gradient through k branches
is then the Binomial(L, p) probability with p = α²/(1 + α²): at α = 1 most of it takes about L/2
branches, and for small α it is carried by paths through few branches (mean pL).
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["path_gradient_components", "path_length_shares", "binomial_shares"]


def _gated_forward(blocks: Sequence[nn.Module], x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    h = x
    for b in blocks:
        branch, gain = getattr(b, "branch", None), getattr(b, "gain", None)
        if not (isinstance(branch, nn.Module) and isinstance(gain, nn.Module) and hasattr(b, "skip")):
            raise TypeError(f"{type(b).__name__} is not a residual block with .branch, .skip and .gain (a PreActBlock)")
        skip = b.skip  # None: no route around (skip = "none"), as in PreActBlock.forward
        route = skip(h) if isinstance(skip, nn.Module) else torch.zeros_like(h)
        h = route + gate * gain(branch(h))
    return h


def path_gradient_components(blocks: Sequence[nn.Module], x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """c_k for k = 0 … L, shape (L+1, *x.shape), complex128 (imaginary parts are rounding), for the
    loss L = Re Σ y ⊙ r of the residual stack `blocks` (PreActBlock-like: skip(h) + gain(branch(h)))."""
    with warnings.catch_warnings():  # torch flags complex parameters as a new feature; plain linear layers are fine
        warnings.simplefilter("ignore", UserWarning)
        mods = [copy.deepcopy(b).to(torch.complex128) for b in blocks]
    n = len(mods) + 1
    js = torch.arange(n, dtype=torch.float64)
    gates = torch.polar(torch.ones(n, dtype=torch.float64), 2 * math.pi * js / n)  # t_j = e^{2πi j/n}
    r_c = r.detach().to(torch.complex128)
    grads = []
    for t in gates:
        xc = x.detach().to(torch.complex128).requires_grad_(True)
        y = _gated_forward(mods, xc, t)
        (g,) = torch.autograd.grad(y, xc, grad_outputs=r_c)  # conj(J(t))ᵀ r for a holomorphic map
        grads.append(g.conj())  # J(t)ᵀ r = Σ_k t^k c_k
    c = torch.stack(grads)  # (n, *x.shape): c(t_j)
    out: torch.Tensor = torch.fft.fft(c, dim=0) / n
    return out  # (n, *x.shape): Σ_j c(t_j) e^{−2πi jk/n} / n = c_k


def path_length_shares(blocks: Sequence[nn.Module], x: torch.Tensor, r: torch.Tensor) -> list[float]:
    """‖c_k‖² / Σ_k ‖c_k‖²: the share of the squared input gradient carried by paths through
    exactly k branches, k = 0 … L (exact for blocks linear in their input)."""
    c = path_gradient_components(blocks, x, r)
    sq = c.real.flatten(1).pow(2).sum(1)  # (L+1,)
    return (sq / sq.sum()).tolist()


def binomial_shares(depth: int, alpha: float) -> list[float]:
    """Binomial(L, p) with p = α²/(1 + α²): the expected shares for branches α·(orthogonal)."""
    p = alpha * alpha / (1.0 + alpha * alpha)
    return [math.comb(depth, k) * p**k * (1 - p) ** (depth - k) for k in range(depth + 1)]
