"""stability/report/render.py: plots rendered in a background process are the same bytes as inline."""

from __future__ import annotations

import pytest
from spec_support import ROOT

from stability import RunOptions, SpecResult, load_spec, run_spec
from stability.report.html import render_html
from stability.report.render import Renderer, spec_pngs


@pytest.fixture(scope="module")
def results() -> list[SpecResult]:
    return [
        run_spec(load_spec(ROOT / "specs" / name), RunOptions(profile="ci"))
        for name in ("control_scaled_skip.toml", "preact_mlp.toml")
    ]


@pytest.mark.slow  # every plot of a training report drawn twice, in a background process and inline
def test_background_plots_are_the_same_bytes_as_inline(results: list[SpecResult]) -> None:
    with Renderer() as renderer:
        for res in results:
            renderer.submit(res)
        background = [renderer.pngs(res) for res in results]
    inline = [spec_pngs(res) for res in results]
    assert background == inline
    expected = [
        ["gradient", "variance"] + (["identity"] if res.spec.expect.identity_at_init is not None else [])
        for res in results
    ]
    assert [list(p) for p in inline] == expected and ["gradient", "variance", "identity"] in expected
    assert all(png.startswith(b"\x89PNG") for p in inline for png in p.values())


@pytest.mark.slow  # a sweep on Dask; nightly
def test_a_result_never_submitted_is_rendered_inline(results: list[SpecResult]) -> None:
    with Renderer() as renderer:
        assert renderer.pngs(results[0]) == spec_pngs(results[0])


@pytest.mark.slow  # every plot of a training report drawn twice, in a background process and inline
def test_the_page_is_the_same_with_background_plots(results: list[SpecResult]) -> None:
    with Renderer() as renderer:
        for res in results:
            renderer.submit(res)
        page = render_html(results, seconds=1.0, pngs=renderer.pngs)
    inline = render_html(results, seconds=1.0)
    strip = lambda s: s.split("generated", 1)[1].split("·", 1)[1]  # noqa: E731  (the generation time differs)
    assert strip(page) == strip(inline)


@pytest.mark.slow  # renders every figure; nightly
def test_the_probe_figures_keep_their_legends_off_the_curves(results: list[SpecResult]) -> None:
    """Gradient, variance and identity figures: each legend below the plot, overlapping no axes;
    the HTML gives each image its own size (a legend's rows make it taller)."""
    import struct

    from matplotlib.figure import Figure

    from stability.report.spec_plots import spec_figures

    drawn = 0
    for res in results:
        for name, fig in spec_figures(res).items():
            assert isinstance(fig, Figure)
            fig.canvas.draw()
            renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
            legends = [a.get_legend() for a in fig.axes if a.get_legend() is not None]
            for legend in legends:
                box = legend.get_window_extent(renderer)
                assert fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1, name
                assert not any(box.overlaps(a.get_window_extent(renderer)) for a in fig.axes), name
                drawn += 1
    assert drawn >= 3
    page = render_html(results)
    for res in results:
        for png in spec_pngs(res).values():
            width, height = struct.unpack(">II", png[16:24])
            assert f'width="{width}" height="{height}"' in page
