"""Stage 4's arithmetic: accurate reductions of boundaries and gradients to a few scalars, as
`stability.measure.probe` takes them during its one pass (and `stability.measure.batched` under
vmap).

- `_Moments` / `_moments`: a boundary's variance and mean, reduced while it is in cache to Σh and
  Σh² with the corrected two-pass formula where the one-pass one would cancel (Chan, Golub &
  LeVeque 1983), float64 where float32 sums leave the range.
- `_norm`, `_norm_value`: ‖g‖₂ as accurate at any size as torch's own norm of `_NORM_ROW`
  elements (rows of `_NORM_ROW` above that, combined in float64: within 1e-6, `_row_norms`),
  taken again in float64 where float32 squares leave the range.
- `_LargeParamNorms`, `_param_norms`: every parameter gradient's norm, the large ones by hooks as
  autograd produces them, the rest grouped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

__all__: list[str] = []  # nothing public: the probe's internals, tested against float64 references

#: At or above this many elements a CPU boundary's moments use sums instead of var_mean (the
#: measured break-even of the two on one core is ~1,700 elements).
_TWO_PASS_MIN = 2048
#: Parameter gradients up to this many elements have their norms taken together (`_param_norms`).
_SMALL_PARAM = 4096
#: Parameters of at least this many elements have their gradients' norms taken by a hook (`_LargeParamNorms`).
_HOOK_PARAM = 16384
#: CPU tensors above this many elements have their norms taken a row of this many at a time (`_row_norms`).
_NORM_ROW = 1024
#: Boundaries up to this many elements have Σh² summed from a temporary of their squares (`_Moments`).
_SQUARES_MAX = 1 << 16


def _moments(h: torch.Tensor, out: list[torch.Tensor]) -> int:
    """Append h's moments to `out` as 0-dim tensors (no host sync); return how to read them.

    Returns 0 after appending (var, mean) from `torch.var_mean`, or n = h.numel() after appending
    (m, Σd, Σd²) with m = mean(h) and d = h − m (corrected two-pass, with no host read: under
    vmap the seeds' boundaries are one tensor). `probe_seeds` calls this one per seed under vmap;
    `probe` reads its sums to the host as it goes (`_Moments`).
    """
    f = h.reshape(-1)  # (N,): a view when h is contiguous
    n = _two_pass_count(f.numel(), f.device, f.dtype)
    if n == 0:
        var, mean = torch.var_mean(_small64(f), correction=0)
        out += (var, mean)
        return 0
    m = f.mean()
    d = f - m  # (N,), a temporary of our own: squared in place below
    out += (m, d.sum(), d.mul_(d).sum())  # mul_, not square_: vmap (probe_seeds) has no rule for square_
    return n


class _Moments:
    """Boundary variance and mean for `probe`, each CPU boundary reduced while it is still in cache.

    A CPU boundary of at least `_TWO_PASS_MIN` elements is reduced at once to s = Σh and
    q = Σh² (cascade `sum`s, float32 accumulation for float32 input, within ~2e-7 relative at up
    to 2^22 elements; above `_SQUARES_MAX` elements q = `_norm`(h)², which needs no temporary;
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
        n = _two_pass_count(f.numel(), f.device, f.dtype)
        if n == 0:
            self._pending.append(self.slot())
            self.parts += torch.var_mean(_small64(f), correction=0)
            return
        s = f.sum().item()
        if n > _SQUARES_MAX:
            q = _row_norm_value(f, None) ** 2  # rows of `_NORM_ROW`: no (N,) temporary (the range is checked in `add_sums`)
        else:
            q = f.square().sum().item()  # (N,) temporary, freed at once
        self.add_sums(self.slot(), f, s, q)

    def add_sums(self, k: int, f: torch.Tensor, s: float, q: float) -> None:
        """Boundary k's variance and mean from s = Σf and q = Σf² (f on the CPU, of at least
        `_TWO_PASS_MIN` elements), with the fallbacks of the class docstring, which read f again."""
        n = f.numel()
        mean = s / n
        var = q / n - mean * mean
        if (not (math.isfinite(s) and math.isfinite(q)) or q == 0.0) and f.dtype != torch.float64 and bool(torch.isfinite(f).all()) and bool(f.any()):
            f64 = f.double()  # finite values whose sums over- or underflow float32 (beyond ~1e19 or below ~1e-19): float64
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


class _LargeParamNorms:
    """The norms of the large parameters' gradients, each taken by a hook as autograd produces it.

    The hook reads the gradient while it is still in cache and hands autograd a stride-0 zero in
    its place, so the gradient's memory is freed at once and reused for the next one, instead of
    every gradient being held to the end of the pass and read back cold (64 MiB for the depth-256
    width-256 MLP of docs/performance.md, and as many fresh pages to fault in on every probe).
    Only parameters of at least `_HOOK_PARAM` elements get one: a Python hook costs ~5 µs, more
    than the norm of a small gradient; small ones are reduced together afterwards
    (`_param_norms`). A leaf's hook sees its whole gradient once (autograd sums the
    contributions of a parameter used twice before it). The hooks are removed on exit, whatever
    happened in between. `norm(g, norm_dtype)` takes the norm: `_norm_value` (a host float, read
    at once: free on the CPU) by default, a 0-dim tensor on a device (no synchronisation).
    """

    def __init__(self, params: list[nn.Parameter], norm_dtype: torch.dtype | None, *, norm: Callable[[torch.Tensor, torch.dtype | None], float | torch.Tensor] | None = None) -> None:
        self.params = params
        self.norm_dtype = norm_dtype
        self.norm = _norm_value if norm is None else norm
        self._by_id: dict[int, float | torch.Tensor] = {}  # id(parameter) → its norm
        self._handles: list[Any] = []
        self._zeros: dict[tuple[torch.Size, torch.dtype, torch.device], torch.Tensor] = {}  # one stride-0 zero per kind and shape
        self._slots: dict[int, list[tuple[list[Any], int]]] = {}  # id(parameter) → the boundaries it is (`boundary`)

    @property
    def norms(self) -> dict[int, float | torch.Tensor]:
        """Parameter index → norm, for every index of a hooked parameter (a parameter listed
        twice, shared by two blocks of a list, has one hook and the same norm at both indices)."""
        return {j: self._by_id[id(p)] for j, p in enumerate(self.params) if id(p) in self._by_id}

    def __enter__(self) -> _LargeParamNorms:
        seen: set[int] = set()
        for p in self.params:
            if p.numel() >= _HOOK_PARAM and id(p) not in seen:
                seen.add(id(p))
                self._slots[id(p)] = []
                self._handles.append(p.register_hook(self._hook(id(p))))  # type: ignore[no-untyped-call]  # torch leaves Tensor.register_hook unannotated
        return self

    def boundary(self, t: torch.Tensor) -> list[tuple[list[Any], int]] | None:
        """Where `t` is a hooked parameter (a block returned it as a boundary), the list of (norm
        list, index) slots its hook also fills with its norm; else None."""
        return self._slots.get(id(t))

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _hook(self, key: int) -> Any:
        slots = self._slots[key]

        def hook(g: torch.Tensor) -> torch.Tensor:
            value = self._by_id[key] = self.norm(g, self.norm_dtype)
            for norms, i in slots:  # (the boundaries this parameter is: `boundary`)
                norms[i] = value
            kind = (g.shape, g.dtype, g.device)
            zero = self._zeros.get(kind)
            if zero is None:
                zero = self._zeros[kind] = g.new_zeros(()).expand(g.shape)
            return zero  # what autograd returns for this parameter: no memory (read by nobody: its norm is taken)

        return hook


def _param_norms(grads: list[torch.Tensor], norm_dtype: torch.dtype | None, *, given: dict[int, float | torch.Tensor] | None = None) -> torch.Tensor:
    """‖g‖ for every parameter gradient, as one float64 (P,) tensor in the order given.

    `given` holds norms already taken (by `_LargeParamNorms`: host floats or 0-dim tensors); their
    gradients are not read. With `norm_dtype=torch.float64` (the device design) every norm is
    accumulated in float64, and nothing is read to the host.
    Gradients of up to `_SMALL_PARAM` elements (biases, norm gains, small weights) are stacked by
    shape and reduced in one call each (by rows of `_NORM_ROW` on the CPU above that size): one
    norm call per bias costs more in dispatch than in arithmetic. Larger CPU gradients are each
    taken by `_norm_value`; on a device, or in float64, by one `torch._foreach_norm` or
    `vector_norm` each.
    """
    if not grads:
        return torch.zeros(0, dtype=torch.float64)
    device = grads[0].device
    given = given or {}
    groups: dict[tuple[object, ...], list[int]] = {}  # small gradients by (shape, dtype, device)
    host: list[int] = []  # larger CPU gradients, not in float64: `_norm_value` each
    middle: list[int] = []  # larger gradients on a device, or in float64: one _foreach_norm / vector_norm each
    for j, g in enumerate(grads):  # one pass: this loop is the function's cost for ~1,000 parameters
        if j in given:
            continue
        if g.numel() <= _SMALL_PARAM:
            groups.setdefault((g.shape, g.dtype, g.device), []).append(j)
        elif g.is_cpu and norm_dtype != torch.float64:
            host.append(j)
        else:
            middle.append(j)
    order: list[int] = []
    pieces: list[torch.Tensor] = []
    if middle:
        big = [grads[j] for j in middle]
        if norm_dtype is None:
            pieces.append(torch.stack(torch._foreach_norm(big)).to(torch.float64))
        else:
            pieces.append(torch.stack([torch.linalg.vector_norm(g, dtype=norm_dtype) for g in big]).to(torch.float64))
        order += middle
    if host:
        pieces.append(torch.tensor([_norm_value(grads[j], norm_dtype) for j in host], dtype=torch.float64))
        order += host
    if given:
        done = sorted(given)
        values = [given[j] for j in done]
        if all(isinstance(v, float) for v in values):
            pieces.append(_to_device(torch.tensor(values, dtype=torch.float64), device))
        else:
            pieces.append(torch.stack([v if isinstance(v, torch.Tensor) else torch.tensor(v, dtype=torch.float64) for v in values]).to(device=device, dtype=torch.float64))
        order += done
    for idx in groups.values():
        stacked = torch.stack([grads[j] for j in idx]).reshape(len(idx), -1)  # (k, numel): one reshape, not one per gradient
        pieces.append(_stacked_norms(stacked, norm_dtype))
        order += idx
    flat = torch.cat(pieces) if len(pieces) > 1 else pieces[0]  # (P,), in `order`
    if order != list(range(len(order))):
        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[torch.tensor(order)] = torch.arange(len(order))
        flat = flat.index_select(0, _to_device(inverse, flat.device))
    return flat


def _stacked_norms(stacked: torch.Tensor, norm_dtype: torch.dtype | None) -> torch.Tensor:
    """(k,) float64 norms of the k rows of `stacked` (k, N), each as `_norm` takes it: on the CPU
    by rows of `_NORM_ROW` above that many elements, a row whose float32 norm is 0 or inf (squares
    out of float32's range) again in float64 (the whole group, one call)."""
    norms: torch.Tensor
    if not stacked.is_cpu or norm_dtype == torch.float64:
        norms = torch.linalg.vector_norm(stacked, dim=1, dtype=norm_dtype)
        return norms.to(torch.float64)
    if stacked.shape[1] > _NORM_ROW:
        norms = torch.tensor(_row_norms(stacked, norm_dtype), dtype=torch.float64)
    else:
        norms = torch.linalg.vector_norm(stacked, dim=1, dtype=norm_dtype)
    if stacked.dtype != torch.float64 and not bool(((norms > 0) & (norms < math.inf)).all()):
        norms = torch.linalg.vector_norm(stacked, dim=1, dtype=torch.float64)  # squares out of float32's range: the group again in float64
    return norms.to(torch.float64)


def _to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A CPU tensor on `device` without synchronising it: to CUDA through pinned memory, copied
    asynchronously (a copy from pageable memory may wait for the device's stream)."""
    if device.type == "cpu":
        return t
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def _norm(g: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """‖g‖₂ as a 0-dim tensor (accumulated in `dtype` when given): `_norm_value`'s on the CPU
    (float64 above `_NORM_ROW` elements, else g's dtype unless the squares left the range), torch's
    own `vector_norm` on a device (a tree reduction there: no drift)."""
    out: torch.Tensor
    if not g.is_cpu:
        out = torch.linalg.vector_norm(g, dtype=dtype)
        return out
    if g.numel() > _NORM_ROW:
        return torch.tensor(_norm_value(g, dtype), dtype=torch.float64)
    out = torch.linalg.vector_norm(g, dtype=dtype)
    if out.dtype != torch.float64 and not 0.0 < out.item() < math.inf:
        out = torch.linalg.vector_norm(g, dtype=torch.float64)
    return out


def _norm_value(g: torch.Tensor, dtype: torch.dtype | None) -> float:
    """‖g‖₂ of a CPU tensor as a Python float, within ~1e-6 relative at any size.

    torch's float32 `vector_norm` (and `_foreach_norm`) on the CPU accumulates each lane of a
    vector register sequentially, so on coherent data its error grows with the length: ‖c·𝟏‖ is
    off by ~1e-6 relative at 1,024 elements, 1.5e-5 at 16,384, 6e-5 at 65,536 and 9e-4 at 2^20
    (constant vectors, worst of 60 values of c, AVX-512); on random data ~1e-7 to 1e-5. Above
    `_NORM_ROW` elements the norm is therefore taken over rows of `_NORM_ROW` (torch's own error
    on 1,024 elements, ≤ 8.6e-7) and the rows' norms combined in float64 (`_row_norms`), so the
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
    """`_norm_value` without the range check."""
    n = g.numel()
    if n <= _NORM_ROW:
        value: float = torch.linalg.vector_norm(g, dtype=dtype).item()
        return value
    if n % _NORM_ROW == 0 and g.is_contiguous():  # `_row_norms`' arithmetic in fewer Python operations (3 µs less): whole rows
        return math.hypot(*torch.linalg.vector_norm(g.view(-1, _NORM_ROW), dim=1, dtype=dtype).tolist())
    return _row_norms(g.reshape(1, -1), dtype)[0]


def _row_norms(f: torch.Tensor, dtype: torch.dtype | None) -> list[float]:
    """The norm of each of the S rows of a CPU tensor f (S, N), N > `_NORM_ROW`, as host floats:
    torch's `vector_norm` (accumulated in `dtype`) of every run of `_NORM_ROW` elements and of the
    remainder, combined by `math.hypot` (float64, correctly rounded to ~1 ulp). `probe` (a row of
    one) and `probe_seeds` (a row per seed) share it, so they give the same bits. (The same
    combination by `vector_norm(dtype=float64)` costs ~1.5 µs more per norm.)"""
    if not f.is_contiguous():
        f = f.contiguous()
    s, n = f.shape
    k = n - n % _NORM_ROW
    rows = torch.linalg.vector_norm(f[:, :k].view(s, k // _NORM_ROW, _NORM_ROW), dim=2, dtype=dtype)  # (S, k / _NORM_ROW)
    if k < n:
        rows = torch.cat((rows, torch.linalg.vector_norm(f[:, k:], dim=1, dtype=dtype, keepdim=True)), dim=1)  # (S, k / _NORM_ROW + 1)
    return [math.hypot(*row) for row in rows.tolist()]


def _stack64(scalars: list[torch.Tensor]) -> torch.Tensor:
    """0-dim tensors → one float64 (k,) tensor: one stack and one cast when the dtypes agree
    (a cast per scalar was ~3% of a probe of a depth-256 MLP)."""
    if not scalars:
        return torch.zeros(0, dtype=torch.float64)
    if all(t.dtype == scalars[0].dtype for t in scalars):
        return torch.stack(scalars).to(torch.float64)
    return torch.stack([t.to(torch.float64) for t in scalars])


def _two_pass_count(numel: int, device: torch.device, dtype: torch.dtype) -> int:
    """What `_moments` returns for a tensor of this size, device and dtype: 0 or numel."""
    return numel if numel >= _TWO_PASS_MIN and device.type == "cpu" and dtype.is_floating_point else 0


def _boundary_values(values: list[float], counts: list[int]) -> Iterator[tuple[int, list[float]]]:
    """(count, its values) per boundary of what `_moments` appended, counts as `_moments` returned:
    (var, mean) where the count is 0, else (m, Σd, Σd²)."""
    k = 0
    for n in counts:
        width = 2 if n == 0 else 3
        yield n, values[k : k + width]
        k += width


def _combine(values: list[float], counts: list[int]) -> tuple[list[float], list[float]]:
    """Host-side (float64) variance and mean per boundary from what `_moments` appended."""
    var: list[float] = []
    mean: list[float] = []
    for n, parts in _boundary_values(values, counts):
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


#: Above this many elements the device design reduces a tensor in chunks of it (`_norm64`,
#: `_var_mean64`), so its float64 copy stays under 128 MiB.
_CHUNK = 1 << 24


def _norm64(g: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """‖g‖₂ accumulated in float64, as a 0-dim float64 tensor on g's device, with no host read.

    Squares of float32 (or half-precision) values never leave float64's range, so the norm needs
    no fallback and nothing is decided on the host: the device design's gradient norms
    (`stability.measure.boundaries`). torch casts the input to float64 first (a copy), so a tensor
    above `_CHUNK` elements is reduced a chunk at a time. `dtype` is ignored (the signature of
    `_norm_value`, for `_LargeParamNorms`)."""
    f = g.reshape(-1)  # (N,): a view when g is contiguous
    if f.numel() <= _CHUNK:
        out: torch.Tensor = torch.linalg.vector_norm(f, dtype=torch.float64)
        return out
    out = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(c, dtype=torch.float64) for c in torch.split(f, _CHUNK)]))
    return out


def _var_mean64(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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
    parts = [(torch.var_mean(c.to(torch.float64), correction=0), c.numel() / f.numel()) for c in chunks]  # ((var, mean), weight) per chunk
    mean = torch.stack([m * w for (_, m), w in parts]).sum()
    var = torch.stack([(v + (m - mean).square()) * w for (v, m), w in parts]).sum()
    return var, mean


def _rel_parts64(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(‖a − b‖, ‖b‖) in float64 as 0-dim tensors, with no host read (the device design's
    identity errors: `stability.measure.boundaries._rel_diff` reads them at once); None when the
    shapes differ."""
    if a.shape != b.shape:
        return None
    a64, b64 = a.detach().to(torch.float64), b.detach().to(torch.float64)
    return _norm64(a64 - b64), _norm64(b64)
