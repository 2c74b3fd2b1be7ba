"""Where work runs: one executor contract for `stability check`, the pytest plugin and `stability
sweep`, and the job that runs a spec.

A *job* is plain data that knows how to run itself and how to conclude from what it sent:

- `Job.execute(emit)` runs wherever the executor puts it (this process, a worker child, a Dask
  worker). Before each case it emits `{"kind": "start", "case": …}`, after it
  `{"kind": "case", "record": …}` (`CaseRecord.to_dict`), and any events of its own; it returns
  its final data. Every event and the final data are plain data (what crosses a process boundary
  is JSON, never a pickle of what user code made).
- `Job.conclude(trace)` runs in the calling process, on what came back (`Trace`: the records, the
  other events, the final data, or the reason the job did not finish), and makes the `Outcome`.
  It decides with this process's own code: a spec job's expectations are judged again from the
  records (stability.run.audit), so nothing a job's process says decides a verdict.

Every executor must (and `Executor.map` documents): run each job in the isolation it states
(`isolation`), stop a case that runs past the job's `case_timeout` (where it can: a child process
is killed, a Dask worker restarted; in-process only the case's own alarm applies), keep what the
job's code prints out of the caller's output where it can (`Trace.output`), record a job whose
process dies or hangs as a failed job with its reason while the others go on, and return results as
data. The executors:

- `InProcessExecutor`: here, one job after another; no isolation (a factory can change torch's
  global state for every later job, exit the process, or hang past the time limit by swallowing
  the timeout exception): the library API, `--in-process`, and debugging;
- `stability.run.worker.WorkerExecutor`: each job in its own child process forked from a clean
  server; what `stability check`, the plugin's custom specs and `stability sweep --serial` use;
- `stability.run.sweep_exec.DaskExecutor`: each job as a task on a Dask cluster; `stability sweep`.

This module is the contract and imports none of the executors that implement it elsewhere:
`stability.run.executors.executor_for` is the one place the CLI, the sweep and the plugin choose
one.
"""

from __future__ import annotations

import abc
import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from stability.errors import StabilityError
from stability.run.engine import RunOptions
from stability.run.guard import case_limit
from stability.run.results import CaseRecord, InvariantResult, SpecResult
from stability.spec.case import Case, reproduce_command
from stability.spec.schema import Spec

__all__ = [
    "Job",
    "Trace",
    "Task",
    "Outcome",
    "Executor",
    "InProcessExecutor",
    "run_task",
    "unfinished_outcome",
    "draws_from_the_spec_alone",
]

Emit = Callable[[dict[str, Any]], None]


@dataclass(kw_only=True)
class Trace:
    """What came back from one job: its records (in order), its other events, its final data (None
    when it did not finish), and why it did not (`failure`; `spec_error` when that is the spec's
    fault, e.g. its code exited, rather than a case's, e.g. the time limit)."""

    records: list[CaseRecord] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    final: dict[str, Any] | None = None
    failure: str | None = None
    spec_error: bool = True
    current: Case | None = None  # the case it was running when it stopped
    seconds: float = 0.0
    output: str = ""

    def take(self, message: dict[str, Any]) -> None:
        """Add one emitted event (the protocol of `Job.execute`)."""
        kind = message["kind"]
        if kind == "start":
            self.current = Case.from_dict(message["case"])
        elif kind == "case":
            self.records.append(CaseRecord.from_dict(message["record"]))
            self.current = None
        else:
            self.events.append(message)


class Job(abc.ABC):
    """One unit of work (see the module docstring)."""

    @property
    def case_timeout(self) -> float | None:
        """Per-case time limit the executor enforces (None: none)."""
        return None

    @property
    @abc.abstractmethod
    def label(self) -> str:
        """A short name (process names, messages)."""

    @abc.abstractmethod
    def execute(self, emit: Emit) -> dict[str, Any]:
        """Run the job here; emit its events; return its final data."""

    @abc.abstractmethod
    def conclude(self, trace: Trace) -> Outcome:
        """The outcome, in the calling process, from what the job sent."""


@dataclass(kw_only=True)
class Outcome:
    """A job's result. For a spec (`Task`) `result` is its `SpecResult` and `error` is set when the
    spec could not be judged at all (bad factory, crashed worker): such a run ends with exit code 2;
    unfinished invariants still appear in `result`, each unmet with its reason, so every report stays
    complete. For a sweep point `result` is its rows."""

    task: Any
    result: Any
    error: str | None = None


@dataclass(frozen=True)
class Task(Job):
    """One spec to run: `case` replays one case string, `only` judges one invariant."""

    spec: Spec
    options: RunOptions = field(default_factory=RunOptions)
    case: str | None = None
    only: str | None = None

    @property
    def label(self) -> str:
        return self.spec.name

    @property
    def case_timeout(self) -> float | None:
        return case_limit(self.spec, self.options.case_timeout)

    def invariants(self) -> list[str]:
        """The invariants this task judges, in the spec's order."""
        return [name for name, _ in self.spec.invariants() if self.only is None or name == self.only]

    def execute(self, emit: Emit) -> dict[str, Any]:
        outcome = run_task(
            self,
            on_start=lambda c: emit({"kind": "start", "case": c.as_dict()}),
            on_case=lambda r: emit({"kind": "case", "record": r.to_dict()}),
            on_result=lambda r: emit({"kind": "result", "result": r.to_dict()}),
        )
        res = outcome.result
        return {
            "results": [r.to_dict() for r in res.results],
            "error": outcome.error,
            "seconds": res.seconds,
            "profile": res.profile,
        }

    def conclude(self, trace: Trace) -> Outcome:
        from stability.run.audit import rejudge
        from stability.run.conclude import case_verdicts

        if trace.final is not None:
            results = [InvariantResult.from_dict(r) for r in trace.final["results"]]
            error = trace.final["error"]
            result = SpecResult(
                spec=self.spec,
                results=results,
                cases={r.case: r for r in trace.records},
                seconds=float(trace.final["seconds"]),
                profile=str(trace.final["profile"]),
            )
            outcome = Outcome(task=self, result=result, error=None if error is None else str(error))
        else:
            done = [InvariantResult.from_dict(e["result"]) for e in trace.events if e.get("kind") == "result"]
            records = list(trace.records)
            if trace.current is not None and not trace.spec_error:  # the stopped case, with the time it was given
                records.append(
                    CaseRecord(
                        case=trace.current,
                        measurements=None,
                        error=trace.failure,
                        seconds=self.options.case_timeout or 0.0,
                    )
                )
            reason = trace.failure or "the job did not finish"
            outcome = unfinished_outcome(
                self,
                reason,
                done=done,
                records=records,
                case=trace.current,
                spec_error=trace.spec_error,
                seconds=trace.seconds,
            )
        outcome.result.output = trace.output
        contradiction = rejudge(outcome.result, replay=self.case is not None)  # this process's own judgement
        if contradiction is not None and outcome.error is None:
            outcome.error = contradiction
        outcome.result.verdicts = case_verdicts(self.spec, outcome.result.cases)
        return outcome


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
            result = engine.run_spec(
                task.spec,
                task.options,
                case=task.case,
                only=task.only,
                on_case=measured,
                on_start=started,
                on_result=judged,
            )
    except StabilityError as exc:
        return unfinished_outcome(task, str(exc), done=done, records=records, case=current[0] if current else None)
    return Outcome(task=task, result=result)


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
    same cases, in any order. There is no public switch for this; tests/test_executor.py
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
                name=name,
                expect=expectation.expect,
                met=False,
                verdict=None,
                case=case,
                examples=0,
                message=f"{spec.path}::{name}: not judged{where}: {reason}",
                reproduce=reproduce_command(spec, case) if case is not None else None,
                error=reason,
            )
        )
    cases = {r.case: r for r in records}
    if case is not None and case not in cases:
        cases[case] = CaseRecord(case=case, measurements=None, error=reason, seconds=0.0)
    profile = get_profile(task.options.profile)[0]
    line = reason if reason.startswith(spec.path) else f"{spec.path}: {reason}"
    return Outcome(
        task=task,
        result=SpecResult(spec=spec, results=results, cases=cases, seconds=seconds, profile=profile),
        error=line if spec_error else None,
    )


class Executor(abc.ABC):
    """Runs jobs and returns their outcomes in job order; `on_done` sees each as it finishes (in
    completion order), so an interrupted run still has what finished. What every executor must do
    is in the module docstring."""

    #: What the executor protects the caller from, in words (shown in docs and `--help`).
    isolation: str = ""
    #: How many jobs run at once.
    workers: int = 1

    @abc.abstractmethod
    def map(self, jobs: Sequence[Job], *, on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
        """Run every job; return the outcomes in the order of `jobs`."""

    def close(self) -> None:  # noqa: B027 -- an optional hook: most executors hold nothing
        """Release what the executor holds (a cluster, a pool); it may not be used afterwards."""


class InProcessExecutor(Executor):
    """Runs every job in this process, one after another. No isolation (see the module doc)."""

    isolation = "none: user code runs in this process and can change its global state, exit it or hang it"

    def map(self, jobs: Sequence[Job], *, on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
        outcomes = []
        for job in jobs:
            trace = Trace()
            t0 = time.perf_counter()
            trace.final = job.execute(trace.take)
            trace.seconds = time.perf_counter() - t0
            outcome = job.conclude(trace)
            outcomes.append(outcome)
            if on_done is not None:
                on_done(outcome)
        return outcomes
