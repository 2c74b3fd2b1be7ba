"""The executors on the shipped specs (`ci` profile): in this process, and through worker
processes with -j 1 and -j 2, one thread per worker; interleaved repeats, wall and CPU time.

    python benchmarks/executors.py [--repeats 3] [--busy 0|2]

CPU time is this process's own plus what every worker reported for itself (the forkserver's
one-off start, an import of torch, is not in it). `--busy 2` runs two spinning processes for the
whole measurement (a competing load on a 2-core runner). Not an asv benchmark: nothing runs at
import and no function starts with time_ or track_. The JSON of every run is compared, without
its timings, with the in-process one: the executors must not change a single number.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from stability.report.formats import to_json
from stability.run.engine import RunOptions
from stability.run.executor import Executor, InProcessExecutor, Task
from stability.run.worker import WorkerExecutor
from stability.spec.load import find_specs, load_spec

SPECS = Path(__file__).resolve().parent.parent / "specs"


def _spin() -> None:
    while True:
        pass


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def measure(executor: Executor, tasks: list[Task]) -> tuple[float, float, str]:
    if isinstance(executor, WorkerExecutor):
        executor.cpu_seconds = 0.0
    c0, t0 = _cpu(), time.perf_counter()
    outcomes = executor.map(tasks)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    if isinstance(executor, WorkerExecutor):
        cpu += executor.cpu_seconds
    return wall, cpu, json.dumps(_strip(to_json([o.result for o in outcomes])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--busy", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    tasks = [Task(load_spec(f), RunOptions(profile="ci")) for f in find_specs([SPECS])]
    executors: dict[str, Executor] = {
        "in-process": InProcessExecutor(),
        "-j 1": WorkerExecutor(jobs=1),
        "-j 2": WorkerExecutor(jobs=2),
    }
    spinners = [multiprocessing.get_context("fork").Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for p in spinners:
        p.start()
    try:
        measure(executors["-j 1"], tasks[:1])  # start the forkserver outside the timings
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in executors}
        reference = None
        for _ in range(args.repeats):
            for name, executor in executors.items():
                wall, cpu, report = measure(executor, tasks)
                reference = reference or report
                assert report == reference, f"{name}: the report differs from the in-process one"
                times[name].append((wall, cpu))
    finally:
        for p in spinners:
            p.kill()
    print(
        f"{len(tasks)} shipped specs, ci profile, {args.busy} busy process(es), median of {args.repeats} "
        "interleaved runs; reports identical"
    )
    print("| executor | wall (s) | CPU (s) |")
    print("|---|---|---|")
    for name, runs in times.items():
        print(f"| {name} | {statistics.median(w for w, _ in runs):.2f} | {statistics.median(c for _, c in runs):.2f} |")


if __name__ == "__main__":
    main()
