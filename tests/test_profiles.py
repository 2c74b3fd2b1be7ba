"""Profiles: the example database is keyed per (spec, invariant, device) through Hypothesis's
public `ExampleDatabase` interface, never through its private function-digest attribute."""

from __future__ import annotations

import inspect

import pytest
from hypothesis import settings
from hypothesis.database import InMemoryExampleDatabase

import stability.run.engine
from stability import RunOptions, parse_spec, run_spec
from stability.run import profiles as prof
from stability.run.profiles import KeyedDatabase, keyed

CLAIM = """
name = "{name}"
description = "claims a positive gate bias keeps the gradient arriving (it does not)"
family = "highway"
[block]
layer = "linear"
activation = "relu"
gate_bias = 2.0
[space]
depth = [1, 8]
width = [4, 8]
batch = [2, 4]
branch_init = ["zero"]
[expect.gradient_arrival]
lo = 0.01
hi = 100.0
"""


def test_keyed_database_files_every_operation_under_its_prefix() -> None:
    inner = InMemoryExampleDatabase()
    a, b = KeyedDatabase(inner, b"a::"), KeyedDatabase(inner, b"b::")
    a.save(b"k", b"1")
    b.save(b"k", b"2")
    assert set(a.fetch(b"k")) == {b"1"} and set(b.fetch(b"k")) == {b"2"}
    a.move(b"k", b"k2", b"1")
    assert set(a.fetch(b"k")) == set() and set(a.fetch(b"k2")) == {b"1"} and set(b.fetch(b"k")) == {b"2"}
    b.delete(b"k", b"2")
    assert set(inner.fetch(b"b::k")) == set() and set(inner.fetch(b"a::k2")) == {b"1"}


def test_a_key_holding_a_path_that_is_not_utf8_is_its_bytes() -> None:
    """A spec path with a byte that does not decode (a surrogate escape to Python) keys the database
    by the file system's bytes, and a UTF-8 path keys it as before."""
    inner = InMemoryExampleDatabase()
    odd = keyed(settings(database=inner), "given_spec::specs/\udcff.toml").database
    odd.save(b"k", b"1")  # type: ignore[union-attr]
    assert set(inner.fetch(b"given_spec::specs/\xff.toml::k")) == {b"1"}
    plain = keyed(settings(database=inner), "given_spec::specs/é.toml").database
    plain.save(b"k", b"2")  # type: ignore[union-attr]
    assert set(inner.fetch("given_spec::specs/é.toml::k".encode())) == {b"2"}


def test_keyed_keeps_a_profile_without_a_database_as_it_is() -> None:
    ci = prof.PROFILES["ci"]
    assert keyed(ci, "x") is ci


def test_each_spec_and_invariant_gets_its_own_database_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    inner = InMemoryExampleDatabase()
    monkeypatch.setitem(prof.PROFILES, "dev", settings(prof.PROFILES["dev"], database=inner, max_examples=5))
    for name in ("claim-one", "claim-two"):
        spec = parse_spec(CLAIM.format(name=name), file=f"specs/{name}.toml")
        assert not run_spec(spec, RunOptions(profile="dev")).met  # a failure: Hypothesis saves it
    prefixes = {key.split(b"::gradient_arrival::cpu::")[0] for key in inner.data if b"::gradient_arrival::cpu::" in key}
    assert prefixes == {b"specs/claim-one.toml", b"specs/claim-two.toml"}, list(inner.data)


def test_the_engine_uses_no_private_hypothesis_attribute() -> None:
    assert "_hypothesis_internal" not in inspect.getsource(stability.run.engine)


@pytest.mark.parametrize("ci_vars", [{}, {"CI": "true"}, {"GITHUB_ACTIONS": "true"}])
def test_a_ci_variable_changes_no_profile(ci_vars: dict[str, str]) -> None:
    # With a CI variable Hypothesis loads its own `ci` profile (derandomized, no database) at import;
    # dev and thorough must stay random with their database all the same, so a fresh interpreter.
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("CI", "GITHUB_ACTIONS")} | ci_vars
    code = (
        "from stability.run.profiles import PROFILES as P; print([(k, p.derandomize, p.database is None, "
        "p.max_examples) for k, p in P.items()])"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == str([("ci", True, True, 10), ("dev", False, False, 25), ("thorough", False, False, 300)])


PLAIN = (
    'name = "p"\ndescription = "d"\nfamily = "plain"\n[space]\ndepth = [1, 3]\nwidth = 4\nbatch = '
    "2\n[probe]\nprofiles = {profiles}\n[expect.gradient_arrival]\nlo = 1e-9\nhi = "
    "1e9\n"
)


def test_probe_profiles_skip_a_specs_probe_invariants_outside_them_and_a_case_still_replays() -> None:
    spec = parse_spec(PLAIN.format(profiles='["thorough"]'))
    result = run_spec(spec, RunOptions(profile="ci"))
    (r,) = result.results
    assert r.skipped and r.met and r.examples == 0 and not result.cases
    assert (
        r.message == "<string>::gradient_arrival: skipped in profile ci (probe.profiles = thorough); run it with "
        "--profile thorough"
    )
    (replayed,) = run_spec(spec, RunOptions(profile="ci"), case="depth=2").results
    assert not replayed.skipped and replayed.met and replayed.verdict is not None
    (searched,) = run_spec(parse_spec(PLAIN.format(profiles='["ci", "thorough"]')), RunOptions(profile="ci")).results
    assert not searched.skipped and searched.examples > 0
