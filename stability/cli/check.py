"""`stability check`: specs in, every expectation judged in worker processes, the reports and the
terminal output out, and the exit code (its meaning is in `stability.cli`). Everything up to the
first probe (the specs, the options, the report paths, the factories' signatures) is checked
without importing torch, so a usage error answers at once.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from stability.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NOTHING,
    EXIT_OK,
    EXIT_USAGE,
    factories_allowed,
    load_each,
)
from stability.errors import SpecError, UsageError
from stability.report.text import printable, write_command

if TYPE_CHECKING:
    from stability.run.engine import SpecResult
    from stability.spec.schema import Spec

__all__ = ["check_command"]


def _validate(args: argparse.Namespace, specs: list[Spec], devices: list[str]) -> int | None:
    """Everything that can be refused before any probing, without importing torch (so a usage
    error answers at once): the memory budget, source roots, the replayed case, the report paths,
    the heartbeat period. Returns the memory budget."""
    from stability.report.outputs import check_outputs
    from stability.report.progress import heartbeat_seconds
    from stability.run.devices import cuda_available
    from stability.run.guard import memory_budget, parse_size
    from stability.spec.case import parse_case_string

    budget = None
    if args.memory_budget is not None:
        try:
            budget = parse_size(args.memory_budget)
        except ValueError:
            raise UsageError(f"--memory-budget {args.memory_budget!r}: write a size like 4GiB or 512MiB") from None
    elif os.environ.get("STABILITY_MEMORY_BUDGET"):
        memory_budget("cpu")  # raises UsageError naming the variable
    for root in args.source_root or []:
        if not Path(root).is_dir():
            raise UsageError(f"--source-root {root}: is not a folder; give the folder that holds your factory modules")
    if args.case:
        if len(specs) != 1:
            raise UsageError(
                f"--case replays one case of one spec, but {len(specs)} specs were given; pass a single spec file"
            )
        for device in devices:
            case = parse_case_string(args.case, specs[0], device=device)
            if case.device.startswith("cuda") and not cuda_available():
                raise UsageError(
                    f"--case {args.case!r}: device={case.device} but CUDA is not available on this machine; "
                    "replay it with device=cpu"
                )
    if args.update_baseline and not args.baseline:
        raise UsageError("--update-baseline writes the --baseline FILE; give --baseline FILE too")
    from stability.cli.grammar import parser
    from stability.cli.usage import refuse_unused

    if args.in_process:
        refuse_unused(parser(), args, ["--jobs"], "--in-process runs the specs in this process, one at a time")
    if args.case:
        refuse_unused(parser(), args, ["--seed"], "--case replays one case, and the case names its own seed")
    check_outputs(
        json=args.json,
        junit=args.junit,
        html=args.html,
        sarif=args.sarif,
        baseline=args.baseline if args.update_baseline else None,
        inputs=[s.path for s in specs],
    )
    heartbeat_seconds()  # a bad $STABILITY_HEARTBEAT is refused now, not after the first spec
    return budget


def check_command(args: argparse.Namespace, console: Console, err: Console) -> int:
    """`stability check ARGS`: the exit code."""
    if args.changed:  # the pre-commit hook: changed files in, the specs they affect out
        from stability.run.changed import affected_specs

        args.paths = affected_specs(args.paths, roots=args.source_root or [])
        if not args.paths:
            print("stability: --changed: the changed files affect no spec; nothing to check", file=sys.stderr)
            return EXIT_OK
    from stability.report.baseline_load import load_baseline
    from stability.run.devices import resolve_devices

    # Everything up to the first probe is checked without torch: a usage error answers at once.
    specs, load_errors = load_each(args.paths)
    for exc in load_errors:
        print(f"stability: error: {printable(str(exc))}", file=sys.stderr)
    if args.device == "cuda":
        from stability.run.devices import cuda_available

        if not cuda_available():
            raise UsageError("--device cuda: CUDA is not available on this machine; use --device cpu or auto")
    devices = resolve_devices(args.device, available=True)
    if len(devices) < len(resolve_devices(args.device)):
        print(
            "stability: --device all: CUDA is not available on this machine, so the cuda runs are skipped",
            file=sys.stderr,
        )
    budget = _validate(args, specs, devices)
    baseline = load_baseline(args.baseline, update=args.update_baseline) if args.baseline else None
    roots = [str(Path(r).resolve()) for r in args.source_root or []]
    specs, refused = factories_allowed(specs, roots)
    load_errors += refused
    if not args.in_process:
        from stability.run.processes import start_server
        from stability.spec.load import preload_modules

        start_server(
            preload_modules(args.paths)
        )  # the server imports torch (and the specs' libraries) while this process imports the rest
    return _run_checks(
        args, console, err, specs, load_errors, devices=devices, budget=budget, baseline=baseline, roots=roots
    )


def _run_checks(
    args: argparse.Namespace,
    console: Console,
    err: Console,
    specs: list[Spec],
    load_errors: list[SpecError],
    *,
    devices: list[str],
    budget: int | None,
    baseline: Any,
    roots: list[str],
) -> int:
    """Run the validated specs, write the reports, print the terminal output; the exit code."""
    import torch

    from stability.families.factory import roots_environment, source_roots
    from stability.report.formats import judged_count, write_json, write_junit
    from stability.report.progress import RunProgress, heartbeat_seconds, mode_for
    from stability.run.engine import RunOptions
    from stability.run.executor import Outcome, Task
    from stability.run.executors import executor_for
    from stability.run.plugins import plugins_environment
    from stability.run.worker import deep_stack, default_threads

    threads = args.threads or default_threads()
    if args.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        if args.in_process:
            torch.use_deterministic_algorithms(True)
    tasks: list[Task] = []
    skipped: list[str] = []
    for device in devices:
        options = RunOptions(
            profile=args.profile,
            device=device,
            case_timeout=args.case_timeout or None,
            memory_budget=budget,
            deterministic=args.deterministic,
            seed=args.seed,
        )
        for spec in specs:
            if device not in spec.space.device and not args.case:
                skipped.append(f"{spec.name} ({device} not in space.device)")
                continue
            tasks.append(Task(spec, options, args.case, args.only))
    if args.in_process:
        torch.set_num_threads(threads)  # this process is the worker
        deep_stack()  # and frees the probes' graphs: the stack a worker gets (stability/run/worker.py)
    env = plugins_environment(args.plugin, roots_environment(roots))
    executor = executor_for(
        "in-process" if args.in_process else "workers",
        jobs=args.jobs,
        threads=threads,
        env=env,
        capture=not args.no_capture,
    )
    t0 = time.perf_counter()
    done: dict[int, Outcome] = {}
    order = {id(t): i for i, t in enumerate(tasks)}
    interrupted = False
    from stability.report.render import Renderer

    renderer = (
        Renderer() if args.html else None
    )  # plots drawn in the background as each spec finishes (stability/report/render.py)
    labels = [t.spec.name + (f" [{t.options.device}]" if len(devices) > 1 else "") for t in tasks]
    progress = RunProgress(
        labels,
        mode=mode_for(console, quiet=args.quiet),
        out=console,
        err=err,
        workers=executor.workers,
        heartbeat=heartbeat_seconds(),
    )
    try:
        with progress, source_roots(roots if args.in_process else []):

            def finished(outcome: Outcome) -> None:
                index = order[id(outcome.task)]
                done[index] = outcome
                progress.finished(index, outcome.result)
                if renderer is not None and outcome.result is not None:
                    renderer.submit(outcome.result)

            executor.map(tasks, on_done=finished)
    except KeyboardInterrupt:
        interrupted = True
    seconds = time.perf_counter() - t0
    outcomes = [done[i] for i in sorted(done)]
    results = [o.result for o in outcomes]
    errors = [str(e) for e in load_errors] + [o.error for o in outcomes if o.error]
    spec_errors = {o.task.spec.path: o.error for o in outcomes if o.error}
    if interrupted:  # a partial run must not replace the last complete report
        _terminal(
            results,
            console,
            time.perf_counter() - t0,
            table=True,
            interrupted=True,
            spec_errors=spec_errors,
            workers=executor.workers,
        )
        if renderer is not None:
            renderer.close()
        kept = [f for f in (args.json, args.junit, args.html) if f]
        if kept:
            print(
                f"stability: interrupted; not written (any previous report is left as it was): {', '.join(kept)}",
                file=sys.stderr,
            )
        return EXIT_INTERRUPTED
    if args.suggest:  # the remedies, by the one computation `stability suggest` runs (stability/run/suggest.py)
        _suggestions(args, outcomes, executor, roots, spec_errors)
    # CI outputs (docs/ci.md): what each spec's numbers depend on, and the baseline's cases
    # replayed on this code by the same executor (stability/report/baseline.py).
    from stability.report import baseline as against
    from stability.report import github
    from stability.report.provenance import provenance as provenance_of

    with source_roots(roots):
        provenance = {s.path: provenance_of(s) for s in specs} if args.json or args.baseline else None
    comparison = None
    if baseline is not None:

        def replay(more: list[Task]) -> list[Outcome]:
            with source_roots(roots if args.in_process else []):
                return list(executor.map(more))

        comparison = against.compare(
            baseline, outcomes, replay=replay, provenances=provenance, update=args.update_baseline
        )
    compared = comparison.to_json() if comparison is not None else None
    unloaded = [(e.file, str(e)) for e in load_errors]
    # The reports first: whatever happens to the terminal afterwards, they are complete.
    t_reports = time.perf_counter()
    if args.json:
        write_json(args.json, results, seconds=seconds, errors=errors, provenance=provenance, baseline=compared)
    if args.junit:
        write_junit(args.junit, results, seconds=seconds, load_errors=unloaded)
    if args.html:
        from stability.report.html import write_html

        with renderer or Renderer() as plots:
            write_html(args.html, results, seconds=seconds, pngs=plots.pngs, comparison=comparison)
    if args.sarif:
        from stability.report.sarif import write_sarif

        write_sarif(args.sarif, results, load_errors=unloaded, comparison=comparison)
    if (
        args.update_baseline and errors
    ):  # a spec not judged has no entries: writing would drop its old ones (docs/ci.md)
        print(
            f"stability: --update-baseline: {printable(args.baseline)} not written (left as it was): "
            f"{len(errors)} spec(s) could not be judged, "
            "and a baseline written now would hold no entries for them; fix the errors above and run again",
            file=sys.stderr,
        )
    elif args.update_baseline:
        write_json(args.baseline, results, seconds=seconds, errors=errors, provenance=provenance, baseline=compared)
    on_github = github.enabled(args.github)
    if on_github and (
        problem := github.write_summary(
            github.job_summary(results, seconds=seconds, errors=errors, comparison=comparison)
        )
    ):
        print(problem, file=sys.stderr)
    reports = time.perf_counter() - t_reports
    _terminal(
        results,
        console,
        time.perf_counter() - t0,
        table=not args.quiet,
        interrupted=False,
        spec_errors=spec_errors,
        reports=reports,
        workers=executor.workers,
    )
    if comparison is not None:
        against.print_comparison(comparison, console, quiet=args.quiet)
    for line in github.workflow_commands(results, load_errors=unloaded, comparison=comparison) if on_github else []:
        write_command(line)  # the one kind of line written past the log's neutralisation (stability/report/text.py)
    for o in outcomes:
        if o.error:
            print(f"stability: error: {printable(o.error)}", file=sys.stderr)
    if errors:
        return EXIT_USAGE
    if not all(r.met for r in results) or (comparison is not None and comparison.failed):
        return EXIT_FAILED
    if comparison is not None and not comparison.update and comparison.compared == 0:
        print(
            f"stability: error: nothing was compared against the baseline {printable(args.baseline)}: "
            f"{_why_not_compared(comparison)}; exit code {EXIT_NOTHING}",
            file=sys.stderr,
        )
        return EXIT_NOTHING
    if judged_count(results) == 0:
        why = []
        if skipped:
            why.append(f"skipped for their device: {', '.join(skipped)}")
        if args.only and not any(r.name == args.only for res in results for r in res.results):
            why.append(f"no spec declares --only {args.only}")
        off = [r for res in results for r in res.results if r.skipped]
        if off:  # each says which profiles run it: stability.run.engine.skipped_in_profile
            why.append(f"{len(off)} skipped in this profile, e.g. {printable(off[0].message)}")
        if any(not r.skipped for res in results for r in res.results):
            why.append("no declared invariant applied to the case")
        print(
            f"stability: error: nothing was judged ({'; '.join(why) or 'no spec ran'}); exit code {EXIT_NOTHING}",
            file=sys.stderr,
        )
        return EXIT_NOTHING
    return EXIT_OK


def _why_not_compared(comparison: Any) -> str:
    """Why a baseline comparison compared nothing, in words."""
    if comparison.deltas:
        return f"its {len(comparison.deltas)} entries for these specs could not be compared (listed above)"
    return (
        "it holds no entry for the specs, invariants and devices this run judged (a baseline of other specs, "
        "or written from another folder: spec files are keyed relative to the folder the check runs in)"
    )


def _suggestions(
    args: argparse.Namespace, outcomes: list[Any], executor: Any, roots: list[str], spec_errors: dict[str, str]
) -> None:
    """`check --suggest`: each spec with an unmet expectation gets its `Suggestions` (on its
    `SpecResult`, which every report renders), from the run just made."""
    from stability.families.factory import source_roots
    from stability.run.suggest import failing_expectations, suggest

    for o in outcomes:
        res = o.result
        if res is None or o.error or res.spec.path in spec_errors or not failing_expectations(res, args.only):
            continue
        try:
            with source_roots(roots if args.in_process else []):
                res.suggestions = suggest(
                    res.spec.path, options=o.task.options, executor=executor, only=args.only, result=res
                )
        except SpecError as exc:  # the file changed under the run: the verdicts stand, without a suggestion
            print(f"stability: warning: --suggest: {printable(str(exc))}", file=sys.stderr)


def _terminal(
    results: list[SpecResult],
    console: Console,
    seconds: float,
    *,
    table: bool,
    interrupted: bool,
    spec_errors: dict[str, str] | None = None,
    reports: float | None = None,
    workers: int = 1,
) -> None:
    """The table, the failures and the summary line. A closed stdout (`| head -1`, `| true`) only
    silences the rest of the output (`stability.run.streams`, around `main`): it changes neither
    the reports nor the exit code."""
    from stability.report.formats import print_failures, print_notes, print_table, summary_line

    if table and results:
        print_table(results, console)
        print_notes(results, console)
    print_failures(results, console, spec_errors=spec_errors)
    if (
        not results and not interrupted
    ):  # no spec ran (each refused, its error printed above): a "0 spec(s)" line would only bury those errors
        return
    console.print(
        summary_line(results, seconds, interrupted=interrupted, reports=reports, workers=workers),
        highlight=False,
        soft_wrap=True,
    )  # one line in a CI log, however long
    console.file.flush()
