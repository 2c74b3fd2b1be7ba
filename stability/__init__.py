"""stability: a property-based test and benchmark harness for deep-network stability.

This module is the public surface; everything below it may change between releases. The pipeline
runs one way, one folder per stage, and no stage imports a later one:

    spec/      a spec file loaded and validated (`load_spec`) → `Spec`, and its `Case`s
    families/  a case built into blocks (`build`): the harness's families and a user's factory
    measure/   one forward and one backward pass (`probe`, `probe_seeds`) → `Measurements`
    judge/     measurements → `Verdict`s (`gradient_arrival`, `variance_growth`, `identity_at_init`, …)
    run/       the search over cases (`strategies.cases`, `run_spec`), executors, store, sweeps
    report/    the terminal table, JSON, JUnit, HTML and plots

`cli.py`, `sweep_cli.py` and `plugin.py` wire the stages to the command line and to pytest.
"""

from stability import meanfield, strategies
from stability._version import __version__ as __version__
from stability.errors import CaseError, SpecError, StabilityError, UsageError
from stability.families.adapters import Stack
from stability.families.build import Network, build, make_input
from stability.judge.growth import classify_ensemble
from stability.judge.invariants import Verdict, classify_growth, gradient_arrival, identity_at_init, mean_shift, variance_growth
from stability.measure.batched import probe_seeds
from stability.measure.channels import ChannelStats
from stability.measure.jacobian import JacobianSpectrum, jacobian_spectrum, jacobian_svdvals
from stability.measure.lesion import lesion_changes
from stability.measure.paths import path_length_shares
from stability.measure.probe import Measurements, probe
from stability.run.engine import CaseRecord, InvariantResult, RunOptions, SpecResult, evaluate, run_spec
from stability.spec.case import Case, parse_case_string
from stability.spec.load import find_specs, load_spec, parse_spec
from stability.spec.schema import Spec

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
]
__all__ += ["JacobianSpectrum", "jacobian_spectrum", "jacobian_svdvals", "lesion_changes", "meanfield", "path_length_shares"]
