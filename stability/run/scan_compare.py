"""The two sides of `stability scan LIBRARY --compare A B`: each release resolved and installed as
`stability zoo --compare` resolves them (`stability.run.releases`: `LIBRARY==VERSION`, a folder of
packages, a virtual environment; one place), then scanned in a child process that imports it
(`python -m stability.report.scan_side`), its rows read back.

Before either side is scanned (minutes), each side's library version is read in its own process:
a side whose library does not import is refused (exit 2, its one line), and so are two sides that
resolve to the same release (naming it): that comparison could only say "nothing moved".
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stability.errors import UsageError
from stability.run.releases import Release, environment
from stability.run.scan import ScanOptions
from stability.run.scan_rows import ScanRow

__all__ = ["Side", "side_version", "check_sides", "scan_side"]


@dataclass(frozen=True, kw_only=True)
class Side:
    """One side's scan: its label, its rows and the releases its process imported."""

    label: str
    rows: tuple[ScanRow, ...]
    versions: dict[str, Any]


def _command(library: str, *rest: str) -> list[str]:
    return ["-W", "ignore", "-m", "stability.report.scan_side", library, *rest]


def _last_line(run: subprocess.CompletedProcess[str]) -> str:
    return (run.stderr.strip().splitlines() or [f"exit {run.returncode}"])[-1]


def side_version(release: Release, library: str) -> str:
    """The version of `library` that `release`'s process imports; UsageError when it does not import."""
    python, env = environment(release)
    run = subprocess.run(
        [python, *_command(library, "--version")], env=env, capture_output=True, text=True, check=False
    )
    if run.returncode != 0:
        raise UsageError(f"release {release.label}: {_last_line(run)}")
    return run.stdout.strip()


def check_sides(a: Release, b: Release, library: str) -> tuple[str, str]:
    """Both sides' versions of `library`; UsageError when a side names another library or both are
    one release."""
    for r in (a, b):
        if r.library is not None and r.library != library:
            raise UsageError(
                f"--compare {r.label}: is a release of {r.library}, and this scan is of {library}; "
                f"give two releases of {library} (e.g. {library}==VERSION)"
            )
    va, vb = side_version(a, library), side_version(b, library)
    if va == vb:
        raise UsageError(
            f"--compare {a.label} {b.label}: both sides import {library} {va}, so nothing could move; "
            "give two different releases"
        )
    return va, vb


def scan_side(release: Release, library: str, out: Path, *, only: str | None, jobs: int, options: ScanOptions) -> Side:
    """Scan `library` under `release` into `out` (the module docstring)."""
    python, env = environment(release)
    rest = ["--out", str(out), "--jobs", str(jobs), "--case-timeout", str(options.case_timeout or 0)]
    if only:
        rest += ["--only", only]
    if options.memory_budget is not None:
        rest += ["--memory-budget", str(options.memory_budget)]
    env = {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    run = subprocess.run([python, *_command(library, *rest)], env=env, capture_output=True, text=True, check=False)
    if run.returncode != 0 or not (out / "rows.json").is_file():
        raise UsageError(f"release {release.label}: the scan did not run under it ({_last_line(run)})")
    rows = tuple(ScanRow.from_dict(r) for r in json.loads((out / "rows.json").read_text(encoding="utf-8")))
    versions = json.loads((out / "versions.json").read_text(encoding="utf-8"))
    return Side(label=release.label, rows=rows, versions=versions)
