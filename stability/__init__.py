"""stability: a property-based test and benchmark harness for deep-network stability.

The pipeline, one module per stage:
spec (`load_spec`) → case (`Case`, `strategies.cases`) → network (`build`) → measurements
(`probe`) → verdicts (`gradient_arrival`, `variance_growth`, `identity_at_init`) → report.
"""

from stability import meanfield, strategies
from stability.adapters import Stack
from stability.batched import probe_seeds
from stability.build import Network, build, make_input
from stability.case import Case, parse_case_string
from stability.channels import ChannelStats
from stability.engine import CaseRecord, InvariantResult, RunOptions, SpecResult, evaluate, run_spec
from stability.errors import CaseError, SpecError, StabilityError, UsageError
from stability.growth import classify_ensemble
from stability.invariants import Verdict, classify_growth, gradient_arrival, identity_at_init, mean_shift, variance_growth
from stability.jacobian import JacobianSpectrum, jacobian_spectrum, jacobian_svdvals
from stability.lesion import lesion_changes
from stability.paths import path_length_shares
from stability.probe import Measurements, probe
from stability.spec import Spec, find_specs, load_spec, parse_spec

__version__ = "0.1.0"

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
