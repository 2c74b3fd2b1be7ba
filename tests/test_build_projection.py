"""The projection skip's prescribed spectrum (stability/families/build.py, `_spectrum_projection`): its
singular values are the geometric sequence from s_max to s_min to float64 precision, and a
one-channel projection is s_min itself. Written from the surviving mutants of the mutation check
(docs/mutation.md)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from stability.families.build import _spectrum_projection


def _spec(s_min: float, s_max: float) -> SimpleNamespace:
    return SimpleNamespace(block=SimpleNamespace(projection_spectrum=(s_min, s_max)))


def test_the_projection_has_exactly_the_prescribed_singular_values() -> None:
    gen = torch.Generator().manual_seed(0)
    w = _spectrum_projection(_spec(0.1, 10.0), 6, gen)  # type: ignore[arg-type]
    assert w.dtype == torch.float64 and w.shape == (6, 6)
    want = torch.tensor(
        [10.0 * 0.01 ** (k / 5) for k in range(6)], dtype=torch.float64
    )  # s_max · (s_min/s_max)^(k/(C−1))
    torch.testing.assert_close(torch.linalg.svdvals(w), want, rtol=1e-13, atol=0.0)


def test_a_one_channel_projection_is_s_min() -> None:
    w = _spectrum_projection(_spec(0.1, 10.0), 1, torch.Generator().manual_seed(0))  # type: ignore[arg-type]
    assert w.dtype == torch.float64 and w.shape == (1, 1) and abs(float(w)) == 0.1


def test_a_two_channel_projection_has_both_ends_of_the_spectrum() -> None:
    w = _spectrum_projection(_spec(0.1, 10.0), 2, torch.Generator().manual_seed(0))  # type: ignore[arg-type]
    torch.testing.assert_close(
        torch.linalg.svdvals(w), torch.tensor([10.0, 0.1], dtype=torch.float64), rtol=1e-13, atol=0.0
    )
