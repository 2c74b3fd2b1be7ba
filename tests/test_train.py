"""stability/measure/train.py and stability/measure/train_update.py against closed forms: one SGD
step of a linear network on a squared loss (Δh exactly), gradient descent on linear least squares
(the loss after k steps in the Hessian's eigenbasis), µP's learning-rate multipliers (Yang et al.
2021, Table 3), and bit-exact replay."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from spec_support import make_spec
from torch import nn

from stability.measure.train import (
    Readout,
    Task,
    TrainModel,
    fit,
    lr_scales,
    make_task,
    relative_residuals,
    train_case,
    trainable,
)
from stability.measure.train_update import log_slope, measure_update, update_sweep
from stability.spec.case import corner_case


def _spec(
    *,
    family: str = "plain",
    layer: str = "linear",
    block: str = "",
    branch: str = "default",
    steps: int = 1,
    optimizer: str = "sgd",
    lr: float = 0.01,
    param: str = "sp",
):  # type: ignore[no-untyped-def]
    return make_spec(
        family,
        block=f'layer = "{layer}"\nactivation = "relu"\n{block}',
        space=f'depth = 3\nwidth = [8, 512]\nweight_init = ["kaiming_normal"]\nbranch_init = ["{branch}"]',
        train=f'steps = {steps}\noptimizer = "{optimizer}"\nlr = {lr}\nparametrization = "{param}"\n'
        "base_width = 16\nsamples = 16",
        expect="[expect.trainability]\n",
    )


# ----------------------------------------------------------------------------- update size, closed form


def _linear_chain(d: int, h: int, k: int, gen: torch.Generator) -> TrainModel:
    """f = W2·W1·W0·x (no biases, readout multiplier 1): three bias-free linear maps in float64."""
    embed = nn.Linear(d, h, bias=False).double()
    hidden = nn.Linear(h, h, bias=False).double()
    readout = Readout(h, k, mult=1.0).double()
    with torch.no_grad():
        for layer in (embed, hidden, readout.linear):
            layer.weight.copy_(
                torch.randn(layer.weight.shape, generator=gen, dtype=torch.float64) / math.sqrt(layer.weight.shape[1])
            )
        readout.linear.bias.zero_()
    readout.linear.bias.requires_grad_(False)
    return TrainModel(embed, nn.Sequential(hidden), readout)


def test_one_sgd_step_changes_every_boundary_as_the_closed_form_says() -> None:
    """L = ½·mean((f − y)²) over the B×k entries. With G_f = (f − y)/(B·k), the gradients are
    ∇W2 = G_fᵀh1, G_h1 = G_f W2, ∇W1 = G_h1ᵀh0, G_h0 = G_h1 W1, ∇W0 = G_h0ᵀx; after W ← W − η∇W,
    h0' = x W0'ᵀ, h1' = h0' W1'ᵀ, f' = h1' W2'ᵀ exactly, so RMS(Δh) = ‖h' − h‖/√n is known."""
    gen = torch.Generator().manual_seed(0)
    B, d, h, k, eta = 12, 5, 9, 3, 0.37
    model = _linear_chain(d, h, k, gen)
    x = torch.randn(B, d, generator=gen, dtype=torch.float64)
    y = torch.randn(B, k, generator=gen, dtype=torch.float64)
    task = Task(x, y, "teacher")
    W0, W1, W2 = (m.weight.detach().clone() for m in (model.embed, model.blocks[0], model.readout.linear))
    h0 = x @ W0.T  # (B, h)
    h1 = h0 @ W1.T  # (B, h)
    f = h1 @ W2.T  # (B, k)
    g_f = (f - y) / (B * k)
    g_w2 = g_f.T @ h1
    g_h1 = g_f @ W2
    g_w1 = g_h1.T @ h0
    g_h0 = g_h1 @ W1
    g_w0 = g_h0.T @ x
    N0, N1, N2 = W0 - eta * g_w0, W1 - eta * g_w1, W2 - eta * g_w2
    h0n = x @ N0.T
    h1n = h0n @ N1.T
    fn = h1n @ N2.T
    expected = [float((a - b).norm()) / math.sqrt(a.numel()) for a, b in ((h0n, h0), (h1n, h1), (fn, f))]

    params = [(p, 1.0) for p in model.modules().parameters() if p.requires_grad]
    rms, change, run = measure_update(
        model, task, lambda: fit(params, lambda: task.loss(model.forward(x)), optimizer="sgd", lr=eta, steps=1)
    )
    assert len(rms) == 3
    for got, want in zip(rms, expected, strict=True):
        assert got == pytest.approx(want, rel=1e-12, abs=0.0)
    for name, g, w in (("embed.weight", g_w0, W0), ("blocks.0.weight", g_w1, W1), ("readout.linear.weight", g_w2, W2)):
        assert change[name] == pytest.approx(eta * float(g.norm()) / float(w.norm()), rel=1e-12, abs=0.0)
    assert run.losses[0] == pytest.approx(0.5 * float(((f - y) ** 2).mean()), rel=1e-14, abs=0.0)
    assert run.losses[1] == pytest.approx(0.5 * float(((fn - y) ** 2).mean()), rel=1e-12, abs=0.0)


def test_log_slope_recovers_a_power_law() -> None:
    widths = [64, 128, 256, 512]
    assert log_slope(widths, [3.0 * w**0.5 for w in widths]) == pytest.approx(0.5, abs=1e-12)
    assert log_slope(widths, [7.0 * w**-1 for w in widths]) == pytest.approx(-1.0, abs=1e-12)
    assert math.isnan(log_slope(widths, [1.0, 0.0, 1.0, 1.0]))


# ----------------------------------------------------------------------------- trainability, closed form


@pytest.mark.parametrize("warmup", [0, 7])
def test_gradient_descent_on_least_squares_follows_the_eigenbasis_formula(warmup: int) -> None:
    """L(w) = 1/(2N)·‖Xw − y‖² = L* + ½·eᵀHe with H = XᵀX/N, e = w − w*. One step of gradient descent
    maps e ← (I − η_t H)e, so in H's eigenbasis (λ_i, v_i), with c_i = v_iᵀe_0,
    L_k = L* + ½·Σ_i λ_i·c_i²·Π_(t<k)(1 − η_t λ_i)², and η_t = η·min(1, (t + 1)/warmup)."""
    gen = torch.Generator().manual_seed(1)
    N, d, steps, eta = 40, 6, 60, 0.3
    X = torch.randn(N, d, generator=gen, dtype=torch.float64)
    y = torch.randn(N, generator=gen, dtype=torch.float64)
    w = nn.Parameter(torch.randn(d, generator=gen, dtype=torch.float64))
    w_star = torch.linalg.lstsq(X, y.unsqueeze(1)).solution.squeeze(1)
    loss_star = float(((X @ w_star - y) ** 2).sum()) / (2 * N)
    lam, V = torch.linalg.eigh(X.T @ X / N)
    c = V.T @ (w.detach() - w_star)
    run = fit([(w, 1.0)], lambda: ((X @ w - y) ** 2).mean() / 2, optimizer="sgd", lr=eta, steps=steps, warmup=warmup)
    assert len(run.losses) == steps + 1 and run.diverged_at is None
    factor = torch.ones(d, dtype=torch.float64)
    for k in range(steps + 1):
        expected = loss_star + 0.5 * float((lam * c**2 * factor**2).sum())
        assert run.losses[k] == pytest.approx(expected, rel=1e-10, abs=0.0), k
        eta_k = eta * min(1.0, (k + 1) / warmup) if warmup else eta
        factor = factor * (1 - eta_k * lam)


def test_gradient_descent_past_two_over_lambda_max_diverges_and_stops_at_the_first_non_finite_loss() -> None:
    """With η > 2/λ_max the component along v_max grows by |1 − ηλ_max| > 1 per step: the loss
    overflows to inf, and the run stops there."""
    X = torch.tensor([[1.0e3, 0.0], [0.0, 1.0]], dtype=torch.float64)
    y = torch.zeros(2, dtype=torch.float64)
    w = nn.Parameter(torch.ones(2, dtype=torch.float64))
    run = fit([(w, 1.0)], lambda: ((X @ w - y) ** 2).mean() / 2, optimizer="sgd", lr=1.0, steps=500)
    assert run.diverged_at is not None and run.diverged_at < 500
    assert not math.isfinite(run.losses[-1]) and all(math.isfinite(v) for v in run.losses[:-1])


# ----------------------------------------------------------------------------- µP multipliers


def test_mup_learning_rate_multipliers_follow_table_3() -> None:
    """Yang et al. 2021 Table 3 with m = width/base_width: hidden weights SGD η, Adam η/m; input
    weights, biases and the readout SGD η·m, Adam η."""
    shapes = {
        "embed.weight": torch.Size([256, 16]),
        "embed.bias": torch.Size([256]),
        "h.weight": torch.Size([256, 256]),
        "readout.linear.weight": torch.Size([4, 256]),
        "readout.linear.bias": torch.Size([4]),
    }
    base = {
        "embed.weight": torch.Size([64, 16]),
        "embed.bias": torch.Size([64]),
        "h.weight": torch.Size([64, 64]),
        "readout.linear.weight": torch.Size([4, 64]),
        "readout.linear.bias": torch.Size([4]),
    }
    delta = {k: torch.Size([2 * s if s == 64 else s for s in v]) for k, v in base.items()}
    sgd = lr_scales(shapes, base, delta, optimizer="sgd")
    adam = lr_scales(shapes, base, delta, optimizer="adam")
    assert sgd == {
        "embed.weight": 4.0,
        "embed.bias": 4.0,
        "h.weight": 1.0,
        "readout.linear.weight": 4.0,
        "readout.linear.bias": 1.0,
    }
    assert adam == {
        "embed.weight": 1.0,
        "embed.bias": 1.0,
        "h.weight": 0.25,
        "readout.linear.weight": 1.0,
        "readout.linear.bias": 1.0,
    }


def test_mup_readout_is_scaled_and_equals_sp_at_the_base_width() -> None:
    sp, mup = _spec(optimizer="adam"), _spec(optimizer="adam", param="mup")
    at_base = corner_case(sp, width=16)
    a, b = trainable(sp, at_base), trainable(mup, at_base)
    x = make_task(sp, at_base).x
    assert torch.equal(a.forward(x), b.forward(x)) and set(b.lr_scale.values()) == {1.0}
    wide = dataclasses.replace(at_base, width=64)
    m = trainable(mup, wide)
    assert m.readout.mult == 0.25
    assert torch.equal(m.readout.linear.weight, trainable(sp, wide).readout.linear.weight * 2.0)
    assert m.lr_scale["blocks.1.layer.weight"] == 0.25 and m.lr_scale["embed.weight"] == 1.0


# ----------------------------------------------------------------------------- determinism and shapes


def test_a_training_run_replays_bit_exactly_and_leaves_the_global_rng_alone() -> None:
    spec = _spec(family="preact", block='norm = "layer"', steps=20, optimizer="adam", lr=0.01)
    case = corner_case(spec, seed=5)
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    first, second = train_case(spec, case), train_case(spec, case)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert first.losses == second.losses and first.residuals == second.residuals
    assert first.losses[-1] < first.losses[0]
    other = train_case(spec, dataclasses.replace(case, seed=6))
    assert other.losses != first.losses


def test_conv_specs_train_and_sweep_widths() -> None:
    spec = _spec(layer="conv2d", optimizer="adam", lr=0.001)
    case = corner_case(spec, spatial=4)
    sweep = update_sweep(spec, case, [8, 16, 32])
    assert len(sweep.slopes) == case.depth + 2 and all(math.isfinite(s) for s in sweep.slopes)
    assert make_task(spec, case).x.shape == (16, 16, 4, 4)


def test_relative_residuals_of_a_zero_branch_stack_are_zero() -> None:
    spec = _spec(family="preact", branch="zero", block='norm = "layer"')
    case = corner_case(spec)
    model = trainable(spec, case)
    assert relative_residuals(model, make_task(spec, case).x) == [0.0] * case.depth
