"""The negative controls in specs/control_*.toml: each must be violated, and must fail if it
claimed to hold.

A control demonstrates one fact of docs/theory.md or docs/training.md by a case that breaks an
invariant (a plain sigmoid stack, a scaled or normalised route around, post-norm, a cancelling
branch, an ill-conditioned projection, a closed highway gate, unnormalised full-size branches, a
language model without qk-layernorm or z-loss). Each is run in the profile it is shipped for: "ci"
(derandomized, so the search and its verdict are the same on every run) unless its
`train.profiles` leaves ci out, and then the first profile it lists, under the `slow` marker (a
learning-rate grid takes minutes). With `expect = "violated"` the spec is met, and the same
document with every expectation flipped to "holds" is not — so a control that stopped breaking
its invariant, or a harness that stopped seeing it, fails here.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from stability import RunOptions, load_spec, run_spec
from stability.spec.load import validate_spec

CONTROLS = sorted((Path(__file__).resolve().parent.parent / "specs").glob("control_*.toml"))


def shipped_profile(path: Path) -> str:
    """ci, or the first profile of train.profiles when it leaves ci out."""
    spec = load_spec(path)
    return "ci" if spec.train is None or "ci" in spec.train.profiles else spec.train.profiles[0]


#: Each control with the profile it runs in; those outside ci are slow.
SHIPPED = [
    pytest.param(p, shipped_profile(p), id=p.stem, marks=() if shipped_profile(p) == "ci" else pytest.mark.slow)
    for p in CONTROLS
]


def _options(profile: str) -> RunOptions:
    """Outside ci a case runs for minutes (a learning-rate grid): its
    limit is the spec's own train.seconds, not --case-timeout's 120 s."""
    return RunOptions(profile=profile) if profile == "ci" else RunOptions(profile=profile, case_timeout=None)


def test_the_controls_are_there_and_some_run_outside_ci() -> None:
    assert len(CONTROLS) >= 8
    assert {shipped_profile(p) for p in CONTROLS} == {"ci", "thorough"}


@pytest.mark.parametrize(("path", "profile"), SHIPPED)
def test_control_is_violated_and_says_so(path: Path, profile: str) -> None:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# Negative control, fact ")  # which fact, and where it comes from
    spec = load_spec(path)
    assert spec.invariants() and all(e.expect == "violated" for _, e in spec.invariants())
    result = run_spec(spec, _options(profile))
    assert result.met, [r.message for r in result.results]
    assert all(r.verdict is not None and not r.verdict.passed and r.error is None for r in result.results)


@pytest.mark.parametrize(("path", "profile"), SHIPPED)
def test_control_flipped_to_holds_is_not_met(path: Path, profile: str) -> None:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    for table in data["expect"].values():
        table["expect"] = "holds"
    spec = validate_spec(data, file=str(path))
    result = run_spec(spec, _options(profile))
    assert not any(r.met for r in result.results), [r.message for r in result.results]
    assert all(r.error is None and r.verdict is not None for r in result.results)
