"""The engine: Hypothesis finds, shrinks and replays failing cases; negative controls."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from stability import RunOptions, parse_spec, run_spec
from stability.spec.case import parse_case_string

HIGHWAY_CLAIM = """
name = "highway-open-claim"
description = "claims a positive gate bias keeps the gradient arriving (it does not)"
family = "highway"
[block]
layer = "linear"
activation = "relu"
gate_bias = 2.0
[space]
depth = [1, 40]
width = [4, 16]
batch = [2, 8]
branch_init = ["zero"]
[expect.gradient_arrival]
expect = "{expect}"
lo = 0.01
hi = 100.0
"""


def highway(expect: str) -> object:
    return parse_spec(HIGHWAY_CLAIM.format(expect=expect), file="specs/highway_claim.toml")


def test_a_false_claim_fails_at_the_smallest_depth_that_breaks_it() -> None:
    # Zero branch: per-block factor 1 − σ(2) = 0.1192; the ratio drops below 0.01 once
    # 0.1192^L < 0.01, i.e. from L = ceil(ln 0.01 / ln 0.1192) = 3.
    result = run_spec(highway("holds"), RunOptions(profile="ci")).results[0]
    assert not result.met
    smallest = math.ceil(math.log(0.01) / math.log(1 - 1 / (1 + math.exp(-2.0))))
    assert result.case is not None and result.case.depth == smallest
    assert result.case.width == 4 and result.case.batch == 2  # shrunk to the bottom of the space
    assert "smallest failing case" in result.message and "gradient ratio" in result.message
    assert result.reproduce is not None and "--case" in result.reproduce
    # The printed case replays the same numbers.
    replay = run_spec(highway("holds"), RunOptions(profile="ci"), case=str(result.case)).results[0]
    assert replay.verdict is not None and result.verdict is not None
    assert replay.verdict.observed == result.verdict.observed
    assert replay.verdict.observed == pytest.approx((1 - 1 / (1 + math.exp(-2.0))) ** smallest, rel=1e-5, abs=0)


def test_the_same_profile_finds_the_same_minimal_case_twice() -> None:
    a = run_spec(highway("holds"), RunOptions(profile="ci")).results[0]
    b = run_spec(highway("holds"), RunOptions(profile="ci")).results[0]
    assert a.case == b.case and a.verdict == b.verdict


def test_a_negative_control_is_met_when_violated_and_reports_the_smallest_case() -> None:
    result = run_spec(highway("violated"), RunOptions(profile="ci")).results[0]
    assert result.met and result.case is not None and result.case.depth == 3
    assert "violated as expected at smallest violating case" in result.message


def test_an_expected_violation_that_never_happens_fails_like_a_strict_xfail() -> None:
    text = (
        HIGHWAY_CLAIM.format(expect="violated")
        .replace("gate_bias = 2.0", "gate_bias = -4.0")
        .replace("[1, 40]", "[1, 8]")
    )
    result = run_spec(parse_spec(text), RunOptions(profile="ci")).results[0]
    assert not result.met and "no case among" in result.message


def test_measurements_of_one_case_are_bit_identical_across_runs() -> None:
    spec = parse_spec(
        HIGHWAY_CLAIM.format(expect="holds").replace('branch_init = ["zero"]', 'weight_init = ["kaiming_normal"]')
    )
    case = parse_case_string("depth=17,width=9,batch=5,seed=123", spec)
    a = run_spec(spec, RunOptions(profile="ci"), case=case).cases[case].measurements
    b = run_spec(spec, RunOptions(profile="ci"), case=case).cases[case].measurements
    assert a is not None and b is not None
    assert a.grad_norm == b.grad_norm and a.act_var == b.act_var and a.param_grad_norm == b.param_grad_norm


def test_pinned_examples_run_first_and_their_depth_is_bisected() -> None:
    # The pinned case fails before any generated one; its depth is then bisected to the smallest
    # failing depth (3, see above) with the pinned values (width 7) kept.
    text = HIGHWAY_CLAIM.format(expect="holds").replace(
        'branch_init = ["zero"]', 'branch_init = ["zero"]\nexamples = ["depth=30,width=7"]'
    )
    result = run_spec(parse_spec(text), RunOptions(profile="ci")).results[0]
    assert not result.met and result.case is not None and (result.case.depth, result.case.width) == (3, 7)


def test_every_search_covers_the_deepest_allowed_depth() -> None:
    spec = parse_spec(
        HIGHWAY_CLAIM.format(expect="holds")
        .replace("gate_bias = 2.0", "gate_bias = -4.0")
        .replace("lo = 0.01", "lo = 1e-30")
    )
    res = run_spec(spec, RunOptions(profile="ci"))
    assert res.results[0].met
    assert max(c.depth for c in res.cases) == 40


ODD_WIDTH_FACTORY = """
from torch import nn


def even_only(depth, width):
    assert width % 2 == 0, "width must be even"  # a library block's own check, like a head count
    return nn.Sequential(*[nn.Identity() for _ in range(depth)])
"""


def test_a_factory_that_refuses_some_cases_fails_those_cases_and_the_other_specs_still_run(tmp_path, cli) -> None:
    (tmp_path / "engine_odd_width.py").write_text(ODD_WIDTH_FACTORY, encoding="utf-8")
    spec = (
        'name = "{name}"\ndescription = "d"\nfamily = "custom"\n[block]\nfactory = "engine_odd_width:even_only"\n'
        "[space]\ndepth = [1, 4]\nwidth = {width}\nbatch = 2\n[expect.gradient_arrival]\nlo = 0.5\nhi = 2.0\n"
    )
    mixed, even = tmp_path / "a_mixed.toml", tmp_path / "b_even.toml"
    mixed.write_text(spec.format(name="mixed", width="[2, 9]"), encoding="utf-8")
    even.write_text(spec.format(name="even", width="[2, 2]"), encoding="utf-8")
    code, out, err = cli("check", mixed, even, "--profile", "ci")
    assert code == 1 and not err, err
    text = " ".join(out.split())
    assert (
        f"{mixed}::gradient_arrival: the case could not be measured at depth=1,width=3," in text
    )  # shrunk to the smallest odd width
    assert "error: the factory engine_odd_width:even_only raised AssertionError: width must be even" in text
    assert f"reproduce: stability check {mixed} --case depth=1,width=3," in text
    assert "│ even │ gradient_arrival │ holds │ ✓ │" in text
    assert "2 spec(s), 2 expectation(s): 1 met, 1 not met" in text


def test_the_readme_example_fails_as_the_readme_shows(cli: Any) -> None:
    """docs/examples/highway_claim.toml is the README's failing example: exit 1, the same shrunk
    case and ratio as the output printed there."""
    root = Path(__file__).resolve().parent.parent
    code, out, _ = cli("check", root / "docs" / "examples" / "highway_claim.toml", "--profile", "ci")
    readme = (root / "README.md").read_text(encoding="utf-8")
    assert code == 1
    assert (
        "depth=3,width=4,batch=2,init=default,branch_init=zero,dtype=float32,device=cpu,seed=0: gradient "
        "ratio 0.00169 < 0.01" in out
    )
    assert (
        "depth=3,width=4,batch=2,init=default,branch_init=zero,dtype=float32,device=cpu,seed=0: gradient "
        "ratio 0.00169 < 0.01" in readme
    )


def test_a_seed_repeats_a_random_search_and_another_seed_draws_other_cases(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`stability check --seed N` (RunOptions.seed): the dev and thorough searches are random;
    with a seed they draw the same cases again, so a failing nightly run can be repeated."""
    monkeypatch.chdir(tmp_path)  # the dev profile's example database lives in ./.hypothesis
    spec = parse_spec(
        HIGHWAY_CLAIM.format(expect="holds").replace("lo = 0.01", "lo = 1e-300").replace("[1, 40]", "[1, 4]")
    )

    def drawn(seed: int) -> list[Any]:
        seen: list[Any] = []
        result = run_spec(spec, RunOptions(profile="dev", seed=seed), on_case=lambda record: seen.append(record.case))
        assert result.results[0].met
        return seen

    first = drawn(1)
    assert len(first) > 5
    assert drawn(1) == first
    assert drawn(2) != first
