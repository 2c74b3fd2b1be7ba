"""Where specs run: the executor interface, the in-process executor, and the one function every
executor calls to run one task.

A *task* is one spec with its run options (and optionally a replayed case or a single invariant);
its *outcome* is the spec's result as plain data, plus a spec-level error when the spec could not
be judged at all (a broken factory, a worker that crashed). The caller alone turns outcomes into
verdicts and an exit code. Executors differ only in where `run_task` runs and in what isolation
that gives:

- `InProcessExecutor` runs in the calling process, like the library's `run_spec`. It gives **no
  isolation**: a factory can change torch's global state (default dtype, threads, RNG,
  deterministic flags) and `sys.path` for every later spec, exit the process, or hang past the
  time limit by swallowing the timeout exception. For the library API and for debugging.
- `stability.run.worker.WorkerExecutor` runs each task in its own child process, supervised by the
  parent (time limit by kill, crashes reported); what `stability check` uses.
- A distributed executor (Dask) implements the same `map`: ship `run_task` and the task to a
  worker, get the `Outcome` back (both pickle).
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from stability.errors import StabilityError
from stability.run.engine import CaseRecord, InvariantResult, RunOptions, SpecResult
from stability.spec.case import Case, reproduce_command
from stability.spec.schema import Spec

__all__ = ["Task", "Outcome", "Executor", "InProcessExecutor", "run_task", "unfinished_outcome", "draws_from_the_spec_alone"]


@dataclass(frozen=True)
class Task:
    """One spec to run: `case` replays one case string, `only` judges one invariant."""

    spec: Spec
    options: RunOptions = field(default_factory=RunOptions)
    case: str | None = None
    only: str | None = None

    def invariants(self) -> list[str]:
        """The invariants this task judges, in the spec's order."""
        return [name for name, _ in self.spec.invariants() if self.only is None or name == self.only]


@dataclass
class Outcome:
    """A task's result. `error` is set when the spec could not be judged (bad factory, crashed
    worker): such a run ends with exit code 2. Unfinished invariants still appear in `result`,
    each unmet with its reason, so every report stays complete."""

    task: Task
    result: SpecResult
    error: str | None = None


def run_task(
    task: Task,
    *,
    on_start: Callable[[Case], None] | None = None,
    on_case: Callable[[CaseRecord], None] | None = None,
    on_result: Callable[[InvariantResult], None] | None = None,
) -> Outcome:
    """Run one task here and now; a spec error becomes `Outcome.error` instead of an exception."""
    from stability.run import engine  # looked up at call time: tests and tools may wrap run_spec

    done: list[InvariantResult] = []
    records: list[CaseRecord] = []
    current: list[Case] = []

    def started(c: Case) -> None:
        current[:] = [c]
        if on_start is not None:
            on_start(c)

    def measured(r: CaseRecord) -> None:
        records.append(r)
        current.clear()
        if on_case is not None:
            on_case(r)

    def judged(r: InvariantResult) -> None:
        done.append(r)
        if on_result is not None:
            on_result(r)

    try:
        with draws_from_the_spec_alone():
            result = engine.run_spec(task.spec, task.options, case=task.case, only=task.only, on_case=measured, on_start=started, on_result=judged)
    except StabilityError as exc:
        return unfinished_outcome(task, str(exc), done=done, records=records, case=current[0] if current else None)
    return Outcome(task, result)


@contextlib.contextmanager
def draws_from_the_spec_alone() -> Iterator[None]:
    """Make Hypothesis's draws a function of the spec, the profile and the device alone.

    Hypothesis mixes into 5% of its draws integer, float and string literals collected from
    every *local* module imported so far (`hypothesis.internal.conjecture.providers.
    _get_local_constants`: the project's own modules, a factory module). So which cases a spec
    gets depended on which modules happened to be imported before it: in one process, a spec run
    after a custom spec drew the factory module's literals as seeds and depths, and a run from
    pytest drew different cases from a run from the CLI. Inside this block the local pool is
    empty (Hypothesis's own global constants stay); the in-process and the worker paths give the
    same cases, in any order. There is no public switch for this; tests/test_gate_executor.py
    fails loudly if the internal it replaces goes away."""
    from hypothesis.internal.cache import LRUCache
    from hypothesis.internal.conjecture import providers

    real, cache = providers._get_local_constants, providers.CONSTANTS_CACHE
    providers._get_local_constants = _no_local_constants
    providers.CONSTANTS_CACHE = LRUCache(1024)  # it holds the local pool filtered per choice: start empty
    try:
        yield
    finally:
        providers._get_local_constants, providers.CONSTANTS_CACHE = real, cache


def _no_local_constants() -> Any:
    from hypothesis.internal.constants_ast import Constants

    return Constants()


def unfinished_outcome(
    task: Task,
    reason: str,
    *,
    done: Sequence[InvariantResult] = (),
    records: Sequence[CaseRecord] = (),
    case: Case | None = None,
    spec_error: bool = True,
    seconds: float = 0.0,
) -> Outcome:
    """The outcome of a task that stopped early: the invariants judged before it stopped, then
    every other one unmet with `reason` (and the case it stopped at, with its reproduce command).
    `spec_error=False` marks a failed case (the time limit) rather than a spec error."""
    from stability.run.profiles import get_profile

    spec = task.spec
    finished = {r.name for r in done}
    results = list(done)
    where = f" at case {case}" if case is not None else ""
    for name in task.invariants():
        if name in finished:
            continue
        expectation = getattr(spec.expect, name)
        results.append(
            InvariantResult(
                name,
                expectation.expect,
                False,
                None,
                case,
                0,
                f"{spec.path}::{name}: not judged{where}: {reason}",
                reproduce_command(spec, case) if case is not None else None,
                reason,
            )
        )
    cases = {r.case: r for r in records}
    if case is not None and case not in cases:
        cases[case] = CaseRecord(case, None, reason, 0.0)
    profile = get_profile(task.options.profile)[0]
    line = reason if reason.startswith(spec.path) else f"{spec.path}: {reason}"
    return Outcome(task, SpecResult(spec, results, cases, seconds, profile), line if spec_error else None)


class Executor(abc.ABC):
    """Runs tasks and returns their outcomes in task order; `on_done` sees each as it finishes
    (in completion order), so an interrupted run still has what finished."""

    #: What the executor protects the caller from, in words (shown in docs and `--help`).
    isolation: str = ""

    @abc.abstractmethod
    def map(self, tasks: Sequence[Task], *, on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
        """Run every task; return the outcomes in the order of `tasks`."""


class InProcessExecutor(Executor):
    """Runs every task in this process, one after another. No isolation (see the module doc)."""

    isolation = "none: user code runs in this process and can change its global state, exit it or hang it"

    def map(self, tasks: Sequence[Task], *, on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
        outcomes = []
        for task in tasks:
            outcome = run_task(task)
            outcomes.append(outcome)
            if on_done is not None:
                on_done(outcome)
        return outcomes
