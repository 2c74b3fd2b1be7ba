"""The probe against closed forms: scalar chains, residual chains, exact identities."""

from __future__ import annotations

import math

import pytest
import torch
from approx_support import approx
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from stability import parse_spec, probe
from stability.families.build import build, make_input
from stability.spec.case import corner_case


class Residual(nn.Module):
    """y = x + f(x)."""

    def __init__(self, f: nn.Module) -> None:
        super().__init__()
        self.f = f

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.f(x)


def scalar(slope: float) -> nn.Linear:
    layer = nn.Linear(1, 1, bias=False).double()
    nn.init.constant_(layer.weight, slope)
    return layer


def chain(slope: float, depth: int, *, residual: bool = False) -> nn.Sequential:
    return nn.Sequential(*[Residual(scalar(slope)) if residual else scalar(slope) for _ in range(depth)])


X = torch.linspace(-1.0, 2.0, 5, dtype=torch.float64).reshape(5, 1)

# Exact up to float64 rounding: L multiplications, each with relative error ≤ 2⁻⁵³.
REL = 1e-12


@pytest.mark.parametrize(("slope", "depth"), [(0.9, 50), (0.9, 100), (0.99, 100)])
def test_plain_chain_ratio_is_the_product_of_slopes(slope: float, depth: int) -> None:
    m = probe(chain(slope, depth), X)
    assert m.gradient_ratio == pytest.approx(slope**depth, rel=REL, abs=0.0)
    assert m.grad_norm[-1] == approx(
        float(torch.linalg.vector_norm(torch.randn(5, 1, generator=torch.Generator().manual_seed(0)).double())), rel=REL
    )


def test_quoted_values_of_the_chain() -> None:
    # The numbers the theory quotes, as the formula gives them (to the quoted digits).
    assert probe(chain(0.9, 50), X).gradient_ratio == approx(5.15e-3, rel=1e-3)
    assert probe(chain(0.9, 100), X).gradient_ratio == approx(2.66e-5, rel=2e-3)


@pytest.mark.parametrize("depth", [2, 4, 6, 8, 10])
def test_plain_versus_residual_table(depth: int) -> None:
    plain = probe(chain(0.5, depth), X).gradient_ratio
    resid = probe(chain(0.5, depth, residual=True), X).gradient_ratio
    assert plain == pytest.approx(0.5**depth, rel=REL, abs=0.0)
    assert resid == approx(1.5**depth, rel=REL)
    quoted = {2: (0.25, 2.25), 4: (0.0625, 5.0625), 6: (0.015625, 11.39), 8: (0.0039, 25.63), 10: (0.00098, 57.67)}
    qp, qr = quoted[depth]
    assert plain == approx(qp, rel=0.01) and resid == approx(qr, rel=0.001)


def test_every_boundary_and_activation_statistic_follows_the_chain() -> None:
    a, depth = 0.9, 12
    m = probe(chain(a, depth), X)
    var0 = float(X.var(correction=0))
    sq0 = float((X**2).mean())
    for l in range(depth + 1):
        assert m.grad_norm[l] / m.grad_norm[-1] == pytest.approx(a ** (depth - l), rel=REL, abs=0.0)
        assert m.act_var[l] == pytest.approx(a ** (2 * l) * var0, rel=REL, abs=0.0)
        assert m.act_sq_mean[l] == pytest.approx(a ** (2 * l) * sq0, rel=REL, abs=0.0)


def test_parameter_gradients_follow_the_product_rule() -> None:
    # L = Σ r_i · (Π_k w_k) x_i  ⇒  ∂L/∂w_l = (Σ r_i x_i) · Π_{k≠l} w_k = (r·x) · a^(L−1)
    a, depth, seed = 0.8, 7, 3
    m = probe(chain(a, depth), X, seed=seed)
    r = torch.randn(
        5, 1, generator=torch.Generator().manual_seed(seed)
    ).double()  # the projection vector: drawn in float32
    expected = abs(float((r * X).sum())) * a ** (depth - 1)
    assert set(m.param_grad_norm) == {f"{l}.weight" for l in range(depth)}
    for value in m.param_grad_norm.values():
        assert value == pytest.approx(expected, rel=REL, abs=0.0)


def test_identity_errors_of_a_scaled_identity() -> None:
    # y = a·x ⇒ ‖y − x‖/‖x‖ = |a − 1|; the input gradient is a·r ⇒ ‖a·r − r‖/‖r‖ = |a − 1|.
    m = probe(chain(0.75, 1), X)
    assert m.identity_error == pytest.approx(0.25, rel=REL, abs=0.0)
    assert m.input_grad_error == pytest.approx(0.25, rel=REL, abs=0.0)


def test_sum_and_mse_losses() -> None:
    m = probe(chain(0.5, 3), X, loss="sum")
    assert m.grad_norm[-1] == approx(math.sqrt(5), rel=REL)  # ∂L/∂y = 1 everywhere
    assert m.gradient_ratio == pytest.approx(0.125, rel=REL, abs=0.0)
    target = torch.zeros(5, 1, dtype=torch.float64)
    m = probe(chain(0.5, 3), X, loss="mse", target=target)
    y = X * 0.125
    assert m.grad_norm[-1] == pytest.approx(float(torch.linalg.vector_norm(2 * y / 5)), rel=REL, abs=0.0)
    with pytest.raises(ValueError, match="target"):
        probe(chain(0.5, 1), X, loss="mse")


def test_a_plain_list_of_modules_is_accepted() -> None:
    blocks = [scalar(0.5), scalar(0.5)]
    assert probe(blocks, X).gradient_ratio == pytest.approx(0.25, rel=REL, abs=0.0)
    assert set(probe(blocks, X).param_grad_norm) == {"0.weight", "1.weight"}


class Poison(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * float("nan")


def test_nonfinite_is_located_at_the_block_that_produced_it() -> None:
    blocks = nn.Sequential(scalar(1.0), scalar(1.0), scalar(1.0), Poison(), scalar(1.0))
    m = probe(blocks, X)
    assert m.nonfinite_at == 4 and m.nonfinite_kind == "activation"


def test_a_detached_block_is_a_zero_gradient_not_a_crash() -> None:
    class Detach(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.detach() * 1.0

    m = probe(nn.Sequential(scalar(0.5), Detach(), scalar(0.5)), X)
    assert m.grad_norm[0] == 0.0 and m.gradient_ratio == 0.0


def test_checkpointing_gives_identical_numbers() -> None:
    torch.manual_seed(0)
    blocks = nn.Sequential(*[nn.Sequential(nn.Linear(6, 6), nn.Tanh()) for _ in range(10)]).double()
    x = torch.randn(3, 6, dtype=torch.float64)
    a = probe(blocks, x)
    for every in (1, 3, 4, 10):
        b = probe(blocks, x, checkpoint_every=every)
        assert (a.grad_norm, a.act_var, a.act_sq_mean, a.param_grad_norm) == (
            b.grad_norm,
            b.act_var,
            b.act_sq_mean,
            b.param_grad_norm,
        )


def test_probe_leaves_input_and_parameter_grads_alone() -> None:
    blocks = chain(0.5, 3)
    x = X.clone()
    probe(blocks, x)
    assert x.grad is None and not x.requires_grad
    assert all(p.grad is None for p in blocks.parameters())


PREACT_ZERO = """
name = "preact-zero"
description = "zero-init preact"
family = "preact"
[block]
layer = "{layer}"
norm = "layer"
activation = "gelu"
[space]
depth = [1, 80]
width = [2, 12]
branch_init = ["zero", "rezero", "skipinit"]
dtype = ["float32", "float64"]
[expect.identity_at_init]
"""


@settings(max_examples=25, deadline=None)
@given(
    depth=st.integers(1, 80),
    width=st.integers(2, 12),
    branch=st.sampled_from(["zero", "rezero", "skipinit"]),
    dtype=st.sampled_from(["float32", "float64"]),
    layer=st.sampled_from(["linear", "conv2d"]),
    seed=st.integers(0, 1000),
)
def test_zero_branch_preact_is_bit_exactly_the_identity(
    depth: int, width: int, branch: str, dtype: str, layer: str, seed: int
) -> None:
    spec = parse_spec(PREACT_ZERO.format(layer=layer))
    case = corner_case(
        spec,
        depth=depth,
        width=width,
        branch_init=branch,
        dtype=dtype,
        seed=seed,
        spatial=3 if layer == "conv2d" else None,
    )
    net = build(spec, case)
    x = make_input(spec, case)
    m = probe(net.blocks, x, seed=seed)
    assert m.identity_error == 0.0 and m.input_grad_error == 0.0
    assert len(set(m.grad_norm)) == 1 and len(set(m.act_var)) == 1  # every boundary identical
    y = net.blocks(x)
    assert torch.equal(y, x)


class _Recorder:
    """A BoundaryObserver that keeps every boundary's sum and the blocks it was started with."""

    name = "recorder"

    def __init__(self) -> None:
        self.sums: list[tuple[int, float]] = []
        self.started: int | None = None

    def start(self, blocks: list[nn.Module]) -> None:
        self.started = len(blocks)

    def observe(self, index: int, h: torch.Tensor) -> None:
        assert not h.requires_grad  # observers see detached tensors
        self.sums.append((index, float(h.sum())))

    def finish(self) -> list[tuple[int, float]]:
        return self.sums


@pytest.mark.parametrize("checkpoint_every", [0, 2])
def test_observers_see_every_boundary_once_in_order(checkpoint_every: int) -> None:
    # y_l = 2^l · x on a chain of slope 2: boundary l sums to 2^l · Σx, once per boundary even when
    # checkpointed segments are recomputed in the backward pass.
    rec = _Recorder()
    m = probe(chain(2.0, 5), X, observers=[rec], checkpoint_every=checkpoint_every)
    assert rec.started == 5
    total = float(X.sum())
    assert m.extra["recorder"] == [(i, total * 2.0**i) for i in range(6)]


def test_no_observers_means_empty_extra() -> None:
    assert probe(chain(0.5, 3), X).extra == {}
