"""Assertion helpers for users' tests: pass quietly, fail with the CLI's explanation."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from stability.assertions import (
    StabilityAssertionError,
    assert_gradient_arrives,
    assert_identity_at_init,
    assert_variance_growth,
)


def sigmoid_stack(depth: int) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.Sigmoid()) for _ in range(depth)])


def test_gradient_arrival_passes_and_fails_with_a_readable_message() -> None:
    x = torch.randn(8, 16)
    m = assert_gradient_arrives(sigmoid_stack(2), x, lo=1e-3, hi=10)
    assert len(m.grad_norm) == 3
    with pytest.raises(StabilityAssertionError) as err:
        assert_gradient_arrives(sigmoid_stack(20), x, lo=0.1, hi=10)
    text = str(err.value)
    assert "gradient_arrival violated" in text and "the gradient vanishes" in text
    assert "stability explain gradient_arrival" in text and "gradient norm by boundary" in text
    assert err.value.verdict.observed < 0.1


def test_variance_and_identity_helpers() -> None:
    x = torch.randn(8, 16)
    assert_identity_at_init(nn.Sequential(nn.Identity(), nn.Identity()), x)
    with pytest.raises(StabilityAssertionError, match="identity_at_init violated"):
        assert_identity_at_init(sigmoid_stack(1), x)
    lin = nn.Linear(16, 16, bias=False)
    nn.init.eye_(lin.weight)
    with torch.no_grad():
        lin.weight.mul_(2.0)  # variance ×4 per block: exponential
    with pytest.raises(StabilityAssertionError, match="exponential"):
        assert_variance_growth(nn.Sequential(*[lin] * 6), x, max_growth="linear")
