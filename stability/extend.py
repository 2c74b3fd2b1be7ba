"""The public module for extension authors: what a plugin imports to register invariants,
families and remedies, to run jobs on an executor of its own, to read the shipped init rule tables
and to read a run's results (docs/extending.md).

    from stability.extend import Invariant, Explanation, Expectation, Verdict, register_invariant

Every name here is imported from the internal module that defines it on first use (PEP 562), so
importing this module imports no torch. The internal modules (`stability.spec.registry`,
`stability.run.executor`, …) may change between releases; these names keep their meaning. The Python
API for running and probing (`load_spec`, `run_spec`, `probe`, `given_spec`, …) is `stability`.
"""

from __future__ import annotations

import typing as _typing

from stability._exports import check_exports as _check_exports
from stability._exports import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from stability.families.build import Network
    from stability.families.discover import Blocks, ModelRun
    from stability.families.embedding import TokenEmbedding
    from stability.judge.init_tables import RuleTable, rule_tables
    from stability.judge.verdict import Verdict, is_evidence
    from stability.measure.boundaries import BoundaryObserver
    from stability.measure.measurements import Measurements, serializable
    from stability.run.engine import RunOptions
    from stability.run.executor import Executor, InProcessExecutor, Job, Outcome, Task, Trace
    from stability.run.probing import MeasureContext
    from stability.run.report_model import CaseEntry, InvariantEntry, Report, SpecEntry, read_report
    from stability.run.results import CaseRecord, InvariantResult, SpecResult
    from stability.spec.case import Case
    from stability.spec.expectations import Expectation
    from stability.spec.init_expect import InitRule
    from stability.spec.registry import (
        FAMILIES,
        INVARIANTS,
        Band,
        Explanation,
        Family,
        Invariant,
        OtherBuild,
        RegistryError,
        register_family,
        register_invariant,
    )
    from stability.spec.remedy import REMEDIES, REMOVE, Remedy, register_remedy
    from stability.spec.schema import Spec

#: Public name → the module that defines it.
_LAZY: dict[str, str] = {
    "INVARIANTS": "stability.spec.registry",
    "FAMILIES": "stability.spec.registry",
    "Invariant": "stability.spec.registry",
    "Explanation": "stability.spec.registry",
    "Band": "stability.spec.registry",
    "Family": "stability.spec.registry",
    "OtherBuild": "stability.spec.registry",
    "RegistryError": "stability.spec.registry",
    "register_invariant": "stability.spec.registry",
    "register_family": "stability.spec.registry",
    "Expectation": "stability.spec.expectations",
    "Spec": "stability.spec.schema",
    "Case": "stability.spec.case",
    "REMEDIES": "stability.spec.remedy",
    "REMOVE": "stability.spec.remedy",
    "Remedy": "stability.spec.remedy",
    "register_remedy": "stability.spec.remedy",
    "InitRule": "stability.spec.init_expect",
    "RuleTable": "stability.judge.init_tables",
    "rule_tables": "stability.judge.init_tables",
    "Network": "stability.families.build",
    "ModelRun": "stability.families.discover",
    "Blocks": "stability.families.discover",
    "TokenEmbedding": "stability.families.embedding",
    "Measurements": "stability.measure.measurements",
    "serializable": "stability.measure.measurements",
    "BoundaryObserver": "stability.measure.boundaries",
    "Verdict": "stability.judge.verdict",
    "is_evidence": "stability.judge.verdict",
    "MeasureContext": "stability.run.probing",
    "RunOptions": "stability.run.engine",
    "Executor": "stability.run.executor",
    "InProcessExecutor": "stability.run.executor",
    "Job": "stability.run.executor",
    "Task": "stability.run.executor",
    "Trace": "stability.run.executor",
    "Outcome": "stability.run.executor",
    "SpecResult": "stability.run.results",
    "InvariantResult": "stability.run.results",
    "CaseRecord": "stability.run.results",
    "Report": "stability.run.report_model",
    "SpecEntry": "stability.run.report_model",
    "InvariantEntry": "stability.run.report_model",
    "CaseEntry": "stability.run.report_model",
    "read_report": "stability.run.report_model",
}

__all__ = [
    # invariants: an entry, its [expect] table, what it judges and returns
    "Invariant",
    "Explanation",
    "Band",
    "Expectation",
    "register_invariant",
    "INVARIANTS",
    "Measurements",
    "serializable",
    "BoundaryObserver",
    "MeasureContext",
    "Verdict",
    "is_evidence",
    # families: an entry and what its builder receives and returns
    "Family",
    "OtherBuild",
    "register_family",
    "FAMILIES",
    "Spec",
    "Case",
    "Network",
    "ModelRun",
    "Blocks",
    "TokenEmbedding",
    # remedies (stability suggest)
    "Remedy",
    "register_remedy",
    "REMEDIES",
    "REMOVE",
    # the shipped init rule tables (init_conformance)
    "RuleTable",
    "InitRule",
    "rule_tables",
    # executors and their jobs
    "Executor",
    "InProcessExecutor",
    "Job",
    "Task",
    "Trace",
    "Outcome",
    "RunOptions",
    # results: in this process, and a JSON report read back
    "SpecResult",
    "InvariantResult",
    "CaseRecord",
    "Report",
    "SpecEntry",
    "InvariantEntry",
    "CaseEntry",
    "read_report",
    # a name that is not registered, or an entry that cannot be
    "RegistryError",
]

__getattr__, __dir__ = _lazy_exports(__name__, _LAZY, globals())
_check_exports(__name__, __all__, _LAZY, globals())
