"""The probe's reduction helpers one at a time, against the exact computation each promises
(stability/measure/probe_pass.py, reductions.py, param_norms.py): relative differences in the
tensors' own dtype or in float64, rounding to a dtype, which boundaries get the two-pass moments,
the host-side combination of those moments, the parameter-gradient norms of every size class in
their own order, the range fallback of `norm_tensor`, and the hooked low-precision parameters. Written
from the mutation check (docs/mutation.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from stability import probe
from stability.measure.boundaries import rel_diff
from stability.measure.param_norms import _HOOK_PARAM, _SMALL_PARAM, param_grad_norms
from stability.measure.probe_pass import projection_vector
from stability.measure.reductions import (
    TWO_PASS_MIN,
    _as_dtype,
    combine_moments,
    moments_into,
    norm_tensor,
    norm_value,
    two_pass_count,
)

#: A gradient of many rows of `reductions.NORM_ROW` (and, plus 3, a remainder).
_LONG = 1 << 16


def _randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def _rows32(t: torch.Tensor) -> float:
    """The norm by the probe's rule above 1,024 elements, written out: float32 norms of the runs of
    1,024 elements (t's size a multiple of it here), combined in float64."""
    return math.hypot(*torch.linalg.vector_norm(t.reshape(-1, 1024), dim=1, dtype=torch.float32).tolist())


def _norm64(t: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(t.double()))


# ----------------------------------------------------------------------------- rel_diff


def test_rel_diff_of_two_float32_tensors_is_computed_in_float32() -> None:
    a, b = _randn(32, 31, seed=1), _randn(32, 31, seed=2)  # ≤ 1,024 elements: one float32 vector_norm each
    own = float(torch.linalg.vector_norm(a - b)) / float(torch.linalg.vector_norm(b))
    wide = _norm64(a.double() - b.double()) / _norm64(b)
    assert own != wide  # the two ways differ in the last bits here, so the test below can tell them apart
    assert rel_diff(a, b) == own


@pytest.mark.parametrize(
    ("da", "db"),
    [
        (torch.float32, torch.float64),
        (torch.float64, torch.float32),
        (torch.float16, torch.float16),
        (torch.bfloat16, torch.bfloat16),
    ],
)
def test_rel_diff_of_mixed_or_half_precision_tensors_is_computed_in_float64(da: torch.dtype, db: torch.dtype) -> None:
    a, b = _randn(40, 7, seed=3, dtype=da), _randn(40, 7, seed=4, dtype=db)
    want = _norm64(a.double() - b.double()) / _norm64(b)
    assert rel_diff(a, b) == want


def test_rel_diff_edges() -> None:
    a = _randn(5, 4, seed=5)
    assert rel_diff(a, a.clone()) == 0.0
    assert rel_diff(a, a.reshape(4, 5)) is None  # another shape: no identity error
    zero = torch.zeros(5, 4)
    assert rel_diff(a, zero) == float(torch.linalg.vector_norm(a))  # against zero: the absolute difference


# ----------------------------------------------------------------------------- _as_dtype, two_pass_count


def test_as_dtype_rounds_to_the_dtype_and_keeps_float64() -> None:
    assert _as_dtype(0.1, torch.float64) == 0.1
    assert _as_dtype(0.1, torch.float32) == float(np.float32(0.1)) != 0.1
    assert _as_dtype(0.1, torch.float16) == float(np.float16(0.1)) != float(np.float32(0.1))
    assert _as_dtype(1.0 + 2**-9, torch.bfloat16) == 1.0  # 8 bits of mantissa


def test_two_pass_count_is_the_size_for_large_cpu_float_tensors_only() -> None:
    cpu, f32 = torch.device("cpu"), torch.float32
    assert two_pass_count(TWO_PASS_MIN, cpu, f32) == TWO_PASS_MIN
    assert two_pass_count(TWO_PASS_MIN + 5, cpu, torch.float64) == TWO_PASS_MIN + 5
    assert two_pass_count(TWO_PASS_MIN - 1, cpu, f32) == 0
    assert (
        two_pass_count(4 * TWO_PASS_MIN, torch.device("cuda"), f32) == 0
    )  # a device: var_mean (no host read mid-pass)
    assert two_pass_count(4 * TWO_PASS_MIN, torch.device("meta"), f32) == 0
    assert two_pass_count(4 * TWO_PASS_MIN, cpu, torch.int64) == 0


# ----------------------------------------------------------------------------- moments_into and combine_moments


def test_moments_small_boundaries_give_var_mean_and_large_ones_the_two_pass_sums() -> None:
    small = _randn(TWO_PASS_MIN - 1, seed=6, dtype=torch.float64) * 3 + 2
    out: list[torch.Tensor] = []
    assert moments_into(small, out) == 0 and len(out) == 2
    var, mean = torch.var_mean(small, correction=0)
    assert (float(out[0]), float(out[1])) == (float(var), float(mean))
    large = _randn(8, 512, seed=7, dtype=torch.float64) * 3 + 2  # 4,096 elements
    out = []
    assert moments_into(large, out) == large.numel() and len(out) == 3
    m = float(large.mean())
    d = large - large.mean()
    assert [float(t) for t in out] == [m, float(d.sum()), float((d * d).sum())]
    v, u = combine_moments([float(t) for t in out], [large.numel()])
    assert v[0] == pytest.approx(float(large.var(unbiased=False)), rel=1e-13, abs=0.0)
    assert u[0] == pytest.approx(m, rel=1e-15, abs=0.0)


def test_combine_applies_the_corrected_two_pass_formula() -> None:
    # m = 1, Σd = 2, Σd² = 10 over n = 4: mean = m + Σd/n = 1.5, var = Σd²/n − (Σd/n)² = 2.5 − 0.25 = 2.25
    var, mean = combine_moments([0.7, -3.0, 1.0, 2.0, 10.0, 5.0, math.inf, 1.0], [0, 4, 2])
    assert var[:2] == [0.7, 2.25] and mean[:2] == [-3.0, 1.5]
    assert math.isnan(var[2]) and mean[2] == 5.0  # an inf sum: non-finite variance, the centre kept as the mean
    v, m = combine_moments(
        [0.0, 1.0, 0.3], [3]
    )  # Σd²/n − (Σd/n)² = 0.1 − 0.11… < 0 (rounding does that near zero variance): clamped at 0
    assert v == [0.0] and m == [1.0 / 3.0]


# ----------------------------------------------------------------------------- norm_tensor


def test_norm_keeps_the_input_dtype_unless_the_squares_leave_the_range() -> None:
    g = _randn(300, seed=8) * 1e-3  # a norm below 1: still float32
    assert norm_tensor(g, None).dtype == torch.float32
    assert float(norm_tensor(g, None)) == float(torch.linalg.vector_norm(g))
    big = torch.full((300,), 2.0**100)  # squares overflow float32: taken again in float64
    out = norm_tensor(big, None)
    assert out.dtype == torch.float64 and float(out) == pytest.approx(2.0**100 * math.sqrt(300), rel=1e-15, abs=0.0)
    tiny = torch.full((300,), 2.0**-100)  # squares underflow to 0 in float32
    assert float(norm_tensor(tiny, None)) == pytest.approx(2.0**-100 * math.sqrt(300), rel=1e-15, abs=0.0)
    assert float(norm_tensor(torch.zeros(300), None)) == 0.0
    assert norm_value(big, None) == float(out) and norm_value(g, None) == float(torch.linalg.vector_norm(g))


def test_norm_of_half_precision_accumulates_in_the_dtype_given() -> None:
    g = _randn(1000, seed=9, dtype=torch.float16)
    out = norm_tensor(g, torch.float32)
    assert out.dtype == torch.float32
    assert float(out) == float(torch.linalg.vector_norm(g, dtype=torch.float32))
    long = _randn(5120, seed=9, dtype=torch.float16)  # by rows: float32 rows, combined in float64
    assert (
        float(norm_tensor(long, torch.float32))
        == _rows32(long)
        != float(torch.linalg.vector_norm(long, dtype=torch.float64))
    )


# ----------------------------------------------------------------------------- param_grad_norms


def test_param_norms_of_every_size_class_in_their_own_order() -> None:
    sizes = [(_LONG + 4096 + 3,), (3, 5), (_SMALL_PARAM + 1,), (_LONG * 2,), (3, 5), (7,), (_SMALL_PARAM,)]
    grads = [
        _randn(*s, seed=10 + i) for i, s in enumerate(sizes)
    ]  # huge, small, middle, huge (whole rows), small, small, small
    out = param_grad_norms(grads, None)
    assert out.dtype == torch.float64 and out.shape == (len(grads),)
    assert out.tolist() == pytest.approx([_norm64(g) for g in grads], rel=5e-7, abs=0.0)
    given = {1: torch.tensor(11.0), 3: torch.tensor(33.0)}  # norms already taken (by the hooks): not recomputed
    mixed = param_grad_norms(grads, None, given=given).tolist()
    assert mixed[1] == 11.0 and mixed[3] == 33.0
    assert [mixed[j] for j in (0, 2, 4, 5, 6)] == pytest.approx(
        [_norm64(grads[j]) for j in (0, 2, 4, 5, 6)], rel=5e-7, abs=0.0
    )
    empty = param_grad_norms([], None)
    assert empty.dtype == torch.float64 and empty.numel() == 0


def test_param_norms_out_of_float32_range_are_taken_in_float64() -> None:
    grads = [
        torch.full((_SMALL_PARAM + 10,), 2.0**83),
        torch.full((3, 3), 2.0**-83),
        torch.full((3, 3), 2.0),
        torch.full((2, 2), 2.0**83),
    ]  # squares beyond float32's range, both ways
    out = param_grad_norms(grads, None).tolist()
    assert out == pytest.approx(
        [2.0**83 * math.sqrt(_SMALL_PARAM + 10), 3 * 2.0**-83, 6.0, 2.0**84], rel=1e-14, abs=0.0
    )


def test_hooked_low_precision_parameters_are_normed_in_float32() -> None:
    side = int(math.isqrt(_HOOK_PARAM))
    lin = nn.Linear(side, side)
    with torch.no_grad():
        lin.weight.copy_(_randn(side, side, seed=11) / side)
    blocks = nn.Sequential(lin.half())
    x = _randn(4, side, seed=12, dtype=torch.float16)
    m = probe(blocks, x, seed=2)
    x0 = x.clone().requires_grad_(True)
    y = blocks(x0)
    y.backward(projection_vector(y.shape, 2, dtype=y.dtype, device=y.device))
    w = lin.weight.grad
    assert w is not None and lin.weight.numel() >= _HOOK_PARAM
    assert (
        m.param_grad_norm["0.weight"] == _rows32(w) != _norm64(w)
    )  # float32 rows, not a float16 or a float64 accumulation
    assert _rows32(w) != math.hypot(*torch.linalg.vector_norm(w.reshape(-1, 1024), dim=1).tolist())


def test_param_norms_in_range_stay_in_float32_arithmetic_and_every_class_alone_is_float64() -> None:
    # in-range float32 norms are not retaken in float64 (that is only for squares out of range):
    # each equals the float32 reduction of its class exactly, whether the norm is below or above 1
    small = [_randn(3, 5, seed=20) * 0.01, _randn(3, 5, seed=21) * 10.0]  # one group of two, norms < 1 and > 1
    middle = [_randn(_SMALL_PARAM + 1, seed=22) * 1e-4, _randn(_SMALL_PARAM + 7, seed=23)]
    out = param_grad_norms([*small, *middle], None).tolist()
    want_small = torch.linalg.vector_norm(torch.stack(small).reshape(2, -1), dim=1).tolist()
    want_middle = [norm_value(g, None) for g in middle]  # each by rows (reductions.row_norms)
    assert out == [*want_small, *want_middle]
    for alone in (small, middle, [_randn(_LONG + 1, seed=24)]):
        assert param_grad_norms(alone, None).dtype == torch.float64
    assert param_grad_norms(small, None, given={0: torch.tensor(1.0), 1: torch.tensor(2.0)}).tolist() == [1.0, 2.0]
    assert param_grad_norms(small, None, given={0: torch.tensor(1.0), 1: torch.tensor(2.0)}).dtype == torch.float64


@pytest.mark.parametrize("size", [7, _SMALL_PARAM + 3, _LONG + 4096])
def test_param_norms_of_half_precision_gradients_accumulate_in_float32(size: int) -> None:
    grads = [_randn(size, seed=25, dtype=torch.float16), _randn(size, seed=26, dtype=torch.float16)]
    out = param_grad_norms(grads, torch.float32).tolist()
    assert out == [float(norm_tensor(g, torch.float32)) for g in grads]  # float32 accumulation, every size class
    assert out != [float(torch.linalg.vector_norm(g)) for g in grads]  # (a float16 accumulation would differ)
    assert param_grad_norms(grads, torch.float32).dtype == torch.float64


def test_large_parameters_are_normed_by_hooks_and_small_ones_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    from stability.measure import probe_pass

    seen: list[dict[int, torch.Tensor]] = []
    real = probe_pass.param_grad_norms

    def spy(
        grads: list[torch.Tensor], norm_dtype: torch.dtype | None, *, given: dict[int, torch.Tensor] | None = None
    ) -> torch.Tensor:
        seen.append(dict(given or {}))
        out: torch.Tensor = real(grads, norm_dtype, given=given)
        return out

    monkeypatch.setattr(probe_pass, "param_grad_norms", spy)
    side = int(math.isqrt(_HOOK_PARAM))
    big = nn.Linear(side, side).double()
    probe(
        nn.Sequential(big, nn.Linear(side, 8).double(), nn.Linear(8, side).double(), big),
        _randn(2, side, seed=27, dtype=torch.float64),
    )
    assert set(seen[0]) == {
        0
    }  # big.weight (side² = _HOOK_PARAM elements, used twice: one hook) only; biases and the 8×side weights at the end


def test_walk_visits_each_module_once_and_names_only_the_naming_roots_parameters() -> None:
    from stability.measure.probe_pass import _walk

    shared = nn.Linear(3, 3)
    root = nn.Sequential(shared, nn.Sequential(shared, nn.BatchNorm1d(3)))
    stem = nn.Sequential(nn.Linear(3, 3), shared)
    modules, buffers, params = _walk([stem, root[1]], root)
    assert len(modules) == len({id(m) for m in modules}) == 6  # root, shared, inner, bn; stem and its own linear
    assert [name for _, name, _ in buffers] == ["running_mean", "running_var", "num_batches_tracked"]
    assert (
        [n for n, _ in params]
        == [n for n, _ in root.named_parameters()]
        == ["0.weight", "0.bias", "1.1.weight", "1.1.bias"]
    )
    tied = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    tied[1].weight = tied[0].weight  # one parameter in two modules: listed once, under its first name
    assert (
        [n for n, _ in _walk([], tied)[2]]
        == [n for n, _ in tied.named_parameters()]
        == ["0.weight", "0.bias", "1.bias"]
    )


def test_stack64_gives_float64_for_none_one_and_mixed_scalars() -> None:
    from stability.measure.reductions import stack64

    assert stack64([]).dtype == torch.float64 and stack64([]).numel() == 0
    one = stack64([torch.tensor(0.1, dtype=torch.float32)])
    assert one.dtype == torch.float64 and one.tolist() == [float(np.float32(0.1))]
    mixed = stack64(
        [
            torch.tensor(0.1, dtype=torch.float32),
            torch.tensor(0.1, dtype=torch.float64),
            torch.tensor(0.1, dtype=torch.float16),
        ]
    )
    assert mixed.dtype == torch.float64 and mixed.tolist() == [float(np.float32(0.1)), 0.1, float(np.float16(0.1))]


# ----------------------------------------------------------------------------- probe's own steps


def test_probe_puts_the_stems_batch_norm_statistics_back_and_restores_garbage_collection() -> None:
    import gc

    from stability import Stack

    stem = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).double().train()
    before = [t.clone() for t in stem[1].buffers()]
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            gc.enable() if enabled else gc.disable()
            probe(
                Stack(blocks=nn.Sequential(nn.Linear(4, 4).double()), stem=stem),
                _randn(8, 4, seed=30, dtype=torch.float64),
            )
            assert gc.isenabled() is enabled  # collection is off during a pass and as it was afterwards
    finally:
        gc.enable() if was else gc.disable()
    assert all(
        torch.equal(a, b) for a, b in zip(before, stem[1].buffers(), strict=True)
    )  # the stem ran in train mode and changed nothing


def test_garbage_collection_is_off_from_the_module_walk_on_and_back_after_a_refused_input() -> None:
    import gc

    from stability import Stack

    seen: list[bool] = []

    class Spy(nn.Module):  # its `_buffers` is read by the walk: a property records gc's state then
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Linear(2, 2)

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            return self.inner(h)

    spy = Spy()
    real = spy.__dict__.pop("_buffers")

    class Walked(type(spy)):  # type: ignore[misc]
        @property
        def _buffers(self) -> dict[str, torch.Tensor]:
            seen.append(gc.isenabled())
            return real

    spy.__class__ = Walked
    was = gc.isenabled()
    try:
        gc.enable()
        probe(nn.Sequential(spy), _randn(3, 2, seed=31))
        assert seen and not any(seen) and gc.isenabled()  # off during the walk, on again after
        with pytest.raises(TypeError):
            probe(
                Stack(blocks=nn.Identity()), _randn(3, 2, seed=31)
            )  # a module with no list of blocks: refused before the pass
        assert gc.isenabled()
    finally:
        gc.enable() if was else gc.disable()


def test_dropout_draws_come_from_the_documented_stream_of_the_seed() -> None:
    from stability.measure.probe_pass import _DROPOUT_STREAM

    drawn: list[float] = []

    class Draws(nn.Module):
        def forward(self, h: torch.Tensor) -> torch.Tensor:
            drawn.append(float(torch.rand(())))  # the global generator, as dropout uses it
            return h

    probe(nn.Sequential(Draws()), _randn(2, 3, seed=31), seed=12345)
    want = float(torch.rand((), generator=torch.Generator().manual_seed((_DROPOUT_STREAM ^ 12345) % 2**63)))
    assert drawn == [want]


def test_callable_call_kwargs_see_the_stacks_input() -> None:
    from stability import Stack

    class Scaled(nn.Module):
        def forward(self, h: torch.Tensor, *, scale: float) -> torch.Tensor:
            return scale * h

    x = _randn(3, 4, seed=32, dtype=torch.float64)
    m = probe(Stack(blocks=nn.Sequential(Scaled()), call_kwargs=lambda h: {"scale": float(h.shape[0])}), x, loss="sum")
    assert m.grad_norm[0] == pytest.approx(3.0 * math.sqrt(x.numel()), rel=1e-15, abs=0.0)  # ∂(Σ 3x)/∂x = 3 everywhere


def test_a_block_returning_a_tuple_is_followed_through_its_first_element() -> None:
    class Pair(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4).double()

        def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            out = self.lin(h)
            return out, out.sum()

    first, second = Pair(), Pair()
    blocks = nn.Sequential(first, second)
    x = _randn(3, 4, seed=33, dtype=torch.float64)
    plain = nn.Sequential(first.lin, second.lin)
    got, want = probe(blocks, x), probe(plain, x)
    assert (got.grad_norm, got.act_var) == (want.grad_norm, want.act_var)


def test_half_precision_boundaries_are_reduced_in_float32_and_the_projection_is_rounded_to_half() -> None:
    x = _randn(64, 64, seed=34, dtype=torch.float16)  # 4,096 ≥ the two-pass size: Σh and Σh² are float32 sums
    m = probe(nn.Sequential(nn.Identity()), x, seed=6)
    f = x.float()
    assert m.act_var[0] == pytest.approx(float(f.var(unbiased=False)), rel=1e-6, abs=0.0)
    r = projection_vector(x.shape, 6, dtype=torch.float16, device=x.device)
    assert m.grad_norm[1] == _rows32(r)  # ∂L/∂y = r, in y's dtype, its norm accumulated in float32


def test_mse_loss_is_the_mean_squared_distance_to_the_target() -> None:
    x = _randn(5, 3, seed=35, dtype=torch.float64)
    target = _randn(5, 3, seed=36, dtype=torch.float64)
    m = probe(nn.Sequential(nn.Identity()), x, loss="mse", target=target)
    want = 2.0 * (x - target) / x.numel()  # ∂ mean((x − t)²) / ∂x
    assert m.grad_norm[0] == pytest.approx(float(torch.linalg.vector_norm(want)), rel=1e-14, abs=0.0)


def test_a_boundary_the_loss_does_not_reach_has_gradient_norm_zero() -> None:
    class Fresh(nn.Module):  # ignores its input: nothing before it reaches the loss
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(3, 4, dtype=torch.float64))

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            return self.w * 2.0

    m = probe(
        nn.Sequential(nn.Linear(4, 4).double(), Fresh(), nn.Linear(4, 4).double()),
        _randn(3, 4, seed=37, dtype=torch.float64),
    )
    assert m.grad_norm[:2] == [0.0, 0.0] and m.grad_norm[2] > 0.0 and m.grad_norm[3] > 0.0


def test_a_global_rng_seed_beyond_63_bits_is_taken_modulo_2_to_the_63() -> None:
    drawn: list[float] = []

    class Draws(nn.Module):
        def forward(self, h: torch.Tensor) -> torch.Tensor:
            drawn.append(float(torch.rand(())))
            return h

    probe(nn.Sequential(Draws()), _randn(2, 3, seed=38), rng_seed=2**63 + 7)
    assert drawn == [float(torch.rand((), generator=torch.Generator().manual_seed(7)))]


def test_only_a_pass_that_runs_user_code_seeds_pythons_and_numpys_generators(monkeypatch: pytest.MonkeyPatch) -> None:
    from stability.measure import probe_pass
    from stability.seeding import seeded

    calls: list[int] = []

    def spy(seed: int) -> object:
        calls.append(seed)
        return seeded(seed)

    monkeypatch.setattr(probe_pass, "seeded", spy)

    class Mine(nn.Module):  # a user's class: its forward may draw from random or numpy.random
        def forward(self, h: torch.Tensor) -> torch.Tensor:
            return h

    torch_only = nn.Sequential(nn.Linear(3, 3), nn.Sequential(nn.ReLU(), nn.Linear(3, 3)))
    assert probe_pass._harness_code_only(list(torch_only.modules()))
    probe(torch_only, _randn(2, 3, seed=32))
    assert calls == []
    nested = nn.Sequential(nn.Linear(3, 3), nn.Sequential(Mine()))
    assert not probe_pass._harness_code_only(list(nested.modules()))
    probe(nested, _randn(2, 3, seed=32), seed=4)
    assert len(calls) == 1


# ----------------------------------------------------------------------------- the host design's fast paths


class _TwoOut(nn.Module):
    """Returns the second of two outputs of one node (chunk): the boundary is output 1 of its node."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.cat([h, 3.0 * h], dim=-1).chunk(2, dim=-1)[1]


class _Twice(nn.Module):
    """Uses its input twice: its boundary's gradient is the sum of both uses."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h * 2.0 + h.square()


class _InPlace(nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h.mul_(2.0)


class _FreshLeaf(nn.Module):
    """Returns a new leaf that requires gradient (no node made it): a tensor hook is set instead."""

    def __init__(self) -> None:
        super().__init__()
        self.p = nn.Parameter(torch.ones(4, 6))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.p


@pytest.mark.parametrize(
    "blocks",
    [
        [nn.Linear(6, 6), _TwoOut(), nn.Tanh()],
        [nn.Linear(6, 6), _Twice(), nn.Linear(6, 6)],
        [nn.Linear(6, 6), _InPlace(), nn.Linear(6, 6)],
        [nn.Linear(6, 6), _FreshLeaf(), nn.Linear(6, 6)],
    ],
    ids=["second output of a node", "used twice", "changed in place by the next block", "a fresh leaf"],
)
def test_boundary_gradient_norms_equal_autograd_at_each_boundary(blocks: list[nn.Module]) -> None:
    """The probe's hooks (pre-hooks on the boundaries' nodes, a tensor hook on a leaf) against
    `torch.autograd.grad` of the same loss with respect to each boundary kept as it entered."""
    torch.manual_seed(0)
    x = _randn(4, 6, seed=30)
    m = probe(blocks, x, seed=2)
    h, kept = x.detach().requires_grad_(True), []
    for b in blocks:
        kept.append(h)
        h = b(h.clone() if isinstance(b, _InPlace) else h)  # (a copy: the boundary keeps the value the block received)
    r = projection_vector(h.shape, 2, dtype=h.dtype, device=h.device)
    want = torch.autograd.grad(h, kept, grad_outputs=r, allow_unused=True, materialize_grads=True)
    assert m.grad_norm[1:-1] == pytest.approx([_norm64(g) for g in want[1:]], rel=1e-6, abs=0.0)


class _ReturnsItsParameter(nn.Module):
    """Returns its own parameter (a leaf: no node) as the next boundary."""

    def __init__(self, rows: int, cols: int) -> None:
        super().__init__()
        self.p = nn.Parameter(_randn(rows, cols, seed=31))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.p


class _HooksItsInput(nn.Module):
    """Sets a hook on its input that doubles the gradient flowing back through it."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if h.requires_grad:
            h.register_hook(lambda g: g * 2.0)
        return torch.tanh(h)


@pytest.mark.parametrize("rows", [4, 256], ids=["a small parameter", "a hooked large parameter"])
def test_a_parameter_returned_as_a_boundary_has_its_gradient_norm_and_keeps_no_hook(rows: int) -> None:
    cols = 64
    block = _ReturnsItsParameter(rows, cols)  # 256 × 64 = `_HOOK_PARAM` elements: its norm taken by the parameter hook
    blocks = [nn.Linear(cols, cols), block, nn.Linear(cols, cols)]
    x = _randn(rows, cols, seed=32)
    for _ in range(2):  # (twice: no hook piles up on the parameter)
        m = probe(blocks, x, seed=3)
    p = block.p
    r = projection_vector((rows, cols), 3, dtype=torch.float32, device="cpu")
    (want,) = torch.autograd.grad(blocks[2](p), [p], grad_outputs=r)
    assert m.grad_norm[2] == pytest.approx(_norm64(want), rel=1e-6, abs=0.0)
    assert m.param_grad_norm["1.p"] == pytest.approx(_norm64(want), rel=1e-6, abs=0.0)
    assert not p._backward_hooks  # (None, or emptied: the probe's hooks are gone)


def test_the_output_s_gradient_is_reported_where_nothing_trainable_is_behind_it() -> None:
    """y = detached h × an outside tensor: autograd runs none of y's graph for the probe's inputs,
    and the output's gradient (the loss's own, r) is still reported."""
    outside = _randn(4, 6, seed=33).requires_grad_(True)

    class Cut(nn.Module):
        def forward(self, h: torch.Tensor) -> torch.Tensor:
            return h.detach() * outside

    m = probe([nn.Tanh(), Cut()], _randn(4, 6, seed=34), seed=5)
    assert m.grad_norm[:2] == [0.0, 0.0]
    assert m.grad_norm[2] == pytest.approx(
        _norm64(projection_vector((4, 6), 5, dtype=torch.float32, device="cpu")), rel=1e-6, abs=0.0
    )


def test_a_block_that_changes_a_large_parameter_s_dtype_in_its_forward_is_probed() -> None:
    class Widens(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(128, 128)  # 16,384 weights: hooked

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            self.lin.double()  # its gradient arrives in float64, unlike the parameter the hook was made for
            return self.lin(h.double()).float()

    torch.manual_seed(0)
    block = Widens()
    m = probe([nn.Linear(128, 128), block], _randn(2, 128, seed=35))
    assert m.param_grad_norm["1.lin.weight"] > 0.0 and math.isfinite(m.param_grad_norm["1.lin.weight"])


def test_a_boundary_s_gradient_is_what_flows_back_through_it_after_the_blocks_own_hooks() -> None:
    """A block that doubles the gradient through its input: the boundary reports the doubled
    gradient, the one the block before it receives (so boundary l's norm and the earlier ones agree
    with each other), as `torch.autograd.grad` with respect to that boundary gives it."""
    torch.manual_seed(0)
    blocks = [nn.Linear(6, 6), _HooksItsInput(), nn.Linear(6, 6)]
    x = _randn(4, 6, seed=36)
    m = probe(blocks, x, seed=2)
    x0 = x.detach().requires_grad_(True)
    h1 = blocks[0](x0)
    y = blocks[2](blocks[1](h1))
    r = projection_vector(y.shape, 2, dtype=y.dtype, device=y.device)
    (g1,) = torch.autograd.grad(y, [h1], grad_outputs=r)
    assert m.grad_norm[1] == pytest.approx(_norm64(g1), rel=1e-6, abs=0.0)
    assert m.grad_norm[0] == pytest.approx(
        _norm64(g1 @ blocks[0].weight.detach()), rel=1e-6, abs=0.0
    )  # what reached the input: the doubled gradient, through the first layer
