"""`stability scan LIBRARY`: every model a library registers, built at a reduced size from its
default config, its recorded init judged against what it declares, and its residual stream
measured at two depths through its own forward, one row each (`stability.run.scan_rows`).

**One model, one job.** Each model is a `ScanJob`, run as `stability check` runs a spec: in a worker
process of its own (`stability.run.worker`), forked from a server that has imported the library
once, under a time limit for the whole model (the parent stops a worker past it), so a model that
hangs, crashes, exits or runs out of memory is a row saying so, never the end of the scan. In the
worker (`scan_one`):

1. **Reduce** (`stability.families.library_scan.plan_build`): the smallest rung of the ladder that
   builds on the meta device within the parameter limit; none: the row is "not built", with why.
2. **Init** (`stability.run.scan_init.judge_init`): the model built at the smaller depth under
   seed 0, its init recorded and judged by `init_conformance`; it fails: the row is "failed".
3. **Stream** at each depth (`scan_spec`: the model as a `family = "library"` spec with
   `[expect.residual_stream]`, measured by `stability.run.engine.evaluate` as `stability zoo` and
   `stability check --case` measure a case, the memory guard first): the four numbers of
   `stability.judge.stream.stream_numbers` on the case's network, or why they were not measured (a
   model whose inputs the harness cannot make — audio, several modalities at once — says so, and
   its init is still judged).

The rows go to the store as they finish (`stability.run.scan_store`), keyed by the library's
release and the harness's code version; `resume` skips the models stored already.
"""

from __future__ import annotations

import fnmatch
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from stability.run.executor import Emit, Executor, Job, Outcome, Trace
from stability.run.scan_rows import ScanRow, StreamAt

__all__ = [
    "ScanOptions",
    "ScanJob",
    "ScanRun",
    "scan_one",
    "scan_spec",
    "select",
    "run_scan",
    "start_case",
    "warm_up",
    "warm_up_spec",
    "DEPTHS",
]

#: The depths a scan builds each model at: its init is judged at the first, its stream measured at both.
DEPTHS: tuple[int, int] = (2, 4)


@dataclass(frozen=True, kw_only=True)
class ScanOptions:
    """How each model is scanned: the depths, the time limit of one model (seconds; None: none),
    the memory budget of one case (bytes; None: the guard's default), the parameter limit, the seed."""

    depths: tuple[int, int] = DEPTHS
    case_timeout: float | None = 120.0
    memory_budget: int | None = None
    max_parameters: int | None = None
    seed: int = 0


def _one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:400]


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def scan_spec(
    library: str, name: str, model: str, config: dict[str, Any], depths: tuple[int, int], modality: str
) -> Any:
    """The spec a model's stream is measured by (the module docstring): `family = "library"`, the
    model and its config — one for both `depths` where it names the depth (`"depth"`), else one
    config per depth (`depths` then a single depth) —, batch 2, one network, `[expect.residual_stream]`."""
    from stability.spec.load import validate_spec

    data = {
        "name": f"scan-{library}-{name}",
        "description": f"stability scan: {library} {name}",
        "family": "library",
        "block": {"layer": "tokens" if modality == "tokens" else "conv2d", "model": model, "config": config},
        "space": {"depth": list(depths), "width": 8, "batch": 2},
        "probe": {"ensemble": 1},
        "expect": {"residual_stream": {}},
    }
    return validate_spec(data, file=f"<scan {library}:{name}>")


def _stream_at(library: str, name: str, build: Any, depth: int, options: ScanOptions) -> StreamAt:
    from stability.errors import StabilityError
    from stability.judge.stream import stream_numbers
    from stability.run.engine import RunOptions, evaluate
    from stability.spec.case import corner_case

    if depth != options.depths[0] and not build.plan.layers:
        return StreamAt(
            depth=depth, error="not measured: no argument of its config counts layers, so every depth is one model"
        )
    if build.modality == "other":
        return StreamAt(
            depth=depth, error=f"not measured: {build.model} takes {build.input_name}, not token ids or images"
        )
    try:
        shared = build.template()  # one spec for both depths: the memory guard's estimate is made once
        config, depths = (shared, options.depths) if shared is not None else (build.config(depth), (depth, depth))
        spec = scan_spec(library, name, build.model, config, depths, build.modality)
        record = evaluate(
            spec, corner_case(spec, depth=depth), RunOptions(case_timeout=None, memory_budget=options.memory_budget)
        )
    except StabilityError as exc:
        return StreamAt(depth=depth, error=f"not measured: {exc}")
    m = record.measurements
    if m is None:
        return StreamAt(depth=depth, error=f"not measured: {record.error}")
    numbers = stream_numbers(m.grad_norm, m.act_var, m.act_sq_mean)
    return StreamAt(depth=depth, numbers={k: _finite(v) for k, v in numbers.items()})


def scan_one(library: str, name: str, also: Sequence[str], options: ScanOptions) -> ScanRow:
    """One model's row (the module docstring), here and now."""
    from stability.families.library_scan import MAX_PARAMETERS, ScanTarget, plan_build
    from stability.run.scan_init import judge_init

    t0 = time.perf_counter()
    target = ScanTarget(library=library, name=name, also=tuple(also))
    base: dict[str, Any] = {"library": library, "name": name, "also": tuple(also)}
    try:
        build = plan_build(target, depth=options.depths[0], max_parameters=options.max_parameters or MAX_PARAMETERS)
    except Exception as exc:  # noqa: BLE001 -- the library's own refusal of every rung: the row says why
        return ScanRow(**base, status="not built", reason=_one_line(exc), seconds=time.perf_counter() - t0)
    config = build.config(options.depths[0])
    built = {
        **base,
        "model": build.model,
        "rung": build.plan.rung,
        "parameters": build.parameters,
        "config": json.dumps(build.changed(options.depths[0]), default=repr),
        "modality": build.modality,
    }
    try:
        init = judge_init(build.model, config, seed=options.seed, file=f"<scan {library}:{name}>")
    except Exception as exc:  # noqa: BLE001 -- built on the meta device, but not for real
        return ScanRow(
            **built,
            status="failed",
            reason=f"its init could not be recorded: {_one_line(exc)}",
            seconds=time.perf_counter() - t0,
        )
    stream = tuple(_stream_at(library, name, build, d, options) for d in options.depths)
    return ScanRow(
        **built,
        status="judged",
        judged=init.judged,
        init_note=init.note,
        deviations=init.deviations,
        laws=init.laws,
        stream=stream,
        seconds=time.perf_counter() - t0,
    )


#: The most models `warm_up` tries, and its time limit for each (seconds).
WARM_UP_TRIES, WARM_UP_SECONDS = 4, 60

#: The fewest models a scan warms its server up for: each saves ~0.5 s of CPU, and the warm-up costs
#: one model's scan (a detection model's: 30 s), so a scan of a few models goes without.
WARM_UP_MODELS = 10


def warm_up_spec(library: str, only: str | None = None) -> str:
    """The forkserver's warm-up for a scan of the models of `library` that match `only`
    (`stability.run.processes.WARM_UP_ENV`; `warm_up`)."""
    return f"{__name__}:warm_up:{library}:{only or ''}"


def warm_up(argument: str) -> None:
    """Scan one model here and throw its row away (`argument`: `LIBRARY:ONLY`, the scan's library and
    its `--only`): run in the workers' server before any worker is forked (`warm_up_spec`), so each
    worker starts with everything a scan imports and initialises once (the modules of the recorder,
    the judge and the engine, the library's shared model code, torch's fake tensors) and pays only
    for its own model: transformers' BertModel took 1.9 s of CPU in a fresh worker and 0.3 s in one
    forked after this. The first of the scan's models whose stream is measured is the one (at most
    `WARM_UP_TRIES`, each stopped after `WARM_UP_SECONDS`; none where the scan has fewer than
    `WARM_UP_MODELS`: too little to share); its output goes nowhere. What a worker then measures is what it measured
    before: every build and draw is seeded by the job itself."""
    import contextlib
    import os
    import signal
    import sys

    from stability.families.library_scan import scan_targets

    library, _, only = argument.partition(":")
    names = select([t.name for t in scan_targets(library)], only or None)
    if len(names) < WARM_UP_MODELS:
        return

    def stop(signum: int, frame: Any) -> None:
        raise TimeoutError("the warm-up took too long")

    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    previous = signal.signal(signal.SIGALRM, stop)
    quiet = contextlib.ExitStack()
    try:
        for stream in (sys.stdout, sys.stderr):  # what Python buffered so far is not the warm-up's
            with contextlib.suppress(Exception):
                stream.flush()
        os.dup2(null, 1)  # the libraries' own output (C code's too) and Python's: nowhere
        os.dup2(null, 2)
        sink = quiet.enter_context(open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115
        quiet.enter_context(contextlib.redirect_stdout(sink))
        quiet.enter_context(contextlib.redirect_stderr(sink))
        for name in names[:WARM_UP_TRIES]:
            signal.alarm(WARM_UP_SECONDS)
            try:
                row = scan_one(library, name, (), ScanOptions(case_timeout=None))
            except Exception:  # noqa: BLE001, S112 -- a model that breaks: the next one
                continue
            finally:
                signal.alarm(0)
            if any(s.numbers for s in row.stream):
                return
    finally:
        quiet.close()
        signal.signal(signal.SIGALRM, previous)
        for fd, saved_fd in zip((1, 2), saved, strict=True):
            os.dup2(saved_fd, fd)
            os.close(saved_fd)
        os.close(null)


def start_case(options: ScanOptions) -> Any:
    """The case a scan job's "start" event names: the time limit covers the whole job from it."""
    from stability.spec.case import Case

    return Case(
        depth=options.depths[0],
        width=1,
        batch=2,
        spatial=None,
        input_width=None,
        weight_init="default",
        branch_init="default",
        dtype="float32",
        device="cpu",
        seed=options.seed,
    )


@dataclass(frozen=True)
class ScanJob(Job):
    """One model of a scan, run wherever the executor puts it (the module docstring)."""

    library: str
    name: str
    also: tuple[str, ...] = ()
    options: ScanOptions = field(default_factory=ScanOptions)

    @property
    def label(self) -> str:
        return f"{self.library}:{self.name}"

    @property
    def case_timeout(self) -> float | None:
        return self.options.case_timeout

    def execute(self, emit: Emit) -> dict[str, Any]:
        emit({"kind": "start", "case": start_case(self.options).as_dict()})  # the model is one "case" of the limit
        return scan_one(self.library, self.name, self.also, self.options).to_dict()

    def conclude(self, trace: Trace) -> Outcome:
        if trace.final is not None:
            row = ScanRow.from_dict(trace.final)
        else:
            timed_out = not trace.spec_error
            row = ScanRow(
                library=self.library,
                name=self.name,
                also=self.also,
                status="timed out" if timed_out else "failed",
                reason=trace.failure or "the worker did not finish",
                seconds=trace.seconds,
            )
        return Outcome(task=self, result=row)


def select(names: Sequence[str], only: str | None) -> list[str]:
    """The names matching `only` (comma-separated shell patterns, case-insensitive), all without it."""
    if not only:
        return list(names)
    patterns = [p.strip().lower() for p in only.split(",") if p.strip()]
    return [n for n in names if any(fnmatch.fnmatchcase(n.lower(), p) for p in patterns)]


@dataclass(kw_only=True)
class ScanRun:
    """A finished scan: its rows in the library's order, the release scanned, how many rows came
    from the store (`resumed`), the wall time and the workers' CPU time."""

    library: str
    release: str
    rows: list[ScanRow]
    resumed: int = 0
    seconds: float = 0.0
    cpu_seconds: float | None = None  # the workers' own CPU time, where the executor counts it


def run_scan(
    plan: Any,
    executor: Executor,
    *,
    store: Any = None,
    on_row: Callable[[int, ScanRow], None] | None = None,
) -> ScanRun:
    """Run the jobs of `plan` (a `stability.run.scan_plan.ScanPlan`) on `executor` (the module
    docstring); each row goes to `store` as it finishes and to `on_row` with its job's index."""
    t0 = time.perf_counter()
    index = {id(j): i for i, j in enumerate(plan.jobs)}

    def done(outcome: Outcome) -> None:
        row: ScanRow = outcome.result
        if store is not None:
            store.put(plan.release, plan.code, row)
        if on_row is not None:
            on_row(index[id(outcome.task)], row)

    cpu0 = getattr(executor, "cpu_seconds", None)
    fresh = {o.result.name: o.result for o in executor.map(plan.jobs, on_done=done)}
    rows = [plan.stored[n] if n in plan.stored else fresh[n] for n in plan.names]
    cpu = getattr(executor, "cpu_seconds", None)
    return ScanRun(
        library=plan.library,
        release=plan.release,
        rows=rows,
        resumed=len(plan.stored),
        seconds=time.perf_counter() - t0,
        cpu_seconds=None if cpu is None or cpu0 is None else cpu - cpu0,
    )
