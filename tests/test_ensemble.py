"""Seed ensembles (stability/measure/ensemble.py) through the engine: the members, the vectorised and
looped probes, and the false-class rates the growth law is held to (issue 12):

- a stack whose seed-averaged profile is linear (pre-activation MLP, a BasicBlock-style conv stack)
  is called exponential in ≤ 1% of ≥ 100 drawn cases;
- the exponential controls (unnormalised residual doubling, plain ReLU above criticality) are
  violated and called exponential at every drawn depth ≥ 8, and the plain tanh stack below
  criticality decays;
- the unnormalised residual stack at width 8, which the control's space leaves out, is not an
  exponential control: its networks freeze (an exact absorbing state, tested here), so the
  seed-averaged log-variance increments fall toward 0 with depth while width 32's settle at a
  positive constant.

Measured results of the ≥ 100-case runs (marked slow) are recorded in docs/ensembles.md ("Measured
false-class rates"); smaller always-run versions of each use the same code and the same assertions.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from approx_support import approx
from spec_support import SPECS, make_case

from stability import load_spec, parse_spec, probe
from stability.families.build import build, derive_seed, make_input
from stability.judge.invariants import Verdict
from stability.measure.ensemble import ENSEMBLE_STREAM, ensemble_seeds, probe_ensemble
from stability.run.engine import evaluate, judge
from stability.spec.case import Case
from stability.spec.schema import Spec

BASIC_BLOCK = '''
"""A stack with torchvision's BasicBlock structure (He et al. 2015): conv3x3, BatchNorm, ReLU,
conv3x3, BatchNorm, identity skip add, ReLU; PyTorch's default init."""
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.conv1 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + x)


def basic_blocks(depth, width):
    return nn.Sequential(*[BasicBlock(width) for _ in range(depth)])
'''


@pytest.fixture(autouse=True)
def _slow_only_when_asked(request: pytest.FixtureRequest) -> None:
    """The ≥ 100-case checks run with `pytest -m slow` (several CPU-minutes); the default run and CI
    skip them, with their measured results in docs/ensembles.md, and run the small versions."""
    expr = request.config.getoption("markexpr") or ""
    if request.node.get_closest_marker("slow") is not None and ("slow" not in expr or "not slow" in expr):
        pytest.skip("slow (≥ 100 drawn cases): run with -m slow; measured results in docs/ensembles.md")


@pytest.fixture
def basic_block_spec(tmp_path: Path) -> Callable[..., Spec]:
    (tmp_path / "bb_blocks.py").write_text(BASIC_BLOCK, encoding="utf-8")

    def make(*, depth: str = "[1, 48]", ensemble: int = 8) -> Spec:
        text = textwrap.dedent(f"""\
            name = "basic-block"
            description = "BasicBlock-style stack"
            family = "custom"
            [block]
            layer = "conv2d"
            factory = "bb_blocks:basic_blocks"
            [space]
            depth = {depth}
            width = [8, 16]
            batch = [4, 8]
            spatial = [2, 4]
            [probe]
            ensemble = {ensemble}
            [expect.variance_growth]
            max_growth = "linear"
            """)
        path = tmp_path / "bb.toml"
        path.write_text(text, encoding="utf-8")
        return load_spec(path)

    return make


def _case(
    depth: int,
    width: int,
    batch: int,
    *,
    seed: int,
    spatial: int | None = None,
    weight_init: str = "default",
    branch_init: str = "default",
) -> Case:
    return make_case(
        depth=depth,
        width=width,
        batch=batch,
        spatial=spatial,
        weight_init=weight_init,
        branch_init=branch_init,
        dtype="float32",
        seed=seed,
    )


def _verdict_growth(spec: Spec, case: Case) -> tuple[str, str, bool]:
    record = evaluate(spec, case)
    assert record.error is None, record.error
    v = judge(spec, "variance_growth", record)
    return v.extra["growth"], v.extra["lowest"], v.passed


# ----------------------------------------------------------------------------- members


def test_members_are_the_case_then_derived_seeds() -> None:
    seeds = ensemble_seeds(1, 8)
    assert seeds[0] == 1
    assert len(set(seeds)) == 8
    assert seeds[1] == derive_seed(derive_seed(1, ENSEMBLE_STREAM), 1)
    assert ensemble_seeds(1, 8) == seeds  # reproducible from the case alone
    assert not {derive_seed(1, k) for k in range(3)} & set(seeds[1:])  # clear of the case's own streams


def test_vectorised_and_looped_members_agree_and_loop_equals_probe(basic_block_spec: Callable[..., Spec]) -> None:
    """The fallback (a loop of `probe`) gives exactly what probing each member alone gives; the
    vectorised pass (BatchNorm in train mode runs under vmap) agrees to float32 rounding."""
    spec = basic_block_spec()
    case = _case(7, 8, 5, spatial=2, seed=1)
    net = build(spec, case)
    first = probe(net.blocks, make_input(spec, case), seed=derive_seed(case.seed, 2))
    fast = probe_ensemble(spec, case, first, size=4)
    slow = probe_ensemble(spec, case, first, size=4, vectorise=False)
    assert fast.vectorised and not slow.vectorised
    for k, s in enumerate(slow.seeds[1:], start=1):
        member = dataclasses.replace(case, seed=s)
        alone = probe(build(spec, member).blocks, make_input(spec, member), seed=derive_seed(s, 2))
        assert slow.act_var[k] == alone.act_var  # bit-identical
        assert fast.act_var[k] == approx(alone.act_var, rel=1e-5)
    assert fast.act_var[0] == first.act_var


# ----------------------------------------------------------------------------- the reported case


def test_basic_block_case_of_the_issue_is_not_exponential(basic_block_spec: Callable[..., Spec]) -> None:
    """depth=7, width=8, batch=5, spatial=2, seed=1 (the issue's case): the ensemble's averaged
    profile is not exponential and the verdict passes max_growth = "linear". At seed 5 of the same
    size this stack's own profile is called "exponential ×1.305" by the one-seed classifier; the
    ensemble of that case is not."""
    spec = basic_block_spec()
    growth, lowest, passed = _verdict_growth(spec, _case(7, 8, 5, spatial=2, seed=1))
    assert growth != "exponential" and lowest != "exponential"
    assert passed
    single = basic_block_spec(ensemble=1)
    noisy = _case(7, 8, 5, spatial=2, seed=5)
    assert (
        judge(single, "variance_growth", evaluate(single, noisy)).extra["growth"] == "exponential"
    )  # one seed's noise
    growth, lowest, passed = _verdict_growth(spec, noisy)
    assert growth != "exponential" and lowest != "exponential" and passed


# ----------------------------------------------------------------------------- false-class rates


def _linear_stack_cases(kind: str, n: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    if kind == "preact_mlp":
        return [
            _case(
                rng.randint(2, 64),
                16,
                rng.randint(4, 16),
                seed=rng.randrange(2**16),
                weight_init=rng.choice(["kaiming_normal", "xavier_normal", "default"]),
            )
            for _ in range(n)
        ]
    return [
        _case(
            rng.randint(2, 48),
            rng.choice([8, 16]),
            rng.randint(4, 8),
            spatial=rng.choice([2, 4]),
            seed=rng.randrange(2**16),
        )
        for _ in range(n)
    ]


def _false_exponentials(spec: Spec, cases: list[Case]) -> list[tuple[Case, str]]:
    out = []
    for case in cases:
        growth, lowest, passed = _verdict_growth(spec, case)
        if growth == "exponential" or lowest == "exponential" or not passed:
            out.append((case, growth))
    return out


@pytest.mark.slow  # two ensembles of many cases; nightly
@pytest.mark.parametrize("kind", ["preact_mlp", "basic_block"])
def test_linear_stacks_are_rarely_called_exponential(kind: str, basic_block_spec: Callable[..., Spec]) -> None:
    spec = load_spec(SPECS / "preact_mlp.toml") if kind == "preact_mlp" else basic_block_spec()
    bad = _false_exponentials(spec, _linear_stack_cases(kind, 8, seed=0))
    assert not bad


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["preact_mlp", "basic_block"])
def test_linear_stacks_are_called_exponential_in_at_most_1_percent_of_100(
    kind: str, basic_block_spec: Callable[..., Spec]
) -> None:
    spec = load_spec(SPECS / "preact_mlp.toml") if kind == "preact_mlp" else basic_block_spec()
    bad = _false_exponentials(spec, _linear_stack_cases(kind, 100, seed=1))
    assert len(bad) <= 1, bad  # ≤ 1% of 100


PLAIN_RELU_HOT = """
name = "plain-relu-hot"
description = "plain ReLU MLP with weight variance 4/fan_in, twice He's: second moment x2 per block"
family = "plain"
[block]
activation = "relu"
[space]
depth = [1, 64]
width = 32
batch = [4, 16]
weight_init = "normal"
init_std = 0.3535533905932738
bias_init = 0.0
[expect.variance_growth]
expect = "violated"
max_growth = "linear"
statistic = "second_moment"
"""

PLAIN_TANH_COLD = """
name = "plain-tanh-cold"
description = "plain tanh MLP with weight variance 0.5/fan_in: ordered phase, the signal decays"
family = "plain"
[block]
activation = "tanh"
[space]
depth = [1, 64]
width = 16
batch = [4, 16]
weight_init = "normal"
init_std = 0.17677669529663687
bias_init = 0.0
[expect.variance_growth]
expect = "violated"
max_growth = "bounded"
"""


def _control(kind: str) -> tuple[Spec, Callable[[random.Random], Case]]:
    if kind == "unnormalised_residual":
        spec = load_spec(SPECS / "control_unnormalised_residual.toml")
        lo, hi = spec.space.width
        widths = [w for w in (8, 16, 32, 64) if lo <= w <= hi]  # the spec's space: 16, 32, 64
        return spec, lambda rng: _case(
            rng.randint(8, 64),
            rng.choice(widths),
            rng.randint(4, 16),
            seed=rng.randrange(2**16),
            weight_init="kaiming_normal",
        )
    spec = parse_spec(PLAIN_RELU_HOT if kind == "plain_relu_hot" else PLAIN_TANH_COLD)
    return spec, lambda rng: _case(
        rng.randint(8, 64), spec.space.width[0], rng.randint(4, 16), seed=rng.randrange(2**16), weight_init="normal"
    )


def _control_verdicts(kind: str, n: int, seed: int) -> list[tuple[Case, str, str, bool]]:
    """(case, reported class, judged class, passed) for n drawn cases of a control at depth ≥ 8."""
    spec, draw = _control(kind)
    rng = random.Random(seed)
    return [(case, *_verdict_growth(spec, case)) for case in (draw(rng) for _ in range(n))]


def _missed_controls(kind: str, n: int, seed: int) -> list[tuple[Case, str, str]]:
    want = "decaying" if kind == "plain_tanh_cold" else "exponential"
    return [
        (case, growth, lowest)
        for case, growth, lowest, passed in _control_verdicts(kind, n, seed)
        if growth != want or (want == "exponential" and passed)
    ]  # a decaying law does not break "bounded" growth


@pytest.mark.slow  # ensembles at many depths; nightly
@pytest.mark.parametrize("kind", ["unnormalised_residual", "plain_relu_hot", "plain_tanh_cold"])
def test_exponential_controls_are_exponential_at_every_depth_from_8(kind: str) -> None:
    assert not _missed_controls(kind, 6, seed=0)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["plain_relu_hot", "plain_tanh_cold"])
def test_exponential_controls_are_exponential_at_every_depth_from_8_over_100(kind: str) -> None:
    assert not _missed_controls(kind, 100, seed=1)


@pytest.mark.slow
def test_unnormalised_residual_is_exponential_at_every_depth_from_8_over_100() -> None:
    """Drawn from the control's space (width 16–64, depth 8–64): violated (faster than linear
    beyond doubt) and called exponential in every one of 100 cases. Width 8 is outside the space
    because there the law is not exponential (the next tests)."""
    verdicts = _control_verdicts("unnormalised_residual", 100, seed=1)
    assert {case.width for case, *_ in verdicts} == {16, 32, 64}
    assert not [v for v in verdicts if v[3]]  # never passes "at most linear"
    assert not [(case, growth, lowest) for case, growth, lowest, _ in verdicts if growth != "exponential"]
    decided = sum(lowest == "exponential" for _, _, lowest, _ in verdicts)
    print(
        f"unnormalised residual: 100 of 100 exponential, {decided} with every other law ruled out"
    )  # for docs/ensembles.md (-s)


def _unnormalised_residual_profiles(width: int, depth: int, networks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(log Var x_l, frozen_l) for l = 0 … depth, shape (networks, depth + 1) each, of `networks`
    width-`width` control networks built by the spec's builder (float64: 2^L overflows float32).
    frozen_l: every coordinate of every sample is ≤ 0 at boundary l."""
    spec = load_spec(SPECS / "control_unnormalised_residual.toml")
    logs, frozen = [], []
    for seed in range(networks):
        case = make_case(depth=depth, width=width, batch=8, weight_init="kaiming_normal", seed=seed)
        x = make_input(spec, case)  # (B, n)
        lv, fz = [torch.log(x.var(unbiased=False))], [bool((x <= 0).all())]
        with torch.no_grad():
            for block in build(spec, case).blocks:
                x = block(x)
                lv.append(torch.log(x.var(unbiased=False)))
                fz.append(bool((x <= 0).all()))
        logs.append(torch.stack(lv))
        frozen.append(torch.tensor(fz))
    return torch.stack(logs), torch.stack(frozen)


def test_unnormalised_residual_freezes_exactly_once_every_coordinate_is_non_positive() -> None:
    """The absorbing state behind width 8's decaying increments: with relu(x) = 0 the branch
    W2·relu(W1·relu(x)) (no bias) is exactly 0, so every later block returns its input bit for bit;
    a state with one positive coordinate is not absorbing."""
    spec = load_spec(SPECS / "control_unnormalised_residual.toml")
    case = make_case(depth=16, width=8, batch=4, weight_init="kaiming_normal", dtype="float32")
    x = -make_input(spec, case).abs()  # (B, n), every coordinate ≤ 0
    h = x
    with torch.no_grad():
        for block in build(spec, case).blocks:
            h = block(h)
    assert torch.equal(h, x)
    x[:, 3] = 1.0  # one positive coordinate per sample
    with torch.no_grad():
        assert not torch.equal(build(spec, case).blocks[0](x), x)


@pytest.mark.slow
def test_unnormalised_residual_increments_decay_to_zero_at_width_8_and_settle_at_width_32() -> None:
    """The seed-averaged log-variance increment per block (the slope of the geometric-mean
    profile the classifier judges), built by the spec's builder (192 networks at width 8, 48 at 32):

    - width 8: networks freeze (previous test) at a rate of order 2^-width per block, so the
      increment falls from ~0.55 over blocks 2–8 to ~0.1 over blocks 129–256 (measured
      0.54 ± 0.02 and 0.097 ± 0.009 with 256 networks), with most networks frozen by block 256,
      while the networks still growing keep ~0.3 per block: the typical width-8 network's log
      variance converges, it does not grow exponentially;
    - width 32: no network freezes and the increment is the same over blocks 65–128 and 129–256
      (0.61 per block: a positive Lyapunov exponent after a transient, exponential growth).

    docs/ensembles.md records the 2,048-network measurement (benchmarks/residual_lyapunov.py).
    """
    logs, frozen = _unnormalised_residual_profiles(8, 256, 192)
    inc = logs.diff(dim=1)  # (S, L): column l − 1 is block l's increment
    early, late = inc[:, 1:8].mean(dim=1), inc[:, 128:256].mean(dim=1)  # (S,) each
    se = lambda d: float(d.std() / len(d) ** 0.5)  # noqa: E731
    assert float(early.mean()) - 3 * se(early) > 0.45
    assert float(late.mean()) + 3 * se(late) < float(early.mean()) / 3  # falls to under a third
    assert float(frozen[:, 256].double().mean()) > 0.5  # most networks are frozen
    live = ~frozen[:, 256]
    assert float(inc[live, 128:256].mean()) > 0.2  # those still growing keep a positive exponent
    logs, frozen = _unnormalised_residual_profiles(32, 256, 48)
    inc = logs.diff(dim=1)
    assert not bool(frozen.any())
    mid, late = inc[:, 64:128].mean(dim=1), inc[:, 128:256].mean(dim=1)
    assert float(late.mean()) > 0.5
    assert abs(float(late.mean() - mid.mean())) < 3 * (se(late) ** 2 + se(mid) ** 2) ** 0.5


def test_shallow_growth_is_undecided_not_exponential() -> None:
    """Depth 2 of the doubling control: the verdict cannot tell the laws apart and says so; the
    search must find a deeper case to show the violation (it cannot shrink to noise at depth 2)."""
    spec = load_spec(SPECS / "control_unnormalised_residual.toml")
    record = evaluate(spec, _case(2, 16, 8, seed=3, weight_init="kaiming_normal"))
    v = judge(spec, "variance_growth", record)
    assert v.passed
    assert v.extra["lowest"] == "linear"
    if v.extra["growth"] != "linear":
        assert "undecided at this depth" in v.detail
    deep = judge(spec, "variance_growth", evaluate(spec, _case(12, 16, 8, seed=3, weight_init="kaiming_normal")))
    assert not deep.passed and deep.extra["growth"] == "exponential"


def test_ensemble_spread_is_reported(basic_block_spec: Callable[..., Spec]) -> None:
    spec = basic_block_spec()
    v = judge(spec, "variance_growth", evaluate(spec, _case(7, 8, 5, spatial=2, seed=1)))
    spread = v.extra["ensemble"]
    assert spread["size"] in (8, 16, 32)  # 8, doubled while the laws stay undecided
    for lo, q25, mid, q75, hi in zip(
        spread["min"], spread["q25"], spread["mean_log"], spread["q75"], spread["max"], strict=True
    ):
        assert lo <= q25 <= q75 <= hi
        assert lo <= mid <= hi
    assert spread["min"][0] == spread["max"][0] == 1.0


def test_non_vectorisable_blocks_fall_back_to_the_loop(tmp_path: Path) -> None:
    """A block that reads a tensor's value in Python (`.item()`) cannot run under vmap."""
    (tmp_path / "item_blocks.py").write_text(
        textwrap.dedent("""
        import torch
        from torch import nn

        class Gated(nn.Module):
            def __init__(self, width):
                super().__init__()
                self.lin = nn.Linear(width, width)

            def forward(self, x):
                return x + self.lin(x) * (0.5 if x.abs().max().item() > 0 else 1.0)

        def make(depth, width):
            return nn.Sequential(*[Gated(width) for _ in range(depth)])
        """),
        encoding="utf-8",
    )
    path = tmp_path / "item.toml"
    path.write_text(
        textwrap.dedent("""\
        name = "item"
        description = "a block vmap cannot run"
        family = "custom"
        [block]
        factory = "item_blocks:make"
        [space]
        depth = 6
        width = 8
        batch = 4
        [probe]
        ensemble = 3
        [expect.variance_growth]
        max_growth = "exponential"
        """),
        encoding="utf-8",
    )
    spec = load_spec(path)
    case = _case(6, 8, 4, seed=0)
    record = evaluate(spec, case)
    assert record.error is None, record.error
    ens = record.measurements.extra["ensemble"]  # type: ignore[union-attr]
    assert not ens.vectorised and ens.size == 3
    member = dataclasses.replace(case, seed=ens.seeds[2])
    alone = probe(build(spec, member).blocks, make_input(spec, member), seed=derive_seed(member.seed, 2))
    assert ens.act_var[2] == alone.act_var
    torch.testing.assert_close(torch.tensor(ens.act_var[0]), torch.tensor(record.measurements.act_var), rtol=0, atol=0)  # type: ignore[union-attr]


def test_html_variance_plot_draws_the_ensemble_spread_as_a_band() -> None:
    from stability.report.plots import ENSEMBLE_GID, ensemble_spread
    from stability.report.spec_plots import spec_figures
    from stability.run.engine import run_spec

    spec = load_spec(SPECS / "control_unnormalised_residual.toml")
    result = run_spec(spec, case="depth=10,width=16,batch=8,seed=2")
    fig = spec_figures(result)["variance"]
    (band,) = [c for c in fig.axes[0].collections if c.get_gid() == ENSEMBLE_GID]
    record = next(iter(result.cases.values()))
    spread = ensemble_spread(record, "variance")
    assert spread is not None
    lo, hi, size = spread
    assert size == record.measurements.extra["ensemble"].size >= 8  # type: ignore[union-attr]
    ys = band.get_paths()[0].vertices[:, 1]
    assert max(ys) == approx(max(hi), rel=1e-12)
    assert min(ys) == approx(min(lo), rel=1e-12)
    assert lo[-1] <= record.measurements.act_var[-1] / record.measurements.act_var[0] <= hi[-1]  # type: ignore[union-attr]


def test_undecided_ensembles_grow_until_decided_or_four_times_the_size() -> None:
    """The sequential design: 8 seeds, doubled while more than one class stays plausible, up to 32;
    the first members are the fixed-size ensemble's, seed for seed."""
    from stability.judge.growth import classify_ensemble, enough_members
    from stability.measure.ensemble import probe_ensemble_until_decided

    spec = load_spec(SPECS / "control_unnormalised_residual.toml")
    sizes = []
    for depth, seed in ((10, 0), (12, 1), (9, 5)):
        case = _case(depth, 8, 4, seed=seed, weight_init="kaiming_normal")
        first = probe(build(spec, case).blocks, make_input(spec, case), seed=derive_seed(case.seed, 2))
        ens = probe_ensemble_until_decided(
            spec,
            case,
            first,
            size=8,
            enough=enough_members(depth, bounded_ratio=spec.expect.variance_growth.bounded_ratio),
        )
        assert ens.size in (8, 16, 32)
        assert ens.seeds == ensemble_seeds(case.seed, ens.size)
        assert ens.size == 32 or classify_ensemble(ens.act_var).decided
        fixed = probe_ensemble(spec, case, first, size=8)
        assert ens.act_var[:8] == fixed.act_var
        sizes.append(ens.size)
    capped = probe_ensemble_until_decided(
        spec,
        _case(10, 8, 4, seed=0, weight_init="kaiming_normal"),
        probe(
            build(spec, _case(10, 8, 4, seed=0, weight_init="kaiming_normal")).blocks,
            make_input(spec, _case(10, 8, 4, seed=0, weight_init="kaiming_normal")),
            seed=derive_seed(0, 2),
        ),
        size=8,
        enough=enough_members(10, bounded_ratio=spec.expect.variance_growth.bounded_ratio),
        max_size=8,
    )
    assert capped.size == 8


# ----------------------------------------------------------------------------- mean shift and lesions on the ensemble


def _drawn(spec: Spec, n: int, seed: int, *, corner: bool = False, any_init: bool = False) -> list[Case]:
    """n cases with fixed draws from the spec's space: depth, then width and batch (their smallest
    values with `corner`, the corner the search favours), the init (the first, or any with
    `any_init`), the seed."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        depth = rng.randint(*spec.space.depth)
        width = spec.space.width[0] if corner else rng.randint(*spec.space.width)
        batch = spec.space.batch[0] if corner else rng.randint(*spec.space.batch)
        init = rng.choice(spec.space.weight_init) if any_init else spec.space.weight_init[0]
        out.append(
            make_case(
                depth=depth, width=width, batch=batch, weight_init=init, dtype="float32", seed=rng.randrange(2**16)
            )
        )
    return out


def _verdict(spec: Spec, invariant: str, case: Case) -> Verdict:
    record = evaluate(spec, case)
    assert record.error is None, record.error
    return judge(spec, invariant, record)


def _assert_all_right(spec: Spec, invariant: str, cases: list[Case], *, holds: bool) -> None:
    """Every case's verdict is `holds`; prints the observed range (docs/ensembles.md quotes it)."""
    verdicts = [(c, _verdict(spec, invariant, c)) for c in cases]
    wrong = [(c, v.observed) for c, v in verdicts if v.passed != holds]
    values = sorted(v.observed for _, v in verdicts)
    print(
        f"{spec.name} {invariant}: from {values[0]:.3f} to {values[-1]:.3f}, median "
        f"{values[len(values) // 2]:.3f}; wrong {len(wrong)}"
    )
    assert not wrong


def _single(spec: Spec) -> Spec:
    """The spec with `ensemble = 1`: one network judged, as before ensembles."""
    return spec.model_copy(update={"probe": spec.probe.model_copy(update={"ensemble": 1})})


def test_mean_shift_of_a_centred_stack_is_judged_on_the_ensemble_not_one_seed() -> None:
    """The case a full-suite run drew from preact_tanh_mlp.toml (tanh is odd: no mean shift in
    expectation): its own network has ρ = 0.296 > 0.25, the median over the 8 networks of its
    ensemble is far below, and with `ensemble = 1` the single network is judged (and fails)."""
    spec = load_spec(SPECS / "preact_tanh_mlp.toml")
    case = make_case(depth=9, width=18, batch=8, weight_init="xavier_normal", dtype="float32", seed=2550)
    v = _verdict(spec, "mean_shift", case)
    assert v.passed and v.extra["ensemble"]["size"] == 8
    assert v.observed < 0.15
    v1 = _verdict(_single(spec), "mean_shift", case)
    assert not v1.passed and "ensemble" not in v1.extra
    assert v1.observed == pytest.approx(0.296, abs=5e-4)


def test_one_heavy_tailed_network_does_not_decide_the_mean_shift() -> None:
    """A reviewer's case: members' ρ [2.124, 0.431, −0.089, −0.093, −0.047, −0.066, −0.11, 0.139],
    mean 0.286 > 0.25; the median judges the typical network."""
    spec = load_spec(SPECS / "preact_tanh_mlp.toml")
    v = _verdict(
        spec,
        "mean_shift",
        make_case(depth=15, width=16, batch=8, weight_init="xavier_normal", dtype="float32", seed=15214),
    )
    assert v.passed and v.extra["ensemble"]["size"] == 8
    assert v.observed < 0.1


def test_mean_shift_of_the_ensemble_is_the_median_of_the_members() -> None:
    spec = load_spec(SPECS / "control_mean_shift_relu.toml")
    case = make_case(depth=6, width=16, batch=8, weight_init=spec.space.weight_init[0], dtype="float32", seed=5)
    record = evaluate(spec, case)
    assert record.measurements is not None
    profiles = record.measurements.extra["channel_ensemble"]
    v = judge(spec, "mean_shift", record)
    assert v.extra["ensemble"]["final_ratio"] == [p.ratio() for p in profiles]
    assert v.observed == statistics.median(p.ratio() for p in profiles)
    assert profiles[0] == record.measurements.extra["channels"]  # member 0 is the case itself


@pytest.mark.parametrize("name", ["preact_tanh_mlp", "control_mean_shift_relu"])
def test_mean_shift_verdicts_over_drawn_cases(name: str) -> None:
    spec = load_spec(SPECS / f"{name}.toml")
    _assert_all_right(spec, "mean_shift", _drawn(spec, 6, 0), holds=name == "preact_tanh_mlp")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["preact_tanh_mlp", "control_mean_shift_relu"])
@pytest.mark.parametrize("corner", [False, True])
def test_mean_shift_verdicts_over_100_drawn_cases(name: str, corner: bool) -> None:
    """The centred stack holds and the ReLU control is caught in every one of 100 cases drawn from
    the space, and of 100 at the corner the search favours (width 16, batch 8), where one
    network's ρ is noisiest (docs/ensembles.md has the measured numbers)."""
    spec = load_spec(SPECS / f"{name}.toml")
    _assert_all_right(
        spec, "mean_shift", _drawn(spec, 100, 2 if corner else 1, corner=corner), holds=name == "preact_tanh_mlp"
    )


def test_lesion_is_judged_on_the_ensemble_median() -> None:
    """The reviewer's case of preact_isometry.toml (depth 4, width 17, batch 1, seed 0): its own
    network's largest lesion change is above 0.8; the median over 8 networks is the verdict."""
    spec = load_spec(SPECS / "preact_isometry.toml")
    case = make_case(depth=4, width=17, batch=1, weight_init="kaiming_normal", dtype="float32")
    v = _verdict(spec, "lesion", case)
    own = max(c for c in v.extra["changes"] if c is not None)
    assert own > 0.8
    ens = v.extra["ensemble"]
    assert ens["size"] == 8 and v.observed == statistics.median(ens["values"]) and v.passed
    v1 = _verdict(_single(spec), "lesion", case)
    assert (v1.passed, v1.observed) == (False, own)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["preact_isometry", "control_lesion_plain"])
def test_lesion_verdicts_over_100_cases_at_the_smallest_width_and_batch(name: str) -> None:
    spec = load_spec(SPECS / f"{name}.toml")
    _assert_all_right(spec, "lesion", _drawn(spec, 100, 3, corner=True, any_init=True), holds=name == "preact_isometry")
