"""stability: a property-based test and benchmark harness for deep-network stability.

This module is the public surface; everything below it may change between releases. The pipeline
runs one way, one folder per stage, and no stage imports a later one:

    spec/      a spec file loaded and validated (`load_spec`) → `Spec`, and its `Case`s; the
               registries of invariants and families (`stability.spec.registry`)
    families/  a case built into blocks (`build`): the harness's families and a user's factory
    measure/   one forward and one backward pass (`probe`, `probe_seeds`) → `Measurements`
    judge/     measurements → `Verdict`s (`gradient_arrival`, `variance_growth`, `identity_at_init`, …)
    run/       the search over cases (`strategies.cases`, `run_spec`), executors, store, sweeps
    report/    the terminal table, JSON, JUnit, HTML and plots

`cli/` (the entry point, `stability.cli.main`, and one module per command: `check`, `sweep`, `zoo`,
`suggest`, over `grammar` and `common`) and `plugin.py` wire the stages to the
command line and to pytest.

Importing the package registers the built-in invariants and families and nothing heavier: the
names below are imported on first use (PEP 562), so `stability --help`, `list`, `explain` and
`schema` never import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import stability.families.catalog
import stability.judge.catalog  # noqa: F401  (registers the built-in invariants; the families above)
import stability.judge.remedies  # noqa: F401  (registers the built-in remedies: stability suggest)
import stability.judge.remedies_logits  # noqa: F401  (and those for logits that grow in training)
from stability._version import __version__ as __version__
from stability.errors import CaseError, SpecError, StabilityError, UsageError

if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from stability import meanfield, strategies
    from stability.families.adapters import Stack
    from stability.families.build import Network, build, make_input
    from stability.judge.growth import classify_ensemble, classify_growth
    from stability.judge.invariants import (
        gradient_arrival,
        identity_at_init,
        mean_shift,
        variance_growth,
    )
    from stability.judge.verdict import Verdict
    from stability.measure.batched import probe_seeds
    from stability.measure.channels import ChannelStats
    from stability.measure.jacobian import JacobianSpectrum, jacobian_spectrum, jacobian_svdvals
    from stability.measure.lesion import lesion_changes
    from stability.measure.measurements import Measurements
    from stability.measure.paths import path_length_shares
    from stability.measure.probe import probe
    from stability.run.engine import RunOptions, evaluate, run_spec
    from stability.run.results import CaseRecord, InvariantResult, SpecResult
    from stability.spec.case import Case, parse_case_string
    from stability.spec.load import find_specs, load_spec, parse_spec
    from stability.spec.schema import Spec
    from stability.testing import given_spec

#: Public name → the module that defines it.
_LAZY: dict[str, str] = {
    "Case": "stability.spec.case",
    "parse_case_string": "stability.spec.case",
    "find_specs": "stability.spec.load",
    "load_spec": "stability.spec.load",
    "parse_spec": "stability.spec.load",
    "Spec": "stability.spec.schema",
    "Stack": "stability.families.adapters",
    "Network": "stability.families.build",
    "build": "stability.families.build",
    "make_input": "stability.families.build",
    "Measurements": "stability.measure.measurements",
    "probe": "stability.measure.probe",
    "probe_seeds": "stability.measure.batched",
    "ChannelStats": "stability.measure.channels",
    "JacobianSpectrum": "stability.measure.jacobian",
    "jacobian_spectrum": "stability.measure.jacobian",
    "jacobian_svdvals": "stability.measure.jacobian",
    "lesion_changes": "stability.measure.lesion",
    "path_length_shares": "stability.measure.paths",
    "Verdict": "stability.judge.verdict",
    "classify_growth": "stability.judge.growth",
    "gradient_arrival": "stability.judge.invariants",
    "identity_at_init": "stability.judge.invariants",
    "mean_shift": "stability.judge.invariants",
    "variance_growth": "stability.judge.invariants",
    "classify_ensemble": "stability.judge.growth",
    "CaseRecord": "stability.run.results",
    "InvariantResult": "stability.run.results",
    "SpecResult": "stability.run.results",
    "RunOptions": "stability.run.engine",
    "evaluate": "stability.run.engine",
    "run_spec": "stability.run.engine",
    "given_spec": "stability.testing",
}
#: Public modules, imported on first use.
_MODULES = ("strategies", "meanfield")

__all__ = [
    "Case",
    "CaseError",
    "CaseRecord",
    "InvariantResult",
    "Measurements",
    "Network",
    "RunOptions",
    "Spec",
    "SpecError",
    "SpecResult",
    "Stack",
    "StabilityError",
    "UsageError",
    "Verdict",
    "build",
    "classify_growth",
    "evaluate",
    "find_specs",
    "given_spec",
    "gradient_arrival",
    "identity_at_init",
    "load_spec",
    "make_input",
    "parse_case_string",
    "parse_spec",
    "probe",
    "probe_seeds",
    "run_spec",
    "strategies",
    "variance_growth",
    "mean_shift",
    "ChannelStats",
    "classify_ensemble",
    "JacobianSpectrum",
    "jacobian_spectrum",
    "jacobian_svdvals",
    "lesion_changes",
    "meanfield",
    "path_length_shares",
]


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        module = importlib.import_module(f"stability.{name}")
        globals()[name] = module
        return module
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'stability' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def _check_exports() -> None:
    """`__all__` and what the package provides agree (as Hypothesis checks its own at import):
    every public name is eager here or lazily importable, and every lazy name is public."""
    eager = {"CaseError", "SpecError", "StabilityError", "UsageError"}
    missing = [n for n in __all__ if n not in _LAZY and n not in _MODULES and n not in eager]
    extra = [n for n in (*_LAZY, *_MODULES) if n not in __all__]
    if missing or extra:  # pragma: no cover - a change to the public surface that forgot one side
        raise RuntimeError(
            f"stability/__init__.py: __all__ names {missing} with no definition, and {extra} are defined but not in __all__"
        )


_check_exports()
