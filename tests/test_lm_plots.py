"""stability/report/lm_plots.py through stability/report/spec_plots.py: each language-model
invariant's verdict is drawn as its figures in the HTML report, with a caption, and each figure
shows the verdict's numbers (the curve, the bound or threshold, the marked step), from hand-built
runs whose verdicts are known."""

from __future__ import annotations

import html
import math
from typing import Any

import pytest
from matplotlib.figure import Figure
from spec_support import shipped_text

from stability.judge import lm_invariants as j
from stability.judge.lr_sensitivity import lr_sensitivity
from stability.measure.lm_records import LMRun
from stability.report.html import figure_caption, render_html
from stability.report.lm_plots import BOUND_GID, LM_CAPTIONS, MARK_GID, MEAN_GID
from stability.report.spec_plots import training_figures
from stability.report.train_plots import DIVERGED_GID
from stability.run.results import InvariantResult, SpecResult
from stability.spec.load import parse_spec
from stability.spec.schema import Spec


def _spec(expect: str) -> Spec:
    """The shipped early-warning control (a small language model's training run) judged by `expect`."""
    return parse_spec(shipped_text("control_lm_early_warning", {}, expect=expect), file="lm.toml")


def _run(
    logits: list[float],
    *,
    losses: list[float] | None = None,
    logz: list[tuple[float, float, float]] | None = None,
    every: int = 5,
    diverged: int | None = None,
) -> LMRun:
    n = len(logits)
    run = LMRun(lr=0.3, seed=0, steps=200, eps=1e-8, entropy_rate=2.0)
    run.recorded = [every * i for i in range(n)]
    run.max_logit = [[v, v / 2] for v in logits]
    run.entropy = [[1.0, 1.0] for _ in logits]
    logz = logz or [(0.0, 0.5, -0.5)] * n
    run.logz_mean, run.logz_max, run.logz_min = ([z[i] for z in logz] for i in range(3))
    run.losses = losses if losses is not None else [4.0 - 0.01 * t for t in range(every * n)]
    run.diverged_at = diverged
    return run


def _figures(spec: Spec, name: str, verdict: Any) -> tuple[dict[str, Figure], SpecResult]:
    expectation = getattr(spec.expect, name)
    met = verdict.passed == (expectation.expect == "holds")
    result = SpecResult(
        spec=spec,
        results=[
            InvariantResult(
                name=name,
                expect=expectation.expect,
                met=met,
                verdict=verdict,
                case=None,
                examples=1,
                message=f"lm.toml::{name}",
            )
        ],
    )
    return training_figures(result), result


def _gid(fig: Figure, gid: str) -> list[Any]:
    return [a for a in fig.findobj() if a.get_gid() == gid]


def _line(fig: Figure, label: str) -> Any:
    (line,) = [ln for ln in fig.axes[0].lines if ln.get_label() == label]
    return line


def _page_shows(result: SpecResult, keys: list[str]) -> None:
    page = render_html([result])
    assert page.count("data:image/png;base64,") == len(keys)
    for key in keys:
        text = LM_CAPTIONS[key.split(":")[0]]
        assert figure_caption(result, key) == text and html.escape(text) in page


def test_attention_logits_draws_the_largest_logit_against_the_step_with_its_bound_and_first_crossing() -> None:
    spec = _spec('[expect.attention_logits]\nexpect = "violated"\nmax_logit = 100.0\n')
    v = j.attention_logits(_run([2.0, 30.0, 150.0, 900.0]), max_logit=100.0)
    figures, result = _figures(spec, "attention_logits", v)
    assert list(figures) == ["attention_logits", "lm_loss:attention_logits"]
    fig = figures["attention_logits"]
    line = _line(fig, "largest logit")
    assert list(line.get_xdata()) == [0, 5, 10, 15] and list(line.get_ydata()) == [2.0, 30.0, 150.0, 900.0]
    (bound,) = _gid(fig, BOUND_GID)
    assert list(bound.get_ydata()) == [100.0, 100.0]
    (mark,) = _gid(fig, MARK_GID)
    assert list(mark.get_offsets()[0]) == [10.0, 150.0]  # the first step over 100
    loss = figures["lm_loss:attention_logits"].axes[0].lines[0]
    assert len(loss.get_ydata()) == 20 and loss.get_label() == "lr 0.3"
    _page_shows(result, list(figures))
    held = j.attention_logits(_run([2.0, 30.0, 40.0]), max_logit=100.0)
    assert not _gid(_figures(spec, "attention_logits", held)[0]["attention_logits"], MARK_GID)


def test_output_logits_draws_log_z_with_its_band_and_the_bound_from_the_judged_step() -> None:
    spec = _spec('[expect.output_logits]\nexpect = "violated"\nmax_abs_logz = 5.0\nstatistic = "mean"\nafter = 0.5\n')
    logz = [(0.0, 1.0, -1.0), (2.0, 4.0, 0.0), (9.0, 12.0, 6.0)]
    run = _run([1.0, 1.0, 1.0], logz=logz, every=100)
    v = j.output_logits(run, max_abs_logz=5.0, statistic="mean", after=0.5)
    assert not v.passed and v.extra["first_step"] == 200
    figures, result = _figures(spec, "output_logits", v)
    assert list(figures) == ["log_z", "lm_loss:output_logits"]
    fig = figures["log_z"]
    assert list(_line(fig, "mean over the tokens").get_ydata()) == [0.0, 2.0, 9.0]
    bounds = _gid(fig, BOUND_GID)
    segments = [seg for b in bounds for seg in b.get_segments()]
    assert sorted((float(s[0][0]), float(s[0][1])) for s in segments) == [
        (100.0, -5.0),
        (100.0, 5.0),
    ]  # from step after·steps = 100
    (mark,) = _gid(fig, MARK_GID)
    assert list(mark.get_offsets()[0]) == [200.0, 9.0]
    _page_shows(result, list(figures))


def test_loss_spike_draws_the_loss_its_ceiling_and_marks_the_spike() -> None:
    spec = _spec('[expect.loss_spike]\nexpect = "violated"\nmax_factor = 1.5\nwindow = 4\n')
    losses = [3.0] * 8 + [6.0] + [3.0] * 3
    v = j.loss_spike(_run([1.0], losses=losses), max_factor=1.5, window=4)
    assert not v.passed and v.extra["step"] == 8
    figures, result = _figures(spec, "loss_spike", v)
    fig = figures["loss_spike"]
    (ceiling,) = _gid(fig, BOUND_GID)
    assert list(ceiling.get_xdata()) == list(range(4, 12)) and ceiling.get_ydata()[4] == pytest.approx(
        4.5, abs=1e-12
    )  # 1.5 × mean(3, 3, 3, 3)
    (mark,) = _gid(fig, MARK_GID)
    assert list(mark.get_offsets()[0]) == [8.0, 6.0]
    _page_shows(result, ["loss_spike"])


def test_early_warning_draws_the_indicator_as_it_stood_at_each_step_and_the_threshold() -> None:
    spec = _spec('[expect.early_warning]\nexpect = "violated"\nsteps = 20\nthreshold = 5.6\n')
    v = j.early_warning(_run([2.0, 4.0, 8.0, 20.0, 50.0]), steps=20, name="logit_growth", threshold=5.6)
    assert not v.passed and v.observed == 10.0
    figures, result = _figures(spec, "early_warning", v)
    fig = figures["early_warning"]
    curve = _line(fig, "logit_growth")
    assert list(curve.get_xdata()) == [0, 5, 10, 15] and list(curve.get_ydata()) == [
        1.0,
        2.0,
        4.0,
        10.0,
    ]  # max l_t / l_0 up to each step
    (threshold,) = _gid(fig, BOUND_GID)
    assert list(threshold.get_ydata()) == [5.6, 5.6]
    (mark,) = _gid(fig, MARK_GID)
    assert list(mark.get_offsets()[0]) == [15.0, 10.0]
    assert len(fig.axes) == 2 and len(fig.axes[1].lines[0].get_ydata()) == 20  # the loss of the 20 steps run
    _page_shows(result, ["early_warning"])


def test_lr_sensitivity_draws_loss_curves_per_learning_rate_and_final_loss_against_learning_rate() -> None:
    spec = _spec('[expect.lr_sensitivity]\nexpect = "violated"\nlrs = [0.01, 0.1, 1.0]\nseeds = 2\nmax_lrs = 0.1\n')
    grid = [0.01, 0.1, 1.0]
    runs: dict[int, dict[float, LMRun]] = {}
    for seed, finals in ((0, [4.0, 2.0, math.nan]), (1, [3.0, 2.5, 6.0])):
        runs[seed] = {}
        for lr, f in zip(grid, finals, strict=True):
            run = LMRun(lr=lr, seed=seed, steps=3, eps=1e-8, initial_eval=5.0, final_eval=f, entropy_rate=1.5)
            run.losses = [5.0, 4.0, f]
            runs[seed][lr] = run
    v = lr_sensitivity(runs, lrs=grid, max_lrs=0.1)
    figures, result = _figures(spec, "lr_sensitivity", v)
    assert list(figures) == ["lr_losses", "lr_curve"]
    curve = figures["lr_curve"]
    (mean,) = _gid(curve, MEAN_GID)
    # seed 0 capped (4, 2, 5), seed 1 (3, 2.5, 5): a diverged or worse-than-L₀ run is drawn at L₀ = 5
    assert list(mean.get_xdata()) == grid and list(mean.get_ydata()) == [3.5, 2.25, 5.0]
    labels = {ln.get_label() for ln in curve.axes[0].lines}
    assert {"initial loss L₀ ≈ 5", "entropy rate H ≈ 1.5"} <= labels
    losses = figures["lr_losses"]
    means = _gid(losses, MEAN_GID)
    assert [ln.get_label() for ln in means] == ["lr 0.01", "lr 0.1", "lr 1"]
    assert list(means[0].get_ydata()) == pytest.approx([5.0, 4.0, 3.5], abs=1e-12)
    assert means[2].get_ydata()[2] == 6.0  # the diverged seed left out of the mean
    assert len(_gid(losses, DIVERGED_GID)) == 1  # lr 1: one seed diverged
    _page_shows(result, ["lr_losses", "lr_curve"])
