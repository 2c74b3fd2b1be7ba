"""`stability sweep --compare A B`: the depth budgets that moved between two code versions.

A sweep stores each budget under the code version that measured it (`stability.run.store_keys.code_version`)
and the inputs it was measured on (`stability.run.store_keys.inputs_hash`, the slice, the invariant,
the seeds, the depth range, the device). `compare` reads the budgets of two versions from the
store, matches them by those inputs, and lists those whose value differs; it probes nothing.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from stability.errors import UsageError
from stability.run.store import Store

__all__ = ["Comparison", "Moved", "compare"]


#: One budget under both code versions: ((spec name, slice, invariant, seeds, depth range, device), A's, B's),
#: each side (budget, status, deciding case).
Moved = list[
    tuple[tuple[str, str, str, str, str, str], tuple[int | None, str, str | None], tuple[int | None, str, str | None]]
]


@dataclass(kw_only=True)
class Comparison:
    """`compare`'s answer: the two code versions, every budget stored under both whose value
    differs (`moved`), how many were compared, and how many are stored under one version only."""

    version_a: str
    version_b: str
    moved: Moved
    compared: int
    only_a: int
    only_b: int


def compare(store: Store, rev_a: str, rev_b: str) -> Comparison:
    """Budgets stored under two different code versions, matched by what they were measured on
    (inputs hash, slice, invariant, seeds, depth range, device; never by the spec's name, so an
    edited copy of a spec under the same name is another budget). Raises UsageError (exit 2) when
    a revision is empty, unknown or ambiguous, when both name one code version, or when no budget
    is stored under both: nothing is comparable, which is never "no budget moved".

    A revision is resolved with `git rev-parse` (a branch, tag or commit) and matched to a stored
    code version by its commit; anything else must be a prefix of exactly one stored code version.
    """
    versions = store.code_versions()
    known = ", ".join(versions) or "none yet"

    def resolve(rev: str) -> str:
        if not rev.strip():
            raise UsageError(
                f"--compare {rev!r}: a revision is empty; give a git revision or a stored code version ({known})"
            )
        matches = []
        if not rev.startswith("-"):  # (never an option to git)
            try:
                commit = subprocess.run(
                    ["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                    capture_output=True,
                    text=True,
                    timeout=30,
                    check=True,
                ).stdout.strip()
            except (OSError, subprocess.SubprocessError):
                commit = ""
            matches = [v for v in versions if commit and f"+g{commit[:12]}" in v]
        if matches:  # one commit: its clean tree's version if stored, else its latest edited one
            clean = [v for v in matches if ".dirty" not in v]
            return (clean or matches)[-1]
        matches = [v for v in versions if v.startswith(rev)]
        if not matches:
            raise UsageError(
                f"--compare {rev}: no budgets stored for that code version in {store.path}; stored versions: {known}"
            )
        if len(matches) > 1:
            raise UsageError(
                f"--compare {rev}: names {len(matches)} stored code versions ({', '.join(matches)}); give more of one"
            )
        return matches[0]

    va, vb = resolve(rev_a), resolve(rev_b)
    if va == vb:
        raise UsageError(f"--compare {rev_a} {rev_b}: both name the code version {va}; give two different revisions")
    a, b = store.budgets(va), store.budgets(vb)
    common = sorted(set(a) & set(b))
    if not common:
        raise UsageError(
            f"--compare {rev_a} {rev_b}: nothing is comparable: no budget is stored under both {va} and {vb} "
            "for the same spec content, slice, "
            f"invariant, seeds, depth range and device ({len(a)} under one, {len(b)} under the other); sweep "
            "the same spec and grid under both"
        )
    moved: Moved = []
    for key in common:
        (name, budget_a, status_a, case_a), (_, budget_b, status_b, case_b) = a[key], b[key]
        if (budget_a, status_a) != (budget_b, status_b):
            _, slice_, invariant, seeds, depths, device = key
            moved.append(
                (
                    (name, slice_, invariant, seeds, depths, device),
                    (budget_a, status_a, case_a),
                    (budget_b, status_b, case_b),
                )
            )
    return Comparison(
        version_a=va,
        version_b=vb,
        moved=moved,
        compared=len(common),
        only_a=len(set(a) - set(b)),
        only_b=len(set(b) - set(a)),
    )
