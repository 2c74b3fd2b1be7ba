"""stability/judge/train_invariants.py: the verdicts on known inputs, and the shipped training specs
(specs/*update_size*, degradation_*, warmup_*, residual_size_*) whose verdicts the literature
fixes, each replayed by its case string, twice, bit-exactly."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from spec_support import SPECS

from stability import RunOptions, load_spec, run_spec
from stability.errors import SpecError
from stability.judge.train_invariants import residual_size, trainability, update_size
from stability.measure.train import TrainRun
from stability.measure.train_update import UpdateRecord, UpdateSweep, log_slope
from stability.spec.load import parse_spec


def _sweep(widths: list[int], exponents: list[float]) -> UpdateSweep:
    """RMS(Δh) = w^p at each boundary: the slopes are exactly the exponents."""
    run = TrainRun([1.0, 0.5], 1, None, 0.0)
    records = [UpdateRecord(w, [float(w) ** p for p in exponents], {"w": 0.1}, run) for w in widths]
    slopes = [log_slope(widths, [r.rms_delta[b] for r in records]) for b in range(len(exponents))]
    return UpdateSweep(widths, records, slopes)


def test_update_size_judges_the_worst_boundary_and_marks_the_first_width_outside_the_cone() -> None:
    sweep = _sweep([64, 128, 256, 512], [0.0, 0.1, 1.0])
    v = update_size(sweep, max_abs_slope=0.5)
    assert not v.passed and v.observed == pytest.approx(1.0, abs=1e-12) and v.block == 2
    assert v.extra["failing_width"] == 128 and "the output" in v.detail and "width^1.00" in v.detail
    flat = update_size(_sweep([64, 128, 256, 512], [0.0, 0.1, -0.2]), max_abs_slope=0.25)
    assert flat.passed and flat.observed == pytest.approx(-0.2, abs=1e-12) and flat.block == 2
    only_out = update_size(_sweep([64, 128, 256, 512], [1.0, 0.1, 0.0]), max_abs_slope=0.5, at="output")
    assert only_out.passed and only_out.block == 2


def test_trainability_verdicts() -> None:
    shallow = TrainRun([1.0, 0.5, 0.2], 2, None, 0.0, depth=4)
    deep = TrainRun([1.0, 0.8, 0.4], 2, None, 0.0, depth=32)
    v = trainability([shallow], max_loss_ratio=0.5)
    assert v.passed and v.observed == pytest.approx(0.2)
    assert not trainability([deep], max_loss_ratio=0.3).passed
    worse = trainability([shallow, deep], compare_depths=(4, 32), max_depth_ratio=1.25)
    assert not worse.passed and worse.observed == pytest.approx(2.0) and "degradation" in worse.detail
    assert trainability([shallow, deep], compare_depths=(4, 32), max_depth_ratio=2.5).passed
    diverged = trainability([TrainRun([1.0, 1e30, math.inf], 2, 2, 0.0, depth=4)])
    assert not diverged.passed and "step 2" in diverged.detail and diverged.extra["curves"]["4"][-1] is None


def test_residual_size_verdicts() -> None:
    shallow = TrainRun([1.0, 0.1], 1, None, 0.0, depth=4, residuals=[0.2, 0.4, 0.2, 0.2])
    deep = TrainRun([1.0, 0.1], 1, None, 0.0, depth=8, residuals=[0.1] * 8)
    v = residual_size([shallow, deep], max_mean=0.2, compare_depths=(4, 8))
    assert v.passed and v.observed == pytest.approx(0.1) and v.extra["depth_ratio"] == pytest.approx(0.4)
    assert not residual_size([deep, shallow], compare_depths=(4, 8)).passed
    assert not residual_size([shallow], max_mean=0.2).passed and residual_size([shallow], max_mean=0.2).block == 1


# ----------------------------------------------------------------------------- the loader


BASE = """
name = "t"
description = "t"
family = "{family}"
[space]
depth = 2
width = 8
{extra}
"""


@pytest.mark.parametrize(
    ("family", "extra", "key"),
    [
        ("plain", "[expect.trainability]", "train"),
        ("plain", "[train]\nsteps = 5\nlr = 0.1\n[expect.gradient_arrival]", "train"),
        (
            "custom",
            '[block]\nfactory = "m:f"\n[train]\nsteps = 5\nlr = 0.1\n[expect.trainability]',
            "expect.trainability",
        ),
        ("plain", "[train]\nsteps = 5\nlr = 0.1\nwarmup = 5\n[expect.trainability]", "train.warmup"),
        ("plain", "[train]\nsteps = 5\nlr = 0.1\n[expect.update_size]\nwidths = [64, 32]", "expect.update_size.widths"),
        (
            "plain",
            "[train]\nsteps = 5\nlr = 0.1\n[expect.trainability]\ncompare_depths = [8, 8]",
            "expect.trainability.compare_depths",
        ),
        ("plain", "[train]\nsteps = 5\n[expect.trainability]", "train.lr"),
    ],
)
def test_training_tables_are_validated_with_one_line_errors(family: str, extra: str, key: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(BASE.format(family=family, extra=extra), file="t.toml")
    assert f"t.toml: {key}" in str(info.value) and "\n" not in str(info.value)


def test_a_spec_outside_its_profiles_is_skipped_and_says_so() -> None:
    spec = load_spec(SPECS / "degradation_plain.toml")
    result = run_spec(spec, RunOptions(profile="ci"))
    (r,) = result.results
    assert r.met and r.verdict is None and "skipped in profile ci" in r.message and "--profile thorough" in r.message


# ----------------------------------------------------------------------------- the SP / µP pair


def test_mup_keeps_the_update_size_flat_and_sp_does_not() -> None:
    """Derivation (docs/training.md): in SP, Adam's first step moves each weight entry by ≈ lr along
    sign(g), so a hidden boundary's change ΔW·h sums `width` aligned terms: slope ≈ +1; the readout
    adds W_out·Δh with Δh aligned to W_out: up to +1.5. The input layer's fan-in is fixed: slope ≈ 0.
    In µP every boundary stays within the bound."""
    mup = run_spec(load_spec(SPECS / "mup_update_size.toml"), RunOptions(profile="ci"))
    sp = run_spec(load_spec(SPECS / "control_sp_update_size.toml"), RunOptions(profile="ci"))
    (m,), (s,) = mup.results, sp.results
    assert m.met and m.verdict is not None and m.verdict.passed and m.examples == 3
    assert s.met and s.verdict is not None and not s.verdict.passed
    print(f"\nµP slopes {m.verdict.extra['slopes']}\nSP slopes {s.verdict.extra['slopes']}")
    assert all(abs(x) < 0.5 for x in m.verdict.extra["slopes"])
    slopes = s.verdict.extra["slopes"]
    assert abs(slopes[0]) < 0.1  # the input layer: fixed fan-in
    assert all(0.7 < x < 1.2 for x in slopes[1:-1])  # hidden boundaries: ≈ +1
    assert 1.0 < slopes[-1] < 1.7  # the output: between +1 and +1.5
    assert f"width^{s.verdict.observed:.2f}" in s.message and s.reproduce is not None


# ----------------------------------------------------------------------------- the seeds' claims, replayed


CLAIMS = [
    ("degradation_plain.toml", "seed=0", False),
    ("degradation_preact.toml", "seed=0", True),
    ("warmup_free_residual.toml", "branch_init=zero,seed=3", True),
    ("warmup_free_residual.toml", "branch_init=rezero,seed=3", True),
    ("warmup_full_branch.toml", "seed=3", False),
    ("residual_size_preact.toml", "seed=0", True),
]


#: The default suite replays two claims (one that fails, one that holds); every claim is replayed nightly.
QUICK = {("warmup_full_branch.toml", "seed=3"), ("warmup_free_residual.toml", "branch_init=zero,seed=3")}


@pytest.mark.parametrize(
    ("file", "case", "passes"),
    [pytest.param(*c, marks=[] if c[:2] in QUICK else [pytest.mark.slow]) for c in CLAIMS],
    ids=[f"{f}:{c}" for f, c, _ in CLAIMS],
)
def test_the_seeds_claims_replay_bit_exactly_with_the_expected_verdict(file: str, case: str, passes: bool) -> None:
    spec = load_spec(SPECS / file)
    first = run_spec(spec, RunOptions(), case=case)
    second = run_spec(spec, RunOptions(), case=case)
    (a,), (b,) = first.results, second.results
    assert a.met and a.error is None, a.message
    assert a.verdict is not None and b.verdict is not None and a.verdict.passed is passes
    assert a.verdict.extra == b.verdict.extra and a.message == b.message  # every loss, bit for bit


def test_training_verdicts_write_strict_json(tmp_path: Path) -> None:
    """NaN and inf never reach the JSON report: a diverged curve's last loss is null."""
    import json

    from stability.report.formats import write_json
    from stability.run.engine import InvariantResult, SpecResult

    spec = load_spec(SPECS / "warmup_full_branch.toml")
    v = trainability([TrainRun([1.0, 1e30, math.inf], 2, 2, 0.0, depth=16)], max_loss_ratio=0.5)
    result = InvariantResult(
        name="trainability", expect="violated", met=True, verdict=v, case=None, examples=1, message="m"
    )
    write_json(tmp_path / "r.json", [SpecResult(spec=spec, results=[result])])

    def refuse(name: str) -> None:
        raise ValueError(name)

    data = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"), parse_constant=refuse)
    assert "null" in json.dumps(data) and data
