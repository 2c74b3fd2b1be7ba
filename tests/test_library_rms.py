"""`library_build._rms`, the root mean square the init rule compares between the reduced and the
shipped width (`factors_between`): float64 rounding at any size and dtype, against the closed forms."""

from __future__ import annotations

import math

import pytest
import torch

from stability.families.library_build import _RMS_ROW, _rms


@pytest.mark.parametrize("n", [1, _RMS_ROW - 1, _RMS_ROW, _RMS_ROW + 1, 3 * _RMS_ROW + 7, (1 << 20) + 5])
def test_the_rms_of_a_constant_is_the_constant(n: int) -> None:
    assert _rms(torch.full((n,), -0.375)) == 0.375  # every square and partial sum exact in binary


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_the_rms_matches_the_float64_sum_of_squares(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(3)
    t = (torch.randn(4099, 517, generator=gen, dtype=torch.float64) * 0.02).to(
        dtype
    )  # rows that do not divide the size
    exact = math.sqrt(math.fsum(v * v for v in t.double().reshape(-1).tolist()) / t.numel())
    assert _rms(t) == pytest.approx(exact, rel=1e-12 if dtype == torch.float64 else 1e-7, abs=0.0)


def test_the_rms_of_a_large_float32_matrix_keeps_float64_accuracy() -> None:
    """A float32 norm over 2^24 + 3 entries in one accumulation drifts by ~1e-3 relative; the
    row-wise reduction stays at float32's rounding of each row (≲ 1e-8 here)."""
    gen = torch.Generator().manual_seed(0)
    t = torch.randn((1 << 24) + 3, generator=gen) * 0.02
    exact = float(torch.linalg.vector_norm(t, dtype=torch.float64)) / math.sqrt(t.numel())
    assert _rms(t) == pytest.approx(exact, rel=1e-8, abs=0.0)


def test_the_rms_of_nothing_is_zero() -> None:
    assert _rms(torch.empty(0, 4)) == 0.0
