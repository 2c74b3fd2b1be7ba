"""`Measurements.to_dict` / `from_dict` (stability/measure/measurements.py): one serialisation for
every process boundary and file, round-tripped for every field, `extra` included."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from spec_support import SPECS, make_measurements

from stability.measure.measurements import SERIALIZABLE, Measurements, decode, encode, serializable
from stability.run.engine import evaluate
from stability.spec.case import corner_case
from stability.spec.load import load_spec


def _same(a: object, b: object) -> bool:
    """Equal, with NaN equal to NaN, and of the same types all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or a == b  # type: ignore[arg-type]
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[arg-type]
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)  # type: ignore[attr-defined,index]
    if dataclasses.is_dataclass(a):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    return a == b


def _probe_specs() -> list[Path]:
    return sorted(p for p in SPECS.glob("*.toml") if load_spec(p).train is None)


@pytest.mark.parametrize("path", _probe_specs(), ids=lambda p: p.stem)
def test_every_shipped_specs_measurements_round_trip_exactly(path: Path) -> None:
    """Every field, `extra` (ensembles, channel profiles, Jacobian spectra, mean-field
    predictions, observers' results) and the parameter-gradient norms included, through a dict
    and through JSON text, bit for bit."""
    spec = load_spec(path)
    case = corner_case(spec, depth=min(max(spec.space.depth[0], 3), spec.space.depth[1]))
    record = evaluate(spec, case)
    m = record.measurements
    assert m is not None, record.error
    for copy in (Measurements.from_dict(m.to_dict()), Measurements.from_json(m.to_json())):
        for f in dataclasses.fields(Measurements):
            assert _same(getattr(copy, f.name), getattr(m, f.name)), f.name
    assert json.loads(m.to_json()) == json.loads(Measurements.from_json(m.to_json()).to_json())


def test_non_finite_numbers_and_tuples_keep_their_values_and_types() -> None:
    m = Measurements(
        grad_norm=[math.inf, 1.0],
        act_var=[math.nan, 2.0],
        act_sq_mean=[1.0, -math.inf],
        param_grad_norm={"0.w": math.nan},
        identity_error=None,
        input_grad_error=0.5,
        nonfinite_at=1,
        nonfinite_kind="gradient",
        channels=[3, 3],
        extra={"pairs": [(1.0, math.nan)], "n": 2},
    )
    back = Measurements.from_json(m.to_json())
    assert _same(back, m)
    assert isinstance(back.extra["pairs"][0], tuple)


def test_only_registered_classes_are_rebuilt() -> None:
    @dataclasses.dataclass(frozen=True)
    class NotRegistered:
        x: float

    with pytest.raises(TypeError, match="register it"):
        encode({"v": NotRegistered(1.0)})
    with pytest.raises(ValueError, match="unknown value type 'os.system'"):
        decode({"__type__": "os.system", "command": "true"})


def test_a_second_class_under_a_registered_name_is_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class Ensemble:  # the name of stability.measure.ensemble.Ensemble
        x: float

    with pytest.raises(ValueError, match="already registered"):
        serializable(Ensemble)
    assert SERIALIZABLE["Ensemble"].__module__ == "stability.measure.ensemble"


def test_an_unknown_field_is_refused() -> None:
    data = make_measurements(grad_norm=[1.0], act_var=[1.0], act_sq_mean=[1.0]).to_dict()
    with pytest.raises(ValueError, match="unknown field"):
        Measurements.from_dict({**data, "verdict": "met"})


@pytest.mark.slow  # a fresh process importing every value class; nightly
def test_every_registered_value_class_is_found_by_a_process_that_has_not_imported_it() -> None:
    """A stored row names its values' classes; a fresh process must find every built-in one."""
    import subprocess
    import sys

    import stability.judge.theory_checks  # noqa: F401
    import stability.measure.channels  # noqa: F401
    import stability.measure.ensemble  # noqa: F401  (the package's own registrations)
    import stability.measure.jacobian  # noqa: F401
    from stability.measure.measurements import BUILTIN_VALUE_MODULES

    owners = {cls.__module__ for cls in SERIALIZABLE.values() if cls.__module__.startswith("stability.")}
    assert owners <= set(BUILTIN_VALUE_MODULES)
    code = (
        "from stability.measure.measurements import decode; print(type(decode({'__type__': 'Ensemble', "
        "'seeds': [1], 'act_var': [[1.0]], 'act_sq_mean': [[1.0]], 'vectorised': "
        "True})).__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "Ensemble"
