"""stability/report/train_plots.py: the update-size-vs-width and loss-curve figures, and their place in
the HTML report (the bound drawn, the failing width and a diverged step marked)."""

from __future__ import annotations

import math

from matplotlib.figure import Figure

from stability.judge.invariants import Verdict
from stability.judge.train_invariants import trainability, update_size
from stability.measure.train import TrainRun
from stability.measure.train_update import UpdateRecord, UpdateSweep, log_slope
from stability.report.html import render_html
from stability.report.spec_plots import training_figures
from stability.report.train_plots import CONE_GID, DIVERGED_GID, FAILING_WIDTH_GID, loss_figure, update_size_figure
from stability.run.engine import InvariantResult, SpecResult
from stability.spec.load import parse_spec


def _gids(fig: Figure) -> set[str]:
    return {a.get_gid() for a in fig.findobj() if a.get_gid()}


def _verdict(exponent: float) -> Verdict:
    widths = [64, 128, 256, 512]
    run = TrainRun([1.0, 0.9], 1, None, 0.0)
    records = [UpdateRecord(w, [1.0, 0.1 * float(w) ** exponent], {"w": 0.01}, run) for w in widths]
    slopes = [log_slope(widths, [r.rms_delta[b] for r in records]) for b in range(2)]
    return update_size(UpdateSweep(widths, records, slopes), max_abs_slope=0.5)


def test_update_size_figure_draws_the_cone_and_marks_the_first_width_outside_it() -> None:
    failing = _verdict(1.0)
    fig = update_size_figure(failing.extra, failed=True)
    assert {CONE_GID, FAILING_WIDTH_GID} <= _gids(fig)
    marks = [a for a in fig.findobj() if a.get_gid() == FAILING_WIDTH_GID]
    assert marks[0].get_offsets()[0][0] == failing.extra["failing_width"] == 128  # type: ignore[attr-defined]
    holding = update_size_figure(_verdict(0.0).extra, failed=False)
    assert CONE_GID in _gids(holding) and FAILING_WIDTH_GID not in _gids(holding)


def test_loss_figure_marks_a_diverged_step() -> None:
    v = trainability(
        [TrainRun([1.0, 10.0, math.inf], 2, 2, 0.0, depth=8), TrainRun([1.0, 0.5, 0.25], 2, None, 0.0, depth=4)]
    )
    fig = loss_figure(v.extra)
    assert DIVERGED_GID in _gids(fig) and len(fig.axes[0].lines) == 2


def test_the_html_report_shows_the_training_figures() -> None:
    spec = parse_spec(
        'name = "t"\ndescription = "t"\nfamily = "plain"\n[space]\ndepth = 2\nwidth = 64\n[train]\nsteps = '
        "1\nlr = 0.001\n[expect.update_size]\nwidths = [64, 128, 256, 512]\n"
    )
    v = _verdict(1.0)
    result = InvariantResult(
        name="update_size",
        expect="holds",
        met=False,
        verdict=v,
        case=None,
        examples=1,
        message="t::update_size: expected to hold, but it fails",
    )
    spec_result = SpecResult(spec=spec, results=[result])
    assert list(training_figures(spec_result)) == ["update_size"]
    page = render_html([spec_result])
    assert "RMS change of the activation" in page and page.count("data:image/png;base64,") == 1


def _legend_outside(fig: Figure) -> None:
    """The legend lies inside the figure and overlaps no axes (the plot's or a colour bar's)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    (legend,) = [a.get_legend() for a in fig.axes if a.get_legend() is not None]
    box = legend.get_window_extent(renderer)
    assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1
    for ax in fig.axes:
        assert not box.overlaps(ax.get_window_extent(renderer)), (box, ax.get_window_extent(renderer))


def test_every_legend_lies_outside_the_curves() -> None:
    """Below the plot, outside its axes (it used to sit on the curves, `loc="best"`): the training
    figures here, the probe's figures in tests/test_render.py."""
    _legend_outside(update_size_figure(_verdict(1.0).extra, failed=True))
    v = trainability(
        [TrainRun([1.0, 10.0, math.inf], 2, 2, 0.0, depth=8), TrainRun([1.0, 0.5, 0.25], 2, None, 0.0, depth=4)]
    )
    _legend_outside(loss_figure(v.extra))
