"""The probe's two designs (stability/measure/boundaries.py) against each other and closed forms.

On the CPU the probe reads its sums to the host as it goes and reduces boundaries of 2,048 to
65,536 elements in groups ("grouped"); "tensor" is the same arithmetic one boundary at a time, so
the two must agree bit for bit. On a device it keeps everything there in float64 and reads once
("device"); CI has no GPU, so that design runs here on CPU tensors: its numbers against closed
forms and float64 references, and the fact that nothing is read to the host before the end
(tests/test_gpu.py checks the same on a CUDA device with torch's synchronisation debug mode).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from stability import probe
from stability.measure import boundaries
from stability.measure.measurements import Measurements
from stability.measure.probe_pass import projection_vector


@pytest.fixture
def design(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setattr(boundaries, "CPU_DESIGN", request.param)
    yield request.param


def _with(design: str, *args: Any, **kwargs: Any) -> Measurements:
    saved = boundaries.CPU_DESIGN
    boundaries.CPU_DESIGN = design  # type: ignore[assignment]
    try:
        return probe(*args, **kwargs)
    finally:
        boundaries.CPU_DESIGN = saved


def _numbers(m: Measurements) -> tuple[Any, ...]:
    return (
        m.grad_norm,
        m.act_var,
        m.act_sq_mean,
        m.param_grad_norm,
        m.identity_error,
        m.input_grad_error,
        m.nonfinite_at,
        m.channels,
    )


class _Scale(nn.Module):
    def __init__(self, a: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.tensor(a))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.weight * h


class _DoubleInPlace(nn.Module):
    """h ← 2h in place: the boundary it receives is changed by the block itself."""

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h.mul_(2.0)


def _mlp(width: int, depth: int, *, norm: bool = False, seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), *([nn.LayerNorm(width)] if norm else []), nn.ReLU()]
    return nn.Sequential(
        *[nn.Sequential(*layers[i : i + (3 if norm else 2)]) for i in range(0, len(layers), 3 if norm else 2)]
    )


def _cases() -> list[tuple[str, nn.Module, torch.Tensor]]:
    g = torch.Generator().manual_seed(7)
    shifted = torch.randn(32, 128, generator=g) * 0.01 + 50.0  # mean ≫ std: the two-pass correction
    return [
        ("mlp, 4,096-element boundaries", _mlp(128, 12), torch.randn(32, 128, generator=g)),
        ("layer-norm mlp, 16,384-element boundaries", _mlp(256, 6, norm=True), torch.randn(64, 256, generator=g)),
        (
            "mixed sizes: 1,000 / 40,000 / 2,048 elements",
            nn.Sequential(nn.Linear(10, 400), nn.Tanh(), nn.Linear(400, 20), nn.Linear(20, 10)),
            torch.randn(100, 10, generator=g),
        ),
        ("scalar chain, mean ≫ std", nn.Sequential(*[_Scale(0.5) for _ in range(5)]), shifted),
        (
            "scalar chain, squares beyond float32",
            nn.Sequential(*[_Scale(1e12) for _ in range(3)]),
            torch.randn(8, 1024, generator=g),
        ),
    ]


@pytest.mark.parametrize(("label", "blocks", "x"), _cases(), ids=[c[0] for c in _cases()])
def test_grouped_and_per_tensor_reductions_are_bit_identical(label: str, blocks: nn.Module, x: torch.Tensor) -> None:
    grouped, tensor = _with("grouped", blocks, x, seed=3), _with("tensor", blocks, x, seed=3)
    assert _numbers(grouped) == _numbers(tensor), label
    ckpt = _with("grouped", blocks, x, seed=3, checkpoint_every=2)
    assert _numbers(ckpt) == _numbers(grouped), label


def test_grouped_numbers_do_not_depend_on_the_thread_count() -> None:
    """Boundaries of 40,000 elements: above torch's grain size a tensor's own `sum` is split over
    the threads (other rounding at two threads than at one); a group's row sums are not."""
    blocks = nn.Sequential(nn.Linear(10, 400), nn.Tanh(), nn.Linear(400, 400), nn.Tanh())
    x = torch.randn(100, 10, generator=torch.Generator().manual_seed(8))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = _with("grouped", blocks, x, seed=1)
        torch.set_num_threads(2)
        two = _with("grouped", blocks, x, seed=1)
    finally:
        torch.set_num_threads(threads)
    assert (one.act_var, one.act_sq_mean) == (two.act_var, two.act_sq_mean)


@pytest.mark.parametrize("design", ["grouped", "tensor", "device"], indirect=True)
def test_a_block_that_changes_its_input_in_place_is_measured_on_what_it_received(design: str) -> None:
    """h_{l+1} = 2·h_l in place on one tensor: var_l = 4^l var(x), ‖g_l‖ = 2^(L−l) ‖r‖. A design
    that kept the boundary instead of its values would see every boundary as the last one."""
    depth = 6
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(9), dtype=torch.float64)  # 4,096 elements: grouped
    m = probe(nn.Sequential(*[_DoubleInPlace() for _ in range(depth)]), x, seed=2)
    var0 = float(x.var(correction=0))
    rnorm = float(torch.linalg.vector_norm(projection_vector(x.shape, 2, dtype=torch.float64, device="cpu")))
    for level in range(depth + 1):
        assert m.act_var[level] == pytest.approx(4.0**level * var0, rel=1e-12, abs=0.0)
        assert m.grad_norm[level] == pytest.approx(2.0 ** (depth - level) * rnorm, rel=1e-12, abs=0.0)


# ----------------------------------------------------------------------------- the device design, on the CPU


@pytest.mark.parametrize(("label", "blocks", "x"), _cases(), ids=[c[0] for c in _cases()])
def test_device_design_agrees_with_the_host_design(label: str, blocks: nn.Module, x: torch.Tensor) -> None:
    """The same pass in float64 on the device: within the host design's float32 accuracy (its
    norms of up to 2^16 elements drift by up to ~1e-5 relative, see docs/performance.md)."""
    host, device = _with("grouped", blocks, x, seed=3), _with("device", blocks, x, seed=3)
    assert device.channels == host.channels and device.nonfinite_at == host.nonfinite_at is None
    for a, b in zip(
        host.grad_norm + host.act_var + host.act_sq_mean,
        device.grad_norm + device.act_var + device.act_sq_mean,
        strict=True,
    ):
        assert b == pytest.approx(a, rel=2e-5, abs=0.0), label
    for k, v in host.param_grad_norm.items():
        assert device.param_grad_norm[k] == pytest.approx(v, rel=2e-5, abs=0.0), (label, k)
    assert device.identity_error == pytest.approx(host.identity_error, rel=1e-5, abs=1e-12)


@pytest.mark.parametrize("a", [1e-12, 1e12, 0.5])
def test_device_design_on_a_scalar_chain_against_closed_forms(a: float) -> None:
    """h_l = a^l x on 4,096-element boundaries (float32 squares out of range at a = 1e±12, the
    values themselves within it up to a^3): var_l = a^(2l) var(x), ‖g_l‖ = a^(L−l) ‖r‖,
    ‖∂L/∂a_l‖ = |Σ g_{l+1} ⊙ h_l| = a^(L−1) |Σ r ⊙ x| (float32 products, rounded once per block)."""
    depth, seed = 3, 5
    x = torch.randn(4, 1024, generator=torch.Generator().manual_seed(3))
    m = _with("device", nn.Sequential(*[_Scale(a) for _ in range(depth)]), x, seed=seed)
    af = float(torch.tensor(a))  # a as the float32 parameter holds it
    x64 = x.double()
    r = projection_vector(x.shape, seed, dtype=torch.float32, device="cpu").double()
    assert m.nonfinite_at is None
    for level in range(depth + 1):
        assert m.act_var[level] == pytest.approx(af ** (2 * level) * float(x64.var(correction=0)), rel=1e-5, abs=0.0)
        assert m.grad_norm[level] == pytest.approx(
            af ** (depth - level) * float(torch.linalg.vector_norm(r)), rel=1e-5, abs=0.0
        )
    for level in range(depth):
        assert m.param_grad_norm[f"{level}.weight"] == pytest.approx(
            af ** (depth - 1) * abs(float((r * x64).sum())), rel=1e-4, abs=0.0
        )


def test_device_design_keeps_large_parameter_norms_and_removes_its_hooks() -> None:
    torch.manual_seed(0)
    shared = nn.Linear(256, 256)
    blocks = nn.Sequential(shared, nn.Tanh(), nn.Linear(256, 256), shared)
    x = torch.randn(8, 256)
    host, device = _with("grouped", blocks, x, seed=5), _with("device", blocks, x, seed=5)
    assert set(device.param_grad_norm) == set(host.param_grad_norm) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    for k, v in host.param_grad_norm.items():
        assert device.param_grad_norm[k] == pytest.approx(v, rel=2e-5, abs=0.0), k
    assert not any(p._backward_hooks for p in blocks.parameters())


_READS = {"item", "tolist", "__bool__", "__float__", "__int__", "__index__", "numpy", "cpu"}


class _HostReads(TorchFunctionMode):
    """Records every call that reads a tensor's values to Python, and whether it was the final read."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[tuple[str, bool]] = []
        self.final = False

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in _READS:
            self.reads.append((name, self.final))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("checkpoint_every", [0, 2])
def test_device_design_reads_nothing_to_the_host_before_its_one_read(
    monkeypatch: pytest.MonkeyPatch, checkpoint_every: int
) -> None:
    mode = _HostReads()
    real = boundaries._read_host

    def read(t: torch.Tensor) -> list[float]:
        mode.final = True
        try:
            return real(t)
        finally:
            mode.final = False

    monkeypatch.setattr(boundaries, "_read_host", read)
    monkeypatch.setattr(boundaries, "CPU_DESIGN", "device")
    torch.manual_seed(1)
    blocks = nn.Sequential(
        *[nn.Sequential(nn.Linear(256, 256), nn.ReLU()) for _ in range(4)], _Scale(1e-30), nn.Linear(256, 8)
    )
    x = (
        torch.randn(16, 256) * 1e20
    )  # float32 squares of the activations overflow, of the gradients below the scale underflow: no fallback to decide
    with mode:
        m = probe(blocks, x, seed=1, checkpoint_every=checkpoint_every)
    assert mode.reads == [("tolist", True)]
    assert m.nonfinite_at is None and all(math.isfinite(v) and v > 0 for v in m.grad_norm)


def test_host_design_reads_as_it_goes() -> None:
    """(The check above can fail: the CPU's own design reads every group and gradient norm.)"""
    mode = _HostReads()
    with mode:
        probe(_mlp(64, 3), torch.randn(64, 64), seed=1)
    assert len(mode.reads) > 3
