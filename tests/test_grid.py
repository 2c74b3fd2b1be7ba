"""The sweep grid: `--over KEY=VALUES` parsing, the grid's points, and a point applied to a spec."""

from __future__ import annotations

import math

import pytest

from stability.errors import UsageError
from stability.run.grid import apply_point, grid_points, parse_axis, point_key
from stability.spec.load import parse_spec

SPEC = """
name = "g"
description = "grid test"
family = "plain"
[block]
activation = "tanh"
[space]
depth = [1, 8]
width = [16, 32]
[expect.gradient_arrival]
lo = 0.1
hi = 10.0
"""


def test_log_spacing_is_geometric_and_integer_keys_round_and_drop_repeats() -> None:
    axis = parse_axis("depth=log:2:1024:10")
    assert axis.values == (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
    assert parse_axis("depth=log:1:4:7").values == (
        1,
        2,
        3,
        4,
    )  # 1, 1.26, 1.59, 2, 2.52, 3.17, 4 rounded, repeats dropped
    assert parse_axis("sigma_w2=lin:0.5:3:6").values == (0.5, 1.0, 1.5, 2.0, 2.5, 3.0)
    assert parse_axis("width=64,256").values == (64, 256)
    assert parse_axis("init=normal,orthogonal").key == "weight_init"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("depth", "write KEY=VALUES"),
        ("dpeth=4", 'did you mean "depth"'),
        ("depth=log:2:1024", "write log:LO:HI:N"),
        ("depth=log:0:8:3", "0 < LO <= HI"),
        ("depth=lin:8:2:3", "LO <= HI"),
        ("depth=a,b", "is not a number"),
        ("depth=0,4", "at least 1"),
        ("sigma_w2=-1", "must be positive"),
        ("init_std=nan", "finite"),
    ],
)
def test_bad_axes_are_one_line_usage_errors(text: str, words: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_axis(text)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_grid_is_every_combination_and_refuses_repeats() -> None:
    axes = [parse_axis("depth=2,4"), parse_axis("width=8,16,32")]
    points = grid_points(axes)
    assert len(points) == 6 and points[0] == {"depth": 2, "width": 8} and points[-1] == {"depth": 4, "width": 32}
    assert point_key({"width": 8, "depth": 2}) == point_key({"depth": 2, "width": 8})
    with pytest.raises(UsageError, match="given twice"):
        grid_points([parse_axis("depth=2"), parse_axis("depth=4")])
    with pytest.raises(UsageError, match="sets weight_init and init_std itself"):
        grid_points([parse_axis("sigma_w2=1"), parse_axis("init_std=0.1")])


def test_sigma_w2_sets_a_normal_init_of_variance_sigma_w2_over_fan_in() -> None:
    spec = parse_spec(SPEC)
    s2, case = apply_point(spec, {"sigma_w2": 1.5, "width": 32, "depth": 100}, seed=3)
    assert case.weight_init == "normal" and case.width == 32 and case.depth == 100 and case.seed == 3
    assert math.isclose(s2.space.init_std**2 * 32, 1.5, rel_tol=1e-12)
    assert spec.space.init_std == 0.02  # the loaded spec is untouched


def test_block_keys_refuse_families_without_them() -> None:
    with pytest.raises(UsageError, match="applies to postnorm, preact"):
        apply_point(parse_spec(SPEC), {"branch_scale": 0.5}, seed=0)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("weight_init=bogus", "'bogus' is not one of default, kaiming_normal"),
        ("branch_init=zero,bogus", "'bogus' is not one of default, zero"),
        ("dtype=int8", "'int8' is not one of float32, float64"),
        ("init=orthogona", 'did you mean "orthogonal"'),
    ],
)
def test_a_choice_outside_the_spec_format_is_refused_before_anything_runs(text: str, words: str) -> None:
    # A bogus choice once ran as a point and showed a budget as if it had passed.
    with pytest.raises(UsageError, match=words):
        parse_axis(text)


def test_choices_the_format_knows_are_accepted() -> None:
    assert parse_axis("init=orthogonal,normal").values == ("orthogonal", "normal")
