"""stability: a property-based test and benchmark harness for deep-network stability.

This module is the Python API, and `stability.extend` the module for extension authors
(invariants, families, remedies, executors, reading results); with `stability.strategies` and
`stability.meanfield` they are the public surface. Import from these only: every other module of
the package is internal and may change between releases. The pipeline runs one way, one folder
per stage, and no stage imports a later one:

    spec/      a spec file loaded and validated (`load_spec`) → `Spec`, and its `Case`s; the
               registries of invariants and families (`stability.extend`)
    families/  a case built into blocks (`build`): the harness's families and a user's factory
    measure/   one forward and one backward pass (`probe`, `probe_seeds`) → `Measurements`
    judge/     measurements → `Verdict`s (`gradient_arrival`, `variance_growth`, `identity_at_init`, …)
    run/       the search over cases (`strategies.cases`, `run_spec`), executors, store, sweeps
    report/    the terminal table, JSON, JUnit, HTML and plots

`cli/` (the entry point and one module per command) and `plugin.py` wire the stages to the
command line and to pytest.

Importing the package registers the built-in invariants and families and nothing heavier: the
names below are imported on first use (PEP 562), so `stability --help`, `list`, `explain` and
`schema` never import torch.
"""

from __future__ import annotations

import typing as _typing

import stability.families.catalog
import stability.judge.catalog  # noqa: F401  (registers the built-in invariants; the families above)
import stability.judge.remedies  # noqa: F401  (registers the built-in remedies: stability suggest)
import stability.judge.remedies_logits  # noqa: F401  (and those for logits that grow in training)
from stability._exports import check_exports as _check_exports
from stability._exports import lazy_exports as _lazy_exports
from stability._version import __version__ as __version__
from stability.errors import CaseError, SpecError, StabilityError, UsageError

if _typing.TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from stability import meanfield, strategies
    from stability.assertions import (
        StabilityAssertionError,
        assert_gradient_arrives,
        assert_identity_at_init,
        assert_variance_growth,
    )
    from stability.families.adapters import Stack
    from stability.families.build import Network, build, make_input
    from stability.judge.growth import EnsembleGrowth, GrowthFit, classify_ensemble, classify_growth
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
    from stability.spec.case import Case, corner_case, parse_case_string
    from stability.spec.load import find_specs, load_spec, parse_spec
    from stability.spec.schema import Spec
    from stability.testing import given_spec

#: Public name → the module that defines it (`stability.NAME`: the public module itself).
_LAZY: dict[str, str] = {
    "Case": "stability.spec.case",
    "corner_case": "stability.spec.case",
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
    "GrowthFit": "stability.judge.growth",
    "classify_growth": "stability.judge.growth",
    "gradient_arrival": "stability.judge.invariants",
    "identity_at_init": "stability.judge.invariants",
    "mean_shift": "stability.judge.invariants",
    "variance_growth": "stability.judge.invariants",
    "EnsembleGrowth": "stability.judge.growth",
    "classify_ensemble": "stability.judge.growth",
    "CaseRecord": "stability.run.results",
    "InvariantResult": "stability.run.results",
    "SpecResult": "stability.run.results",
    "RunOptions": "stability.run.engine",
    "evaluate": "stability.run.engine",
    "run_spec": "stability.run.engine",
    "given_spec": "stability.testing",
    "StabilityAssertionError": "stability.assertions",
    "assert_gradient_arrives": "stability.assertions",
    "assert_identity_at_init": "stability.assertions",
    "assert_variance_growth": "stability.assertions",
    "strategies": "stability.strategies",
    "meanfield": "stability.meanfield",
}

__all__ = [
    # errors
    "StabilityError",
    "SpecError",
    "CaseError",
    "UsageError",
    # a spec and its cases
    "Spec",
    "Case",
    "load_spec",
    "parse_spec",
    "find_specs",
    "parse_case_string",
    "corner_case",
    # building and probing
    "Network",
    "Stack",
    "build",
    "make_input",
    "probe",
    "probe_seeds",
    "Measurements",
    "ChannelStats",
    "JacobianSpectrum",
    "jacobian_spectrum",
    "jacobian_svdvals",
    "lesion_changes",
    "path_length_shares",
    # judging
    "Verdict",
    "gradient_arrival",
    "variance_growth",
    "identity_at_init",
    "mean_shift",
    "classify_growth",
    "GrowthFit",
    "classify_ensemble",
    "EnsembleGrowth",
    # running a spec, and its results
    "RunOptions",
    "run_spec",
    "evaluate",
    "SpecResult",
    "InvariantResult",
    "CaseRecord",
    # in a user's own tests
    "given_spec",
    "strategies",
    "assert_gradient_arrives",
    "assert_variance_growth",
    "assert_identity_at_init",
    "StabilityAssertionError",
    "meanfield",
]

__getattr__, __dir__ = _lazy_exports(__name__, _LAZY, globals())
_check_exports(__name__, __all__, _LAZY, globals())
