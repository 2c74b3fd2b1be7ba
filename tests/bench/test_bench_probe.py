"""pytest-benchmark microbenchmarks of the probe and the builders.

In the normal test run (pyproject's addopts has --benchmark-disable) each runs its function once,
as a plain test, and checks the result. To time them, and to compare with a saved run:

    pytest tests/bench --benchmark-enable --benchmark-autosave
    pytest tests/bench --benchmark-enable --benchmark-compare --benchmark-compare-fail=median:10%

The second command exits non-zero when a median is more than 10% slower than the last saved run
(.benchmarks/, git-ignored). docs/performance.md has the numbers and the asv suite that tracks
them over commits.
"""

from __future__ import annotations

import pytest
import torch

from stability import build, make_input, parse_spec, probe
from stability.families.build import derive_seed
from stability.measure.batched import probe_seeds
from stability.measure.probe_pass import projection_vector
from stability.spec.case import corner_case

FAMILY_BLOCK = {
    "plain": 'norm = "none"',
    "preact": 'norm = "layer"',
    "postnorm": 'norm = "layer"',
    "highway": 'norm = "layer"',
    "dense": 'norm = "layer"\ngrowth = 8\ntransition_every = 8\ncompression = 0.5',
}


def spec_for(family: str, layer: str = "linear"):  # noqa: ANN201
    spatial = "spatial = 8\n" if layer == "conv2d" else ""
    return parse_spec(
        f"""
name = "bench-{family}"
description = "pytest-benchmark network"
family = "{family}"
[block]
layer = "{layer}"
{FAMILY_BLOCK[family]}
[space]
depth = [1, 256]
width = [8, 64]
batch = [4, 16]
{spatial}weight_init = ["kaiming_normal"]
branch_init = ["default"]
device = ["cpu"]
[expect.gradient_arrival]
lo = 1e-30
hi = 1e30
"""
    )


@pytest.fixture(autouse=True)
def one_thread():  # noqa: ANN201
    """Timings with one intra-op thread: stable on shared CI machines (see docs/performance.md)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def network(family: str, depth: int, width: int, batch: int, layer: str = "linear"):  # noqa: ANN201
    spec = spec_for(family, layer)
    case = corner_case(spec, depth=depth, width=width, batch=batch)
    return build(spec, case).blocks, make_input(spec, case)


def reference(blocks, x: torch.Tensor, seed: int = 0) -> tuple[float, float, float]:  # noqa: ANN001
    """What the probe should report, by plain autograd and float64 reductions: ‖∂L/∂x‖ for
    L = Σ y⊙r (r the probe's projection vector), ‖∂L/∂y‖ = ‖r‖, and Var(y) (divisor n)."""
    x0 = x.detach().clone().requires_grad_(True)
    y = blocks(x0)
    r = projection_vector(y.shape, seed, dtype=y.dtype, device=y.device)
    (g,) = torch.autograd.grad(y, [x0], grad_outputs=r)
    return float(g.double().norm()), float(r.double().norm()), float(y.detach().double().var(correction=0))


def check_values(m, blocks, x: torch.Tensor) -> None:  # noqa: ANN001
    g0, g_top, var = reference(blocks, x)
    assert m.grad_norm[0] == pytest.approx(g0, rel=1e-5, abs=0)
    assert m.grad_norm[-1] == pytest.approx(g_top, rel=1e-6, abs=0)
    assert m.act_var[-1] == pytest.approx(var, rel=1e-5, abs=0)


@pytest.mark.benchmark(group="probe")
@pytest.mark.parametrize("family", ["plain", "preact", "dense"])
def test_probe_mlp(benchmark, family: str) -> None:  # noqa: ANN001
    blocks, x = network(family, 32, 64, 16)
    m = benchmark(probe, blocks, x)
    assert m.n_blocks == 32 and m.nonfinite_at is None
    check_values(m, blocks, x)


@pytest.mark.benchmark(group="probe")
def test_probe_conv(benchmark) -> None:  # noqa: ANN001
    blocks, x = network("preact", 8, 8, 4, layer="conv2d")
    m = benchmark(probe, blocks, x)
    assert m.n_blocks == 8 and m.nonfinite_at is None
    check_values(m, blocks, x)


@pytest.mark.benchmark(group="probe")
def test_probe_checkpointed(benchmark) -> None:  # noqa: ANN001
    blocks, x = network("preact", 32, 64, 16)
    m = benchmark(probe, blocks, x, checkpoint_every=8)
    assert m.grad_norm == probe(blocks, x).grad_norm  # recomputation changes nothing


@pytest.mark.benchmark(group="baseline")
def test_forward_backward_mlp(benchmark) -> None:  # noqa: ANN001
    """The bare forward + backward the probe's overhead is measured against."""
    blocks, x = network("preact", 32, 64, 16)
    params = list(blocks.parameters())

    def step() -> tuple[torch.Tensor, ...]:
        x0 = x.detach().requires_grad_(True)
        y = blocks(x0)
        return torch.autograd.grad(y, [x0, *params], grad_outputs=torch.ones_like(y))

    grads = benchmark(step)
    assert len(grads) == 1 + len(params)
    assert float(grads[0].double().norm()) == pytest.approx(probe(blocks, x, loss="sum").grad_norm[0], rel=1e-5, abs=0)


@pytest.mark.benchmark(group="seeds")
def test_probe_seeds_32(benchmark) -> None:  # noqa: ANN001
    spec = spec_for("preact")
    cases = [corner_case(spec, depth=16, width=32, batch=8, seed=s) for s in range(32)]
    nets = [build(spec, c).blocks for c in cases]
    xs = [make_input(spec, c) for c in cases]
    seeds = [derive_seed(c.seed, 2) for c in cases]
    out = benchmark(probe_seeds, nets, xs, seeds=seeds)
    assert len(out) == 32 and all(m.n_blocks == 16 for m in out)
    for s in (0, 17, 31):  # the vectorised numbers are each seed's own (tests/test_batched.py pins the tolerance)
        alone = probe(nets[s], xs[s], seed=seeds[s])
        assert out[s].grad_norm == pytest.approx(alone.grad_norm, rel=1e-5, abs=0)
        assert out[s].act_var == pytest.approx(alone.act_var, rel=1e-5, abs=0)


@pytest.mark.benchmark(group="build")
@pytest.mark.parametrize("family", ["plain", "preact", "postnorm", "highway", "dense"])
def test_build(benchmark, family: str) -> None:  # noqa: ANN001
    spec = spec_for(family)
    case = corner_case(spec, depth=64, width=64, batch=16)
    net = benchmark(build, spec, case)
    assert len(net.blocks) == 64
    again = build(spec, case)  # the same case builds the same weights, bit for bit
    for (name, p), (_, q) in zip(net.blocks.named_parameters(), again.blocks.named_parameters(), strict=True):
        assert torch.equal(p, q), name
    with torch.no_grad():
        y = net.blocks(make_input(spec, case))
    assert y.shape[0] == 16 and bool(torch.isfinite(y).all())
