"""Which executor a run gets: `executor_for`, the one place the CLI, the sweep and the plugin
choose one by name.

The contract (`Job`, `Trace`, `Outcome`, `Executor`) and the in-process executor are
`stability.run.executor`; the executors that isolate a job live beside it, each in its own module
(`stability.run.worker.WorkerExecutor`, `stability.run.sweep_exec.DaskExecutor`) and importing
that contract. This module sits above all three, so the contract imports none of its
implementations; each of those is imported only when a run asks for it (the Dask one needs the
`sweep` extra).
"""

from __future__ import annotations

from typing import Literal

from stability.run.executor import Executor, InProcessExecutor

__all__ = ["Where", "executor_for"]

Where = Literal["in-process", "workers", "dask"]


def executor_for(
    where: Where,
    *,
    jobs: int = 1,
    threads: int = 1,
    env: dict[str, str] | None = None,
    capture: bool = True,
    scheduler: str | None = None,
    gpu: bool = False,
    verbose: bool = False,
) -> Executor:
    """The executor for a run, chosen in one place: `in-process` (no isolation), `workers` (a
    child process per job, `jobs` at a time, each with `threads` torch threads and the environment
    `env`, its output captured unless `capture` is off), or `dask` (a task per job on a local
    cluster of `jobs` worker processes, or on the cluster at `scheduler`; `gpu`: CUDA jobs;
    `verbose`: let the cluster's own log warnings reach stderr)."""
    if where == "in-process":
        return InProcessExecutor()
    if where == "workers":
        from stability.run.worker import WorkerExecutor

        return WorkerExecutor(jobs=jobs, threads=threads, env=env, capture=capture)
    from stability.run.sweep_exec import DaskExecutor

    return DaskExecutor(scheduler=scheduler, n_workers=jobs or None, gpu=gpu, env=env, verbose=verbose)
