"""A sweep's points as jobs (`PointTask`), and the Dask executor that runs jobs on a cluster.

A `PointTask` (a spec, one grid point, its seeds) is a job of stability.run.executor's contract:
`execute` measures each seed's case with `stability.run.engine.evaluate`, exactly as
`stability check --case` measures it, emitting each record; `conclude` turns the records into one
row per seed (the case string, the measurements as `Measurements.to_json` text, or the reason the
case could not be measured). Any executor runs it: `InProcessExecutor` (the library's default),
`WorkerExecutor` (`stability sweep --serial`: each point in its own child process, so a factory's
global changes never reach the next point), or `DaskExecutor` (the default of `stability sweep`).

`DaskExecutor` submits one Dask task per job to a `distributed` cluster: a `LocalCluster` of
worker processes sized to the machine by default, or the scheduler at `tcp://HOST:PORT`. The job's
case events reach the parent through Dask's worker event log, and the parent enforces the per-case
time limit itself: a case still running `case_timeout` + `DASK_GRACE_S` after its start has its
worker restarted and its job recorded as failed with the reason, while the sweep goes on. A worker
process that dies during a job (the factory crashed it) is restarted by its nanny; Dask does not
retry the task (`allowed-failures = 0`); every job the dead worker held is then run again alone,
so the one that crashes it comes back failed with Dask's reason and any job that was only queued
beside it succeeds. CUDA jobs ask for `resources={"GPU": 1}`, so they run only on workers started
with that resource (`dask worker ... --resources GPU=1`). A job reaches a worker as pickled bytes
read after the run's plugins are imported there; its result comes back as JSON text (what Dask
itself carries between processes is pickled: a Dask worker is as trusted as the code it runs).

Every executor runs a point with one intra-op thread, so a point gives bit-identical numbers
whichever ran it.
"""

from __future__ import annotations

import json
import os
import pickle
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from stability.run.executor import Emit, Executor, Job, Outcome, Trace
from stability.run.grid import Value, apply_point
from stability.run.guard import case_limit, past_limit

__all__ = ["PointTask", "Row", "DaskExecutor", "DASK_GRACE_S", "CONNECT_TIMEOUT_S"]

Row = dict[str, Any]  # {"seed": int, "case": str, "m": JSON text | None, "error": str | None}

#: Past a case's time limit, how long a Dask job may still run before its worker is restarted.
DASK_GRACE_S = 5.0
#: How long connecting to a `--scheduler` may take before the sweep gives up (exit 2).
CONNECT_TIMEOUT_S = 10.0


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())


@dataclass(frozen=True)
class PointTask(Job):
    """One grid point of one spec, probed with every seed in `seeds`."""

    spec: Any  # stability.spec.schema.Spec (typed loosely so the task pickles without this module's imports)
    point: dict[str, Value]
    seeds: tuple[int, ...]
    device: str = "cpu"
    tag: dict[str, Any] = field(default_factory=dict)  # the caller's bookkeeping, returned untouched
    memory_budget: int | None = None  # the guard's budget (None: the default, half the free memory)
    timeout: float | None = 120.0  # the per-case time limit (`case_timeout`)

    @property
    def label(self) -> str:
        return f"{self.spec.name}@{','.join(f'{k}={v}' for k, v in self.point.items())}"

    @property
    def case_timeout(self) -> float | None:
        return case_limit(self.spec, self.timeout)

    def execute(self, emit: Emit) -> dict[str, Any]:
        import threading

        import torch

        from stability.errors import StabilityError
        from stability.run.engine import RunOptions, evaluate
        from stability.run.results import CaseRecord

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the same reduction order in every process: bit-identical results
        try:
            try:
                pairs = [apply_point(self.spec, self.point, seed=s, device=self.device) for s in self.seeds]
            except StabilityError as exc:
                return {"error": str(exc)}
            on_main = (
                threading.current_thread() is threading.main_thread()
            )  # (a Dask task is not: its parent keeps the time)
            options = RunOptions(
                device=self.device, case_timeout=self.timeout if on_main else None, memory_budget=self.memory_budget
            )
            for spec_s, case in pairs:
                emit({"kind": "start", "case": case.as_dict()})
                try:
                    record = evaluate(spec_s, case, options)
                except StabilityError as exc:  # a custom factory that raises: this case fails, the sweep goes on
                    record = CaseRecord(case=case, measurements=None, error=str(exc))
                except Exception as exc:
                    record = CaseRecord(case=case, measurements=None, error=f"the case does not run: {_one_line(exc)}")
                emit({"kind": "case", "record": record.to_dict()})
            return {}
        finally:
            torch.set_num_threads(threads)

    def conclude(self, trace: Trace) -> Outcome:
        rows = point_rows(self, trace)
        return Outcome(task=self, result=rows, error=None)


def point_rows(task: PointTask, trace: Trace) -> list[Row]:
    """One row per seed from what the job sent; a seed it never measured gets the reason."""
    final = trace.final or {}
    if final.get("error"):
        return [{"seed": s, "case": "", "m": None, "error": str(final["error"])} for s in task.seeds]
    by_seed = {r.case.seed: r for r in trace.records}
    reason = trace.failure or "the point did not finish"
    rows = []
    for s in task.seeds:
        r = by_seed.get(s)
        if r is None:
            case = trace.current if trace.current is not None and trace.current.seed == s else None
            rows.append({"seed": s, "case": "" if case is None else str(case), "m": None, "error": reason})
        else:
            rows.append(
                {
                    "seed": s,
                    "case": str(r.case),
                    "m": None if r.measurements is None else r.measurements.to_json(),
                    "error": r.error,
                }
            )
    return rows


def _dask_execute(payload: bytes, topic: str, index: int) -> str:
    """A job on a Dask worker: the run's plugins first, then the job; its events go to the parent
    through the worker's event log (for the time limit) and all of them come back with the result,
    as JSON text."""
    from distributed import get_worker

    from stability.run.plugins import load_plugins

    load_plugins()
    job: Job = pickle.loads(payload)
    worker = get_worker()
    events: list[dict[str, Any]] = []

    def emit(message: dict[str, Any]) -> None:
        events.append(message)
        if message["kind"] in ("start", "case"):
            worker.log_event(topic, {"job": index, "kind": message["kind"], "worker": worker.address})

    final = job.execute(emit)
    return json.dumps({"events": events, "final": final}, allow_nan=True)


class DaskExecutor(Executor):
    """Jobs as tasks on a Dask distributed cluster (one task per job; see the module docstring).

    `scheduler=None` starts a `LocalCluster` of `n_workers` worker processes (default: one per
    CPU core, one thread each, with the environment `env`), closed by `close()`;
    `scheduler="tcp://HOST:PORT"` connects to a running cluster and leaves it running.
    """

    isolation = (
        "each job runs in a Dask worker process: a crash or an exit takes that worker down, not the run (the job fails "
        "with the reason); a case past its time limit has its worker restarted; a worker runs one job at a time, and "
        "global state a job changes stays in that worker for the jobs it runs later"
    )

    def __init__(
        self,
        *,
        scheduler: str | None = None,
        n_workers: int | None = None,
        client: Any = None,
        gpu: bool = False,
        env: dict[str, str] | None = None,
        verbose: bool = False,
    ) -> None:
        import logging
        import warnings

        import dask
        from distributed import Client, LocalCluster

        self._cluster: Any = None
        self._own_client = client is None
        if client is not None:
            self.client = client
        elif scheduler:
            self.client = Client(scheduler, timeout=f"{CONNECT_TIMEOUT_S}s")  # type: ignore[no-untyped-call,unused-ignore]
        else:
            # CUDA points need the GPU resource: one local worker holds it (several workers would
            # share the same device; for one worker per GPU start workers with CUDA_VISIBLE_DEVICES
            # and --resources GPU=1 yourself, and pass --scheduler).
            n = n_workers or (1 if gpu else os.cpu_count() or 1)
            extra: dict[str, Any] = {"resources": {"GPU": 1}} if gpu else {}
            if env:
                extra["env"] = {k: v for k, v in env.items() if k.startswith("STABILITY_")}
            # A worker holds only the task it runs (saturation 1.0: no queued task dies with it), and a
            # task whose worker died is not retried: the crashing point fails, no other point does.
            isolation = {"distributed.scheduler.allowed-failures": 0, "distributed.scheduler.worker-saturation": 1.0}
            # Dask's own warnings (a nanny killing a worker at shutdown, the metrics server's port
            # taken by another cluster) are about Dask, not about the sweep, whose results say what
            # failed: only `verbose` (`stability sweep --verbose`) lets them reach stderr.
            with dask.config.set(isolation), warnings.catch_warnings():
                if not verbose:
                    warnings.filterwarnings("ignore", message="Port .* is already in use", category=UserWarning)
                self._cluster = LocalCluster(  # type: ignore[no-untyped-call,unused-ignore]
                    n_workers=n,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    silence_logs=logging.WARNING if verbose else logging.ERROR,
                    **extra,
                )
            self.client = Client(self._cluster)  # type: ignore[no-untyped-call,unused-ignore]
        self.workers = max(1, len(self.client.scheduler_info().get("workers", {})))

    def map(self, jobs: Sequence[Job], *, on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
        from distributed import wait

        topic = f"stability-{uuid.uuid4().hex}"
        started: dict[int, tuple[float, str]] = {}  # job → (when its current case started, the worker's address)

        def on_event(event: Any) -> None:
            _, message = event
            if message["kind"] == "start":
                started[message["job"]] = (time.monotonic(), message["worker"])
            else:
                started.pop(message["job"], None)

        self.client.subscribe_topic(topic, on_event)
        outcomes: dict[int, Outcome] = {}
        t0 = {i: time.monotonic() for i in range(len(jobs))}

        def finish(i: int, trace: Trace) -> None:
            trace.seconds = time.monotonic() - t0[i]
            outcomes[i] = jobs[i].conclude(trace)
            if on_done is not None:
                on_done(outcomes[i])

        try:
            futures = {self._submit(job, topic, i): i for i, job in enumerate(jobs)}
            died: list[int] = []
            remaining = set(futures)
            while remaining:
                wait_for = self._next_deadline(jobs, started, [futures[f] for f in remaining])
                try:
                    done, _ = wait(list(remaining), timeout=wait_for, return_when="FIRST_COMPLETED")  # type: ignore[no-untyped-call,unused-ignore]
                except TimeoutError:  # (distributed's TimeoutError is the builtin one) nothing finished yet
                    done = set()
                for fut in done:
                    remaining.discard(fut)
                    i = futures[fut]
                    started.pop(i, None)
                    try:
                        trace = _trace(fut.result())
                    except Exception:  # KilledWorker: a worker process died while it held this job
                        died.append(i)
                        continue
                    finish(i, trace)
                for fut in list(remaining):  # a case past its time limit: restart its worker, fail the job
                    i = futures[fut]
                    limit = jobs[i].case_timeout
                    if i in started and limit and time.monotonic() > started[i][0] + limit + DASK_GRACE_S:
                        address = started.pop(i)[1]
                        remaining.discard(fut)
                        fut.cancel()
                        self.client.restart_workers([address])
                        reason = past_limit(limit, " and its Dask worker was restarted")
                        finish(i, Trace(failure=reason, spec_error=False))
            # A worker that dies takes every job it held, not only the one that crashed it. Each such
            # job runs again alone on the cluster: one that crashed its worker crashes it again and is
            # failed with the reason; one that was only beside it now succeeds.
            for i in sorted(died):
                if i in outcomes:
                    continue
                try:
                    trace = _trace(self._submit(jobs[i], topic, i).result())
                except Exception as exc:
                    trace = Trace(
                        failure=f"the worker process running this job died ({_one_line(exc)})", spec_error=False
                    )
                finish(i, trace)
        finally:
            self.client.unsubscribe_topic(topic)
        return [outcomes[i] for i in range(len(jobs))]

    @staticmethod
    def _next_deadline(jobs: Sequence[Job], started: dict[int, tuple[float, str]], running: list[int]) -> float:
        """Seconds until the first running case passes its limit (at most 1 s: a case may start meanwhile)."""
        now = time.monotonic()
        ends = [
            started[i][0] + (jobs[i].case_timeout or 0.0) + DASK_GRACE_S - now
            for i in running
            if i in started and jobs[i].case_timeout
        ]
        return max(0.05, min([1.0, *ends]))

    def _submit(self, job: Job, topic: str, index: int) -> Any:
        device = str(getattr(job, "device", "cpu"))
        resources = {"GPU": 1} if device.startswith("cuda") else None
        return self.client.submit(_dask_execute, pickle.dumps(job), topic, index, pure=False, resources=resources)

    def close(self) -> None:
        if self._own_client:
            self.client.close()
        if self._cluster is not None:
            self._cluster.close()


def _trace(text: str) -> Trace:
    """The trace of a job that finished on a Dask worker, from its JSON text."""
    data = json.loads(text)
    trace = Trace()
    for message in data["events"]:
        trace.take(message)
    trace.final = data["final"]
    return trace
