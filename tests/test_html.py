"""The HTML report (stability/report/html.py) and its plots (stability/report/plots.py, chosen per spec in
stability/report/spec_plots.py), checked on content."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from spec_support import make_measurements

from stability import CaseRecord, Measurements, RunOptions, SpecResult, load_spec, run_spec
from stability.cli import main
from stability.errors import UsageError
from stability.report.figures import to_png
from stability.report.html import render_html, write_html
from stability.report.plots import BAND_GID, HIGHLIGHT_GID, Highlight, gradient_figure, variance_figure
from stability.report.spec_plots import spec_figures
from stability.spec.case import Case

# A spec whose expectation fails: a plain sigmoid stack cannot keep its gradient (the sigmoid's
# slope is at most 1/4), yet the spec claims it does. Its description tries to inject a script.
FAILING_SPEC = """\
name = "sigmoid-claims-arrival <b>"
description = "claims <script>alert('x')</script> the gradient arrives & stays"
family = "plain"

[block]
activation = "sigmoid"

[space]
depth = [10, 30]
width = 8
batch = 4
weight_init = ["xavier_normal"]

[expect.gradient_arrival]
expect = "holds"
lo = 0.1

[expect.variance_growth]
expect = "holds"
max_growth = "bounded"
"""


@pytest.fixture(scope="module")
def spec_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("specs") / "sigmoid_claims.toml"
    path.write_text(FAILING_SPEC)
    return path


@pytest.fixture(scope="module")
def failing(spec_file: Path) -> SpecResult:
    return run_spec(load_spec(spec_file), RunOptions(profile="ci"))


@pytest.fixture(scope="module")
def page(failing: SpecResult) -> str:
    return render_html([failing], seconds=1.0)


def _case(depth: int, **kw: object) -> Case:
    values: dict[object, object] = dict(
        depth=depth,
        width=4,
        batch=2,
        spatial=None,
        input_width=None,
        weight_init="default",
        branch_init="default",
        dtype="float32",
        device="cpu",
        seed=0,
    )
    values.update(kw)
    return Case(**values)  # type: ignore[arg-type]


def _record(case: Case, grad: list[float], var: list[float]) -> CaseRecord:
    m = make_measurements(grad_norm=grad, act_var=var, act_sq_mean=[2 * v for v in var])
    return CaseRecord(case=case, measurements=m)


def _band(fig: Figure) -> tuple[float, float]:
    (ax,) = [a for a in fig.axes if a.get_yscale() == "log"]
    (patch,) = [p for p in ax.patches if p.get_gid() == BAND_GID]
    ys = patch.get_patch_transform().transform(patch.get_path().vertices)[:, 1]
    return float(ys.min()), float(ys.max())


def _ys(line: Line2D) -> list[float]:
    return [float(v) for v in np.asarray(line.get_ydata())]


def _highlighted(fig: Figure) -> Line2D:
    (line,) = [ln for ax in fig.axes for ln in ax.lines if ln.get_gid() == HIGHLIGHT_GID]
    return line


# ----------------------------------------------------------------------------- the run itself


def test_the_spec_really_fails(failing: SpecResult) -> None:
    ga = next(r for r in failing.results if r.name == "gradient_arrival")
    assert not ga.met and ga.case is not None and ga.reproduce


# ----------------------------------------------------------------------------- plots


def test_gradient_plot_draws_ratios_to_the_output_and_the_bound_band() -> None:
    shallow, deep = _case(3), _case(5)
    records = [
        _record(shallow, [1e-3, 1e-2, 1e-1, 1.0], [1, 1, 1, 1]),
        _record(deep, [2.0, 2.0, 2.0, 2.0, 2.0, 4.0], [1] * 6),
    ]
    fig = gradient_figure(records, bound=(0.1, 10.0), highlight=Highlight(shallow, failed=True))
    assert _band(fig) == pytest.approx((0.1, 10.0))
    line = _highlighted(fig)
    assert _ys(line) == pytest.approx([1e-3, 1e-2, 1e-1, 1.0])  # g_l / g_L
    assert line.get_color() == "#d62728" and line.get_linewidth() > 2
    others = [ln for ln in fig.axes[0].lines if ln.get_gid() is None and _ys(ln)]
    assert [_ys(ln) for ln in others] == [pytest.approx([0.5] * 5 + [1.0])]
    assert all(ln.get_linewidth() < line.get_linewidth() for ln in others)
    assert to_png(fig).startswith(b"\x89PNG\r\n\x1a\n")


def test_a_met_expectation_highlights_its_case_without_red() -> None:
    case = _case(3)
    fig = gradient_figure([_record(case, [1.0, 1.0, 1.0, 1.0], [1] * 4)], highlight=Highlight(case, failed=False))
    assert _highlighted(fig).get_color() != "#d62728"
    assert not [p for p in fig.axes[0].patches if p.get_gid() == BAND_GID]  # no bound declared, no band


def test_variance_plot_uses_the_declared_statistic_and_band() -> None:
    case = _case(3)
    record = _record(case, [1.0] * 4, [2.0, 4.0, 8.0, 16.0])
    fig = variance_figure([record], statistic="variance", band=(0.5, 4.0), highlight=Highlight(case, failed=True))
    assert _ys(_highlighted(fig)) == pytest.approx([1, 2, 4, 8])
    assert _band(fig) == pytest.approx((0.5, 4.0))
    # second moment: act_sq_mean is 2·var here, so the ratios are the same; an open lower side
    # runs to the bottom of the plot instead
    fig = variance_figure([record], statistic="second_moment", band=(None, 4.0))
    lo, hi = _band(fig)
    assert hi == pytest.approx(4.0) and lo < 1.0


def test_unplottable_values_become_gaps_not_errors() -> None:
    records = [
        _record(_case(3), [0.0, float("nan"), 1.0, 1.0], [1, float("inf"), 1, 1]),
        CaseRecord(case=_case(4), measurements=None, error="out of memory"),
    ]
    for fig in (gradient_figure(records, bound=(0.1, 10)), variance_figure(records, band=(None, 4.0))):
        assert to_png(fig).startswith(b"\x89PNG")


def test_spec_figures_take_bounds_and_failing_case_from_the_result(failing: SpecResult) -> None:
    figures = spec_figures(failing)
    assert _band(figures["gradient"]) == pytest.approx((0.1, 10.0))
    assert _band(figures["variance"])[1] == pytest.approx(4.0)  # max_growth = "bounded", bounded_ratio 4
    ga = next(r for r in failing.results if r.name == "gradient_arrival")
    line = _highlighted(figures["gradient"])
    m = failing.cases[ga.case].measurements  # type: ignore[index]
    assert m is not None and line.get_color() == "#d62728"
    assert _ys(line) == pytest.approx([g / m.grad_norm[-1] for g in m.grad_norm])


# ----------------------------------------------------------------------------- the page


def test_failing_expectation_and_case_are_marked(failing: SpecResult, page: str) -> None:
    ga = next(r for r in failing.results if r.name == "gradient_arrival")
    rows = [row.replace("<wbr>", "") for row in re.findall(r'<tr class="failed">(.*?)</tr>', page)]
    verdict = [r for r in rows if ">gradient_arrival<" in r]
    assert verdict and "✗" in verdict[0]
    assert any(
        ga.case.varying(failing.spec) in r and "failing case of gradient_arrival" in r and "✗" in r for r in rows
    )  # type: ignore[union-attr]
    assert ga.reproduce is not None and ga.reproduce.replace("'", "&#x27;") in page
    assert "stability explain gradient_arrival" in page
    assert '<section class="spec failed"' in page
    met = next(r for r in failing.results if r.name == "variance_growth")
    assert met.met and re.search(r'<tr class="ok">(?:(?!</tr>).)*>variance_growth<(?:(?!</tr>).)*✓', page)


def test_user_text_is_escaped(page: str) -> None:
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "stays" in page and "&amp; stays" in page
    assert "sigmoid-claims-arrival &lt;b&gt;" in page
    assert "<script" not in page.lower() and "<b>" not in page


def test_page_is_self_contained_with_data_uri_images(page: str) -> None:
    images = re.findall(r'<img src="([^"]*)"', page)
    assert len(images) == 2
    for src in images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")
    links = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert all(link.startswith(("data:", "#")) for link in links)
    assert "<link" not in page and "@import" not in page and "url(" not in page


def test_the_verdict_table_has_every_column(page: str) -> None:
    for head in ("spec", "invariant", "expect", "observed", "bound", "deciding case", "reproduce"):
        assert f"<th>{head}</th>" in page
    assert "[0.1, 10]" in page and "growth ≤ bounded" in page
    assert "plain" in page and "sigmoid_claims.toml" in page


def test_write_html_writes_index_atomically(tmp_path: Path, failing: SpecResult) -> None:
    path = write_html(tmp_path / "report", [failing], seconds=1.0)
    assert path == tmp_path / "report" / "index.html"
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert [p.name for p in path.parent.iterdir()] == ["index.html"]  # no temporary file left
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UsageError, match="give a folder"):
        write_html(blocker, [failing], seconds=1.0)


def test_cli_check_writes_the_report_and_exits_1(
    tmp_path: Path, spec_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "html"
    assert main(["check", str(spec_file), "--profile", "ci", "--only", "gradient_arrival", "--html", str(out)]) == 1
    capsys.readouterr()
    page = (out / "index.html").read_text(encoding="utf-8")
    assert '<tr class="failed">' in page and "data:image/png;base64," in page


def test_an_empty_run_still_renders() -> None:
    page = render_html([], seconds=0.0)
    assert "0 spec(s)" in page and "</html>" in page


# ----------------------------------------------------------------------------- what each plot and table says

GROWTH_ONLY = """\
name = "growth-only"
description = "only limits the growth class"
family = "preact"
[block]
norm = "layer"
[space]
depth = [1, 6]
width = 8
batch = 4
branch_init = ["zero", "default"]
[expect.variance_growth]
max_growth = "linear"
[expect.identity_at_init]
atol = {atol}
"""


@pytest.fixture(scope="module")
def growth_only() -> list[SpecResult]:
    from stability import parse_spec

    return [
        run_spec(parse_spec(GROWTH_ONLY.format(atol=atol), file=f"g{atol}.toml"), RunOptions(profile="ci"))
        for atol in (0.0, 1e-6)
    ]


def _has_band(fig: Figure) -> bool:
    return any(p.get_gid() == BAND_GID for ax in fig.axes for p in ax.patches)


def test_a_caption_mentions_a_shaded_band_exactly_when_the_plot_draws_one(
    failing: SpecResult, growth_only: list[SpecResult]
) -> None:
    from stability.report.html import figure_caption

    seen = set()
    for res in [failing, *growth_only]:
        for key, fig in spec_figures(res).items():
            caption = figure_caption(res, key)
            assert ("Shaded" in caption) == _has_band(fig), (res.spec.name, key, caption)
            seen.add((key, _has_band(fig)))
    assert {
        ("variance", False),
        ("variance", True),
        ("identity", True),
        ("identity", False),
        ("gradient", False),
    } <= seen
    growth = growth_only[0]
    assert 'No band: max_growth = "linear"' in figure_caption(growth, "variance")


def test_identity_plot_shows_each_zero_branch_case_and_the_judged_errors(growth_only: list[SpecResult]) -> None:
    from stability.report.plots import JUDGED_GID

    res = growth_only[0]
    fig = spec_figures(res)["identity"]
    zero = [r for r in res.cases.values() if r.case.branch_init == "zero" and r.measurements is not None]
    assert zero and all(r.case.branch_init in ("zero", "default") for r in res.cases.values())
    (ax,) = [a for a in fig.axes if a.get_yscale() == "symlog"]
    dots = [ln for ln in ax.lines if ln.get_gid() == JUDGED_GID]
    assert len(dots) == len(zero)  # one pair of dots per zero-branch case, none for default-branch ones
    for r in zero:
        m = r.measurements
        assert (
            m is not None and m.identity_error == 0.0 and m.input_grad_error == 0.0
        )  # a zero-branch pre-activation stack is the identity
    for ln in dots:
        assert _ys(ln) == [0.0, 0.0]
    # the lines: relative change of E[x_l²] and of the gradient norm, exactly 0 for the identity
    data = [
        _ys(ln)
        for ln in ax.lines
        if ln.get_gid() not in (JUDGED_GID,) and len(ln.get_xdata()) > 0 and ln.get_gid() != "stability-bound-edge"
    ]
    assert data and all(v == 0.0 for ys in data for v in ys)
    assert any(
        ln.get_gid() == "stability-bound-edge" and _ys(ln)[0] == 0.0 for ln in ax.lines
    )  # atol = 0: the line at 0


def test_identity_plot_draws_nonzero_errors_where_a_block_changes_its_input() -> None:
    from stability.report.plots import identity_figure

    case = _case(3, branch_init="zero")
    m = Measurements(
        grad_norm=[2.0, 1.0, 1.0, 1.0],
        act_var=[1, 1, 1, 1],
        act_sq_mean=[1.0, 1.0, 4.0, 4.0],
        param_grad_norm={},
        identity_error=0.5,
        input_grad_error=1.0,
        nonfinite_at=None,
    )
    fig = identity_figure([CaseRecord(case=case, measurements=m)], atol=0.1, highlight=Highlight(case, failed=True))
    line = _highlighted(fig)
    assert _ys(line) == [0.0, 0.0, 3.0, 3.0] and line.get_color() == "#d62728"  # |4 − 1| / 1 from boundary 2 on
    dashed = [ln for ln in fig.axes[0].lines if ln.get_linestyle() == "--" and len(ln.get_xdata())]
    assert any(_ys(ln) == [1.0, 0.0, 0.0, 0.0] for ln in dashed)  # |2 − 1| / 1 at the input
    assert _has_band(fig)


def test_every_column_of_both_tables_is_labelled(failing: SpecResult, growth_only: list[SpecResult]) -> None:
    page = render_html([failing, *growth_only])
    heads = re.findall(r"<th>(.*?)</th>", page)
    assert heads and all(h.strip() for h in heads), heads
    assert "<th>seconds</th>" in page and "<th>s</th>" not in page and "<th>gradient ratio r₀</th>" in page
    assert "seconds: build and probe time of the case" in page
    assert len(re.findall(r'<img src="data:image/png', page)) == 2 + 3 + 3  # identity plots for the identity specs
