"""The negative controls in specs/control_*.toml: each must be violated, and must fail if it
claimed to hold.

A control demonstrates one fact of docs/theory.md by a case that breaks an invariant (a plain
sigmoid stack, a scaled or normalised route around, post-norm, a cancelling branch, an
ill-conditioned projection, a closed highway gate, unnormalised full-size branches). Run with the
"ci" profile (derandomized, so the search and its verdict are the same on every run): with
`expect = "violated"` the spec is met, and the same document with every expectation flipped to
"holds" is not — so a control that stopped breaking its invariant, or a harness that stopped
seeing it, fails here.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from stability import RunOptions, load_spec, run_spec
from stability.spec.load import validate_spec

CONTROLS = sorted((Path(__file__).resolve().parent.parent / "specs").glob("control_*.toml"))


def test_the_controls_are_there() -> None:
    assert len(CONTROLS) >= 8


@pytest.mark.parametrize("path", CONTROLS, ids=[p.stem for p in CONTROLS])
def test_control_is_violated_and_says_so(path: Path) -> None:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# Negative control, fact ")  # which fact, and where it comes from
    spec = load_spec(path)
    assert spec.invariants() and all(e.expect == "violated" for _, e in spec.invariants())
    result = run_spec(spec, RunOptions(profile="ci"))
    assert result.met, [r.message for r in result.results]
    assert all(r.verdict is not None and not r.verdict.passed and r.error is None for r in result.results)


@pytest.mark.parametrize("path", CONTROLS, ids=[p.stem for p in CONTROLS])
def test_control_flipped_to_holds_is_not_met(path: Path) -> None:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    for table in data["expect"].values():
        table["expect"] = "holds"
    spec = validate_spec(data, file=str(path))
    result = run_spec(spec, RunOptions(profile="ci"))
    assert not any(r.met for r in result.results), [r.message for r in result.results]
    assert all(r.error is None for r in result.results)
