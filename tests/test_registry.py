"""The registries (stability/spec/registry.py): duplicates and incomplete entries are refused when
registered, unknown names get the closest ones, every built-in entry is complete, each rule
that used to be written in several modules is written in one, and a registration (or a batch of
them) whose spec-model rebuild fails leaves nothing half registered."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

import stability
from stability.errors import SpecError
from stability.spec import registry, schema
from stability.spec.json_schema import spec_schema
from stability.spec.load import parse_spec
from stability.spec.registry import (
    FAMILIES,
    INVARIANTS,
    Explanation,
    Family,
    Invariant,
    RegistryError,
    batch,
    register_family,
    register_invariant,
)
from stability.spec.schema import Expectation, Spec

PACKAGE = Path(stability.__file__).parent

_EXPLAINED = Explanation(summary="s", computes="c", fails="f", fixes="x")


class Tiny(Expectation):
    limit: float = Field(1.0, gt=0.0)


def _tiny(**changes: object) -> Invariant:
    fields = {
        "name": "tiny_check",
        "expectation": Tiny,
        "summary": "a tiny check",
        "label": "a number",
        "explanation": _EXPLAINED,
        "judge": lambda m, e: None,
    }
    return Invariant(**{**fields, **changes})  # type: ignore[arg-type]


@pytest.fixture
def registered() -> Iterator[list[str]]:
    """Names registered by a test, unregistered afterwards (the spec models are rebuilt both times)."""
    names: list[str] = []
    yield names
    for name in names:
        (INVARIANTS if name in INVARIANTS else FAMILIES).unregister(name)


def test_a_second_entry_under_a_registered_name_is_refused_and_names_the_first() -> None:
    with pytest.raises(
        RegistryError,
        match=r"invariant 'gradient_arrival' is already registered \(by stability\.judge\.catalog\); choose "
        r"another name",
    ):
        register_invariant(_tiny(name="gradient_arrival"))
    assert INVARIANTS.get("gradient_arrival").expectation.__name__ == "GradientArrival"
    family = FAMILIES.get("plain")
    with pytest.raises(RegistryError, match="family 'plain' is already registered"):
        register_family(dataclasses.replace(family))


@pytest.mark.parametrize(
    ("changes", "missing"),
    [
        ({"judge": None}, "a probe invariant needs judge"),
        ({"phase": "training", "judge": None}, "a training invariant needs train"),
        ({"name": "two words"}, "is not an identifier"),
        ({"expectation": dict}, "must be a pydantic model class"),
        ({"applies": lambda spec: {"branch_init": ["zero"]}}, "needs applies_reason"),
        ({"label": " "}, "label is empty"),
        ({"explanation": "text"}, "must be a stability.spec.registry.Explanation"),
    ],
)
def test_an_incomplete_invariant_fails_when_it_is_registered_naming_what_is_missing(
    changes: dict[str, object], missing: str
) -> None:
    with pytest.raises(RegistryError, match=re.escape(missing)):
        _tiny(**changes)
    assert "tiny_check" not in INVARIANTS


def test_an_expectation_not_derived_from_the_base_names_the_fix() -> None:
    from pydantic import BaseModel

    class Bare(BaseModel):
        limit: float = 1.0

    with pytest.raises(
        RegistryError, match="lacks the field 'expect': derive it from stability.spec.schema.Expectation"
    ):
        _tiny(expectation=Bare)


def test_an_incomplete_family_fails_when_it_is_registered() -> None:
    base = dict(
        name="tiny_family",
        description="d",
        build=lambda s, c, g: None,
        block_keys=frozenset(),
        layers=("linear",),
        estimate=lambda s, c: None,
        block_bytes=1,
    )
    for changes, missing in (
        ({"layers": ()}, "layers is empty"),
        ({"block_bytes": 0}, "block_bytes must be positive"),
        ({"description": ""}, "description is empty"),
    ):
        with pytest.raises(RegistryError, match=re.escape(missing)):
            Family(**{**base, **changes})  # type: ignore[arg-type]


def test_an_unknown_name_gets_the_closest_and_never_another_entrys_behaviour() -> None:
    with pytest.raises(
        RegistryError, match=r"unknown invariant 'gradient_arival' \(did you mean \"gradient_arrival\"\?\)"
    ):
        INVARIANTS.get("gradient_arival")
    with pytest.raises(RegistryError, match=r"unknown family 'preactt' \(did you mean \"preact\"\?\)"):
        FAMILIES.get("preactt")
    from stability.run.conclude import judge

    with pytest.raises(RegistryError):
        judge(
            parse_spec(_TINY_SPEC.replace("[expect.tiny_check]\nlimit = 2.0", "[expect.gradient_arrival]")),
            "identity_error",
            None,
        )  # type: ignore[arg-type]


_TINY_SPEC = (
    'name = "t"\ndescription = "d"\nfamily = "plain"\n[space]\ndepth = [1, 4]\nwidth = '
    "4\n[expect.tiny_check]\nlimit = 2.0\n"
)


def test_registering_an_invariant_makes_specs_accept_it_and_unregistering_refuses_it_again(
    registered: list[str],
) -> None:
    with pytest.raises(SpecError, match="expect.tiny_check = .*unknown key"):
        parse_spec(_TINY_SPEC)
    register_invariant(_tiny())
    registered.append("tiny_check")
    spec = parse_spec(_TINY_SPEC)
    assert [n for n, _ in spec.invariants()] == ["tiny_check"] and spec.expect.tiny_check.limit == 2.0
    assert "tiny_check" in spec_schema()["$defs"]["Expect"]["properties"]
    with pytest.raises(SpecError, match=r"expect.tiny_check.limit = -1.0: .*greater than 0"):
        parse_spec(_TINY_SPEC.replace("limit = 2.0", "limit = -1.0"))


def test_every_built_in_entry_is_complete_and_in_the_catalogue_order() -> None:
    assert INVARIANTS.names()[:3] == ("gradient_arrival", "variance_growth", "identity_at_init")
    assert set(FAMILIES.names()) >= {"plain", "postnorm", "preact", "highway", "dense", "custom", "transformer"}
    for entry in INVARIANTS:
        assert entry.explanation.summary and entry.explanation.computes_text() and entry.explanation.references, (
            entry.name
        )
        assert (entry.judge is not None) != entry.training, entry.name
        assert entry.training == (entry.sweep_refusal is not None), entry.name  # a sweep measures every probe invariant
    assert sorted(Spec.model_fields["expect"].annotation.model_fields) == sorted(INVARIANTS.names())  # type: ignore[union-attr]


# ----------------------------------------------------------------------------- one rule, one place


@functools.cache
def _code() -> tuple[tuple[str, int, str], ...]:
    """Every line of the package's code as (module, line, its tokens joined), its strings and
    comments left out (tokenize), so a docstring or a message that names a rule does not count;
    tokenized once for every pattern."""
    import io
    import tokenize

    lines = []
    for path in sorted(PACKAGE.rglob("*.py")):
        code: dict[int, list[str]] = {}
        for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if tok.type == tokenize.COMMENT or (tok.type == tokenize.STRING and len(tok.string) > 16):
                continue  # comments, docstrings and messages; short literals ("auto", "plain") are code
            code.setdefault(tok.start[0], []).append(tok.string)
        lines += [(str(path.relative_to(PACKAGE)), i, " ".join(toks)) for i, toks in sorted(code.items())]
    return tuple(lines)


def _code_lines(pattern: str) -> list[str]:
    """`module:line` of every line of the package's code matching `pattern` (`_code`)."""
    rx = re.compile(pattern)
    return [f"{module}:{i}" for module, i, text in _code() if rx.search(text)]


def test_each_rule_is_written_in_one_place() -> None:
    # identity_at_init applies to the zero-branch inits: the set once, used by the family entries only
    assert {p.split(":")[0] for p in _code_lines(r"ZERO_BRANCH_INITS")} == {"families/catalog.py", "spec/values.py"}
    # the Kaiming gains: one table
    assert [p.split(":")[0] for p in _code_lines(r"5\.0 / 3\.0|25\.0 / 9\.0")] == ["families/gains.py"]
    # the default spatial size and token count of 8: one constant
    assert [p.split(":")[0] for p in _code_lines(r"DEFAULT_SIZE\s*=")] == ["spec/values.py"]
    assert _code_lines(r"or \( 8 , 8 \)|or 8\b|else 8\b") == []
    # device resolution (cpu / cuda / auto / all): one module
    assert {p.split(":")[0] for p in _code_lines(r'(device|choice) (==|in|not in) \(? ?(None , )?"(auto|all)"')} == {
        "run/devices.py"
    }
    # no module but the catalogues names a built-in family or invariant to decide what to do (the
    # remedies' catalogue maps each remedy onto the keys of the families it applies to)
    deciding = _code_lines(r'family (==|!=|in|not in) \(? ?"') + _code_lines(
        r'name (==|!=) "(gradient_arrival|identity_at_init|mean_field|lesion|variance_growth)"'
    )
    assert [p for p in deciding if not p.startswith(("families/", "judge/catalog", "judge/remedies"))] == []
    # a user's file (a factory's module, a plugin) is imported by path in one routine
    assert [p.split(":")[0] for p in _code_lines(r"spec_from_file_location|exec_module")] == ["families/factory.py"] * 2


def test_a_spec_loaded_before_the_registry_changed_still_pickles_for_its_worker(registered: list[str]) -> None:
    """A spec keeps the `Expect` of its time; a rebuilt one must not make it unpicklable (a worker
    reads it with the `Expect` of its own registry)."""
    import pickle

    spec = parse_spec(_TINY_SPEC.replace("[expect.tiny_check]\nlimit = 2.0", "[expect.gradient_arrival]\nlo = 0.25"))
    register_invariant(_tiny())
    registered.append("tiny_check")
    copy = pickle.loads(pickle.dumps(spec))
    assert copy.expect.gradient_arrival == spec.expect.gradient_arrival and copy.expect.tiny_check is None
    INVARIANTS.unregister("tiny_check")
    registered.clear()
    assert pickle.loads(pickle.dumps(spec)).expect.gradient_arrival.lo == 0.25


# ----------------------------------------------------------------------------- a registration whose rebuild fails


class Toy(schema.Expectation):
    limit: float = 1.0


def _toy(name: str) -> Invariant:
    return Invariant(
        name=name,
        expectation=Toy,
        summary="a toy",
        label="a number",
        explanation=Explanation(summary="s", computes="c", fails="f", fixes="x"),
        judge=lambda m, e: None,
    )


@pytest.fixture
def failing_rebuild(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """schema.rebuild fails while an invariant whose name starts with `toy_broken` is registered."""
    real = schema.rebuild

    def rebuild(invariants: Iterable[Any], families: Iterable[Any]) -> None:
        entries = list(invariants)
        if any(e.name.startswith("toy_broken") for e in entries):
            raise RuntimeError("the spec models cannot be rebuilt")
        real(entries, families)

    monkeypatch.setattr(schema, "rebuild", rebuild)
    yield
    for name in [n for n in INVARIANTS.names() if n.startswith("toy_")]:
        INVARIANTS.unregister(name)


SPEC = (
    'name = "t"\ndescription = "d"\nfamily = "plain"\n[space]\ndepth = [1, 4]\nwidth = '
    "4\n[expect.{name}]\nlimit = 2.0\n"
)


def _whole_or_absent(name: str) -> None:
    assert name not in INVARIANTS
    assert name not in schema.Spec.model_fields["expect"].annotation.model_fields  # type: ignore[union-attr]
    with pytest.raises(SpecError, match="unknown key"):
        parse_spec(SPEC.format(name=name))
    assert sorted(schema.Spec.model_fields["expect"].annotation.model_fields) == sorted(INVARIANTS.names())  # type: ignore[union-attr]


def test_a_registration_whose_rebuild_fails_is_not_left_half_registered(failing_rebuild: None) -> None:
    with pytest.raises(RuntimeError, match="cannot be rebuilt"):
        register_invariant(_toy("toy_broken"))
    _whole_or_absent("toy_broken")


def test_a_batch_whose_rebuild_fails_registers_none_of_its_entries(failing_rebuild: None) -> None:
    before = (INVARIANTS.names(), FAMILIES.names())
    with pytest.raises(RuntimeError, match="cannot be rebuilt"), batch():
        register_invariant(_toy("toy_fine"))
        register_invariant(_toy("toy_broken_too"))
    _whole_or_absent("toy_broken_too")
    _whole_or_absent("toy_fine")
    assert (INVARIANTS.names(), FAMILIES.names()) == before
    with batch():  # the registry still works
        register_invariant(_toy("toy_fine"))
    assert "toy_fine" in INVARIANTS and parse_spec(SPEC.format(name="toy_fine")).expect.toy_fine.limit == 2.0
    assert registry._deferred == [0]
