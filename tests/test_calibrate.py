"""`stability calibrate` (stability/run/calibrate.py, stability/cli/calibrate.py): the bands against
a closed form, and `--write` changing the bands and nothing else.

The closed form: a factory whose every block multiplies its input by c = 2^(seed mod 3 − 1), one
of 1/2, 1 and 2 by the case's seed. Every number is then exact in float: with x_l = c^l·x₀,
g_l = c^(L−l)·g_L, so g₀/g₁ = c, g₁/g_L = c^(L−1), g₀/g_L = c^L, Var(x_L)/Var(x₀) = c^(2L), and
each block changes the stream by |c − 1| forward and backward."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest
from spec_support import write_spec

from stability.cli import main
from stability.run.bands import MARGIN, band_of
from stability.run.calibrate import calibrate, calibration_depths, calibration_seeds, measure
from stability.run.executor import InProcessExecutor
from stability.spec.load import load_spec
from stability.spec.registry import Band

FACTORY = """
import torch
from torch import nn


class Scale(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c

    def forward(self, x):
        return self.c * x


def scaled(depth, seed):
    return nn.Sequential(*[Scale(2.0 ** (seed % 3 - 1)) for _ in range(depth)])


def crashes(depth, width):
    raise RuntimeError("the factory  breaks\\n here")
"""

#: Written out in full, comments and all: `--write` must change the bands and keep every other line.
SPEC = """\
# my own comment, kept
name = "scaled"
description = "every block multiplies by a power of two chosen by the seed"
family = "custom"

[block]
factory = "scaled_blocks:scaled"

[space]
depth = [1, 4]
width = 4
batch = 4

[expect.residual_stream]  # the stream
lo = 0.5   # my note on lo
hi = 2.0
entry_lo = 0.1
entry_hi = 10.0
variance_lo = 0.01
variance_hi = 100.0

[expect.gradient_arrival]
lo = 0.01
hi = 100.0
"""


def _spec(tmp_path: Path, text: str = SPEC) -> Path:
    return write_spec(tmp_path, "scaled", text, modules={"scaled_blocks": FACTORY})


def _down(x: float) -> float:
    """Two significant digits, down, by hand: 0.4 → 0.4, 0.3125 → 0.31."""
    e = math.floor(math.log10(x)) - 1
    return math.floor(round(x / 10**e, 9)) * 10**e


def _up(x: float) -> float:
    e = math.floor(math.log10(x)) - 1
    return math.ceil(round(x / 10**e, 9)) * 10**e


def test_bands_of_a_scalar_chain_are_its_closed_form(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path))
    depths = calibration_depths(spec, [1, 2, 3])
    seeds = calibration_seeds(spec, 6)
    measured = measure(spec, executor=InProcessExecutor(), depths=depths, seeds=seeds)
    cal = calibrate(measured)
    factors = [2.0 ** (s % 3 - 1) for s in seeds]
    assert len(set(factors)) > 1, "the seeds must give more than one factor for a spread"
    fits = {(f.invariant, f.number): f for f in cal.fits}

    def expect(number: str, per_network: object) -> None:
        fit = fits[number]
        for spread in fit.spreads:
            values = [per_network(c, spread.depth) for c in factors]  # type: ignore[operator]
            assert (spread.lo, spread.hi) == (min(values), max(values)), (number, spread)
        everything = [per_network(c, d) for c in factors for d in depths]  # type: ignore[operator]
        lo = _down(min(everything) / MARGIN) if fit.lo_key else None
        hi = _up(max(everything) * MARGIN) if fit.hi_key else None
        for got, want in zip(fit.proposed, (lo, hi), strict=True):
            assert (got is None and want is None) or got == pytest.approx(want, rel=1e-12, abs=0.0), number

    expect(("gradient_arrival", "ratio"), lambda c, L: c**L)
    expect(("residual_stream", "entry"), lambda c, L: c)
    expect(("residual_stream", "stream"), lambda c, L: c ** (L - 1))
    expect(("residual_stream", "variance"), lambda c, L: c ** (2 * L))
    expect(("residual_stream", "change"), lambda c, L: abs(c - 1))
    assert cal.depths == (1, 2, 3) and cal.cases == 18 and cal.releases[0].startswith("torch ")


def test_the_band_rounds_outward_and_keeps_a_floor_of_the_number_type() -> None:
    band = Band(number="x", label="x", values=lambda v: [], lo="lo", hi="hi")
    fit = band_of("toy", band, {1: [1.0, 1.0], 2: [2.85, 1.32]})
    assert fit.proposed == (0.8, 3.6)  # 1/1.25 = 0.8 exactly; 2.85·1.25 = 3.5625 → 3.6
    assert fit.spread_text() == "1: 1–1, 2: 1.32–2.85"
    identity = band_of("toy", Band(number="c", label="c", values=lambda v: [], hi="hi"), {1: [0.0, 0.0]})
    assert identity.proposed == (None, 9.6e-7)  # 8 float32 epsilons, rounded up: not a band of 0
    undefined = band_of("toy", band, {1: [1.0, math.nan]})
    assert undefined.proposed == (None, None) and "undefined on 1 network" in (undefined.problem or "")
    zero = band_of("toy", band, {1: [0.0, 1.0]})
    assert zero.proposed == (None, None) and "no positive lower bound" in (zero.problem or "")


def test_write_changes_the_bands_and_nothing_else(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _spec(tmp_path)
    code = main(["calibrate", str(path), "--write", "--depths", "1,2", "--seeds", "3", "--in-process"])
    assert code == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "wrote 8 bound(s)" in out and "residual_stream" in out
    after = path.read_text().splitlines()
    before = SPEC.splitlines()
    assert len(after) == len(before)
    changed = [(b, a) for b, a in zip(before, after, strict=True) if a != b]
    keys = [b.split("=")[0].strip() for b, _ in changed]
    assert keys == ["lo", "hi", "entry_lo", "entry_hi", "variance_lo", "variance_hi", "lo", "hi"]
    for _, line in changed:
        assert "  # calibrated: " in line
    assert after[0] == "# my own comment, kept" and "[expect.residual_stream]  # the stream" in after
    lo = next(a for b, a in changed if b.startswith("lo = 0.5"))
    assert lo.endswith(" ‖ my note on lo") and "over 3 seeds" in lo and "torch " in lo
    again = path.read_text()
    assert main(["calibrate", str(path), "--write", "--depths", "1,2", "--seeds", "3", "--in-process"]) == 0
    assert path.read_text() == again  # a second run replaces its own comments, keeps the user's once
    assert load_spec(path).expect.residual_stream is not None


def test_bad_input_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _spec(tmp_path)
    assert main(["calibrate", str(path), "--depths", "1,9", "--in-process"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--depths 1,9: 9 is outside the spec's space.depth" in err
    crashing = _spec(tmp_path, SPEC.replace("scaled_blocks:scaled", "scaled_blocks:crashes"))
    before = crashing.read_text()
    assert main(["calibrate", str(crashing), "--write", "--depths", "1", "--seeds", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "depth 1" in err and "the factory breaks here" in err
    assert crashing.read_text() == before
    assert main(["calibrate", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_a_spec_without_bands_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = SPEC.split("[expect.residual_stream]")[0] + "[expect.identity_at_init]\n"
    path = _spec(tmp_path, textwrap.dedent(text))
    assert main(["calibrate", str(path), "--in-process"]) == 2
    assert "declares no invariant with bands" in capsys.readouterr().err


def test_a_plugins_invariant_is_calibrated_by_its_registered_bands(tmp_path: Path) -> None:
    """Nothing in calibrate names an invariant: a toy one registered here, E[x_L²]/E[x₀²] = c^(2L)
    bounded above by max_ratio, gets its band from the same networks."""
    from pydantic import Field

    from stability.judge.verdict import Verdict
    from stability.spec.expectations import Expectation
    from stability.spec.registry import INVARIANTS, Explanation, Invariant, register_invariant

    class ToyGrowth(Expectation):
        max_ratio: float = Field(4.0, gt=0.0)

    def judge(m: object, e: ToyGrowth) -> Verdict:
        ratio = m.act_sq_mean[-1] / m.act_sq_mean[0]  # type: ignore[attr-defined]
        return Verdict(
            invariant="toy_growth",
            passed=ratio <= e.max_ratio,
            observed=ratio,
            bound=f"≤ {e.max_ratio:g}",
            block=None,
            detail=f"ratio {ratio:g}",
        )

    register_invariant(
        Invariant(
            name="toy_growth",
            expectation=ToyGrowth,
            summary="a toy",
            label="E[x_L²]/E[x₀²]",
            explanation=Explanation(summary="a toy", computes="c", fails="f", fixes="x"),
            judge=judge,
            bands=(Band(number="ratio", label="E[x_L²]/E[x₀²]", values=lambda v: [v.observed], hi="max_ratio"),),
        )
    )
    try:
        spec = load_spec(_spec(tmp_path, SPEC.split("[expect.residual_stream]")[0] + "[expect.toy_growth]\n"))
        seeds = calibration_seeds(spec, 6)
        cal = calibrate(measure(spec, executor=InProcessExecutor(), depths=(1, 2), seeds=seeds))
        (fit,) = cal.fits
        most = max((2.0 ** (s % 3 - 1)) ** (2 * d) for s in seeds for d in (1, 2))
        assert (fit.invariant, fit.current, fit.proposed) == ("toy_growth", (None, 4.0), (None, _up(most * MARGIN)))
    finally:
        INVARIANTS.unregister("toy_growth")


def test_a_band_is_measured_only_on_the_cases_its_invariant_applies_to(tmp_path: Path) -> None:
    text = SPEC.replace("batch = 4\n", 'batch = 4\nbranch_init = ["default", "zero"]\n').replace(
        "[expect.gradient_arrival]\n", '[expect.gradient_arrival]\napplies_when = { branch_init = ["zero"] }\n'
    )
    spec = load_spec(_spec(tmp_path, text))
    cal = calibrate(measure(spec, executor=InProcessExecutor(), depths=(1,), seeds=calibration_seeds(spec, 2)))
    fits = {f.invariant: f for f in cal.fits}
    assert fits["gradient_arrival"].problem == "it applies to none of the calibrated networks (applies_when)"
    assert fits["residual_stream"].problem is None  # the corner case (branch_init default) is its own
