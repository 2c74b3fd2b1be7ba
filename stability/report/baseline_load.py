"""Reading a baseline: a JSON report of an earlier run (`stability check --json`, the base
branch's), read whole within bounds (`MAX_BYTES`, `MAX_DEPTH`) into the judged expectations of a
`stability.report.baseline.Baseline`, each keyed by its spec file in one normal form (`spec_key`).
A file that is not such a report is a UsageError (exit 2) naming the fix.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from typing import Any

from stability.errors import UsageError
from stability.judge.verdict import Verdict
from stability.report.baseline import Baseline, Entry, Key, spec_key
from stability.report.provenance import SCHEMA_VERSION
from stability.spec.case import Case

__all__ = ["MAX_BYTES", "MAX_DEPTH", "load_baseline"]

_FIX = "write one with `stability check --json FILE` on the base branch, or pass --update-baseline to create it"


def _float(x: Any) -> float:
    """A number of a JSON report ("nan", "inf" and "-inf" are written as strings)."""
    return float(x) if isinstance(x, (int, float, str)) and not isinstance(x, bool) else math.nan


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
                f"--baseline {path}: is {info.st_size} bytes, over the limit of {MAX_BYTES} ({MAX_BYTES // 2**20} MiB) for a baseline; {_FIX}"
            )
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)  # (a file that grew since the stat is still bounded)
        if len(raw) > MAX_BYTES:
            raise UsageError(
                f"--baseline {path}: is over the limit of {MAX_BYTES} bytes ({MAX_BYTES // 2**20} MiB) for a baseline; {_FIX}"
            )
        text = raw.decode("utf-8")
    except FileNotFoundError:
        if update:
            return Baseline(path, [])
        raise UsageError(f"--baseline {path}: no such file; {_FIX}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(
            f"--baseline {path}: cannot be read ({getattr(exc, 'strerror', None) or exc}); {_FIX}"
        ) from None
    if _depth(text) > MAX_DEPTH:
        raise UsageError(
            f"--baseline {path}: nests arrays and objects more than {MAX_DEPTH} deep, over the limit for a baseline (a JSON report nests 6); {_FIX}"
        )
    try:
        data = json.loads(text)
        if (
            not isinstance(data, dict)
            or data.get("schema_version") != SCHEMA_VERSION
            or not isinstance(data.get("specs"), list)
        ):
            raise ValueError(f"not a stability JSON report of schema_version {SCHEMA_VERSION}")
        baseline = Baseline(path, [])
        for spec in data["specs"]:
            where = (spec_key(str(spec["file"])), str(spec["name"]))
            baseline.provenance[where] = spec.get("provenance")
            for inv in spec["invariants"]:
                if inv.get("verdict") is None or inv.get("case") is None:
                    continue  # not judged (n/a, skipped, not measured): nothing to compare
                case = Case.from_dict(inv["case"])
                extra = {
                    k: _float(v) if v in ("nan", "inf", "-inf") else v for k, v in (inv.get("extra") or {}).items()
                }
                verdict = Verdict(
                    inv["name"],
                    inv["verdict"] == "holds",
                    _float(inv["observed"]),
                    str(inv.get("bound") or ""),
                    inv.get("block"),
                    str(inv.get("detail") or ""),
                    extra,
                    bool(inv.get("measured", True)),
                )
                baseline.entries.append(
                    Entry(Key(*where, inv["name"], str(case)), case, inv["expect"], bool(inv["met"]), verdict)
                )
    except (ValueError, KeyError, TypeError) as exc:
        what = exc.args[0] if isinstance(exc, ValueError) and exc.args else f"{type(exc).__name__}: {exc}"
        raise UsageError(f"--baseline {path}: is not a stability JSON report ({what}); {_FIX}") from None
    return baseline
