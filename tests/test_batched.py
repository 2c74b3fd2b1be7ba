"""`probe_seeds` (stability/measure/batched.py) against the per-seed `probe` and against closed forms.

Tolerance, and why it is not zero. `probe_seeds` runs the S networks under `torch.func.vmap`, so
the kernels differ from the ones `probe` runs: a `Linear` becomes a batched matmul (bmm) instead
of `addmm`, a `Conv2d` becomes one grouped convolution, and a norm layer's affine-parameter
gradient is a reduction over the rows of an (S, B, C) tensor instead of a (B, C) one. Floating
point addition is not associative, so any reduction done in another order can change the last
bits. Measured on the CPU (torch 2.13, MKL), float32, depth 8, seeds 0-7, every shipped spec:

- linear stacks (plain_mlp, preact_mlp, postnorm_mlp, dense_mlp, the controls without batch norm):
  boundary gradients and activation moments bit-identical; parameter-gradient norms bit-identical
  or 1-2 ulp apart (≤ 1.6e-7 relative: layer-norm γ gradients, reduced over (S, B, C) rows);
- conv stacks (grouped convolution) and sigmoid/highway gates: ≤ 7e-7 relative;
- batch norm on the route around (control_norm_skip): ≤ 6e-5 relative, because batch-norm backward
  at batch 4 subtracts nearly equal numbers and each block amplifies the rounding of the last;
- a bias right before batch norm has gradient exactly 0 in exact arithmetic; both sides report
  rounding noise (~1e-6 of the weight gradient's norm) that agrees in size, not in digits.

None of that is a property of the method (in float64 every spec agrees to ≤ 2e-13 relative), and
it is not pinned either: another BLAS may pick other kernels. So the tests compare in float64 with
rtol = 1e-10, and in float32 on the layer-normalised and plain linear specs with rtol = 1e-5, each
with an absolute allowance of rtol × the largest value of the same kind (for the exact zeros
above). Exact zeros that an invariant relies on (identity_error with atol = 0) are asserted exact.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from stability import load_spec, probe
from stability.families.build import build, derive_seed, make_input
from stability.measure.batched import probe_seeds
from stability.measure.probe import Measurements
from stability.spec.case import corner_case

SPECS = sorted((Path(__file__).resolve().parent.parent / "specs").glob("*.toml"))
FLOAT32_SPECS = ["plain_mlp", "preact_mlp", "postnorm_mlp", "highway_mlp"]


def _cases(path: Path, dtype: str, n: int = 3, depth: int = 8):  # noqa: ANN202
    spec = load_spec(path)
    overrides = {"depth": min(depth, spec.space.depth[1]), "dtype": dtype, "device": "cpu"}
    if "default" in spec.space.branch_init:
        overrides["branch_init"] = "default"  # a zero branch is the identity: too easy to agree on
    return spec, [corner_case(spec, seed=spec.space.seed[0] + s, **overrides) for s in range(n)]


def _inputs(spec, cases):  # noqa: ANN001, ANN202
    """(networks, inputs, loss seeds) as `stability.run.engine.evaluate` would probe them."""
    nets, xs = [], []
    for case in cases:
        net = build(spec, case)
        x = make_input(spec, case)
        if net.stem is not None:
            with torch.no_grad():
                x = net.stem(x)
        nets.append(net.blocks)
        xs.append(x)
    return nets, xs, [derive_seed(c.seed, 2) for c in cases]


def _assert_close(got: Measurements, want: Measurements, rtol: float) -> None:
    def close(a: float | None, b: float | None, scale: float, what: str) -> None:
        if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
            assert (a is None and b is None) or (
                a is not None and b is not None and math.isnan(a) == math.isnan(b) and (math.isnan(a) or a == b)
            ), (what, a, b)
            return
        assert abs(a - b) <= rtol * max(abs(a), abs(b)) + rtol * scale, (
            what,
            a,
            b,
            abs(a - b) / max(abs(a), abs(b), 1e-300),
        )

    for field in ("grad_norm", "act_var", "act_sq_mean"):
        g, w = getattr(got, field), getattr(want, field)
        assert len(g) == len(w)
        scale = max((abs(v) for v in w if math.isfinite(v)), default=0.0)
        for i, (a, b) in enumerate(zip(g, w, strict=True)):
            close(a, b, scale, f"{field}[{i}]")
    assert list(got.param_grad_norm) == list(want.param_grad_norm)
    scale = max((abs(v) for v in want.param_grad_norm.values() if math.isfinite(v)), default=0.0)
    for name, b in want.param_grad_norm.items():
        close(got.param_grad_norm[name], b, scale, name)
    close(got.identity_error, want.identity_error, 0.0, "identity_error")
    close(got.input_grad_error, want.input_grad_error, 0.0, "input_grad_error")
    assert got.channels == want.channels
    assert (got.nonfinite_at, got.nonfinite_kind) == (want.nonfinite_at, want.nonfinite_kind)


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_matches_probe_per_seed_float64(path: Path) -> None:
    spec, cases = _cases(path, "float64")
    nets, xs, seeds = _inputs(spec, cases)
    got = probe_seeds(nets, xs, seeds=seeds, loss=spec.probe.loss)
    nets, xs, seeds = _inputs(spec, cases)  # fresh copies: train-mode batch norm updates buffers
    want = [probe(n, x, seed=s, loss=spec.probe.loss) for n, x, s in zip(nets, xs, seeds, strict=True)]
    for g, w in zip(got, want, strict=True):
        _assert_close(g, w, rtol=1e-10)


@pytest.mark.parametrize("name", FLOAT32_SPECS)
def test_matches_probe_per_seed_float32(name: str) -> None:
    spec, cases = _cases(Path(SPECS[0].parent, f"{name}.toml"), "float32")
    nets, xs, seeds = _inputs(spec, cases)
    got = probe_seeds(nets, xs, seeds=seeds)
    want = [probe(n, x, seed=s) for n, x, s in zip(nets, xs, seeds, strict=True)]
    for g, w in zip(got, want, strict=True):
        _assert_close(g, w, rtol=1e-5)


def test_zero_branch_identity_is_exact() -> None:
    """identity_at_init is judged with atol = 0: the batched probe must keep the exact zeros."""
    spec = load_spec(Path(SPECS[0].parent, "preact_mlp.toml"))
    cases = [corner_case(spec, depth=12, width=16, branch_init="zero", seed=s) for s in range(5)]
    nets, xs, seeds = _inputs(spec, cases)
    for m in probe_seeds(nets, xs, seeds=seeds):
        assert m.identity_error == 0.0
        assert m.input_grad_error == 0.0
        assert m.gradient_ratio == 1.0


def test_scalar_chains_give_the_product_of_slopes() -> None:
    """Closed form: a chain of L scalar Linear(1, 1) with weight w_s has gradient ratio w_s^L."""
    depth, slopes = 40, [0.9, 1.1, 0.5, 1.0]

    def chain(w: float) -> nn.Sequential:
        layers = [nn.Linear(1, 1, bias=False).double() for _ in range(depth)]
        for layer in layers:
            nn.init.constant_(layer.weight, w)
        return nn.Sequential(*layers)

    x = torch.linspace(-1.0, 2.0, 5, dtype=torch.float64).reshape(5, 1)
    got = probe_seeds([chain(w) for w in slopes], [x] * len(slopes), seeds=[0] * len(slopes))
    for w, m in zip(slopes, got, strict=True):
        assert m.gradient_ratio == pytest.approx(
            w**depth, rel=1e-12, abs=0
        )  # 0.5**40 ≈ 9e-13: approx's default abs=1e-12 would swamp it
        for i in range(depth + 1):  # boundary i sees w^(L − i) of the output gradient
            assert m.grad_norm[i] / m.grad_norm[-1] == pytest.approx(w ** (depth - i), rel=1e-12, abs=0)


def test_sum_loss_matches_probe() -> None:
    spec, cases = _cases(Path(SPECS[0].parent, "highway_mlp.toml"), "float64", n=3)
    nets, xs, _ = _inputs(spec, cases)
    got = probe_seeds(nets, torch.stack(xs), loss="sum")
    want = [probe(n, x, loss="sum") for n, x in zip(nets, xs, strict=True)]
    for g, w in zip(got, want, strict=True):
        _assert_close(g, w, rtol=1e-10)


def test_rejects_networks_that_differ() -> None:
    a = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    b = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    c = nn.Sequential(nn.Linear(4, 4, bias=False), nn.ReLU())
    x = torch.randn(2, 4)
    with pytest.raises(ValueError, match="network 1 differs from network 0: its blocks are"):
        probe_seeds([a, b], [x, x])
    with pytest.raises(ValueError, match="network 1 differs from network 0 at 0.bias"):
        probe_seeds([a, c], [x, x])
    with pytest.raises(ValueError, match="2 networks but 3 inputs"):
        probe_seeds([a, a], [x, x, x])
    with pytest.raises(ValueError, match="2 networks but 1 seeds"):
        probe_seeds([a, a], [x, x], seeds=[0])
    with pytest.raises(ValueError, match="choose"):
        probe_seeds([a], [x], loss="mse")  # type: ignore[arg-type]


def test_blocks_without_parameters_anywhere_in_the_stack_match_probe() -> None:
    # Linear, ReLU, Linear, ReLU …: every other block has no parameters, the last one included.
    def net(seed: int) -> nn.Sequential:
        torch.manual_seed(seed)
        return nn.Sequential(*[m for _ in range(3) for m in (nn.Linear(6, 6).double(), nn.ReLU())], nn.Identity())

    nets = [net(s) for s in (1, 2, 3)]
    xs = [torch.randn(4, 6, generator=torch.Generator().manual_seed(s), dtype=torch.float64) for s in (1, 2, 3)]
    got = probe_seeds(nets, torch.stack(xs), seeds=[7, 8, 9])
    want = [probe(n, x, seed=s) for n, x, s in zip(nets, xs, [7, 8, 9], strict=True)]
    for g, w in zip(got, want, strict=True):
        _assert_close(g, w, rtol=1e-10)


@pytest.mark.parametrize("how", ["sequential", "module_list", "parameter"])
def test_a_tied_stack_is_refused_and_the_ensemble_measures_it_one_network_at_a_time(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def net(seed: int) -> nn.Module:
        torch.manual_seed(seed)
        if how == "parameter":  # two modules, one weight
            a, b = nn.Linear(5, 5, bias=False).double(), nn.Linear(5, 5, bias=False).double()
            b.weight = a.weight
            return nn.Sequential(a, nn.Tanh(), b)
        block = nn.Sequential(nn.Linear(5, 5).double(), nn.Tanh())
        return nn.Sequential(*[block] * 4) if how == "sequential" else nn.ModuleList([block] * 4)

    x = torch.randn(3, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match="share a parameter or buffer"):
        probe_seeds([net(1), net(2)], [x, x])
    from stability.measure.ensemble import _probe_members

    spec = load_spec(SPECS[0].parent / "plain_mlp.toml")
    nets = {s: net(s) for s in (11, 12)}

    class _Net:  # what `_member` returns: (network, input after the stem)
        def __init__(self, blocks: nn.Module) -> None:
            self.blocks, self.stem, self.call_kwargs, self.model = blocks, None, None, None

    monkeypatch.setattr(
        "stability.measure.ensemble._member", lambda spec, case, seed: (_Net(nets[seed]), x)
    )  # _built builds each member with it
    found, vectorised = _probe_members(spec, corner_case(spec), [11, 12])
    assert not vectorised  # refused by probe_seeds, measured by probe
    for m, s in zip(found, (11, 12), strict=True):
        _assert_close(m, probe(nets[s], x, seed=derive_seed(s, 2), rng_seed=derive_seed(s, 3)), rtol=0.0)


def test_large_boundaries_have_accurate_norms_per_seed() -> None:
    """Per-seed boundaries of 2^18 elements (above the size where torch's float32 vector_norm
    drifts): each seed's gradient norms equal the closed form a^(L−l)·‖r_s‖ to float32 accuracy,
    r_s the projection vector of seed s (drawn in float32), as `probe` reports them."""
    a, depth, width = 0.5, 3, 1 << 18
    nets = [nn.Sequential(*[nn.Linear(1, 1, bias=False) for _ in range(depth)]) for _ in range(2)]
    for net in nets:
        for lin in net:
            nn.init.constant_(lin.weight, a)
    xs = [torch.randn(width, 1, generator=torch.Generator().manual_seed(s)) for s in range(2)]
    for seed, m in zip([3, 4], probe_seeds(nets, xs, seeds=[3, 4]), strict=True):
        r = torch.randn(width, 1, generator=torch.Generator().manual_seed(seed)).double()
        rnorm = float(r.square().sum().sqrt())
        for l in range(depth + 1):
            assert abs(m.grad_norm[l] - a ** (depth - l) * rnorm) <= 5e-7 * a ** (depth - l) * rnorm
