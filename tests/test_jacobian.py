"""stability.measure.jacobian against exact Jacobians, exact isometries and the free-probability prediction
for plain ReLU stacks (Pennington, Schoenholz & Ganguli 2017)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from stability import build, make_input, parse_spec
from stability.measure.jacobian import hutchinson_mean_sq, jacobian_spectrum, jacobian_svdvals, power_max_sq
from stability.spec.case import corner_case

EPS64 = float(torch.finfo(torch.float64).eps)


def _spec(family: str, block: str, space: str) -> object:
    return parse_spec(
        f'name = "j"\ndescription = "j"\nfamily = "{family}"\n[block]\n{block}\n[space]\ndepth = [1, '
        "64]\nwidth = [1, 256]\n"
        f'batch = [1, 8]\ndevice = ["cpu"]\ndtype = ["float64"]\n{space}\n[expect.jacobian_spectrum]\n'
    )


@pytest.mark.parametrize("branch_init", ["zero", "rezero", "skipinit"])
def test_zero_branch_residual_stack_is_exactly_the_identity(branch_init: str) -> None:
    spec = _spec("preact", 'norm = "layer"', f'weight_init = ["kaiming_normal"]\nbranch_init = ["{branch_init}"]')
    case = corner_case(spec, depth=6, width=12, batch=3, branch_init=branch_init, dtype="float64")  # type: ignore[arg-type]
    blocks, x = build(spec, case).blocks, make_input(spec, case)  # type: ignore[arg-type]
    n = x.numel()
    jac = torch.func.jacrev(blocks)(x).detach().reshape(n, n)
    assert torch.equal(jac, torch.eye(n, dtype=torch.float64))  # J = I bit for bit
    s = jacobian_svdvals(blocks, x)
    assert torch.equal(s, torch.ones(n, dtype=torch.float64))
    est = jacobian_spectrum(blocks, x, probes=8, seed=1)
    assert est.max_sq == pytest.approx(1.0, rel=4 * EPS64, abs=0.0)
    # |J v|^2 = |v|^2 exactly, so the estimate is the probes' own mean |v|^2 / N.
    gen = torch.Generator().manual_seed(5)
    mean, _ = hutchinson_mean_sq(blocks, x, probes=8, generator=gen)
    v = torch.randn((8, *x.shape), generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    assert mean == pytest.approx(float(v.flatten(1).pow(2).sum(1).mean()) / n, rel=8 * EPS64, abs=0.0)


def test_orthogonal_linear_plain_stack_is_an_exact_isometry() -> None:
    spec = _spec("plain", 'activation = "identity"', 'weight_init = ["orthogonal"]\nbias_init = 0.0')
    case = corner_case(spec, depth=10, width=16, batch=2, weight_init="orthogonal", dtype="float64")  # type: ignore[arg-type]
    blocks, x = build(spec, case).blocks, make_input(spec, case)  # type: ignore[arg-type]
    s = jacobian_svdvals(blocks, x)
    assert float((s - 1).abs().max()) < 64 * EPS64  # 10 orthogonal factors, each orthogonal to ~4 eps
    exact = jacobian_spectrum(blocks, x, exact=True)
    assert exact.spread == pytest.approx(1.0, rel=256 * EPS64, abs=0.0)
    est = jacobian_spectrum(blocks, x, probes=4, seed=0)
    assert est.max_sq == pytest.approx(1.0, rel=1e-12, abs=0.0)


def _relu_stack(depth: int, width: int, *, orthogonal: bool, seed: int) -> nn.Sequential:
    gen = torch.Generator().manual_seed(seed)
    layers: list[nn.Module] = []
    for _ in range(depth):
        lin = nn.Linear(width, width, bias=False, dtype=torch.float64)
        with torch.no_grad():
            if orthogonal:
                nn.init.orthogonal_(lin.weight, gain=math.sqrt(2.0), generator=gen)
            else:
                nn.init.kaiming_normal_(lin.weight, nonlinearity="relu", generator=gen)
        layers += [lin, nn.ReLU()]
    return nn.Sequential(*layers)


@pytest.mark.parametrize("orthogonal", [False, True], ids=["gaussian", "orthogonal"])
def test_relu_plain_stack_spectrum_spreads_linearly_with_depth(orthogonal: bool) -> None:
    """Pennington et al. (2017): at criticality (σ_w² = 2) a ReLU stack keeps ⟨σ²⟩ = 1, but the
    variance of σ² over the spectrum of JJᵀ is the sum over layers of each layer's, because the
    layers are asymptotically free: for one layer D W with D² = diag(0/1, p = 1/2) and WWᵀ
    Marchenko–Pastur (m1 = 2, m2 = 8) or orthogonal (m1 = 2, m2 = 4), the free product gives
    m2 = m2(D²) m1(WWᵀ)² + m1(D²)² m2(WWᵀ) − m1(D²)² m1(WWᵀ)² = 3 (Gaussian) or 2 (orthogonal),
    so Var σ² = 2L (Gaussian) or L (orthogonal): never an isometry, and worse with depth.

    Tolerance: the mean over seeds is within 4 standard errors (measured) plus the O(L²/n)
    finite-width correction bounded by 2L(L+1)/n."""
    width, seeds = 192, 6
    slope = 1.0 if orthogonal else 2.0
    previous = 0.0
    for depth in (1, 2, 4):
        vars_, means = [], []
        for seed in range(seeds):
            blocks = _relu_stack(depth, width, orthogonal=orthogonal, seed=seed)
            x = torch.randn(1, width, generator=torch.Generator().manual_seed(100 + seed), dtype=torch.float64)
            sp = jacobian_spectrum(blocks, x, exact=True)
            assert sp.var_sq is not None
            vars_.append(sp.var_sq)
            means.append(sp.mean_sq)
        t = torch.tensor(vars_, dtype=torch.float64)
        avg, se = float(t.mean()), float(t.std() / math.sqrt(seeds))
        predicted = slope * depth
        assert abs(avg - predicted) <= 4 * se + 2 * depth * (depth + 1) / width, (depth, avg, se, predicted)
        assert avg > previous  # the spread grows with depth
        previous = avg
        m = torch.tensor(means, dtype=torch.float64)
        # ⟨σ²⟩ = χ₁^L = 1: per layer Var ln ≈ 5/n (Hanin 2018), so its sd over seeds is known.
        assert abs(float(m.mean()) - 1) <= 4 * math.sqrt(math.expm1(5 * depth / width) / seeds)


def test_hutchinson_error_matches_its_stated_standard_error() -> None:
    """E|Jv|² = tr(JᵀJ), Var|Jv|² = 2Σσ⁴ for v ~ N(0, I): the estimate of K probes has standard
    error √(2Σσ⁴/K)/N. Over S independent estimates z = (est − exact)/SE has mean square 1; with
    S = 100 its sampling sd is about √(2/S) = 0.14 (heavier for K = 16 chi-square draws), so
    [0.55, 1.6] is a ±3-sd band. A factor-2 error in the variance formula lands outside it."""
    blocks = _relu_stack(3, 10, orthogonal=False, seed=3)
    x = torch.randn(2, 10, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    s2 = jacobian_svdvals(blocks, x) ** 2
    n, k = x.numel(), 16
    s2 = torch.cat([s2, s2.new_zeros(n - s2.numel())])
    exact = float(s2.mean())
    se = math.sqrt(2 * float(s2.pow(2).sum()) / k) / n
    zs, reported = [], []
    for seed in range(100):
        est, rep = hutchinson_mean_sq(blocks, x, probes=k, generator=torch.Generator().manual_seed(seed))
        zs.append((est - exact) / se)
        reported.append(rep)
    msq = sum(z * z for z in zs) / len(zs)
    assert 0.55 <= msq <= 1.6, msq
    assert max(abs(z) for z in zs) < 5
    assert 0.7 <= sum(reported) / len(reported) / se <= 1.3  # the reported (sample) SE estimates it


def test_power_iteration_is_a_lower_bound_that_converges() -> None:
    blocks = _relu_stack(4, 12, orthogonal=False, seed=11)
    x = torch.randn(2, 12, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    top = float(jacobian_svdvals(blocks, x).max()) ** 2
    got, used = power_max_sq(blocks, x, iterations=500, generator=torch.Generator().manual_seed(0), rtol=1e-12)
    assert got <= top * (1 + 16 * EPS64)
    assert got == pytest.approx(top, rel=1e-6, abs=0.0)
    one, _ = power_max_sq(blocks, x, iterations=1, generator=torch.Generator().manual_seed(0))
    assert one <= got


def test_batch_norm_running_stats_are_left_alone() -> None:
    net = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.ReLU())
    before = {k: v.clone() for k, v in net.state_dict().items()}
    jacobian_spectrum(net, torch.randn(5, 4), probes=4, iterations=3)
    jacobian_svdvals(net, torch.randn(5, 4))
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    assert net[1].track_running_stats


def test_exact_refuses_large_jacobians() -> None:
    with pytest.raises(ValueError, match="use the estimates"):
        jacobian_svdvals(nn.Identity(), torch.zeros(2, 4096))
