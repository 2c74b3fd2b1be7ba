"""Stage 4's arithmetic: accurate reductions of boundaries and gradients to a few scalars, as
`stability.measure.probe` takes them during its one pass (and `stability.measure.batched` under
vmap).

- `Moments` / `moments_into`: a boundary's variance and mean, reduced while it is in cache to Σh and
  Σh² with the corrected two-pass formula where the one-pass one would cancel (Chan, Golub &
  LeVeque 1983), float64 where float32 sums leave the range.
- `norm_tensor`, `norm_value`: ‖g‖₂ as accurate at any size as torch's own norm of `NORM_ROW`
  elements (rows of `NORM_ROW` above that, combined in float64: within 1e-6, `row_norms`),
  taken again in float64 where float32 squares leave the range.
- the device design's float64 reductions (`norm64`, `var_mean64`, `rel_parts64`).

The parameter gradients' norms, taken with these, are `stability.measure.param_norms`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

#: The probe's internals (stability.measure.boundaries, batched and param_norms reduce with them),
#: tested against float64 references; internal, free to change.
__all__ = [
    "NORM_ROW",
    "SQUARES_MAX",
    "TWO_PASS_MIN",
    "Moments",
    "boundary_values",
    "combine_moments",
    "moments_into",
    "norm64",
    "norm_tensor",
    "norm_value",
    "rel_parts64",
    "row_norms",
    "stack64",
    "to_device",
    "two_pass_count",
    "var_mean64",
]

#: At or above this many elements a CPU boundary's moments use sums instead of var_mean (the
#: measured break-even of the two on one core is ~1,700 elements).
TWO_PASS_MIN = 2048
#: CPU tensors above this many elements have their norms taken a row of this many at a time (`row_norms`).
NORM_ROW = 1024
#: Boundaries up to this many elements have Σh² summed from a temporary of their squares (`Moments`).
SQUARES_MAX = 1 << 16


def moments_into(h: torch.Tensor, out: list[torch.Tensor]) -> int:
    """Append h's moments to `out` as 0-dim tensors (no host sync); return how to read them.

    Returns 0 after appending (var, mean) from `torch.var_mean`, or n = h.numel() after appending
    (m, Σd, Σd²) with m = mean(h) and d = h − m (corrected two-pass, with no host read: under
    vmap the seeds' boundaries are one tensor). `probe_seeds` calls this one per seed under vmap;
    `probe` reads its sums to the host as it goes (`Moments`).
    """
    f = h.reshape(-1)  # (N,): a view when h is contiguous
    n = two_pass_count(f.numel(), f.device, f.dtype)
    if n == 0:
        var, mean = torch.var_mean(_small64(f), correction=0)
        out += (var, mean)
        return 0
    m = f.mean()
    d = f - m  # (N,), a temporary of our own: squared in place below
    out += (m, d.sum(), d.mul_(d).sum())  # mul_, not square_: vmap (probe_seeds) has no rule for square_
    return n


class Moments:
    """Boundary variance and mean for `probe`, each CPU boundary reduced while it is still in cache.

    A CPU boundary of at least `TWO_PASS_MIN` elements is reduced at once to s = Σh and
    q = Σh² (cascade `sum`s, float32 accumulation for float32 input, within ~2e-7 relative at up
    to 2^22 elements; above `SQUARES_MAX` elements q = `norm_tensor`(h)², which needs no temporary;
    a BLAS `dot` or a plain `vector_norm` drifts to 1e-5 at 2^20) and read to the host (free on a
    CPU): mean = s/n, var = q/n − mean². That one-pass formula multiplies the
    sums' relative error by (1 + mean²/var) (Chan, Golub & LeVeque 1983), so where mean² > var the
    boundary, still in cache, gets the corrected two-pass formula instead (eq. 1.7: d = h − c with
    c the one-pass mean, var = Σd²/n − (Σd/n)², mean = c + Σd/n). In float32 the variance is so
    within 5e-7 of a float64 reference (tests/test_probe_reductions.py); float64 boundaries are
    exact to ~1e-15. Nothing is copied or kept: an earlier design copied every boundary into a
    1 MiB buffer and reduced 16 at a time, and that buffer's traffic through the cache cost more
    than the reductions. Smaller boundaries, where a call's fixed cost dominates, and CUDA
    boundaries (no host read inside the forward pass) keep `torch.var_mean` (in float64 on the
    CPU, `_small64`), read to the host with everything else at the end.
    """

    def __init__(self) -> None:
        self.var: list[float] = []
        self.mean: list[float] = []
        self.parts: list[torch.Tensor] = []  # 0-dim (var, mean) pairs of the var_mean boundaries, in order
        self._pending: list[int] = []  # which boundaries those pairs belong to

    def slot(self) -> int:
        """Reserve the next boundary's place (filled by `add_sums`, or by `result` for var_mean)."""
        self.var.append(math.nan)
        self.mean.append(math.nan)
        return len(self.var) - 1

    def add(self, h: torch.Tensor) -> None:
        f = h.reshape(-1)  # (N,): a view when h is contiguous
        n = two_pass_count(f.numel(), f.device, f.dtype)
        if n == 0:
            self._pending.append(self.slot())
            self.parts += torch.var_mean(_small64(f), correction=0)
            return
        s = f.sum().item()
        if n > SQUARES_MAX:
            q = (
                _row_norm_value(f, None) ** 2
            )  # rows of `NORM_ROW`: no (N,) temporary (the range is checked in `add_sums`)
        else:
            q = f.square().sum().item()  # (N,) temporary, freed at once
        self.add_sums(self.slot(), f, s, q)

    def add_sums(self, k: int, f: torch.Tensor, s: float, q: float) -> None:
        """Boundary k's variance and mean from s = Σf and q = Σf² (f on the CPU, of at least
        `TWO_PASS_MIN` elements), with the fallbacks of the class docstring, which read f again."""
        n = f.numel()
        mean = s / n
        var = q / n - mean * mean
        if (
            (not (math.isfinite(s) and math.isfinite(q)) or q == 0.0)
            and f.dtype != torch.float64
            and bool(torch.isfinite(f).all())
            and bool(f.any())
        ):
            f64 = (
                f.double()
            )  # finite values whose sums over- or underflow float32 (beyond ~1e19 or below ~1e-19): float64
            mean = float(f64.mean())
            var = float((f64 - mean).square_().mean())
        elif not math.isfinite(s):  # an inf or nan in h: non-finite, as from var_mean
            var = math.nan
        elif not mean * mean <= var:  # cancellation (or a q that overflowed to inf): two-pass
            c = _as_dtype(mean, f.dtype)
            d = f - c  # (N,) temporary
            ds = d.sum().item() / n
            mean = c + ds
            var = max(d.square_().sum().item() / n - ds * ds, 0.0)
        self.var[k] = var
        self.mean[k] = mean

    def result(self, values: list[float]) -> tuple[list[float], list[float]]:
        """(var, mean) per boundary, given the host values of `parts`."""
        for j, i in enumerate(self._pending):
            self.var[i], self.mean[i] = values[2 * j], values[2 * j + 1]
        return self.var, self.mean


def _small64(f: torch.Tensor) -> torch.Tensor:
    """A small CPU boundary as `var_mean` takes it: in float64, where squares of finite float32
    values neither overflow (beyond ~1e19) nor underflow (below ~1e-19), so the variance is the true
    one, as the sums of the larger boundaries give, instead of inf or 0. The CPU's `var_mean` is a
    scalar loop as fast in float64 as in float32 (76 and 78 µs for 8 × 2,000 elements on one core);
    the copy is under 16 KiB. CUDA boundaries stay as they are (no copy on the device)."""
    return f.to(torch.float64) if f.is_cpu and f.dtype != torch.float64 else f


def _as_dtype(value: float, dtype: torch.dtype) -> float:
    """`value` rounded to `dtype` (what a tensor op with that Python scalar subtracts)."""
    if dtype == torch.float64:
        return value
    return float(torch.tensor(value, dtype=dtype))


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A CPU tensor on `device` without synchronising it: to CUDA through pinned memory, copied
    asynchronously (a copy from pageable memory may wait for the device's stream)."""
    if device.type == "cpu":
        return t
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def norm_tensor(g: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """‖g‖₂ as a 0-dim tensor (accumulated in `dtype` when given): `norm_value`'s on the CPU
    (float64 above `NORM_ROW` elements, else g's dtype unless the squares left the range), torch's
    own `vector_norm` on a device (a tree reduction there: no drift)."""
    out: torch.Tensor
    if not g.is_cpu:
        out = torch.linalg.vector_norm(g, dtype=dtype)
        return out
    if g.numel() > NORM_ROW:
        return torch.tensor(norm_value(g, dtype), dtype=torch.float64)
    out = torch.linalg.vector_norm(g, dtype=dtype)
    if out.dtype != torch.float64 and not 0.0 < out.item() < math.inf:
        out = torch.linalg.vector_norm(g, dtype=torch.float64)
    return out


def norm_value(g: torch.Tensor, dtype: torch.dtype | None) -> float:
    """‖g‖₂ of a CPU tensor as a Python float, within ~1e-6 relative at any size.

    torch's float32 `vector_norm` (and `_foreach_norm`) on the CPU accumulates each lane of a
    vector register sequentially, so on coherent data its error grows with the length: ‖c·𝟏‖ is
    off by ~1e-6 relative at 1,024 elements, 1.5e-5 at 16,384, 6e-5 at 65,536 and 9e-4 at 2^20
    (constant vectors, worst of 60 values of c, AVX-512); on random data ~1e-7 to 1e-5. Above
    `NORM_ROW` elements the norm is therefore taken over rows of `NORM_ROW` (torch's own error
    on 1,024 elements, ≤ 8.6e-7) and the rows' norms combined in float64 (`row_norms`), so the
    error no longer grows with the size; a non-contiguous tensor is copied first. A float32 norm
    of 0 or inf (the squares under- or overflow below ~1e-19 or above ~1e19 per element; reading
    it costs nothing on the CPU) is taken again in one float64 pass: the true norm where g is
    finite and not all zero, and 0, inf or nan again otherwise. (A LayerNorm → Linear → ReLU stack
    of depth 256 at Kaiming init has gradients of ~1e21 per element at its input: float32 squares
    overflow there.)
    """
    value = _row_norm_value(g, dtype)
    if g.dtype != torch.float64 and dtype != torch.float64 and not 0.0 < value < math.inf:
        value = torch.linalg.vector_norm(g, dtype=torch.float64).item()
    return value


def _row_norm_value(g: torch.Tensor, dtype: torch.dtype | None) -> float:
    """`norm_value` without the range check."""
    n = g.numel()
    if n <= NORM_ROW:
        value: float = torch.linalg.vector_norm(g, dtype=dtype).item()
        return value
    if (
        n % NORM_ROW == 0 and g.is_contiguous()
    ):  # `row_norms`' arithmetic in fewer Python operations (3 µs less): whole rows
        return math.hypot(*torch.linalg.vector_norm(g.view(-1, NORM_ROW), dim=1, dtype=dtype).tolist())
    return row_norms(g.reshape(1, -1), dtype)[0]


def row_norms(f: torch.Tensor, dtype: torch.dtype | None) -> list[float]:
    """The norm of each of the S rows of a CPU tensor f (S, N), N > `NORM_ROW`, as host floats:
    torch's `vector_norm` (accumulated in `dtype`) of every run of `NORM_ROW` elements and of the
    remainder, combined by `math.hypot` (float64, correctly rounded to ~1 ulp). `probe` (a row of
    one) and `probe_seeds` (a row per seed) share it, so they give the same bits. (The same
    combination by `vector_norm(dtype=float64)` costs ~1.5 µs more per norm.)"""
    if not f.is_contiguous():
        f = f.contiguous()
    s, n = f.shape
    k = n - n % NORM_ROW
    rows = torch.linalg.vector_norm(f[:, :k].view(s, k // NORM_ROW, NORM_ROW), dim=2, dtype=dtype)  # (S, k / NORM_ROW)
    if k < n:
        rows = torch.cat(
            (rows, torch.linalg.vector_norm(f[:, k:], dim=1, dtype=dtype, keepdim=True)), dim=1
        )  # (S, k / NORM_ROW + 1)
    return [math.hypot(*row) for row in rows.tolist()]


def stack64(scalars: list[torch.Tensor]) -> torch.Tensor:
    """0-dim tensors → one float64 (k,) tensor: one stack and one cast when the dtypes agree
    (a cast per scalar was ~3% of a probe of a depth-256 MLP)."""
    if not scalars:
        return torch.zeros(0, dtype=torch.float64)
    if all(t.dtype == scalars[0].dtype for t in scalars):
        return torch.stack(scalars).to(torch.float64)
    return torch.stack([t.to(torch.float64) for t in scalars])


def two_pass_count(numel: int, device: torch.device, dtype: torch.dtype) -> int:
    """What `moments_into` returns for a tensor of this size, device and dtype: 0 or numel."""
    return numel if numel >= TWO_PASS_MIN and device.type == "cpu" and dtype.is_floating_point else 0


def boundary_values(values: list[float], counts: list[int]) -> Iterator[tuple[int, list[float]]]:
    """(count, its values) per boundary of what `moments_into` appended, counts as `moments_into` returned:
    (var, mean) where the count is 0, else (m, Σd, Σd²)."""
    k = 0
    for n in counts:
        width = 2 if n == 0 else 3
        yield n, values[k : k + width]
        k += width


def combine_moments(values: list[float], counts: list[int]) -> tuple[list[float], list[float]]:
    """Host-side (float64) variance and mean per boundary from what `moments_into` appended."""
    var: list[float] = []
    mean: list[float] = []
    for n, parts in boundary_values(values, counts):
        if n == 0:
            var.append(parts[0])
            mean.append(parts[1])
            continue
        m, s, q = parts
        ds = s / n
        if math.isfinite(ds):
            mean.append(m + ds)
            var.append(max(q / n - ds * ds, 0.0))  # q = inf (overflow) gives inf, q = nan gives nan
        else:  # an inf or nan in h: non-finite, as from var_mean
            mean.append(m)
            var.append(math.nan)
    return var, mean


#: Above this many elements the device design reduces a tensor in chunks of it (`norm64`,
#: `var_mean64`), so its float64 copy stays under 128 MiB.
_CHUNK = 1 << 24


def norm64(g: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """‖g‖₂ accumulated in float64, as a 0-dim float64 tensor on g's device, with no host read.

    Squares of float32 (or half-precision) values never leave float64's range, so the norm needs
    no fallback and nothing is decided on the host: the device design's gradient norms
    (`stability.measure.boundaries`). torch casts the input to float64 first (a copy), so a tensor
    above `_CHUNK` elements is reduced a chunk at a time. `dtype` is ignored (the signature of
    `norm_value`, for `_LargeParamNorms`)."""
    f = g.reshape(-1)  # (N,): a view when g is contiguous
    if f.numel() <= _CHUNK:
        out: torch.Tensor = torch.linalg.vector_norm(f, dtype=torch.float64)
        return out
    out = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(c, dtype=torch.float64) for c in torch.split(f, _CHUNK)])
    )
    return out


def var_mean64(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(variance, mean) of h in float64 as 0-dim tensors on h's device, with no host read: the
    device design's boundary moments. `torch.var_mean` is Welford's update (no cancellation) and
    float64 holds the squares of any float32 value, so neither the two-pass correction nor a
    range fallback is needed. Above `_CHUNK` elements the chunks' moments are combined with
    the pairwise formula of Chan, Golub & LeVeque (1983): M2 = Σ M2_c + Σ n_c (mean_c − mean)²."""
    f = h.reshape(-1)
    if f.numel() <= _CHUNK:
        var, mean = torch.var_mean(f.to(torch.float64), correction=0)
        return var, mean
    chunks = torch.split(f, _CHUNK)
    parts = [
        (torch.var_mean(c.to(torch.float64), correction=0), c.numel() / f.numel()) for c in chunks
    ]  # ((var, mean), weight) per chunk
    mean = torch.stack([m * w for (_, m), w in parts]).sum()
    var = torch.stack([(v + (m - mean).square()) * w for (v, m), w in parts]).sum()
    return var, mean


def rel_parts64(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(‖a − b‖, ‖b‖) in float64 as 0-dim tensors, with no host read (the device design's
    identity errors: `stability.measure.boundaries.rel_diff` reads them at once); None when the
    shapes differ."""
    if a.shape != b.shape:
        return None
    a64, b64 = a.detach().to(torch.float64), b.detach().to(torch.float64)
    return norm64(a64 - b64), norm64(b64)
