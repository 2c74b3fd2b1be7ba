"""The probe's less travelled paths against direct computations (stability/measure/probe.py): parameter
gradient norms of mixed sizes in their own order, a parameter reached twice, every container the
probe accepts, the moment buffer when it fills and when the boundary size changes, the errors it
raises and the low-precision gradient norms. Written from the mutation check (docs/mutation.md)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from stability import Stack, probe
from stability.errors import BlockError
from stability.measure.probe_pass import projection_vector


def _x(*shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64).to(dtype)


def _seeded(module: nn.Module, seed: int = 0) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) / math.sqrt(max(p.shape[-1], 1)))
    return module


def test_parameter_gradient_norms_of_mixed_sizes_keep_their_names_and_order() -> None:
    # 4096 < 80·80 = 6400: the weights go through the large-tensor path, the biases (80) through the
    # stacked small path, and a 3×3 weight (9) through a group of its own shape
    blocks = _seeded(
        nn.Sequential(
            nn.Linear(80, 80), nn.Tanh(), nn.Linear(80, 3), nn.Linear(3, 3), nn.Linear(3, 80), nn.Linear(80, 80)
        ).double()
    )
    x = _x(4, 80)
    m = probe(blocks, x, loss="sum")
    x0 = x.clone().requires_grad_(True)
    grads = torch.autograd.grad(blocks(x0).sum(), list(blocks.parameters()))
    want = {name: float(g.norm()) for (name, _), g in zip(blocks.named_parameters(), grads, strict=True)}
    assert list(m.param_grad_norm) == list(want)
    for name, value in want.items():
        assert m.param_grad_norm[name] == pytest.approx(value, rel=1e-12, abs=0.0), name


def test_a_module_used_twice_has_its_parameters_listed_once() -> None:
    shared = nn.Linear(5, 5).double()
    m = probe(nn.Sequential(shared, shared), _x(2, 5), loss="sum")
    assert list(m.param_grad_norm) == ["0.weight", "0.bias"]
    frozen = nn.Linear(5, 5).double().requires_grad_(False)
    assert list(probe(nn.Sequential(frozen, nn.Linear(5, 5).double()), _x(2, 5)).param_grad_norm) == [
        "1.weight",
        "1.bias",
    ]


def test_every_container_gives_the_same_numbers() -> None:
    layers = [_seeded(nn.Linear(6, 6).double(), s) for s in range(3)]
    x = _x(3, 6)
    ref = probe(nn.Sequential(*layers), x)
    for blocks in (
        nn.ModuleList(layers),
        list(layers),
        Stack(blocks=nn.Sequential(*layers)),
        Stack(blocks=nn.ModuleList(layers)),
    ):
        m = probe(blocks, x)  # type: ignore[arg-type]
        assert (m.grad_norm, m.act_var, m.act_sq_mean) == (ref.grad_norm, ref.act_var, ref.act_sq_mean)
        assert m.param_grad_norm == ref.param_grad_norm
    single = probe(layers[0], x)
    assert single.n_blocks == 1 and single.grad_norm == probe(nn.Sequential(layers[0]), x).grad_norm
    assert list(single.param_grad_norm) == ["weight", "bias"]
    with pytest.raises(
        TypeError,
        match=r"^Stack.blocks is a int: give an nn.Sequential, an nn.ModuleList or a module with "
        r"\.blocks/\.layers/\.layer/\.h/\.block$",
    ):
        probe(Stack(blocks=3), x)  # type: ignore[arg-type]


def test_a_stack_stem_runs_first_without_gradient() -> None:
    stem = nn.Linear(4, 6).double()
    body = _seeded(nn.Linear(6, 6).double())
    x = _x(3, 4)
    m = probe(Stack(blocks=nn.Sequential(body), stem=stem), x)
    ref = probe(nn.Sequential(body), stem(x).detach())
    assert m.grad_norm == ref.grad_norm and m.act_var == ref.act_var
    assert stem.weight.grad is None and list(m.param_grad_norm) == ["0.weight", "0.bias"]


def test_identity_error_is_none_for_a_new_shape_and_absolute_against_a_zero_input() -> None:
    assert probe(nn.Sequential(nn.Linear(4, 3).double()), _x(2, 4)).identity_error is None
    zero = torch.zeros(2, 4, dtype=torch.float64)
    shift = nn.Linear(4, 4).double()
    with torch.no_grad():
        shift.weight.zero_()
        shift.bias.fill_(0.5)
    m = probe(nn.Sequential(shift), zero)
    assert m.identity_error == pytest.approx(
        math.sqrt(8 * 0.25), rel=1e-15, abs=0.0
    )  # ‖y − 0‖ with no ‖x‖ to divide by


def test_loss_errors_and_block_errors_are_one_line_and_name_the_block() -> None:
    blocks = nn.Sequential(nn.Linear(4, 4).double())
    with pytest.raises(ValueError, match=r'^probe\(loss="mse"\) needs target=$'):
        probe(blocks, _x(2, 4), loss="mse")
    with pytest.raises(ValueError, match=r"^probe\(loss='l1'\): choose \"projection\", \"sum\" or \"mse\"$"):
        probe(blocks, _x(2, 4), loss="l1")  # type: ignore[arg-type]

    class Boom(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("bad\n  shape")

    class Words(nn.Module):
        def forward(self, x: torch.Tensor) -> str:
            return "no tensor"

    with pytest.raises(
        BlockError, match=r"^block 1 \(Boom\) failed on an input of shape \(2, 4\): ValueError: bad shape$"
    ):
        probe(nn.Sequential(nn.Linear(4, 4).double(), Boom()), _x(2, 4))
    with pytest.raises(
        BlockError,
        match=r"^block 0 \(Words\) returned str with no tensor hidden state \(a tensor; else "
        r"last_hidden_state or hidden_states; else element 0 of a tuple or list\)$",
    ):
        probe(nn.Sequential(Words()), _x(2, 4))


def test_moments_are_exact_when_the_buffer_fills_and_when_the_size_changes() -> None:
    """Boundaries of ≥ 2,048 values are buffered, 1 MiB of rows at a time (float64: 64 rows of
    2,048 values, 32 of 4,096), and reduced a group at a time. Batch 32: 70 boundaries of width 64
    (N = 2,048) fill the buffer once, 35 of width 128 (N = 4,096) fill it again after a size change,
    and 3 of width 48 (N = 1,536) take the one-pass path. Each boundary's variance and mean are
    checked against torch's own."""
    widths = [64] * 70 + [128] * 35 + [48] * 3
    layers = [
        _seeded(nn.Linear(a, b).double(), s) for s, (a, b) in enumerate(zip([64, *widths[:-1]], widths, strict=True))
    ]
    x = _x(32, 64)
    m = probe(nn.Sequential(*layers), x)
    h = x
    want_var, want_mean = [float(h.var(unbiased=False))], [float(h.mean())]
    with torch.no_grad():
        for layer in layers:
            h = layer(h)
            want_var.append(float(h.var(unbiased=False)))
            want_mean.append(float(h.mean()))
    assert m.act_var == pytest.approx(want_var, rel=1e-10, abs=0.0)
    assert m.act_sq_mean == pytest.approx(
        [v + u * u for v, u in zip(want_var, want_mean, strict=True)], rel=1e-10, abs=0.0
    )
    assert m.channels == [64, *widths]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_gradient_norms_are_taken_in_float32(dtype: torch.dtype) -> None:
    blocks = nn.Sequential(*[_seeded(nn.Linear(16, 16), s).to(dtype) for s in range(3)])
    x = _x(4, 16, dtype=dtype)
    m = probe(blocks, x, seed=3)
    x0 = x.clone().requires_grad_(True)
    hs = [x0]
    for b in blocks:
        hs.append(b(hs[-1]))
        hs[-1].retain_grad()
    r = projection_vector(hs[-1].shape, 3, dtype=dtype, device=x.device)
    hs[-1].backward(r)
    want = [float(torch.linalg.vector_norm(h.grad, dtype=torch.float32)) for h in hs[1:]]  # type: ignore[arg-type]
    assert m.grad_norm[1:] == pytest.approx(want, rel=1e-6, abs=0.0)
    assert m.grad_norm[0] == pytest.approx(
        float(torch.linalg.vector_norm(x0.grad, dtype=torch.float32)), rel=1e-6, abs=0.0
    )  # type: ignore[arg-type]


def test_large_low_precision_parameter_gradients_are_normed_in_float32() -> None:
    blocks = nn.Sequential(_seeded(nn.Linear(80, 80)).half())  # 6,400 > 4,096 weights: the large-tensor path
    x = _x(4, 80, dtype=torch.float16)
    m = probe(blocks, x, seed=1)
    x0 = x.clone().requires_grad_(True)
    y = blocks(x0)
    y.backward(projection_vector(y.shape, 1, dtype=y.dtype, device=y.device))
    w = blocks[0].weight.grad
    assert w is not None
    assert m.param_grad_norm["0.weight"] == pytest.approx(
        float(torch.linalg.vector_norm(w, dtype=torch.float32)), rel=1e-6, abs=0.0
    )


def test_a_vector_boundary_counts_as_one_channel() -> None:
    m = probe(nn.Sequential(nn.Linear(5, 5).double(), nn.Linear(5, 5).double()), _x(5))  # (C,) with no batch axis
    assert m.channels == [1, 1, 1]


def test_a_stacks_call_kwargs_reach_every_block_unless_overridden() -> None:
    class Scaled(nn.Module):
        def forward(self, x: torch.Tensor, *, scale: float = 1.0) -> torch.Tensor:
            return scale * x

    x = _x(2, 3)
    stack = Stack(blocks=nn.Sequential(Scaled(), Scaled()), call_kwargs={"scale": 2.0})
    assert probe(stack, x, loss="sum").gradient_ratio == pytest.approx(4.0, rel=1e-15, abs=0.0)
    assert probe(stack, x, loss="sum", call_kwargs={"scale": 3.0}).gradient_ratio == pytest.approx(
        9.0, rel=1e-15, abs=0.0
    )


def test_an_output_that_depends_on_nothing_has_zero_gradients_everywhere() -> None:
    class Cut(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3).double()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x).detach()

    m = probe(nn.Sequential(Cut()), _x(2, 3))
    assert m.grad_norm[0] == 0.0 and m.param_grad_norm == {"0.lin.weight": 0.0, "0.lin.bias": 0.0}


def test_a_parameter_the_output_does_not_use_has_a_zero_gradient() -> None:
    class Spare(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used = nn.Linear(3, 3).double()
            self.unused = nn.Linear(3, 3).double()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.used(x)

    m = probe(nn.Sequential(Spare()), _x(2, 3))
    assert m.param_grad_norm["0.unused.weight"] == 0.0 and m.param_grad_norm["0.used.weight"] > 0.0


def test_names_follow_named_parameters_through_keys_nesting_sharing_and_a_stem() -> None:
    # the probe lists parameters from the same walk that saves buffers and flags (one walk per probe)
    from collections import OrderedDict

    inner = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4)).double()
    shared = nn.Linear(4, 4).double()
    blocks = nn.Sequential(
        OrderedDict(first=inner, second=shared, third=nn.Sequential(shared, nn.LayerNorm(4).double()))
    )
    blocks.register_parameter("scale", nn.Parameter(torch.ones((), dtype=torch.float64)))
    stem = nn.Sequential(
        shared
    )  # a module of the blocks reached again from the stem: still named once, under the blocks
    for container in (blocks, Stack(blocks=blocks, stem=stem)):
        m = probe(container, _x(3, 4))
        assert list(m.param_grad_norm) == [n for n, _ in blocks.named_parameters()]
    as_list = probe(
        [inner, shared, shared], _x(3, 4)
    )  # a plain list: "{i}.{name}", a repeated block at each of its places
    assert list(as_list.param_grad_norm) == [
        "0.0.weight",
        "0.0.bias",
        "0.2.weight",
        "0.2.bias",
        "1.weight",
        "1.bias",
        "2.weight",
        "2.bias",
    ]


def test_the_containers_own_buffers_and_flag_are_put_back() -> None:
    class Counting(nn.Sequential):
        def __init__(self, *mods: nn.Module) -> None:
            super().__init__(*mods)
            self.register_buffer("calls", torch.zeros((), dtype=torch.float64))

        def forward(self, h: torch.Tensor) -> torch.Tensor:  # not used by the probe (it calls the children)
            return super().forward(h)

    blocks = Counting(nn.Linear(3, 3).double())
    blocks.calls += 5  # type: ignore[operator]

    class Meddler(nn.Module):
        def forward(self, h: torch.Tensor) -> torch.Tensor:
            blocks.calls += 1  # type: ignore[operator]
            blocks.eval()
            return h

    blocks.append(Meddler())
    blocks.train()
    probe(blocks, _x(2, 3))
    assert float(blocks.calls) == 5.0 and blocks.training  # type: ignore[arg-type]
