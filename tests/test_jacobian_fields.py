"""stability.measure.jacobian's estimate on a map whose spectrum is known, in float32 as in float64: every
field of the result, and the probes drawn in the input's dtype. Written from the mutation check
(docs/mutation.md)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from stability.measure.jacobian import jacobian_spectrum, power_max_sq


class Times(nn.Module):
    """y = c·x: J = c·I, every σ² = c²."""

    def __init__(self, c: float) -> None:
        super().__init__()
        self.c = c

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c * x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_estimate_of_a_scaled_identity_reports_every_field(dtype: torch.dtype) -> None:
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(1), dtype=dtype)
    est = jacobian_spectrum(nn.Sequential(Times(2.0), Times(1.5)), x, probes=8, iterations=20, seed=3)
    assert (est.n, est.method, est.probes) == (15, "estimate", 8)
    assert est.max_sq == pytest.approx(9.0, rel=1e-6, abs=0.0)  # σ_max² = (2·1.5)²
    assert est.iterations == 2  # the Rayleigh quotient repeats at once: stopped at the second product
    assert est.spread == pytest.approx(est.max_sq / est.mean_sq, rel=1e-15, abs=0.0)
    assert 0 < est.mean_sq_se and abs(est.mean_sq - 9.0) < 5 * est.mean_sq_se  # Hutchinson: 9·‖v‖²/N per probe
    top, used = power_max_sq(Times(3.0), x, iterations=5, generator=torch.Generator().manual_seed(0))
    assert top == pytest.approx(9.0, rel=1e-6, abs=0.0) and used == 2


def test_exact_spectrum_fields_and_a_small_mean() -> None:
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ex = jacobian_spectrum(Times(0.5), x, exact=True)  # every σ² = 0.25
    assert (ex.method, ex.n, ex.mean_sq_se, ex.probes, ex.iterations) == ("exact", 6, 0.0, 0, 0)
    assert ex.mean_sq == pytest.approx(0.25, rel=1e-15, abs=0.0) and ex.spread == pytest.approx(1.0, rel=1e-15, abs=0.0)
    assert ex.var_sq == pytest.approx(0.0, rel=0.0, abs=1e-30)


def test_hutchinson_needs_two_probes() -> None:
    from stability.measure.jacobian import hutchinson_mean_sq

    with pytest.raises(ValueError, match=r"^probes must be at least 2 to state a standard error, got 1$"):
        hutchinson_mean_sq(Times(1.0), torch.ones(2, 2), probes=1, generator=torch.Generator())


def test_power_iteration_stops_at_once_on_a_zero_jacobian() -> None:
    top, used = power_max_sq(
        Times(0.0), torch.ones(2, 3, dtype=torch.float64), iterations=20, generator=torch.Generator().manual_seed(0)
    )
    assert (top, used) == (0.0, 1)
