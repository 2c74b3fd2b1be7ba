"""stability/measure/memory.py, and facts 8-9 of docs/theory.md: what the backward pass keeps.

Fact 8 (dense): block l reads k0 + k·l channels, so the activations saved for the backward pass sum
to Σ_l B·(k0 + k·l) — quadratic in depth. Fact 9 (residual): every block saves the same few tensors,
so the sum is linear in depth; checkpointing every N blocks keeps only the ⌈L/N⌉ segment inputs and
changes no number the probe reports (Huang et al. 2017 for dense connectivity; Chen et al. 2016,
"Training Deep Nets with Sublinear Memory Cost", for checkpointing).

Byte counts are integers, so the closed forms are checked exactly; the fits carry their own
thresholds, stated where used.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from stability import build, make_input, parse_spec, probe
from stability.measure.memory import saved_activation_bytes
from stability.spec.case import corner_case
from stability.spec.schema import Spec

_ITEM = {torch.float32: 4, torch.float64: 8}


def _spec(family: str, block: str, space: str = "") -> Spec:
    return parse_spec(
        f'name = "memory"\ndescription = "memory"\nfamily = "{family}"\n[block]\n{block}\n[space]\ndepth = '
        f"[1, 64]\nwidth = [1, 64]\nbatch = [2, 16]\n{space}\n[expect.gradient_arrival]\n"
    )


def _r2(x: np.ndarray, y: np.ndarray, degree: int) -> tuple[float, np.ndarray]:
    """R² of a least-squares polynomial fit of `degree`, and its coefficients (highest first)."""
    coef = np.polyfit(x, y, degree)
    resid = y - np.polyval(coef, x)
    return 1.0 - float(resid @ resid) / float(((y - y.mean()) ** 2).sum()), coef


# ----------------------------------------------------------------------------- the closed form


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("depth", [1, 2, 7])
def test_linear_stack_saves_exactly_its_inputs(depth: int, dtype: torch.dtype) -> None:
    """y = x Wᵀ (no bias) saves its input x (for ∂L/∂W) and Wᵀ (a view of the weight, for ∂L/∂x).
    Leaving out the weights' storages, L linear layers keep exactly their L inputs: L·B·w·itemsize."""
    batch, width = 3, 5
    net = nn.Sequential(*[nn.Linear(width, width, bias=False, dtype=dtype) for _ in range(depth)])
    x = torch.randn(batch, width, dtype=dtype)
    assert saved_activation_bytes(net, x) == depth * batch * width * _ITEM[dtype]


def test_a_storage_saved_twice_counts_once() -> None:
    """ReLU saves its output and the next Linear saves the same tensor as its input: one storage.
    A Linear → ReLU → Linear stack therefore keeps x and relu(x W₁ᵀ): 2·B·w·4 bytes, not 3."""
    batch, width = 2, 6
    net = nn.Sequential(nn.Linear(width, width, bias=False), nn.ReLU(), nn.Linear(width, width, bias=False))
    assert saved_activation_bytes(net, torch.randn(batch, width)) == 2 * batch * width * 4


def test_nothing_saved_without_parameters_to_differentiate_and_no_ops_that_save() -> None:
    """A stack of additions and scalings by Python numbers saves nothing (their backward needs no
    tensor), so the count is exactly 0: the function does not count the boundaries themselves."""

    class AddScale(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return 0.5 * x + 1.0

    assert saved_activation_bytes(nn.Sequential(AddScale(), AddScale()), torch.randn(4, 4)) == 0


def test_checkpointing_keeps_only_the_segment_inputs() -> None:
    """With checkpoint_every = N < L the segments' inner tensors are recomputed; each segment's
    input stays saved: ⌈L/N⌉·B·w·itemsize bytes."""
    depth, batch, width = 7, 3, 5
    net = nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(depth)])
    x = torch.randn(batch, width)
    for every in (1, 2, 3, 6):
        assert saved_activation_bytes(net, x, checkpoint_every=every) == math.ceil(depth / every) * batch * width * 4
    # N ≥ L: no checkpointing, as in `probe`
    assert saved_activation_bytes(net, x, checkpoint_every=depth) == depth * batch * width * 4


def test_leaves_no_graph_and_the_input_untouched() -> None:
    net = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    x = torch.randn(2, 4)
    saved_activation_bytes(net, x)
    assert not x.requires_grad and x.grad_fn is None
    assert all(p.grad is None for p in net.parameters())


# ----------------------------------------------------------------------------- fact 8: dense


@pytest.mark.parametrize("layer", ["linear", "conv2d"])
def test_dense_block_l_reads_k0_plus_k_l_channels(layer: str) -> None:
    growth, k0, depth = 5, 3, 9
    spec = _spec("dense", f'layer = "{layer}"\ngrowth = {growth}', "spatial = [4, 4]" if layer == "conv2d" else "")
    case = corner_case(spec, depth=depth, width=k0, batch=2)
    net = build(spec, case)
    expected = [k0 + growth * l for l in range(depth + 1)]  # boundary l: the input of block l
    for l, block in enumerate(net.blocks):
        conv = block.layer
        assert (conv.in_channels if layer == "conv2d" else conv.in_features) == expected[l]
        assert (conv.out_channels if layer == "conv2d" else conv.out_features) == growth
    m = probe(net.blocks, make_input(spec, case))
    assert m.channels == expected


def test_dense_saved_bytes_follow_the_closed_form() -> None:
    """Norm none, ReLU: layer l saves relu(x_l) once (ReLU's output = the Linear's input), and the
    concatenation saves nothing, so the total is exactly B·4·Σ_{l<L}(k0 + k·l)
    = B·4·(L·k0 + k·L(L−1)/2) bytes in float32."""
    growth, k0, batch = 4, 8, 3
    spec = _spec("dense", f'activation = "relu"\nnorm = "none"\ngrowth = {growth}')
    for depth in (1, 2, 5, 12):
        case = corner_case(spec, depth=depth, width=k0, batch=batch)
        got = saved_activation_bytes(build(spec, case).blocks, make_input(spec, case))
        assert got == batch * 4 * (depth * k0 + growth * depth * (depth - 1) // 2)


def test_dense_saved_bytes_grow_quadratically() -> None:
    """With batch norm the count also has per-channel statistics, so no exact form is asserted;
    a quadratic must explain it (R² > 0.99, the issue's threshold) with a clearly positive
    quadratic coefficient: at least half the predicted B·(2 saved tensors)·itemsize·k/2 per depth²
    (a linear-in-depth memory would fit a quadratic with coefficient ≈ 0)."""
    growth, k0, batch = 8, 16, 4
    spec = _spec("dense", f'activation = "relu"\nnorm = "batch"\ngrowth = {growth}')
    depths = np.array([1, 2, 4, 8, 12, 16, 24, 32], dtype=np.float64)
    saved = []
    for depth in depths.astype(int):
        case = corner_case(spec, depth=int(depth), width=k0, batch=batch)
        saved.append(saved_activation_bytes(build(spec, case).blocks, make_input(spec, case)))
    r2, coef = _r2(depths, np.asarray(saved, dtype=np.float64), 2)
    assert r2 > 0.99
    assert coef[0] > 0.5 * batch * 2 * 4 * growth / 2


# ----------------------------------------------------------------------------- fact 9: residual


def test_residual_saved_bytes_grow_linearly() -> None:
    """Every pre-activation block saves the same tensors (norm inputs and statistics, ReLU outputs),
    the addition none: the count is linear in depth (R² > 0.99, the issue's threshold), with no
    quadratic part (|quadratic coefficient| below 1e-6 of the slope, fit rounding)."""
    spec = _spec("preact", 'activation = "relu"\nnorm = "layer"')
    depths = np.array([1, 2, 4, 8, 16, 24, 32], dtype=np.float64)
    saved = []
    for depth in depths.astype(int):
        case = corner_case(spec, depth=int(depth), width=16, batch=4)
        saved.append(saved_activation_bytes(build(spec, case).blocks, make_input(spec, case)))
    y = np.asarray(saved, dtype=np.float64)
    r2, (slope, _) = _r2(depths, y, 1)
    assert r2 > 0.99 and slope > 0
    _, coef2 = _r2(depths, y, 2)
    assert abs(coef2[0]) < 1e-6 * slope


@pytest.mark.parametrize("every", [1, 3, 8])
def test_probe_checkpointing_cuts_saved_bytes_and_changes_no_number(every: int) -> None:
    """Checkpointed, the stack keeps only its ⌈L/N⌉ segment inputs (B·w·4 bytes each), less than
    without; and the probe's gradient norms, statistics and identity errors are bit-identical
    (the recomputation repeats the same float operations on the same inputs)."""
    depth, width, batch = 16, 16, 4
    spec = _spec("preact", 'activation = "relu"\nnorm = "layer"')
    case = corner_case(spec, depth=depth, width=width, batch=batch, seed=3)
    net = build(spec, case)
    x = make_input(spec, case)
    full = saved_activation_bytes(net.blocks, x)
    cut = saved_activation_bytes(net.blocks, x, checkpoint_every=every)
    assert cut == math.ceil(depth / every) * batch * width * 4 < full
    plain, ckpt = probe(net.blocks, x), probe(net.blocks, x, checkpoint_every=every)
    assert ckpt.grad_norm == plain.grad_norm
    assert ckpt.act_var == plain.act_var and ckpt.act_sq_mean == plain.act_sq_mean
    assert ckpt.param_grad_norm == plain.param_grad_norm
