"""stability/run/suggest_candidates.py: the compositions `stability suggest` tries as candidates of
their own, each structural remedy with every initialisation that applies to the network it makes
(the route around with its branches at zero, scaled or gated: He et al. 2016; Zhang et al. 2019;
De & Smith 2020; Bachlechner et al. 2020), checked before anything runs as a single remedy is:
the loader, the expectations, what is drawn and judged (`judged_changes`). Nothing here runs a case.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stability.run.suggest_candidates import compositions, pairs, same_changes
from stability.spec.load import validate_spec
from stability.spec.remedy import REMEDIES, Remedy, register_remedy

PLAIN = """name = "plain"
description = "plain tanh MLP"
family = "plain"

[block]
activation = "tanh"   # my activation

[space]
depth = [1, 64]
width = 16
weight_init = ["normal"]
init_std = 0.2092
bias_init = 0.0

[expect.gradient_arrival]
lo = 0.1
hi = 10.0
"""

POSTNORM = """name = "resnet"
description = "post-norm residual MLP, no norm, two-layer ReLU branches"
family = "postnorm"

[block]
activation = "relu"

[space]
depth = [2, 12]
width = [8, 16]
weight_init = ["kaiming_normal"]

[expect.gradient_arrival]
"""


def _composed(text: str, failing: set[str] | None = None) -> dict[str, Any]:
    data = tomllib.loads(text)
    spec = validate_spec(data, file="spec.toml")
    got = compositions(list(REMEDIES), failing or {"gradient_arrival"}, spec, data, text, "spec.toml")
    return {a.remedy: (a, edited) for a, edited in got}


@pytest.fixture
def toys() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        REMEDIES.unregister(name)


def _register(names: list[str], **fields: Any) -> None:
    entry = {
        "summary": "a toy",
        "fixes": frozenset({"gradient_arrival"}),
        "references": ("A. Toy (2026).",),
        **fields,
    }
    register_remedy(Remedy(**entry))
    names.append(entry["name"])


def test_the_route_around_is_composed_with_every_initialisation_of_the_residual_stack_it_makes() -> None:
    """None of zero, 1/√depth, ReZero or SkipInit applies to a plain stack: it has no branch. The
    route around gives it one-layer branches, and each applies to that; each composition is the
    route's edit, then the initialisation's, in registry order. Fixup needs two layers per branch."""
    got = _composed(PLAIN)
    assert list(got) == [
        "residual_route+zero_branch",
        "residual_route+shrink_branch",
        "residual_route+rezero",
        "residual_route+skipinit",
        "residual_route+critical_init",
    ]
    attempt, edited = got["residual_route+zero_branch"]
    assert attempt.changed() == 'family = "preact", block.branch_layers = 1, space.branch_init = ["zero"]'
    assert edited.family == "preact" and edited.block.branch_layers == 1 and edited.space.branch_init == ["zero"]
    assert attempt.references == REMEDIES.get("residual_route").references + REMEDIES.get("zero_branch").references
    assert attempt.summary.startswith(REMEDIES.get("residual_route").summary + "; then ")
    assert '+branch_init = ["zero"]' in attempt.diff and 'activation = "tanh"   # my activation' in attempt.text
    assert got["residual_route+shrink_branch"][1].block.branch_scale == "1/sqrt(depth)"
    assert got["residual_route+critical_init"][1].space.weight_init == ["xavier_normal"]


def test_prenorm_is_composed_with_fixup_where_the_branch_is_fixups() -> None:
    """Post-norm to pre-activation, then Fixup's zero last layer and L^(-1/2) branch scale (two
    ReLU layers per branch, no norm), beside the other initialisations of the stack it makes."""
    got = _composed(POSTNORM)
    assert "prenorm+fixup" in got
    attempt, edited = got["prenorm+fixup"]
    assert [c.key for c in attempt.changes] == ["family", "space.branch_init", "block.branch_scale"]
    assert edited.family == "preact" and edited.space.branch_init == ["zero"]


def test_only_for_what_failed() -> None:
    """A structural remedy meant for none of the unmet invariants composes nothing, and an
    initialisation meant for none of them is not composed."""
    assert _composed(PLAIN, {"attention_logits"}) == {}
    assert set(_composed(POSTNORM, {"identity_at_init"})) == {
        "prenorm+zero_branch",
        "prenorm+rezero",
        "prenorm+skipinit",
        "prenorm+fixup",
    }  # prenorm is meant for identity_at_init; 1/√depth and the critical init are not


def test_a_composition_may_not_change_what_is_drawn_or_judged(toys: list[str]) -> None:
    """The guard of a single remedy applies to the composition as a whole: an initialisation that
    narrows the depth (here one that applies only to the residual stack the route makes, so it is
    asked about that stack, not the plain one) or touches an expectation is refused, naming why."""
    _register(
        toys,
        name="toy_shallow",
        applies=lambda spec, data: spec.family == "preact",
        edit=lambda spec, data: {"space.branch_init": ["zero"], "space.depth": [1, 8]},
        kind="init",
    )
    _register(
        toys,
        name="toy_bound",
        applies=lambda spec, data: spec.family == "preact",
        edit=lambda spec, data: {"expect.gradient_arrival.lo": 0.0},
        kind="init",
    )
    got = _composed(PLAIN)
    shallow, edited = got["residual_route+toy_shallow"]
    assert edited is None and shallow.status == "refused"
    assert shallow.detail.startswith("it changes space.depth: a remedy may not change which cases are drawn")
    bound, edited = got["residual_route+toy_bound"]
    assert edited is None and bound.status == "refused" and "may not change the expectations" in bound.detail


def test_a_plugins_structural_remedy_composes_and_a_failing_edit_composes_nothing(toys: list[str]) -> None:
    """Kinds come from the registry entry: a plugin's structural remedy is composed with the
    built-in initialisations; an initialisation whose edit raises on the new stack, a structural
    edit the loader refuses, and an "other" remedy compose nothing (the single attempts say why)."""

    def boom(spec: Any, data: Any) -> dict[str, Any]:
        raise RuntimeError("no")

    _register(
        toys,
        name="toy_route",
        applies=lambda spec, data: spec.family == "plain",
        edit=lambda spec, data: {"family": "preact"},
        kind="structure",
    )
    _register(toys, name="toy_boom", applies=lambda spec, data: spec.family == "preact", edit=boom, kind="init")
    _register(
        toys,
        name="toy_unloadable",
        applies=lambda spec, data: spec.family == "plain",
        edit=lambda spec, data: {"family": "preact", "block.branch_layers": 3},
        kind="structure",
    )
    _register(
        toys,
        name="toy_other",
        applies=lambda spec, data: True,
        edit=lambda spec, data: {"block.branch_layers": 1},
    )
    got = _composed(PLAIN)
    assert "toy_route+zero_branch" in got and got["toy_route+zero_branch"][1] is not None
    assert not [n for n in got if "toy_boom" in n or "toy_unloadable" in n or "toy_other" in n]


def test_a_pair_that_repeats_a_composition_is_the_same_changes() -> None:
    """`suggest` skips a pair whose changes a composition already made (the same keys, the same
    values, another name and order)."""
    data = tomllib.loads(PLAIN)
    edits = {
        "critical_init": (REMEDIES.get("critical_init"), {"space.weight_init": ["xavier_normal"]}),
        "residual_route": (REMEDIES.get("residual_route"), {"family": "preact", "block.branch_layers": 1}),
    }
    ((pair, _),) = pairs(edits, data, PLAIN, "spec.toml")
    composed = _composed(PLAIN)
    assert same_changes(pair, composed["residual_route+critical_init"][0])
    assert not same_changes(pair, composed["residual_route+zero_branch"][0])
    assert pair.remedy == "critical_init+residual_route"


def test_the_written_composition_loads_as_the_validated_one(tmp_path: Path) -> None:
    """What `--out` would write (the text edit) is the spec that was validated (the data edit)."""
    from stability.spec.load import load_spec

    for attempt, edited in _composed(PLAIN).values():
        path = tmp_path / "fixed.toml"
        path.write_text(attempt.text, encoding="utf-8")
        assert load_spec(path).model_dump(exclude={"path"}) == edited.model_dump(exclude={"path"}), attempt.remedy
