"""stability/judge/stream.py (`residual_stream`) against closed forms: stacks of blocks that scale
their input by known gains (x → c·x, and x + γ·x, a layer scale on an identity branch), probed
through the real probe, give the entry factor, the stream's gradient ratio, the output's variance
ratio and the block change exactly; the median over a seed ensemble; every bound, message and
failure path; and the registry entry that every path asks."""

from __future__ import annotations

import math

import pytest
import torch
from approx_support import approx
from spec_support import make_measurements
from torch import nn

from stability.judge.stream import residual_stream, stream_numbers
from stability.judge.verdict import Verdict
from stability.measure.ensemble import Ensemble
from stability.measure.probe import Measurements, probe

REL = {"rel": 1e-9, "abs": 0.0}


class Scale(nn.Module):
    def __init__(self, c: float) -> None:
        super().__init__()
        self.c = c

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c * x


class LayerScaled(nn.Module):
    """x + γ·F(x) with F the identity: the Jacobian is (1 + γ)·I, the block change γ exactly."""

    def __init__(self, gamma: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.tensor(gamma, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.gamma * x


def _probe(blocks: list[nn.Module]) -> Measurements:
    x = torch.randn(4, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    return probe(nn.Sequential(*blocks), x)


def test_gains_give_each_number_in_closed_form() -> None:
    """Gains c = 5, 1.1, 1.2: g_l/g_(l+1) = c_l and Var(x_(l+1))/Var(x_l) = c_l², so the entry is
    5, the stream 1.1·1.2, the variance (5·1.1·1.2)², and the largest change |5 − 1| = 4."""
    m = _probe([Scale(5.0), Scale(1.1), Scale(1.2)])
    n = stream_numbers(m.grad_norm, m.act_var, m.act_sq_mean)
    assert n["entry"] == pytest.approx(5.0, **REL)
    assert n["stream"] == pytest.approx(1.32, **REL)
    assert n["variance"] == pytest.approx((5 * 1.1 * 1.2) ** 2, **REL)
    assert n["change"] == pytest.approx(4.0, **REL)
    per_block = stream_numbers(m.grad_norm, m.act_var, m.act_sq_mean, variance_exponent=1.0)
    assert per_block["variance"] == pytest.approx((5 * 1.1 * 1.2) ** 2 / 3, **REL)
    assert n["entry"] * n["stream"] == pytest.approx(m.gradient_ratio, **REL)  # gradient_arrival's ratio, split in two


def test_a_layer_scale_block_changes_the_stream_by_its_scale() -> None:
    for gamma in (1e-6, 1e-3, 0.5):
        m = _probe([LayerScaled(gamma) for _ in range(4)])
        n = stream_numbers(m.grad_norm, m.act_var, m.act_sq_mean)
        assert n["change"] == approx(gamma, rel=1e-6)
        assert n["stream"] == pytest.approx((1 + gamma) ** 3, **REL) and n["entry"] == pytest.approx(1 + gamma, **REL)
    assert stream_numbers(*([1.0, 1.0, 1.0],) * 3)["change"] == 0.0  # identity blocks


def test_the_verdict_states_every_bound_and_passes_inside_them() -> None:
    m = _probe([Scale(5.0), Scale(1.1), Scale(1.2)])
    v = residual_stream(
        m, lo=1.0, hi=2.0, entry_lo=4.0, entry_hi=6.0, variance_lo=40.0, variance_hi=50.0, max_block_change=4.5
    )
    assert v.passed and v.invariant == "residual_stream" and v.observed == pytest.approx(1.32, **REL)
    assert v.bound == "g₁/g_L in [1, 2]; g₀/g₁ in [4, 6]; Var(x_L)/Var(x₀) in [40, 50]; block change ≤ 4.5"
    assert (
        v.detail == "stream gradient ratio g₁/g_L 1.32; entry factor g₀/g₁ 5; output variance Var(x_L)/Var(x₀) 43.56; "
        "largest block change 4 within the bounds"
    )
    assert v.extra["entry"] == pytest.approx(5.0, **REL) and v.extra["members"] == 1
    plain = residual_stream(m, lo=1.0, hi=2.0)
    assert (
        plain.passed
        and plain.bound == "g₁/g_L in [1, 2]"
        and plain.detail
        == "stream gradient ratio g₁/g_L 1.32 within the bounds; entry factor g₀/g₁ 5 (reported, not bounded)"
    )


@pytest.mark.parametrize(
    ("bounds", "broken"),
    [
        ({"hi": 1.3}, "stream gradient ratio g₁/g_L 1.32 > 1.3"),
        ({"lo": 1.4}, "stream gradient ratio g₁/g_L 1.32 < 1.4"),
        ({"entry_lo": 5.5}, "entry factor g₀/g₁ 5 < 5.5"),
        ({"entry_hi": 4.5}, "entry factor g₀/g₁ 5 > 4.5"),
        ({"variance_hi": 43.0}, "output variance Var(x_L)/Var(x₀) 43.56 > 43"),
        ({"variance_lo": 15.0, "variance_exponent": 1.0}, "output variance Var(x_L)/Var(x₀)/L^1 14.52 < 15"),
        ({"max_block_change": 3.9}, "largest block change 4 > 3.9"),
    ],
)
def test_each_bound_fails_alone_and_names_its_number(bounds: dict[str, float], broken: str) -> None:
    m = _probe([Scale(5.0), Scale(1.1), Scale(1.2)])
    v = residual_stream(m, **{"lo": 1.0, "hi": 2.0, **bounds})
    assert not v.passed and v.detail.startswith(broken + " (all: ")


def test_the_ensemble_median_is_judged_and_its_range_reported() -> None:
    """Three networks with stream ratios 1, 2 and 8: the median 2 is judged, not member 0's 8."""
    profiles = [[8.0, 8.0, 1.0], [2.0, 2.0, 1.0], [1.0, 1.0, 1.0]]  # entry 1 each; stream 8, 2, 1
    ones = [[1.0, 1.0, 1.0]] * 3
    ens = Ensemble(seeds=[0, 1, 2], act_var=ones, act_sq_mean=ones, vectorised=True, grad_norm=profiles)
    m = make_measurements(
        grad_norm=profiles[0], act_var=[1.0] * 3, act_sq_mean=[1.0] * 3, extra={"stream_ensemble": ens}
    )
    v = residual_stream(m, lo=0.5, hi=4.0)
    assert v.passed and v.observed == 2.0 and v.extra["members"] == 3
    assert v.detail.startswith("stream gradient ratio g₁/g_L 2 (median of 3 networks, 1 to 8)")
    assert v.extra["per_member"]["stream"] == [8.0, 2.0, 1.0]
    assert not residual_stream(m, lo=0.5, hi=1.5).passed


def test_one_undefined_member_makes_the_ensembles_median_undefined() -> None:
    """Three networks, one with a zero variance at the input (its variance ratio is undefined), the
    two others at exactly 1: the median over the ensemble is undefined, never the median of the
    two left (which would hold the band [0.5, 2])."""
    grads = [[1.0, 1.0, 1.0]] * 3
    ones = [1.0, 1.0, 1.0]
    ens = Ensemble(
        seeds=[0, 1, 2], act_var=[[0.0, 1.0, 1.0], ones, ones], act_sq_mean=[ones] * 3, vectorised=True, grad_norm=grads
    )
    m = make_measurements(grad_norm=grads[0], act_var=ones, act_sq_mean=ones, extra={"stream_ensemble": ens})
    v = residual_stream(m, lo=0.5, hi=2.0, variance_lo=0.5, variance_hi=2.0)
    assert not v.passed and v.extra["variance"] is None and v.extra["per_member"]["variance"] == [None, 1.0, 1.0]
    assert v.detail.startswith("output variance Var(x_L)/Var(x₀) is undefined (a zero variance or gradient")
    assert v.extra["stream"] == 1.0  # the other numbers are defined for every member: judged on their median


def test_zero_and_non_finite_measurements_fail_with_what_happened() -> None:
    zero = residual_stream(make_measurements(grad_norm=[1.0, 1.0, 0.0], act_var=[1.0] * 3, act_sq_mean=[1.0] * 3))
    assert zero == Verdict(
        invariant="residual_stream",
        passed=False,
        observed=0.0,
        bound="g₁/g_L in [0.1, 10]",
        block=2,
        detail="the output gradient is zero; the loss does not depend on the output",
    )
    bad = residual_stream(
        Measurements(
            grad_norm=[1.0, 1.0, 1.0],
            act_var=[1.0] * 3,
            act_sq_mean=[1.0] * 3,
            param_grad_norm={},
            identity_error=None,
            input_grad_error=None,
            nonfinite_at=2,
            nonfinite_kind="activation",
        )
    )
    assert not bad.passed and bad.block == 1 and math.isnan(bad.observed)
    dead = residual_stream(make_measurements(grad_norm=[1.0, 0.0, 1.0], act_var=[1.0] * 3, act_sq_mean=[1.0] * 3))
    assert not dead.passed and "is undefined" not in dead.detail  # g₁/g_L = 0 is a number
    assert dead.observed == 0.0 and "0 < 0.1" in dead.detail
    flat = residual_stream(
        make_measurements(grad_norm=[1.0, 1.0, 1.0], act_var=[0.0] * 3, act_sq_mean=[0.0] * 3),
        variance_hi=2.0,
    )
    assert not flat.passed and "output variance Var(x_L)/Var(x₀) is undefined" in flat.detail


def test_the_entry_is_registered_once_and_checks_its_bounds() -> None:
    from stability import parse_spec
    from stability.errors import SpecError
    from stability.spec.registry import INVARIANTS

    entry = INVARIANTS.get("residual_stream")
    assert entry.ensemble is not None and entry.judge is not None and not entry.training
    text = (
        'name = "t"\ndescription = "t"\nfamily = "preact"\n[space]\ndepth = [1, 4]\nwidth = '
        "8\n[expect.residual_stream]\n"
    )
    assert parse_spec(text + "lo = 0.5\nhi = 2.0\n").expect.residual_stream.hi == 2.0
    with pytest.raises(SpecError, match="entry_lo.*is above entry_hi"):
        parse_spec(text + "entry_lo = 3.0\nentry_hi = 2.0\n")


def test_the_severity_reads_every_bounded_number_so_a_broken_band_is_worse_than_any_inside() -> None:
    """The baseline rule's direction (`toward_bound`) compares severities: Mamba under transformers 4.53
    breaks the entry and variance bands with its gradient ratio 1.31 near the low end, and 4.54 puts every
    number inside; that move is away from the bound, whatever the gradient ratio alone says."""
    from stability.spec.registry import invariant
    from stability.spec.schema import ResidualStream

    e = ResidualStream(
        lo=0.8, hi=4100.0, entry_lo=8.8, entry_hi=1100.0, variance_lo=9700.0, variance_hi=280000.0, max_block_change=0.5
    )
    inv = invariant("residual_stream")

    def sev(stream: float, **extra: float) -> float:
        return inv.severity_of(
            Verdict(
                invariant="residual_stream",
                passed=True,
                observed=stream,
                bound="",
                block=None,
                detail="",
                extra={"entry": 100.0, "variance": 5e4, "change": 0.1, **extra},
            ),
            e,
        )

    inside = sev(204.0)
    assert inside == pytest.approx(
        max(math.log(0.8 / 204), math.log(8.8 / 100), math.log(5e4 / 280000), math.log(0.1 / 0.5))
    )
    broken = sev(1.31, entry=1.116, variance=1.164)
    assert broken == pytest.approx(math.log(9700 / 1.164)) and broken > 0 > inside
    assert sev(204.0, change=0.0) < 0  # identity blocks: the upper-bounded change as far inside as can be
    assert sev(204.0, change=0.6) == pytest.approx(math.log(0.6 / 0.5))
    assert sev(204.0, entry=math.nan) == math.inf
    assert (
        inv.severity_of(
            Verdict(
                invariant="residual_stream",
                passed=False,
                observed=204.0,
                bound="",
                block=None,
                detail="",
                extra={"entry": None, "variance": 5e4},
            ),
            e,
        )
        == math.inf
    )  # undefined, as the verdict stores it


def test_a_number_exactly_at_its_bound_holds() -> None:
    """Every bound is inclusive: gains 4, 2, 1 (powers of two, exact in float64) give the entry 4,
    the stream 2, the variance (4·2·1)² = 64 and the largest change 3 exactly, and bounds at exactly
    those numbers hold."""
    m = _probe([Scale(4.0), Scale(2.0), Scale(1.0)])
    n = stream_numbers(m.grad_norm, m.act_var, m.act_sq_mean)
    assert (n["entry"], n["stream"], n["variance"], n["change"]) == (4.0, 2.0, 64.0, 3.0)
    v = residual_stream(
        m, lo=2.0, hi=2.0, entry_lo=4.0, entry_hi=4.0, variance_lo=64.0, variance_hi=64.0, max_block_change=3.0
    )
    assert v.passed, v.detail
