"""The loader on valid input: shipped specs, defaults, ranges, and family rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from shipped_support import require_shipped_libraries
from spec_support import SPECS

from stability import SpecError, load_spec, parse_spec
from stability.spec.load import find_specs
from stability.spec.registry import FAMILIES

MINIMAL = """
name = "m"
description = "minimal"
family = "{family}"
{block}
[space]
depth = {depth}
width = 8
[expect.gradient_arrival]
"""


def test_every_shipped_spec_loads_and_every_family_is_shipped() -> None:
    require_shipped_libraries()
    specs = [load_spec(p) for p in find_specs([SPECS])]
    assert {s.family for s in specs} == set(FAMILIES.names())
    for family in set(FAMILIES.names()) - {"custom"}:
        layers = {s.block.layer for s in specs if s.family == family}
        expected = (
            {"tokens"}
            if family == "transformer"
            else {"tokens", "conv2d"}
            if family == "library"
            else {"linear", "conv2d"}
        )
        assert layers == expected, family
    assert len({s.name for s in specs}) == len(specs)
    assert any(e.expect == "violated" for s in specs for _, e in s.invariants())


@given(lo=st.integers(1, 10**6), span=st.integers(0, 10**6))
def test_ranges_are_inclusive_pairs(lo: int, span: int) -> None:
    spec = parse_spec(MINIMAL.format(family="plain", block="", depth=f"[{lo}, {lo + span}]"))
    assert spec.space.depth == (lo, lo + span)


def test_a_single_value_is_a_range_of_one() -> None:
    assert parse_spec(MINIMAL.format(family="plain", block="", depth=7)).space.depth == (7, 7)


def test_defaults() -> None:
    spec = parse_spec(MINIMAL.format(family="preact", block="", depth=3))
    assert spec.block.layer == "linear" and spec.block.skip == "identity" and spec.block.norm == "none"
    assert spec.space.weight_init == ["default"] and spec.space.dtype == ["float32"]
    ga = spec.expect.gradient_arrival
    assert ga is not None and (ga.expect, ga.lo, ga.hi) == ("holds", 0.1, 10.0)
    assert [n for n, _ in spec.invariants()] == ["gradient_arrival"]


@pytest.mark.parametrize(
    ("family", "block", "key"),
    [
        ("plain", "[block]\ngate_bias = 1.0", "block.gate_bias"),
        ("preact", "[block]\ngrowth = 4", "block.growth"),
        ("highway", '[block]\nskip = "projection"', "block.skip"),
        ("dense", "[block]\nbranch_layers = 1", "block.branch_layers"),
        ("custom", '[block]\nfactory = "m:f"\nnorm = "layer"', "block.norm"),
        ("preact", '[block]\nfactory = "m:f"', "block.factory"),
    ],
)
def test_options_that_make_no_sense_for_the_family_are_refused(family: str, block: str, key: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec(MINIMAL.format(family=family, block=block, depth=3), file="x.toml")
    assert f"x.toml: {key}" in str(err.value) and f"makes no sense for family '{family}'" in str(err.value)


def test_identity_at_init_needs_a_zero_branch_in_the_space() -> None:
    text = MINIMAL.format(family="preact", block="", depth=3) + "[expect.identity_at_init]\n"
    with pytest.raises(SpecError, match="space.branch_init"):
        parse_spec(text)
    assert (
        parse_spec(text.replace("width = 8", 'width = 8\nbranch_init = ["zero"]')).expect.identity_at_init is not None
    )
