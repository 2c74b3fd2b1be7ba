"""Reading a baseline: a JSON report of an earlier run (`stability check --json`, the base
branch's), read whole within bounds (`MAX_BYTES`, `MAX_DEPTH`) into the judged expectations of a
`stability.report.baseline.Baseline`, each keyed by its spec file in one normal form (`spec_key`).
A file that is not such a report is a UsageError (exit 2) naming the fix.
"""

from __future__ import annotations

import os
import re
import stat

from stability.errors import UsageError
from stability.report.baseline import Baseline, Entry, Key, spec_key
from stability.run.report_model import read_report

__all__ = ["MAX_BYTES", "MAX_DEPTH", "load_baseline"]

_FIX = "write one with `stability check --json FILE` on the base branch, or pass --update-baseline to create it"


#: A baseline is read whole: at most MAX_BYTES, its JSON nested at most MAX_DEPTH arrays and
#: objects deep. A JSON report nests 6 deep (report → specs → spec → invariants → entry → its
#: `extra`'s values) and takes ~2 KiB per judged expectation (the shipped specs' ci report,
#: ~140 expectations: ~0.3 MiB), so both limits are far above any report the tool writes.
MAX_BYTES = 64 * 2**20
MAX_DEPTH = 64
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON `text` (brackets inside strings skipped),
    without recursion; stops counting past MAX_DEPTH."""
    depth = deepest = 0
    for m in _TOKENS.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    break
        elif c in "]}":
            depth -= 1
    return deepest


def load_baseline(path: str, *, update: bool = False) -> Baseline:
    """Read a JSON report as a baseline. A missing file is an empty baseline with `update` (it is
    about to be written), else a UsageError; so is a file that is not a stability JSON report."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):  # never block on a FIFO or read a device
            raise UsageError(f"--baseline {path}: is not a regular file; {_FIX}")
        if info.st_size > MAX_BYTES:
            raise UsageError(
                f"--baseline {path}: is {info.st_size} bytes, over the limit of {MAX_BYTES} "
                f"({MAX_BYTES // 2**20} MiB) for a baseline; {_FIX}"
            )
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)  # (a file that grew since the stat is still bounded)
        if len(raw) > MAX_BYTES:
            raise UsageError(
                f"--baseline {path}: is over the limit of {MAX_BYTES} bytes ({MAX_BYTES // 2**20} MiB) for a "
                f"baseline; {_FIX}"
            )
        text = raw.decode("utf-8")
    except FileNotFoundError:
        if update:
            return Baseline(path=path, entries=[])
        raise UsageError(f"--baseline {path}: no such file; {_FIX}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"--baseline {path}: cannot be read ({getattr(exc, 'strerror', None) or exc}); {_FIX}"
        ) from None
    if _depth(text) > MAX_DEPTH:
        raise UsageError(
            f"--baseline {path}: nests arrays and objects more than {MAX_DEPTH} deep, over the limit for a "
            f"baseline (a JSON report nests 6); {_FIX}"
        )
    baseline = Baseline(path=path, entries=[])
    try:
        for spec in read_report(text).specs:
            where = (spec_key(spec.file), spec.name)
            baseline.provenance[where] = None if spec.provenance is None else spec.provenance.to_data()
            for inv in spec.invariants:
                verdict, case = inv.verdict_of(), inv.case_of()
                if verdict is None or case is None:
                    continue  # not judged (n/a, skipped, not measured): nothing to compare
                baseline.entries.append(
                    Entry(
                        key=Key(file=where[0], spec=where[1], invariant=inv.name, case=str(case)),
                        case=case,
                        expect=inv.expect,
                        met=inv.met,
                        verdict=verdict,
                    )
                )
    except ValueError as exc:  # not JSON, not a report (`read_report` says where), not a case
        raise UsageError(f"--baseline {path}: is not a stability JSON report ({exc}); {_FIX}") from None
    return baseline
