"""The probe's boundary moments and gradient norms on the CPU, against float64 references.

`stability.measure.reductions.Moments` reduces each boundary of ≥ 2,048 elements to Σh and Σh² at
once (one-pass, with the corrected two-pass formula where mean² > var would cancel); `norm_tensor`
takes norms above 1,024 elements a row of 1,024 at a time, combined in float64, because torch's
float32 `vector_norm` drifts with the length (1.5e-5 relative at 16,384 elements on a constant
vector, 9e-4 at 2^20). Every bound below is the stated accuracy in float32 (docs/performance.md): a
float32 cascade sum of n ≤ 2^22 terms is within ~2e-7 relative, and the one-pass variance loses at
most a factor (1 + mean²/var) ≤ 2 of that to cancellation before the two-pass formula takes over.
Where every sum is exact in binary floating point, the probe's variance is the population variance
(divided by n) to the last bit; and a tensor reduced in chunks keeps the variance between its chunks
(Chan, Golub & LeVeque 1983).
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from approx_support import approx
from torch import nn

from stability import probe
from stability.measure import reductions as P

REL = 5e-7  # 2 × ~2e-7 (see above); on random data torch's own vector_norm is within this on a row of 1,024


def _reference(x: torch.Tensor) -> tuple[float, float]:
    x64 = x.double()
    return float(x64.var(correction=0)), float(x64.mean())


@pytest.mark.parametrize("n", [2048, 16384, 131072, 1 << 20])
@pytest.mark.parametrize("shift", [0.0, 0.5, 0.99, 1.01, 3.0, 1e3, -1e5])
def test_moments_match_float64_at_every_size_and_mean(n: int, shift: float) -> None:
    """Shift = mean/std: ≤ 1 takes the one-pass sums, > 1 the two-pass correction (at 1e3 the
    one-pass formula alone is off by ~10%, so this fails without the correction)."""
    g = torch.Generator().manual_seed(n)
    for scale in (1.0, 1e-3, 1e4):
        x = ((torch.randn(n, generator=g, dtype=torch.float64) + shift) * scale).float()
        var_ref, mean_ref = _reference(x)
        m = P.Moments()
        m.add(x)
        (var,), (mean,) = m.result([])
        assert abs(var - var_ref) <= REL * var_ref
        assert abs(mean - mean_ref) <= REL * math.sqrt(var_ref) + 1e-7 * abs(mean_ref)


def test_moments_divide_by_n_exactly() -> None:
    """h = μ ± c (half each): var = c² and mean = μ exactly, at a size on the summed path."""
    n = 4096
    signs = torch.tensor([1.0, -1.0]).repeat(n // 2)
    for mu, c in [(0.0, 1.0), (0.25, 0.5), (1000.0, 0.125)]:  # the last: mean² ≫ var, two-pass
        m = P.Moments()
        m.add(mu + c * signs)
        (var,), (mean,) = m.result([])
        assert var == c * c
        assert mean == mu


def test_small_boundaries_use_var_mean_and_keep_order() -> None:
    m = P.Moments()
    big = torch.arange(4096, dtype=torch.float32)
    small = torch.tensor([1.0, 2.0, 3.0, 6.0])
    m.add(small)
    m.add(big)
    m.add(small * 2)
    host = torch.stack(m.parts).double().tolist()
    var, mean = m.result(host)
    assert mean == [3.0, 2047.5, 6.0]
    assert var[0] == pytest.approx(3.5, rel=1e-7, abs=0)
    assert var[1] == pytest.approx((4096**2 - 1) / 12, rel=REL, abs=0)  # mean² > var: the two-pass path
    assert var[2] == pytest.approx(14.0, rel=1e-7, abs=0)


@pytest.mark.parametrize(("bad", "var_is", "mean_is"), [(math.inf, "nan", "inf"), (math.nan, "nan", "nan")])
def test_non_finite_boundaries(bad: float, var_is: str, mean_is: str) -> None:
    """inf or nan in h: var nan (non-finite, as var_mean says)."""
    x = torch.randn(4096)
    x[7] = bad
    m = P.Moments()
    m.add(x)
    (var,), (mean,) = m.result([])
    kinds = {"nan": math.isnan, "inf": math.isinf}
    assert kinds[var_is](var)
    assert kinds[mean_is](mean)


@pytest.mark.parametrize("n", [1000, 4096])  # the var_mean path of small boundaries, and the sums of larger ones
@pytest.mark.parametrize("scale", [1e20, 1e36, 1e-25, 1e-40])
def test_finite_boundaries_whose_float32_sums_overflow_or_underflow(scale: float, n: int) -> None:
    """Finite values whose squares (or sums) leave float32's range are reduced in float64: the
    true variance and mean, not inf, nan or 0 (and the boundary is not called non-finite)."""
    x = (torch.randn(n, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * scale).float()
    x[7] = 3.0e38 if scale == 1e36 else x[7]  # near float32's largest finite value
    var_ref, mean_ref = _reference(x)
    m = P.Moments()
    m.add(x)
    (var,), (mean,) = m.result(torch.stack(m.parts).double().tolist() if m.parts else [])
    assert math.isfinite(var) and math.isfinite(mean)
    assert abs(var - var_ref) <= 1e-12 * var_ref
    assert abs(mean - mean_ref) <= 1e-12 * math.sqrt(var_ref)


@pytest.mark.parametrize("n", [500, 4096])  # the var_mean path of small boundaries, and the sums of larger ones
@pytest.mark.parametrize("a", [1e-14, 1e14])
def test_boundaries_out_of_float32_squares_range_are_measured_alike_by_probe_and_probe_seeds(a: float, n: int) -> None:
    # h_l = a^l x: var(h_2) = a^4 var(x), ~1e56 or 1e-56, and gradients of a^2 r, whose float32
    # squares overflow or underflow; both probes report the true values.
    from stability import probe_seeds

    x = torch.randn(1, n, generator=torch.Generator().manual_seed(4))
    ref = float(x.double().var(correction=0))
    nets = [nn.Sequential(_Scale(a), _Scale(a)) for _ in range(2)]
    ms = [probe(nets[0], x, seed=5), *probe_seeds(nets, [x, x], seeds=[5, 5])]
    r = torch.randn(1, n, generator=torch.Generator().manual_seed(5)).double()
    top = float(r.square().sum().sqrt())
    for m in ms:
        assert m.nonfinite_at is None
        assert (
            abs(m.grad_norm[0] - float(torch.tensor(a)) ** 2 * top) <= 1e-6 * float(torch.tensor(a)) ** 2 * top
        )  # ∂L/∂x = a² r
        for level, var in enumerate(m.act_var):
            want = ref * float(torch.tensor(a)) ** (2 * level)  # a is a float32 parameter
            assert abs(var - want) <= 1e-6 * want, (level, var, want)


@pytest.mark.parametrize("scale", [1e-25, 1e25])
def test_norms_whose_float32_squares_leave_the_range(scale: float) -> None:
    """A gradient of 1e-25 (squares underflow) or 1e25 (squares overflow) per element: its norm is
    taken again in float64, and the probe reports it instead of 0 or a non-finite gradient."""
    g = torch.randn(5000, generator=torch.Generator().manual_seed(3)) * scale
    ref = float(g.double().square().sum().sqrt())
    assert abs(float(P.norm_tensor(g, None)) - ref) <= REL * ref
    a = 1e-12 if scale < 1 else 1e12  # h_{l+1} = a·h_l: the gradient shrinks or grows by a per block
    m = probe(nn.Sequential(_Scale(a), _Scale(a), _Scale(1.0)), torch.randn(1, 5000), seed=1)
    assert m.nonfinite_at is None
    r = torch.randn(1, 5000, generator=torch.Generator().manual_seed(1)).double()
    rnorm = float(r.square().sum().sqrt())
    assert abs(m.grad_norm[0] - a * a * rnorm) <= 1e-6 * a * a * rnorm


@pytest.mark.parametrize("n", [1000, 65536, 65537, 1 << 20, (1 << 22) + 5])
def test_norm_is_accurate_at_every_size(n: int) -> None:
    g = (
        torch.randn(n, generator=torch.Generator().manual_seed(3)).abs() + 0.5
    )  # all positive: the worst case for accumulation
    ref = float(g.double().square().sum().sqrt())
    assert abs(float(P.norm_tensor(g, None)) - ref) <= REL * ref


#: float32's unit roundoff, 2^-24.
U32 = 2.0**-24


def _torch_error(n: int, c: float) -> float:
    """Relative error of torch's own float32 norm of n copies of c (c exact in float32)."""
    return abs(float(torch.linalg.vector_norm(torch.full((n,), c))) - math.sqrt(n) * c) / (math.sqrt(n) * c)


@pytest.mark.parametrize("n", [1025, 2048, 4096, 16384, 65536, 65536 + 1000, 131072, 1 << 20])
def test_norm_of_a_constant_vector_is_as_accurate_as_one_row(n: int) -> None:
    """‖c·𝟏_n‖ = √n·|c| exactly. Constant (coherent) data is the worst case for torch's float32
    `vector_norm` on the CPU, which accumulates each lane of a vector register sequentially: its
    error grows with n (at 16,384 elements 7.8e-6 for c = 1.1 and up to 1.5e-5 over c; at 2^20
    9e-4). `norm_tensor` takes rows of `NORM_ROW` and combines their norms in float64, so whatever n
    is, its error is that of torch's own norm on the longest row it uses (1,024 elements, or the
    remainder), measured here on the same machine, plus 2 roundings of float32 (a row's norm to
    float32, whose rounding the float64 combination keeps, and slack for the combination itself):
    the tolerance does not grow with n. It is also never more than 1e-6 (docs/performance.md)."""
    row = 1024  # the claim (reductions.NORM_ROW): no accumulation runs over more than this
    rest = n % row
    for c in [1.1, 0.7, 1.0 / 3.0, 2.5, 0.01]:
        c = float(torch.tensor(c))  # exact in float32
        exact = math.sqrt(n) * c
        tol = max(_torch_error(row, c), _torch_error(rest, c) if rest else 0.0) + 2 * U32
        assert tol <= 1e-6
        for got in (float(P.norm_tensor(torch.full((n,), c), None)), P.norm_value(torch.full((n,), c), None)):
            assert abs(got - exact) <= tol * exact, (n, c, abs(got - exact) / exact, tol)


def test_norm_of_a_large_non_contiguous_tensor() -> None:
    g = torch.randn(1024, 1024, generator=torch.Generator().manual_seed(4)).t()
    ref = float(g.double().square().sum().sqrt())
    out = P.norm_tensor(g, None)  # reduced in float64 (no row view of a transposed tensor)
    assert abs(float(out) - ref) <= REL * ref


class _Scale(nn.Module):
    def __init__(self, a: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.tensor(a))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.weight * h


def test_probe_on_large_boundaries_against_closed_forms() -> None:
    """A chain h_{l+1} = a·h_l on 2^20-element float32 boundaries with mean ≫ std at the input:
    var_l = a^(2l)·var_0 and mean_l = a^l·mean_0; the gradient at boundary l is a^(L−l)·r, so
    ‖g_l‖ = a^(L−l)·‖r‖ with r the probe's projection vector (drawn in float32 from the seed)."""
    a, depth, seed = 0.5, 4, 11
    x = (torch.randn(1, 1 << 20, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 0.01 + 50.0).float()
    m = probe(nn.Sequential(*[_Scale(a) for _ in range(depth)]), x, seed=seed)
    var0, mean0 = _reference(x)
    r = torch.randn(1, 1 << 20, generator=torch.Generator().manual_seed(seed)).double()
    rnorm = float(r.square().sum().sqrt())
    for l in range(depth + 1):
        # each boundary is a float32 product, exact up to its own rounding (powers of 2: exact)
        assert abs(m.act_var[l] - a ** (2 * l) * var0) <= REL * a ** (2 * l) * var0
        assert abs(m.act_sq_mean[l] - a ** (2 * l) * (var0 + mean0**2)) <= REL * a ** (2 * l) * (var0 + mean0**2)
        assert abs(m.grad_norm[l] - a ** (depth - l) * rnorm) <= REL * a ** (depth - l) * rnorm


def _reference_param_norms(blocks: nn.Module, x: torch.Tensor, seed: int) -> dict[str, float]:
    """‖∂L/∂p‖ by a plain autograd.grad in float64 (L = Σ y⊙r with the probe's r)."""
    b64 = copy.deepcopy(blocks).double()
    named = list(b64.named_parameters())
    y = b64(x.double())
    r = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed)).double()
    grads = torch.autograd.grad(y, [p for _, p in named], grad_outputs=r)
    return {n: float(g.square().sum().sqrt()) for (n, _), g in zip(named, grads, strict=True)}


def test_large_parameter_norms_taken_by_hooks_match_autograd_and_leave_no_hook() -> None:
    """Weights of 256×256 (≥ the hook size) and biases (reduced afterwards), one Linear shared by
    blocks 0 and 2 (its hook must see the sum of both uses): every norm within float32 accuracy
    of a float64 autograd reference, and no hook left on any parameter afterwards."""
    torch.manual_seed(0)
    shared = nn.Linear(256, 256)
    blocks = nn.Sequential(shared, nn.Tanh(), nn.Linear(256, 256), shared, nn.Linear(256, 128, bias=False))
    x = torch.randn(8, 256)
    m = probe(blocks, x, seed=5)
    ref = _reference_param_norms(blocks, x, seed=5)
    assert set(m.param_grad_norm) == set(ref) == {"0.weight", "0.bias", "2.weight", "2.bias", "4.weight"}
    for name, value in ref.items():
        assert abs(m.param_grad_norm[name] - value) <= 1e-5 * value, (
            name
        )  # float32 forward and backward against float64
    for p in blocks.parameters():
        assert not p._backward_hooks


def test_hooks_are_removed_when_a_block_fails() -> None:
    class Boom(nn.Module):
        def forward(self, h: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom")

    lin = nn.Linear(256, 256)
    with pytest.raises(Exception, match="boom"):
        probe(nn.Sequential(lin, Boom()), torch.randn(4, 256))
    assert not lin.weight._backward_hooks


def test_an_unused_large_parameter_has_gradient_norm_zero() -> None:
    class Skip(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.unused = nn.Linear(256, 256)

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            return 2.0 * h

    m = probe(nn.Sequential(Skip(), nn.Linear(256, 256)), torch.randn(4, 256))
    assert m.param_grad_norm["0.unused.weight"] == 0.0
    assert m.param_grad_norm["1.weight"] > 0.0


def test_checkpointed_probe_with_hooked_parameters_gives_identical_numbers() -> None:
    """Weights of 128×128 (hooked: ≥ the hook size) and boundaries of 32×128 (summed path): a
    checkpointed probe recomputes segments in the backward pass, and every number it reports
    is still bit-identical to the plain probe's."""
    torch.manual_seed(3)
    blocks = nn.Sequential(*[nn.Sequential(nn.Linear(128, 128), nn.ReLU()) for _ in range(6)])
    x = torch.randn(32, 128)
    plain = probe(blocks, x, seed=2)
    for every in (1, 2, 4):
        ckpt = probe(blocks, x, seed=2, checkpoint_every=every)
        assert ckpt.grad_norm == plain.grad_norm
        assert ckpt.act_var == plain.act_var
        assert ckpt.act_sq_mean == plain.act_sq_mean
        assert ckpt.param_grad_norm == plain.param_grad_norm
        assert ckpt.identity_error == plain.identity_error
    for p in blocks.parameters():
        assert not p._backward_hooks


def test_a_large_parameter_shared_by_blocks_of_a_list_has_its_norm_under_every_name() -> None:
    """A list of blocks names a shared Linear once per block ('0.weight', '2.weight'): one hook,
    the same (whole) gradient norm under both names, equal to a float64 autograd reference."""
    torch.manual_seed(1)
    lin = nn.Linear(128, 128)
    x = torch.randn(32, 128)
    m = probe([lin, nn.Tanh(), lin], x, seed=4)
    ref = _reference_param_norms(nn.Sequential(lin, nn.Tanh(), lin), x, seed=4)
    for name in ("0.weight", "2.weight"):
        assert abs(m.param_grad_norm[name] - ref["0.weight"]) <= 1e-5 * ref["0.weight"]
    assert not lin.weight._backward_hooks


class _Half(nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return 0.5 * h


class _Wider(nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h.double() + 1e-10


@pytest.mark.parametrize("scale", [1.0, 1e-25, 1e25])
def test_identity_error_keeps_differences_at_any_scale(scale: float) -> None:
    """y = x/2: the relative error is 0.5 exactly (float64) at any input scale."""
    m = probe(nn.Sequential(_Half()), torch.randn(4, 8) * scale)
    assert m.identity_error == 0.5


def test_identity_error_between_two_dtypes() -> None:
    m = probe(nn.Sequential(_Wider()), torch.ones(4, 8))
    assert m.identity_error == pytest.approx(1e-10, rel=1e-6, abs=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [2048, 4096, 6000])
def test_two_pass_variance_divides_by_n_exactly(n: int, dtype: torch.dtype) -> None:
    """±c alternating values, shifted by μ: mean μ and population variance c² exactly (the n − 1
    divisor would give c²·n/(n − 1), 1 + 4.9e-4 at n = 2,048). Every sum involved is exact in
    binary floating point, so the probe must return c² and μ to the last bit."""
    c, mu = 1.5, 0.25
    signs = torch.tensor([1.0, -1.0], dtype=dtype).repeat(n // 2)  # (n,)
    x = (mu + c * signs).reshape(n // 16, 16)  # (B, C) with B·C = n ≥ 2,048: the two-pass path
    m = probe([nn.Identity(), nn.Identity()], x)
    assert m.act_var == [c * c] * 3
    assert m.act_sq_mean == [c * c + mu * mu] * 3


# ----------------------------------------------------------------------------- chunked float64 moments


@pytest.mark.parametrize("chunk", [3, 7, 64])
def test_chunked_variance_keeps_the_between_chunk_term(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Chunks with different means: the within-chunk variances alone miss most of the variance
    (Chan, Golub & LeVeque 1983: M2 = Σ M2_c + Σ n_c (mean_c − mean)²). The reference is float64
    over the whole tensor; `_CHUNK` is made small so the chunked path runs on a small tensor."""
    monkeypatch.setattr(P, "_CHUNK", chunk)
    h = torch.cat(
        [torch.full((chunk,), float(3 * i)) + torch.linspace(-0.5, 0.5, chunk) for i in range(5)]
        + [torch.tensor([7.0, -2.0])]
    )  # (5·chunk + 2,): a short last chunk
    var, mean = P.var_mean64(h)
    want_var, want_mean = torch.var_mean(h.double(), correction=0)
    assert var.dtype == torch.float64 and mean.dtype == torch.float64
    assert float(mean) == approx(float(want_mean), rel=1e-12)
    assert float(var) == approx(float(want_var), rel=1e-12)
    within = sum(float(torch.var(c.double(), correction=0)) * c.numel() for c in torch.split(h, chunk)) / h.numel()
    assert float(var) > 2 * within  # the between-chunk term is most of it here
    norm = P.norm64(h)
    assert float(norm) == approx(math.sqrt(float((h.double() ** 2).sum())), rel=1e-12)


@pytest.mark.slow
def test_chunked_variance_over_two_to_the_24_elements() -> None:
    """The real threshold: 2^24 + 5 elements, two halves with means 0 and 2 (variance 1 + within)."""
    n = (1 << 24) + 5
    h = torch.zeros(n)  # (N,) float32
    h[n // 2 :] = 2.0
    var, mean = P.var_mean64(h)
    m = (n - n // 2) * 2.0 / n
    assert float(mean) == approx(m, rel=1e-12)
    assert float(var) == approx((n // 2) / n * m**2 + (n - n // 2) / n * (2.0 - m) ** 2, rel=1e-9)
