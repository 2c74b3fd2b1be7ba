"""Internal modules of the package under test, at whichever path the measured commit has them.

asv measures older commits with the current benchmarks/: a commit before the package moved into
stage folders (spec/, families/, measure/, judge/, run/, report/) has the same modules flat under
`stability/`. Benchmarks import internal modules through `internal` so a range of commits across
the move measures every commit (the public surface, `stability`, needs nothing).
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: Stage-folder path → the flat module name the same code had before the move.
FLAT = {
    "spec.case": "case",
    "measure.probe": "probe",
    "measure.memory": "memory",
    "run.engine": "engine",
    "run.grid": "grid",
    "run.store": "store",
    "run.sweep": "sweep",
    "run.sweep_exec": "sweep_exec",
}


def internal(path: str, package: str = "stability") -> ModuleType:
    """`package.<path>` (e.g. "spec.case"), or the flat `package.<FLAT[path]>` where the commit
    under test predates the stage folders."""
    try:
        return importlib.import_module(f"{package}.{path}")
    except ModuleNotFoundError:  # also "'stability.spec' is not a package" on a flat commit
        return importlib.import_module(f"{package}.{FLAT[path]}")
