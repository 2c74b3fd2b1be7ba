"""Assertion helpers for users' own tests: probe once, judge, and fail with the same explanation
the CLI prints.

    from stability.assertions import assert_gradient_arrives

    def test_my_stack_trains_at_depth():
        blocks = make_my_blocks(depth=64)
        assert_gradient_arrives(blocks, torch.randn(8, 32), lo=0.1, hi=10)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import torch
from torch import nn

from stability.judge.invariants import Verdict, gradient_arrival, identity_at_init, variance_growth
from stability.measure.probe import Measurements, probe

__all__ = ["assert_gradient_arrives", "assert_variance_growth", "assert_identity_at_init", "StabilityAssertionError"]

Blocks = nn.Module | Iterable[nn.Module]


class StabilityAssertionError(AssertionError):
    """An invariant failed; carries the verdict and the measurements."""

    def __init__(self, verdict: Verdict, m: Measurements) -> None:
        self.verdict, self.measurements = verdict, m
        lines = [
            f"{verdict.invariant} violated: {verdict.detail}",
            f"  observed {verdict.observed:.4g}, bound {verdict.bound}"
            + (f", decided at block {verdict.block}" if verdict.block is not None else ""),
            f"  gradient norm by boundary (input → output): {_compact(m.grad_norm)}",
            f"  activation variance by boundary: {_compact(m.act_var)}",
            f"  what to do: `stability explain {verdict.invariant}`",
        ]
        super().__init__("\n".join(lines))


def _compact(values: list[float], keep: int = 4) -> str:
    shown: list[float | None] = [*values] if len(values) <= 2 * keep else [*values[:keep], None, *values[-keep:]]
    return "[" + ", ".join("…" if v is None else f"{v:.3g}" for v in shown) + "]"


def _check(v: Verdict, m: Measurements) -> Measurements:
    if not v.passed:
        raise StabilityAssertionError(v, m)
    return m


def assert_gradient_arrives(
    blocks: Blocks,
    x: torch.Tensor,
    *,
    lo: float = 0.1,
    hi: float = 10.0,
    loss: Literal["projection", "sum"] = "projection",
    seed: int = 0,
) -> Measurements:
    """Fail unless ‖∂L/∂x‖ / ‖∂L/∂y‖ lies in [lo, hi]. Returns the measurements."""
    m = probe(blocks, x, loss=loss, seed=seed)
    return _check(gradient_arrival(m, lo=lo, hi=hi), m)


def assert_variance_growth(
    blocks: Blocks,
    x: torch.Tensor,
    *,
    max_growth: str = "linear",
    max_ratio: float | None = None,
    min_ratio: float | None = None,
    statistic: str = "variance",
    seed: int = 0,
) -> Measurements:
    """Fail when the activation variance grows faster than `max_growth` or leaves the ratios."""
    m = probe(blocks, x, seed=seed)
    return _check(
        variance_growth(m, max_growth=max_growth, max_ratio=max_ratio, min_ratio=min_ratio, statistic=statistic), m
    )


def assert_identity_at_init(blocks: Blocks, x: torch.Tensor, *, atol: float = 0.0, seed: int = 0) -> Measurements:
    """Fail unless the stack is the identity forwards and backwards (bit-exactly with atol=0)."""
    m = probe(blocks, x, seed=seed)
    return _check(identity_at_init(m, atol=atol), m)
