"""A sweep says what it holds: every key no axis sets, at its value, in the terminal table's header
and the HTML report (stability.run.grid.fixed_values); the heatmaps' x axis is the swept axis
with the most values, or `--x KEY` (stability.report.phase.x_axis_key); depth ticks read 2, 4, 8."""

from __future__ import annotations

from pathlib import Path

import pytest
from spec_support import SPECS

from stability.cli import main
from stability.report.phase import heatmap_figure, x_axis_key
from stability.run.executor import InProcessExecutor
from stability.run.grid import fixed_text, fixed_values, parse_axis
from stability.run.store import Store
from stability.run.sweep import run_sweep
from stability.spec.load import load_spec

SCALED = SPECS / "control_scaled_skip.toml"  # preact, skip = "scaled", branch_init = ["zero"], width 8, batch 4


def test_the_terminal_and_the_html_name_every_fixed_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The order of --over no longer picks the x axis: skip_scale (three values) beats branch_init
    (one), so the heatmap is skip_scale × depth, not a one-column map of branch_init."""
    args = [
        "sweep",
        str(SCALED),
        "--over",
        "depth=1,2",
        "--over",
        "branch_init=zero",
        "--over",
        "skip_scale=0.5,1,2",
        "--seeds",
        "1",
        "--depth-range",
        "1:4",
    ]
    assert main([*args, "--serial", "-q", "--db", str(tmp_path / "r.sqlite"), "--html", str(tmp_path / "report")]) == 0
    out = capsys.readouterr().out
    held = "width=8, batch=4, weight_init=default, dtype=float32, branch_scale=1.0"
    assert f"held fixed at every point: {held}" in out
    page = (tmp_path / "report" / "index.html").read_text()
    assert f'held fixed at every point: <span class="mono">{held}</span>' in page
    assert "branch_init=zero" in page  # the facet's title names the one-value axis
    with Store(tmp_path / "r.sqlite") as store:  # the same points, read back: no probe
        result = run_sweep(
            load_spec(SCALED),
            [parse_axis(a) for a in args[3::2][:3]],
            store,
            InProcessExecutor(),
            seeds=[0],
            depth_range=(1, 4),
        )
    assert x_axis_key(result) == "skip_scale"
    fig = heatmap_figure(result, "gradient", facet={"branch_init": "zero"})
    assert fig.axes[0].get_xlabel() == "skip_scale"
    assert (
        heatmap_figure(result, "gradient", facet={"skip_scale": 0.5}, x="branch_init").axes[0].get_xlabel()
        == "branch_init"
    )


def test_x_names_a_swept_key_or_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = [
        "sweep",
        str(SCALED),
        "--over",
        "depth=1,2",
        "--over",
        "skip_scale=0.5,2",
        "--seeds",
        "1",
        "--serial",
        "-q",
        "--db",
        str(tmp_path / "r.sqlite"),
        "--html",
        str(tmp_path / "html"),  # --x sets the report's axis: without --html it is refused as doing nothing
    ]
    for bad in ("depth", "width"):
        capsys.readouterr()
        assert main([*base, "--x", bad]) == 2
        assert (
            capsys.readouterr().err.strip()
            == f"stability: error: --x {bad}: the heatmaps' x axis must be a swept key other than depth; "
            "choose one of skip_scale"
        )


@pytest.mark.parametrize(
    ("spec", "axes", "expected"),
    [
        (
            "preact_mlp.toml",
            ["depth=2,4", "branch_init=zero,default"],
            {"width": 16, "batch": 4, "weight_init": "kaiming_normal", "dtype": "float32", "branch_scale": 1.0},
        ),
        (
            "plain_tanh_mlp.toml",
            ["depth=2,4", "sigma_w2=1,2"],
            {"width": 256, "batch": 16, "dtype": "float32"},
        ),  # σ_w² sets the init; plain has one branch init
        (
            "plain_tanh_mlp.toml",
            ["depth=2,4", "weight_init=normal,xavier_normal"],
            {"width": 256, "batch": 16, "dtype": "float32", "init_std": 0.0765466},
        ),  # the spec's own init_std
        (
            "control_scaled_skip.toml",
            ["skip_scale=0.5,1"],
            {
                "depth": 1,
                "width": 8,
                "batch": 4,
                "weight_init": "default",
                "branch_init": "zero",
                "dtype": "float32",
                "branch_scale": 1.0,
            },
        ),
        (
            "custom_rezero.toml",
            ["depth=2,4"],
            {"width": 8, "batch": 4, "weight_init": "default", "branch_init": "default", "dtype": "float32"},
        ),
    ],
)
def test_the_fixed_values_are_what_apply_point_gives_the_keys_no_axis_sets(
    spec: str, axes: list[str], expected: dict[str, object]
) -> None:
    loaded = load_spec(SPECS / spec)
    assert fixed_values(loaded, [parse_axis(a) for a in axes]) == expected
    assert fixed_text(loaded, [parse_axis(a) for a in axes]) == ", ".join(f"{k}={v}" for k, v in expected.items())


def test_the_depth_axis_reads_powers_of_two(tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as store:
        result = run_sweep(
            load_spec(SCALED),
            [parse_axis("depth=1,3,9,27"), parse_axis("skip_scale=0.5,1")],
            store,
            InProcessExecutor(),
            seeds=[0],
            budgets=False,
        )
    ax = heatmap_figure(result, "gradient").axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["1", "2", "4", "8", "16", "32"][: len(labels)] and len(labels) >= 5, labels
    assert not [t for t in ax.get_yticklabels(minor=True) if t.get_text()]
