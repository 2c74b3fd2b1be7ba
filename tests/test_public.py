"""The public surface (stability/__init__.py, stability/extend.py, stability/_exports.py): each public
module's `__all__` names what it provides, each name is what the module that defines it defines,
and nothing a public name's signature or fields need is internal only (as Hypothesis checks its
exports). Which modules are public is `PUBLIC`; tests/test_docs_snippets.py holds the docs to it."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import subprocess
import sys
import types
import typing
from typing import Any

import pytest

import stability
import stability.extend
from stability._exports import check_exports, public_names

#: The modules a user or an extension author imports; every other module is internal.
PUBLIC = ("stability", "stability.extend", "stability.strategies", "stability.meanfield")
LAZY = (stability, stability.extend)


@pytest.mark.parametrize("module", LAZY, ids=lambda m: m.__name__)
def test_every_public_name_is_what_the_module_that_defines_it_defines(module: types.ModuleType) -> None:
    lazy: dict[str, str] = module._LAZY
    assert len(set(module.__all__)) == len(module.__all__)
    for name in module.__all__:
        value = getattr(module, name)
        where = lazy.get(name)
        if where == f"{module.__name__}.{name}":  # a public module of its own
            assert isinstance(value, types.ModuleType) and value.__name__ == where
        elif where is not None:
            assert value is getattr(importlib.import_module(where), name), name
            if inspect.isclass(value) or inspect.isfunction(value):
                assert (value.__name__, value.__module__) == (name, where), name
        else:  # defined eagerly in the public module (the errors)
            assert value is module.__dict__[name] and value.__module__.startswith("stability"), name
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        module.nothing_here  # noqa: B018
    assert set(module.__all__) <= set(dir(module))


#: Exported dataclasses built from their place in a list of values: a job is its spec and options.
POSITIONAL = {"Task"}


def test_every_public_dataclass_is_built_by_keyword() -> None:
    """A result, a case or an option set of the public modules is never built from a row of
    positional values (`Measurements([1.0], [1.0], [1.0], {}, None, None, None)`): each field is
    named where it is given, so a field added or moved cannot shift the others."""
    seen = set()
    for module in LAZY:
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) and dataclasses.is_dataclass(value) and name not in POSITIONAL:
                seen.add(name)
                positional = [f.name for f in dataclasses.fields(value) if f.init and not f.kw_only]
                assert not positional, (name, positional)
    assert {"Verdict", "Measurements", "Case", "RunOptions", "Outcome", "Network", "SpecResult"} <= seen


def test_the_two_modules_agree_where_they_share_a_name() -> None:
    shared = set(stability.__all__) & set(stability.extend.__all__)
    assert {"Spec", "Case", "Verdict", "Measurements", "SpecResult", "RunOptions"} <= shared
    assert all(getattr(stability, n) is getattr(stability.extend, n) for n in shared)


def _classes(hint: Any, out: set[type]) -> None:
    if inspect.isclass(hint) and hint.__module__.startswith("stability"):
        out.add(hint)
    for arg in typing.get_args(hint):
        _classes(arg, out)


def needed(value: Any) -> set[type]:
    """The package's classes that a public name's users meet: in a function's parameters and
    return, in a class's constructor, and in a dataclass's fields."""
    targets = [value.__init__, value] if inspect.isclass(value) else [value] if callable(value) else []
    found: set[type] = set()
    for target in targets:
        for hint in typing.get_type_hints(target).values():
            _classes(hint, found)
    if inspect.isclass(value) and dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            _classes(typing.get_type_hints(value)[f.name], found)
    return found - {value}


def test_nothing_a_public_name_needs_is_internal_only() -> None:
    """A result, an option or a hook's argument that only an internal module names would send an
    author to an internal import; each must be public in `stability` or `stability.extend`. (A
    spec's tables, `Spec.block` and the rest, are reached as attributes and documented in
    docs/specs.md; pydantic models are left out.)"""
    public = {id(getattr(m, n)) for m in LAZY for n in m.__all__}
    missing: dict[str, list[str]] = {}
    for module in LAZY:
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, types.ModuleType) or (inspect.isclass(value) and hasattr(value, "model_fields")):
                continue
            for cls in needed(value):
                if id(cls) not in public and not hasattr(cls, "model_fields") and not cls.__name__.startswith("_"):
                    missing.setdefault(f"{cls.__module__}.{cls.__name__}", []).append(f"{module.__name__}.{name}")
    assert missing == {}


def test_the_closure_check_finds_a_result_type_that_is_not_exported() -> None:
    from stability.families.build import Network

    assert {c.__name__ for c in needed(Network)} >= {"ModelRun", "TokenEmbedding"}
    assert {c.__name__ for c in needed(stability.run_spec)} >= {"Spec", "RunOptions", "SpecResult", "Case"}


def test_the_export_check_refuses_what_the_module_and_its_all_disagree_on() -> None:
    namespace = {"Here": object(), "extra": 1, "_private": 2, "sub": types.ModuleType("sub"), "annotations": None}
    namespace["annotations"] = __import__("__future__").annotations
    assert public_names(namespace) == {"Here", "extra"}
    check_exports("m", ["Here", "extra", "Lazy"], {"Lazy": "m.inner"}, namespace)
    with pytest.raises(RuntimeError, match=r"__all__ names \['Gone'\] with no definition"):
        check_exports("m", ["Here", "extra", "Gone"], {}, namespace)
    with pytest.raises(RuntimeError, match=r"\['Lazy', 'extra'\] are public but not in __all__"):
        check_exports("m", ["Here"], {"Lazy": "m.inner"}, namespace)
    with pytest.raises(RuntimeError, match=r"\['Here'\] twice"):
        check_exports("m", ["Here", "Here", "extra"], {}, namespace)


def test_importing_the_public_modules_registers_the_catalogues_and_imports_no_torch() -> None:
    """A fresh process that imports `stability` and `stability.extend` has every invariant and family
    registered (the counts this process sees) and has not imported torch."""
    from stability.spec.registry import FAMILIES, INVARIANTS

    code = (
        "import sys, stability, stability.extend\nfrom stability.spec.registry import FAMILIES\n"
        "print(len(stability.extend.INVARIANTS), len(FAMILIES), 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(len(INVARIANTS)), str(len(FAMILIES)), "False"]


def test_an_extension_registers_through_the_public_module_alone() -> None:
    """The extension points of docs/extending.md, from `stability.extend` only: an invariant judged
    on a probe's measurements, registered, listed, then removed."""
    from stability.extend import INVARIANTS, Expectation, Explanation, Invariant, Verdict, register_invariant

    class Small(Expectation):
        most: float = 1.0

    def judge(m: Any, e: Small) -> Verdict:
        top = m.act_sq_mean[-1]
        return Verdict(invariant="small_output", passed=top <= e.most, observed=top, bound="", block=None, detail="")

    entry = register_invariant(
        Invariant(
            name="small_output",
            expectation=Small,
            summary="the output's second moment stays small",
            label="E[y²]",
            judge=judge,
            explanation=Explanation(summary="small", computes="E[y²]", fails="-", fixes="-"),
        )
    )
    try:
        assert "small_output" in INVARIANTS.names() and INVARIANTS.get("small_output") is entry
        m = stability.Measurements(
            grad_norm=[1.0, 1.0],
            act_var=[1.0, 4.0],
            act_sq_mean=[1.0, 4.0],
            param_grad_norm={},
            identity_error=None,
            input_grad_error=None,
            nonfinite_at=None,
        )
        assert entry.judge is not None and entry.judge(m, Small(most=2.0)).passed is False
    finally:
        INVARIANTS.unregister("small_output")
    assert "small_output" not in INVARIANTS.names()
