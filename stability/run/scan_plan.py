"""What a scan will do (`plan_scan`): the models of a library matching `--only`, the rows the store
holds already for this release and code version (`--resume`), and one `ScanJob` for each other.

**One build, one row.** Many timm and torchvision names build the same model at the scan's reduced
size: `vit_base_patch16_224` and `vit_large_patch16_224` differ in width, depth and heads, which the
reducer makes the same (`stability.families.library_reduce`), and a name's pretrained tag
(`.augreg_in21k`) changes nothing the builder makes. Building each would cost the scan hours for no
new fact, so where an executor is given the names are first keyed by what they build (the class and
its reduced arguments, `stability.families.library_scan.build_key`, in `KeyJob`s of a chunk of
names each, in the workers, under the time limit) and each key is scanned once: its row names the
first of its names and lists the others (`ScanRow.also`). Names whose arguments differ in anything
else the reducer keeps (a layer scale, a norm, a qkv bias, the image size) keep rows of their own.
transformers' targets are one per model class already and are not keyed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from stability.run.executor import Emit, Executor, Job, Outcome, Trace
from stability.run.scan import ScanJob, ScanOptions, select
from stability.run.scan_rows import ScanRow

__all__ = ["ScanPlan", "KeyJob", "plan_scan", "KEY_CHUNK"]

#: Names keyed per `KeyJob`.
KEY_CHUNK = 40


@dataclass
class ScanPlan:
    """What a scan will do: the library's release and the code version its rows are filed under,
    the models selected (in the library's order, one per build), the rows the store holds already
    (with `resume`) and a job for each of the others."""

    library: str
    release: str
    code: str
    names: list[str]
    stored: dict[str, ScanRow]
    jobs: list[ScanJob]
    keyed: int = 0  # names keyed by what they build (0: not keyed)


@dataclass(frozen=True)
class KeyJob(Job):
    """The build keys of a chunk of names (the module docstring)."""

    library: str
    names: tuple[str, ...]
    options: ScanOptions = field(default_factory=ScanOptions)

    @property
    def label(self) -> str:
        return f"{self.library}: keys of {self.names[0]}…"

    @property
    def case_timeout(self) -> float | None:
        return None if self.options.case_timeout is None else self.options.case_timeout * len(self.names)

    def execute(self, emit: Emit) -> dict[str, Any]:
        from stability.families.library_scan import MAX_PARAMETERS, ScanTarget, build_key
        from stability.run.scan import start_case

        emit({"kind": "start", "case": start_case(self.options).as_dict()})
        limit = self.options.max_parameters or MAX_PARAMETERS
        return {
            "keys": {
                n: build_key(
                    ScanTarget(library=self.library, name=n), depth=self.options.depths[0], max_parameters=limit
                )
                for n in self.names
            }
        }

    def conclude(self, trace: Trace) -> Outcome:
        keys = dict(trace.final["keys"]) if trace.final is not None else {}
        return Outcome(task=self, result={n: keys.get(n, f"{self.library}:{n} (not keyed)") for n in self.names})


def _keys(library: str, names: Sequence[str], executor: Executor, options: ScanOptions) -> dict[str, str]:
    chunks = [tuple(names[i : i + KEY_CHUNK]) for i in range(0, len(names), KEY_CHUNK)]
    out: dict[str, str] = {}
    for o in executor.map([KeyJob(library, c, options) for c in chunks]):
        out.update(o.result)
    return out


def plan_scan(
    library: str,
    *,
    only: str | None = None,
    options: ScanOptions | None = None,
    store: Any = None,
    resume: bool = False,
    executor: Executor | None = None,
) -> ScanPlan:
    """The models of `library` matching `only`, one per build where `executor` keys them (the
    module docstring); with `resume`, the rows `store` (a `ScanStore`) holds for this release and
    code version are reused and only the others get a job, and a model that timed out (on a loaded
    machine, or under a shorter `--case-timeout`) is tried again."""
    from stability.families.library_scan import scan_targets
    from stability.families.library_support import installed
    from stability.run.store_keys import code_version

    options = options or ScanOptions()
    release, code = installed(library), code_version()
    targets = {t.name: t for t in scan_targets(library)}
    names = select(list(targets), only)
    also = {n: list(targets[n].also) for n in names}
    keyed = 0
    if executor is not None and library != "transformers" and len(names) > 1:
        keys = _keys(library, names, executor, options)
        first: dict[str, str] = {}
        for n in names:
            head = first.setdefault(keys[n], n)
            if head != n:
                also[head].append(n)
        names = [n for n in names if first[keys[n]] == n]
        keyed = len(keys)
    stored = store.rows(library, release, code) if store is not None and resume else {}
    stored = {n: r for n, r in stored.items() if n in names and r.status != "timed out"}  # a time-out is no result
    jobs = [ScanJob(library, n, tuple(also[n]), options) for n in names if n not in stored]
    return ScanPlan(library, release, code, names, stored, jobs, keyed)
