"""CPU/GPU parity: the same case built from the same seed measures the same on both devices.

Tolerances: float32 — the GPU's matmul and reduction kernels sum in a different order (and may
use TF32 unless disabled, which we do), so relative differences grow like depth × 1e-6; we allow
1e-4 at depth ≤ 16. bfloat16 — 8 mantissa bits, a relative rounding of 2⁻⁸ ≈ 4e-3 per operation;
we allow 5e-2 at depth ≤ 8. Skipped with a reason where CUDA is absent (CI has no GPU).
"""

from __future__ import annotations

import pytest
import torch
from approx_support import approx

from stability import parse_spec
from stability.run.engine import evaluate
from stability.spec.case import corner_case

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available on this machine"),
]

SPEC = parse_spec(
    """
name = "parity"
description = "parity"
family = "preact"
[block]
layer = "{layer}"
norm = "layer"
[space]
depth = [1, 16]
width = [8, 32]
dtype = ["float32", "bfloat16"]
device = ["cpu", "cuda"]
weight_init = ["kaiming_normal"]
[expect.gradient_arrival]
""".replace("{layer}", "linear")
)


@pytest.mark.parametrize(("dtype", "depth", "rtol"), [("float32", 16, 1e-4), ("bfloat16", 8, 5e-2)])
def test_cpu_and_cuda_agree(dtype: str, depth: int, rtol: float) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    cpu = evaluate(SPEC, corner_case(SPEC, depth=depth, width=32, dtype=dtype, device="cpu", seed=3)).measurements
    gpu = evaluate(SPEC, corner_case(SPEC, depth=depth, width=32, dtype=dtype, device="cuda", seed=3)).measurements
    assert cpu is not None and gpu is not None
    for a, b in zip(cpu.grad_norm + cpu.act_var, gpu.grad_norm + gpu.act_var, strict=True):
        assert b == approx(a, rel=rtol)


def _no_sync_blocks() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    blocks = torch.nn.Sequential(
        *[torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.LayerNorm(256), torch.nn.ReLU()) for _ in range(6)],
        torch.nn.Linear(256, 256),  # 65,536 weights: a parameter-gradient hook
    ).cuda()
    return blocks, torch.randn(
        64, 256, device="cuda"
    ) * 1e20  # float32 squares overflow: the float64 reductions, decided on nothing


@pytest.mark.parametrize("checkpoint_every", [0, 2])
def test_the_pass_never_synchronises_the_device_before_its_one_read(
    monkeypatch: pytest.MonkeyPatch, checkpoint_every: int
) -> None:
    """torch raises on any synchronising call (a host read, a blocking copy) while the debug mode
    is "error"; the pass's one read at the end (`boundaries._read_host`) is let through and counted."""
    from stability import probe
    from stability.measure import boundaries

    torch.backends.cuda.matmul.allow_tf32 = False
    reads: list[int] = []
    real = boundaries._read_host

    def read(t: torch.Tensor) -> list[float]:
        torch.cuda.set_sync_debug_mode(0)
        try:
            reads.append(t.numel())
            return real(t)
        finally:
            torch.cuda.set_sync_debug_mode("error")

    blocks, x = _no_sync_blocks()
    cpu = probe(blocks.cpu(), x.cpu(), seed=4, checkpoint_every=checkpoint_every)
    blocks.cuda()
    probe(blocks, x, seed=4)  # warm up cuBLAS and the caching allocator (their first calls may synchronise)
    torch.cuda.synchronize()
    monkeypatch.setattr(boundaries, "_read_host", read)
    torch.cuda.set_sync_debug_mode("error")
    try:
        gpu = probe(blocks, x, seed=4, checkpoint_every=checkpoint_every)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert len(reads) == 1
    assert gpu.nonfinite_at is None and cpu.nonfinite_at is None
    for a, b in zip(cpu.grad_norm + cpu.act_var, gpu.grad_norm + gpu.act_var, strict=True):
        assert b == approx(a, rel=1e-4)
