"""Where a sweep's points run: one small interface, two backends.

A `PointTask` (a spec, one grid point, its seeds) is plain data; `run_point` turns it into one
row per seed (plain data too: the case string, the measurements as JSON text from
`Measurements.to_json`, or the reason the case could not be measured). A `Backend` takes a batch of tasks and yields `(index, rows)` as
each finishes, in any order:

- `SerialBackend` runs them in this process, one after another;
- `DaskBackend` submits one Dask task per point to a `distributed` cluster: a `LocalCluster` of
  worker processes sized to the machine by default, or the scheduler at `tcp://HOST:PORT`. Each
  point runs inside a worker process, so a factory that kills its process (a segfault,
  `os._exit`) takes that worker down, not the sweep: Dask restarts the worker and the point comes
  back as failed with the reason. CUDA points ask for `resources={"GPU": 1}`, so they run only on
  workers started with that resource (`dask worker ... --resources GPU=1`).

Both backends run the same `run_point` with one intra-op thread, so a point gives bit-identical
numbers whichever backend ran it.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from stability.run.grid import Value, apply_point

__all__ = ["PointTask", "Row", "run_point", "Backend", "SerialBackend", "DaskBackend"]

Row = dict[str, Any]  # {"seed": int, "case": str, "m": JSON text | None, "error": str | None}


@dataclass(frozen=True)
class PointTask:
    """One grid point of one spec, probed with every seed in `seeds`."""

    spec: Any  # stability.spec.schema.Spec (typed loosely so the task pickles without this module's imports)
    point: dict[str, Value]
    seeds: tuple[int, ...]
    device: str = "cpu"
    tag: dict[str, Any] = field(default_factory=dict)  # the caller's bookkeeping, returned untouched
    memory_budget: int | None = None  # the guard's budget (None: the default, half the free memory)


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def run_point(task: PointTask) -> list[Row]:
    """Probe one point's seeds; never raises for a problem with the point (it becomes each row's
    `error`). Each seed is one case measured by `stability.run.engine.evaluate`, exactly as
    `stability check --case` measures it (every observer, extra measurement and seed ensemble its
    declared invariants need), so a sweep judges the numbers check would."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same reduction order in every process: bit-identical results
    try:
        return _run_point(task)
    finally:
        torch.set_num_threads(threads)


def run_point_payload(payload: bytes) -> list[Row]:
    """`run_point` on a pickled task, read only after this process has imported the run's plugins
    (`$STABILITY_PLUGINS`), so a plugin's invariants and families exist in a Dask worker too."""
    from stability.run.plugins import load_plugins

    load_plugins()
    task: PointTask = pickle.loads(payload)
    return run_point(task)


def _run_point(task: PointTask) -> list[Row]:
    from stability.errors import StabilityError
    from stability.run.engine import RunOptions, evaluate

    try:
        pairs = [apply_point(task.spec, task.point, seed=s, device=task.device) for s in task.seeds]
    except StabilityError as exc:
        return [{"seed": s, "case": "", "m": None, "error": str(exc)} for s in task.seeds]
    options = RunOptions(device=task.device, case_timeout=None, memory_budget=task.memory_budget)  # a Dask task runs off the main thread: no SIGALRM
    rows: list[Row] = []
    for spec_s, case in pairs:
        try:
            record = evaluate(spec_s, case, options)
        except StabilityError as exc:  # a custom factory that raises: this point fails, the sweep goes on
            rows.append({"seed": case.seed, "case": str(case), "m": None, "error": str(exc)})
            continue
        except Exception as exc:
            rows.append({"seed": case.seed, "case": str(case), "m": None, "error": f"the case does not run: {_one_line(exc)}"})
            continue
        m = None if record.measurements is None else record.measurements.to_json()
        rows.append({"seed": case.seed, "case": str(case), "m": m, "error": record.error})
    return rows


class Backend(Protocol):
    """Runs a batch of point tasks; yields (index in `tasks`, rows) as each point finishes."""

    workers: int

    def run(self, tasks: Sequence[PointTask]) -> Iterator[tuple[int, list[Row]]]: ...

    def close(self) -> None: ...


def _failed(task: PointTask, reason: str) -> list[Row]:
    return [{"seed": s, "case": "", "m": None, "error": reason} for s in task.seeds]


class SerialBackend:
    """Every point in this process, in order."""

    workers = 1

    def run(self, tasks: Sequence[PointTask]) -> Iterator[tuple[int, list[Row]]]:
        for i, task in enumerate(tasks):
            try:
                rows = run_point(task)
            except Exception as exc:  # run_point reports problems as rows; this is a last guard
                rows = _failed(task, f"the point did not run: {_one_line(exc)}")
            yield i, rows

    def close(self) -> None:
        pass


class DaskBackend:
    """Points as tasks on a Dask distributed cluster (one task per point).

    `scheduler=None` starts a `LocalCluster` of `n_workers` worker processes (default: one per
    CPU core, one thread each), closed by `close()`; `scheduler="tcp://HOST:PORT"` connects to a
    running cluster and leaves it running. A worker process that dies during a point (the factory
    crashed it) is restarted by its nanny; Dask does not retry the point (`allowed-failures = 0`);
    every point the dead worker held is then run again alone, so the one that crashes it comes back
    failed with Dask's reason and any point that was only queued beside it succeeds. Each local
    worker is sent one task at a time (`worker-saturation = 1.0`) to keep such reruns rare.
    """

    def __init__(self, *, scheduler: str | None = None, n_workers: int | None = None, client: Any = None, gpu: bool = False) -> None:
        import dask
        from distributed import Client, LocalCluster

        self._cluster: Any = None
        self._own_client = client is None
        if client is not None:
            self.client = client
        elif scheduler:
            self.client = Client(scheduler, timeout="30s")  # type: ignore[no-untyped-call,unused-ignore]
        else:
            # CUDA points need the GPU resource: one local worker holds it (several workers would
            # share the same device; for one worker per GPU start workers with CUDA_VISIBLE_DEVICES
            # and --resources GPU=1 yourself, and pass --scheduler).
            n = n_workers or (1 if gpu else os.cpu_count() or 1)
            extra = {"resources": {"GPU": 1}} if gpu else {}
            # A worker holds only the task it runs (saturation 1.0: no queued task dies with it), and a
            # task whose worker died is not retried: the crashing point fails, no other point does.
            isolation = {"distributed.scheduler.allowed-failures": 0, "distributed.scheduler.worker-saturation": 1.0}
            with dask.config.set(isolation):
                self._cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None, **extra)  # type: ignore[no-untyped-call,unused-ignore]
            self.client = Client(self._cluster)  # type: ignore[no-untyped-call,unused-ignore]
        self.workers = max(1, len(self.client.scheduler_info().get("workers", {})))

    def run(self, tasks: Sequence[PointTask]) -> Iterator[tuple[int, list[Row]]]:
        from distributed import as_completed

        futures = {self._submit(task): i for i, task in enumerate(tasks)}
        died: list[int] = []
        for fut in as_completed(list(futures)):  # type: ignore[no-untyped-call,unused-ignore]
            i = futures[fut]
            try:
                rows = fut.result()
            except Exception:  # KilledWorker: a worker process died while it held this point
                died.append(i)
                continue
            yield i, rows
        # A worker that dies takes every point it held, not only the one that crashed it. Each such
        # point runs again alone on the cluster: one that crashed its worker crashes it again and is
        # failed with the reason; one that was only beside it now succeeds.
        for i in sorted(died):
            try:
                rows = self._submit(tasks[i]).result()
            except Exception as exc:
                rows = _failed(tasks[i], f"the worker process running this point died ({_one_line(exc)})")
            yield i, rows

    def _submit(self, task: PointTask) -> Any:
        resources = {"GPU": 1} if task.device.startswith("cuda") else None
        return self.client.submit(run_point_payload, pickle.dumps(task), pure=False, resources=resources)

    def close(self) -> None:
        if self._own_client:
            self.client.close()
        if self._cluster is not None:
            self._cluster.close()
