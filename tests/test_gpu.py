"""CPU/GPU parity: the same case built from the same seed measures the same on both devices.

Tolerances: float32 — the GPU's matmul and reduction kernels sum in a different order (and may
use TF32 unless disabled, which we do), so relative differences grow like depth × 1e-6; we allow
1e-4 at depth ≤ 16. bfloat16 — 8 mantissa bits, a relative rounding of 2⁻⁸ ≈ 4e-3 per operation;
we allow 5e-2 at depth ≤ 8. Skipped with a reason where CUDA is absent (CI has no GPU).
"""

from __future__ import annotations

import pytest
import torch

from stability import parse_spec
from stability.run.engine import evaluate
from stability.spec.case import corner_case

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available on this machine")]

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
        assert b == pytest.approx(a, rel=rtol)
