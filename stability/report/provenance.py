"""Stage 6 (what a report's numbers depend on): each spec's provenance — its content hash
(`stability.run.store_keys.spec_hash`: every validated value, not comments), the content hash of a
custom spec's factory module, and the harness's code version (`stability.run.store_keys.code_version`)
— with what differs between two of them, in words.

The JSON report (`stability.report.formats.to_json`, its schema `stability.run.report_model`) writes
it; a baseline (`stability.report.baseline`) reads it back and reports whatever changed beside its
numbers.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stability.errors import SpecError

if TYPE_CHECKING:
    from stability.spec.schema import Spec

__all__ = ["provenance", "provenance_changes"]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def provenance(spec: Spec) -> dict[str, Any]:
    """What a spec's numbers depend on: its content hash, its factory module's (custom specs; the
    source roots in force apply) and the harness's code version."""
    from stability.families.factory import locate_factory
    from stability.run.store_keys import code_version, spec_hash
    from stability.spec.registry import FAMILIES

    factory: dict[str, str | None] | None = None
    if FAMILIES.get(spec.family).user_code and spec.block.factory:
        try:
            module = locate_factory(spec.path, spec.block.factory)[2]
            factory = {"module": os.path.relpath(module), "sha256": _sha(module)}
        except (SpecError, OSError, ValueError):
            factory = {"module": spec.block.factory, "sha256": None}
    return {"spec": spec_hash(spec), "factory": factory, "harness": code_version()}


def provenance_changes(before: dict[str, Any] | None, now: dict[str, Any]) -> list[str]:
    """What differs from the provenance `before` (a baseline's; None: it records none) to `now`."""
    if before is None:
        return ["the baseline records no provenance (a report from an older harness)"]
    out = []
    if before.get("spec") != now["spec"]:
        out.append(f"the spec's content (hash {before.get('spec')} → {now['spec']})")
    was, nowf = before.get("factory") or {}, now["factory"] or {}
    if was.get("sha256") != nowf.get("sha256") or was.get("module") != nowf.get("module"):
        out.append(
            f"the factory module {nowf.get('module') or was.get('module')} (sha256 {was.get('sha256')} → "
            f"{nowf.get('sha256')})"
        )
    if before.get("harness") != now["harness"]:
        out.append(f"the harness ({before.get('harness')} → {now['harness']})")
    return out
