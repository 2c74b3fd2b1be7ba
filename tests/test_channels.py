"""Channel statistics (stability/measure/channels.py) and the `mean_shift` invariant, against closed forms:
inputs built with known per-channel means and variances, the law of total variance against the
probe's whole-tensor variance, timm's definitions, and a ReLU of a standard normal."""

from __future__ import annotations

import math

import pytest
import torch
from approx_support import approx
from spec_support import SPECS, make_case
from torch import nn

from stability import build, load_spec, make_input, parse_spec, probe
from stability.judge.invariants import mean_shift
from stability.measure.channels import ChannelStats, channel_moments, mean_shift_ratio
from stability.run.engine import run_spec


def _balanced(n: int) -> torch.Tensor:
    """n values (n even) with mean exactly 0 and population variance exactly 1: +1, −1, +1, …"""
    return torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(n)], dtype=torch.float64)


MU = torch.tensor([0.5, -2.0, 3.0, 0.0], dtype=torch.float64)
SIGMA = torch.tensor([1.0, 0.25, 2.0, 3.0], dtype=torch.float64)
M_EXACT = float((MU**2).mean())  # 13.25 / 4
V_EXACT = float((SIGMA**2).mean())


@pytest.mark.parametrize("layout", ["bc", "bchw", "btc"])
def test_known_channel_means_and_variances(layout: str) -> None:
    if layout == "bc":
        x = MU[None, :] + SIGMA[None, :] * _balanced(6)[:, None]  # (B=6, C=4)
    elif layout == "bchw":
        z = _balanced(2 * 3 * 3).reshape(2, 3, 3)  # (B, H, W), balanced over all 18 positions
        x = MU[None, :, None, None] + SIGMA[None, :, None, None] * z[:, None, :, :]  # (2, 4, 3, 3)
    else:
        z = _balanced(2 * 5).reshape(2, 5)  # (B, T)
        x = MU[None, None, :] + SIGMA[None, None, :] * z[:, :, None]  # (B=2, T=5, C=4): channels last
    m, v, grand = channel_moments(x).tolist()
    assert m == pytest.approx(M_EXACT, rel=1e-14, abs=0.0)
    assert v == pytest.approx(V_EXACT, rel=1e-14, abs=0.0)
    assert grand == pytest.approx(float(MU.mean()), rel=1e-14, abs=0.0)


def test_wrong_axis_would_differ() -> None:
    """The layout matters: reading (B, T, C) channels-first gives other numbers (guards the rule)."""
    z = _balanced(2 * 5).reshape(2, 5)
    x = MU[None, None, :] + SIGMA[None, None, :] * z[:, :, None]
    assert channel_moments(x, layout="channels_first")[0].item() != approx(M_EXACT, rel=1e-3)


def test_law_of_total_variance_against_the_probe() -> None:
    """Var(h) = V + M − m̄² at every boundary, V and M from the observer, Var from the probe
    (the probe's var_mean and two-pass paths both: the conv boundaries hold ≥ 2,048 values)."""
    spec = load_spec(SPECS / "preact_conv.toml")
    case = make_case(
        depth=5, width=16, batch=8, spatial=8, weight_init="kaiming_normal", seed=3
    )  # 8·16·8·8 = 8,192 values
    obs = ChannelStats()
    m = probe(build(spec, case).blocks, make_input(spec, case), observers=[obs])
    prof = m.extra["channels"]
    for b, var in enumerate(m.act_var):
        assert prof.var[b] + prof.sq_mean[b] - prof.grand_mean[b] ** 2 == pytest.approx(var, rel=1e-12, abs=0.0)
        assert prof.count[b] == 8 * 8 * 8


def _timm_avg_sq_ch_mean(output: torch.Tensor) -> float:
    """timm.utils.model.avg_sq_ch_mean (timm 1.0), verbatim but for the hook arguments."""
    return torch.mean(output.mean(axis=[0, 2, 3]) ** 2).item()  # type: ignore[call-overload]


def _timm_avg_ch_var(output: torch.Tensor) -> float:
    """timm.utils.model.avg_ch_var (timm 1.0), verbatim but for the hook arguments."""
    return torch.mean(output.var(axis=[0, 2, 3])).item()  # type: ignore[call-overload]


def _preact_bn_relu_conv() -> tuple[nn.Sequential, torch.Tensor]:
    """The issue's 6-block pre-activation conv stack: BatchNorm, ReLU, 16 channels."""
    spec = parse_spec(
        """
        name = "spp"
        description = "pre-activation conv stack, BatchNorm and ReLU"
        family = "preact"
        [block]
        layer = "conv2d"
        activation = "relu"
        norm = "batch"
        [space]
        depth = 6
        width = 16
        batch = 8
        spatial = 8
        [expect.variance_growth]
        """.replace("\n        ", "\n")
    )
    case = make_case(depth=6, width=16, batch=8, spatial=8)
    return build(spec, case).blocks, make_input(spec, case)


def test_against_timm_definitions_on_the_same_input() -> None:
    blocks, x = _preact_bn_relu_conv()
    obs = ChannelStats()
    probe(blocks, x, observers=[obs])
    prof = obs.finish()
    blocks, x = _preact_bn_relu_conv()  # fresh batch-norm buffers: the same forward again
    h = x
    outputs = [h]
    with torch.no_grad():
        for block in blocks:
            h = block(h)
            outputs.append(h)
    n = 8 * 8 * 8
    for b, out in enumerate(outputs):
        assert prof.sq_mean[b] == pytest.approx(_timm_avg_sq_ch_mean(out), rel=1e-12, abs=0.0)
        assert prof.var[b] * n / (n - 1) == approx(_timm_avg_ch_var(out), rel=1e-12)  # timm's unbiased var


def test_against_timm_itself_where_it_imports() -> None:
    try:
        from timm.utils.model import avg_ch_var, avg_sq_ch_mean
    except Exception as exc:  # noqa: BLE001 - timm needs torchvision, whose wheel may not import on this torch
        pytest.skip(
            f"timm does not import here ({type(exc).__name__}: {exc}); the verbatim copies above are checked instead"
        )
    blocks, x = _preact_bn_relu_conv()
    obs = ChannelStats()
    probe(blocks, x, observers=[obs])
    prof = obs.finish()
    out = x
    n = 8 * 8 * 8
    assert prof.sq_mean[0] == pytest.approx(avg_sq_ch_mean(None, None, out), rel=1e-12, abs=0.0)
    assert prof.var[0] * n / (n - 1) == pytest.approx(avg_ch_var(None, None, out), rel=1e-12, abs=0.0)


def test_mean_shift_hides_inside_variance_growth() -> None:
    """Issue 12's signal-propagation comparison, qualitatively: on the 6-block pre-activation
    BatchNorm/ReLU conv stack the average squared channel mean grows several-fold while the
    average channel variance grows less than the whole-tensor variance does."""
    blocks, x = _preact_bn_relu_conv()
    obs = ChannelStats()
    m = probe(blocks, x, observers=[obs])
    prof = m.extra["channels"]
    assert prof.sq_mean[-1] > 0.15 and prof.sq_mean[-1] > 10 * prof.sq_mean[0]
    whole_growth = m.act_var[-1] / m.act_var[0]
    channel_growth = prof.var[-1] / prof.var[0]
    assert 1.2 < channel_growth < whole_growth
    assert m.act_var[-1] - prof.var[-1] == approx(prof.sq_mean[-1] - prof.grand_mean[-1] ** 2, rel=1e-9)


def test_relu_of_a_standard_normal_has_its_closed_form_ratio() -> None:
    """ρ(relu(z)) = (1/2π) / (1/2 − 1/2π) ≈ 0.4663 for z ~ N(0, 1)."""
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(200_000, 4, generator=gen, dtype=torch.float64)  # (N, C)
    m, v, _ = channel_moments(torch.relu(z)).tolist()
    expected = (1 / (2 * math.pi)) / (0.5 - 1 / (2 * math.pi))
    assert mean_shift_ratio(m, v, 200_000) == approx(expected, rel=0.02)  # sd of the estimate ≈ 0.3%


def test_sampling_correction_removes_the_small_batch_bias() -> None:
    """Zero-mean channels at N = 4: raw M/V averages 1/(N − 1) = 1/3, the corrected ρ averages 0."""
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(4, 20_000, generator=gen, dtype=torch.float64)  # (N = 4, C = 20,000)
    m, v, _ = channel_moments(z).tolist()
    assert m / v == approx(1 / 3, rel=0.05)
    assert abs(mean_shift_ratio(m, v, 4)) < 0.02


def test_no_observer_no_channel_statistics() -> None:
    blocks, x = _preact_bn_relu_conv()
    assert probe(blocks, x).extra == {}


def test_mean_shift_verdict_without_statistics_fails_and_says_why() -> None:
    blocks, x = _preact_bn_relu_conv()
    v = mean_shift(probe(blocks, x))
    assert not v.passed and "not measured" in v.detail


def test_mean_shift_bound_is_inclusive() -> None:
    blocks, x = _preact_bn_relu_conv()
    m = probe(blocks, x, observers=[ChannelStats()])
    rho = m.extra["channels"].ratio()
    assert mean_shift(m, max_ratio=rho).passed
    assert not mean_shift(m, max_ratio=math.nextafter(rho, 0.0)).passed


def test_shipped_specs_control_caught_centred_holds() -> None:
    control = run_spec(load_spec(SPECS / "control_mean_shift_relu.toml"), case="depth=8,width=32,batch=16,seed=0")
    (r,) = control.results
    assert r.met and r.verdict is not None and not r.verdict.passed and r.verdict.observed > 0.5
    centred = run_spec(load_spec(SPECS / "preact_tanh_mlp.toml"), case="depth=8,width=32,batch=16,seed=0")
    (r,) = centred.results
    assert r.met and r.verdict is not None and r.verdict.passed and r.verdict.observed < 0.25
