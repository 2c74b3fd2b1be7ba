"""The `stability` command: check, list, explain, schema.

Exit codes: 0 at least one expectation judged and every one met; 1 some expectation not met (the
CI gate); 2 bad spec, bad usage, an unreadable input or a spec that could not run (a broken
factory, a crashed worker), reported after every other spec has run (one line on stderr each,
never a traceback); 5 nothing was judged (pytest's "no tests ran"); 130 interrupted (after the
partial summary). `check` runs every spec in its own worker process (`stability.run.worker`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from rich.console import Console

from stability.errors import SpecError, StabilityError, UsageError, did_you_mean
from stability.report.text import printable
from stability.run.devices import CHOICES as DEVICE_CHOICES
from stability.spec.registry import INVARIANTS

if TYPE_CHECKING:
    from stability.run.engine import SpecResult
    from stability.spec.schema import Spec

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: Nothing was judged (every spec skipped for its device, --only naming an undeclared invariant, a
#: replayed case no invariant applies to): pytest's "no tests were collected" code.
EXIT_NOTHING = 5


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def _parser() -> argparse.ArgumentParser:

    from stability._version import __version__

    p = _Parser(prog="stability", description="Property-based stability checks for deep networks.")
    p.add_argument("--version", action="version", version=f"stability {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    plugins = _Parser(add_help=False)
    plugins.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module (or .py file) that registers invariants or families, imported in every process of the run (repeatable; also $STABILITY_PLUGINS)",
    )

    c = sub.add_parser("check", parents=[plugins], help="check specs and exit non-zero when an expectation is not met")
    c.add_argument("paths", nargs="*", help="spec files or folders (default: ./specs)")
    c.add_argument("--profile", choices=["ci", "dev", "thorough"], help="search budget (default: STABILITY_PROFILE, else ci under CI, else dev)")
    c.add_argument("--device", default="cpu", choices=list(DEVICE_CHOICES), help="where cases run (default cpu)")
    c.add_argument("--case", help="replay one case, e.g. depth=23,width=8,init=xavier_normal,seed=5")
    c.add_argument("--only", metavar="INVARIANT", help=f"check one invariant ({', '.join(INVARIANTS.names())}, or a plugin's)")
    c.add_argument("--json", metavar="FILE", help="write the machine-readable report")
    c.add_argument("--junit", metavar="FILE", help="write JUnit XML (one testcase per spec and invariant)")
    c.add_argument("--html", metavar="DIR", help="write a self-contained HTML report with plots")
    c.add_argument("--case-timeout", type=_seconds, default=120.0, metavar="S", help="per-case time limit in seconds (default 120; 0 = none)")
    c.add_argument("--memory-budget", metavar="SIZE", help="refuse cases estimated above SIZE (e.g. 4GiB; default half the free RAM)")
    c.add_argument("--deterministic", action="store_true", help="torch.use_deterministic_algorithms(True) (for CUDA runs)")
    c.add_argument("--quiet", "-q", action="store_true", help="only the summary and failures")
    c.add_argument("--jobs", "-j", type=_count("jobs", auto=True), default="auto", metavar="N", help="run N specs at once, each in its own worker process (default auto: one per usable core)")
    c.add_argument("--threads", type=_count("threads"), default=None, metavar="N", help="torch threads per worker (default: STABILITY_THREADS, else 1)")
    c.add_argument("--source-root", action="append", metavar="DIR", help="a folder whose .py files custom factories may come from, besides each spec's own folder (repeatable)")
    c.add_argument("--in-process", action="store_true", help="run specs in this process, without worker isolation (for debugging; a factory can then change global state; its output is not captured)")
    c.add_argument(
        "-s",
        "--no-capture",
        action="store_true",
        help="let the specs' own code (factories, blocks) print to this terminal as it runs; by default what it prints is captured and shown with the spec's failures",
    )
    c.add_argument("--seed", type=int, default=None, metavar="N", help="Hypothesis seed for the search, to repeat a dev or thorough run (default: random; ci is derandomized)")
    c.add_argument("--sarif", metavar="FILE", help="write SARIF 2.1.0 (code scanning: one result per unmet expectation, at its line in the spec)")
    c.add_argument(
        "--github",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="GitHub Actions job summary ($GITHUB_STEP_SUMMARY) and ::error annotations on the specs' lines (default: on when GITHUB_ACTIONS=true)",
    )
    c.add_argument("--baseline", metavar="FILE", help="compare each expectation's number with this JSON report's, on its cases; exit 1 when one moved toward its bound past its drift")
    c.add_argument("--update-baseline", action="store_true", help="write this run's JSON report to the --baseline FILE (the comparison is shown, not failed on)")
    c.add_argument("--changed", action="store_true", help="the paths are changed files (and spec folders, default ./specs): check the specs they change, directly or through a factory module")

    ls = sub.add_parser("list", parents=[plugins], help="list specs, the families they use, and every registered invariant and family")
    ls.add_argument("paths", nargs="*")

    e = sub.add_parser("explain", parents=[plugins], help="what an invariant means, why it fails, and the usual fixes")
    e.add_argument("invariant", nargs="?")

    sub.add_parser("schema", parents=[plugins], help="print the JSON Schema of the spec format")

    sw = sub.add_parser("sweep", parents=[plugins], help="a spec over a grid: phase diagrams and depth budgets, stored in SQLite (docs/sweeps.md)")
    sw.add_argument("spec", nargs="?", help="one spec file")
    sw.add_argument("--over", action="append", default=[], metavar="KEY=VALUES", help="an axis, e.g. depth=log:2:1024:10, sigma_w2=lin:0.5:3:11, width=64,256 (repeat for more)")
    sw.add_argument("--seeds", type=int, default=8, metavar="N", help="seeds per point, the ensemble (default 8)")
    sw.add_argument("--first-seed", type=int, metavar="S", help="first seed of the ensemble (default: the spec's first seed)")
    sw.add_argument("--depth-range", metavar="LO:HI", help="depths the budget bisection searches (default: the depth axis's range, else the spec's)")
    sw.add_argument("--no-budget", action="store_true", help="only the grid, no depth budgets")
    sw.add_argument("--db", default=None, metavar="PATH", help="results database (default .stability/results.sqlite)")
    sw.add_argument("--resume", action="store_true", help="rerun the last unfinished sweep recorded in the database (stored points are never recomputed)")
    sw.add_argument("--compare", nargs=2, metavar=("REV_A", "REV_B"), help="budgets that moved between two code versions (git revisions); exit 1 if one went down")
    sw.add_argument("--serial", action="store_true", help="run in this process instead of on Dask workers")
    sw.add_argument("--workers", type=int, metavar="N", help="local Dask worker processes (default: one per CPU core; at most 4 per core)")
    sw.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="use a running Dask cluster instead of a local one")
    sw.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where points run (cuda points need workers with the GPU resource)")
    sw.add_argument("--html", metavar="DIR", help="write the report with the phase diagrams to DIR/index.html")
    sw.add_argument("--x", metavar="KEY", help="the phase diagrams' x axis, a swept key (default: the swept axis with the most values; the others are facets)")
    sw.add_argument("--only", metavar="INVARIANT", help="sweep one of the invariants the spec declares")
    sw.add_argument("--case-timeout", type=_seconds, default=120.0, metavar="S", help="per-case time limit in seconds, enforced by the parent on every backend (default 120; 0 = none)")
    sw.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    sw.add_argument("--verbose", action="store_true", help="let the Dask cluster's own log warnings (workers restarted or killed at shutdown) reach stderr")
    from stability.zoo_cli import add_zoo_parser

    add_zoo_parser(sub, [plugins])
    return p


def _default_paths(paths: list[str]) -> list[str]:
    if paths:
        return paths
    if not Path("specs").is_dir():
        raise UsageError("no path given and there is no ./specs folder; run `stability check PATH` with a spec file or folder")
    return ["specs"]


def _load_all(paths: list[str]) -> list[Spec]:
    specs, errors = _load_each(paths)
    if errors:
        for exc in errors[:-1]:
            print(f"stability: error: {printable(str(exc))}", file=sys.stderr)
        raise errors[-1]
    return specs


def _load_each(paths: list[str]) -> tuple[list[Spec], list[SpecError]]:
    """Every spec that loads, and one SpecError per file that does not. Two specs with one name
    are refused outright (UsageError-like SpecError, nothing runs): the reports key on names."""
    from stability.spec.load import find_specs, load_spec

    files = find_specs(list(_default_paths(paths)))
    if not files:
        raise UsageError(f"{', '.join(paths) or 'specs'}: no *.toml spec files found; add one (see `stability schema`)")
    specs: list[Spec] = []
    errors: list[SpecError] = []
    for f in files:
        try:
            specs.append(load_spec(f))
        except SpecError as exc:
            errors.append(exc)
    names: dict[str, str] = {}
    for s in specs:
        if s.name in names:
            for error in errors:
                print(f"stability: error: {printable(str(error))}", file=sys.stderr)
            raise SpecError(s.path, "name", f"is already used by {names[s.name]}", value=s.name, fix="give each spec a unique name")
        names[s.name] = s.path
    return specs, errors


def _seconds(text: str) -> float:
    """--case-timeout: seconds ≥ 0, finite (0 = no limit)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time limit; give seconds ≥ 0 (0 = no limit)")
    return value


def _count(option: str, *, auto: bool = False) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if auto and text == "auto":
            return _cores()
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"{text!r} is not a count; give a whole number ≥ 1" + (" or auto" if auto else ""))
        return value

    parse.__name__ = option
    return parse


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


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
            raise UsageError(f"--case replays one case of one spec, but {len(specs)} specs were given; pass a single spec file")
        for device in devices:
            case = parse_case_string(args.case, specs[0], device=device)
            if case.device.startswith("cuda") and not cuda_available():
                raise UsageError(f"--case {args.case!r}: device={case.device} but CUDA is not available on this machine; replay it with device=cpu")
    if args.update_baseline and not args.baseline:
        raise UsageError("--update-baseline writes the --baseline FILE; give --baseline FILE too")
    check_outputs(json=args.json, junit=args.junit, html=args.html, sarif=args.sarif, baseline=args.baseline if args.update_baseline else None, inputs=[s.path for s in specs])
    heartbeat_seconds()  # a bad $STABILITY_HEARTBEAT is refused now, not after the first spec
    return budget


def _check(args: argparse.Namespace, console: Console, err: Console) -> int:
    if args.changed:  # the pre-commit hook: changed files in, the specs they affect out
        from stability.run.changed import affected_specs

        args.paths = affected_specs(args.paths, roots=args.source_root or [])
        if not args.paths:
            print("stability: --changed: the changed files affect no spec; nothing to check", file=sys.stderr)
            return EXIT_OK
    from stability.report.baseline import load_baseline
    from stability.run.devices import resolve_devices

    # Everything up to the first probe is checked without torch: a usage error answers at once.
    specs, load_errors = _load_each(args.paths)
    for exc in load_errors:
        print(f"stability: error: {printable(str(exc))}", file=sys.stderr)
    if args.device == "cuda":
        from stability.run.devices import cuda_available

        if not cuda_available():
            raise UsageError("--device cuda: CUDA is not available on this machine; use --device cpu or auto")
    devices = resolve_devices(args.device, available=True)
    if len(devices) < len(resolve_devices(args.device)):
        print("stability: --device all: CUDA is not available on this machine, so the cuda runs are skipped", file=sys.stderr)
    budget = _validate(args, specs, devices)
    baseline = load_baseline(args.baseline, update=args.update_baseline) if args.baseline else None
    roots = [str(Path(r).resolve()) for r in args.source_root or []]
    specs, refused = _factories_allowed(specs, roots)
    load_errors += refused
    if not args.in_process:
        from stability.run.processes import start_server
        from stability.spec.load import preload_modules

        start_server(preload_modules(args.paths))  # the server imports torch (and the specs' libraries) while this process imports the rest
    return _run_checks(args, console, err, specs, load_errors, devices=devices, budget=budget, baseline=baseline, roots=roots)


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
    from stability.run.executor import Outcome, Task, executor_for
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
        options = RunOptions(profile=args.profile, device=device, case_timeout=args.case_timeout or None, memory_budget=budget, deterministic=args.deterministic, seed=args.seed)
        for spec in specs:
            if device not in spec.space.device and not args.case:
                skipped.append(f"{spec.name} ({device} not in space.device)")
                continue
            tasks.append(Task(spec, options, args.case, args.only))
    if args.in_process:
        torch.set_num_threads(threads)  # this process is the worker
        deep_stack()  # and frees the probes' graphs: the stack a worker gets (stability/run/worker.py)
    env = plugins_environment(args.plugin, roots_environment(roots))
    executor = executor_for("in-process" if args.in_process else "workers", jobs=args.jobs, threads=threads, env=env, capture=not args.no_capture)
    t0 = time.perf_counter()
    done: dict[int, Outcome] = {}
    order = {id(t): i for i, t in enumerate(tasks)}
    interrupted = False
    from stability.report.render import Renderer

    renderer = Renderer() if args.html else None  # plots drawn in the background as each spec finishes (stability/report/render.py)
    labels = [t.spec.name + (f" [{t.options.device}]" if len(devices) > 1 else "") for t in tasks]
    progress = RunProgress(labels, mode=mode_for(console, quiet=args.quiet), out=console, err=err, workers=executor.workers, heartbeat=heartbeat_seconds())
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
        _terminal(results, console, time.perf_counter() - t0, table=True, interrupted=True, spec_errors=spec_errors, workers=executor.workers)
        if renderer is not None:
            renderer.close()
        kept = [f for f in (args.json, args.junit, args.html) if f]
        if kept:
            print(f"stability: interrupted; not written (any previous report is left as it was): {', '.join(kept)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    # CI outputs (docs/ci.md): what each spec's numbers depend on, and the baseline's cases
    # replayed on this code by the same executor (stability/report/baseline.py).
    from stability.report import baseline as against
    from stability.report import github

    with source_roots(roots):
        provenance = {s.path: against.provenance(s) for s in specs} if args.json or args.baseline else None
    comparison = None
    if baseline is not None:

        def replay(more: list[Task]) -> list[Outcome]:
            with source_roots(roots if args.in_process else []):
                return list(executor.map(more))

        comparison = against.compare(baseline, outcomes, replay=replay, provenances=provenance, update=args.update_baseline)
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
    if args.update_baseline:
        write_json(args.baseline, results, seconds=seconds, errors=errors, provenance=provenance, baseline=compared)
    on_github = github.enabled(args.github)
    if on_github and (problem := github.write_summary(github.job_summary(results, seconds=seconds, errors=errors, comparison=comparison))):
        print(problem, file=sys.stderr)
    reports = time.perf_counter() - t_reports
    _terminal(results, console, time.perf_counter() - t0, table=not args.quiet, interrupted=False, spec_errors=spec_errors, reports=reports, workers=executor.workers)
    if comparison is not None:
        against.print_comparison(comparison, console, quiet=args.quiet)
    for line in github.workflow_commands(results, load_errors=unloaded, comparison=comparison) if on_github else []:
        print(line, flush=True)
    for o in outcomes:
        if o.error:
            print(f"stability: error: {printable(o.error)}", file=sys.stderr)
    if errors:
        return EXIT_USAGE
    if not all(r.met for r in results) or (comparison is not None and comparison.failed):
        return EXIT_FAILED
    if judged_count(results) == 0:
        why = []
        if skipped:
            why.append(f"skipped for their device: {', '.join(skipped)}")
        if args.only and not any(r.name == args.only for res in results for r in res.results):
            why.append(f"no spec declares --only {args.only}")
        if any(res.results for res in results):
            why.append("no declared invariant applied to the case")
        print(f"stability: error: nothing was judged ({'; '.join(why) or 'no spec ran'}); exit code {EXIT_NOTHING}", file=sys.stderr)
        return EXIT_NOTHING
    return EXIT_OK


def _factories_allowed(specs: list[Spec], roots: list[str]) -> tuple[list[Spec], list[SpecError]]:
    """Custom specs whose factory is found under the factory rule (by path, importing nothing)
    and whose signature, read from its source, takes every `factory_args` key and asks for nothing
    unfilled (`stability.families.factory.check_factory`); one SpecError, printed now, for each
    spec refused: it does not run."""
    from stability.families.factory import check_factory, source_roots
    from stability.spec.registry import FAMILIES

    allowed: list[Spec] = []
    refused: list[SpecError] = []
    with source_roots(roots):
        for spec in specs:
            try:
                if FAMILIES.get(spec.family).user_code and spec.block.factory:
                    check_factory(spec)
                allowed.append(spec)
            except SpecError as exc:
                print(f"stability: error: {printable(str(exc))}", file=sys.stderr)
                refused.append(exc)
    return allowed, refused


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
    from stability.report.formats import print_failures, print_table, summary_line

    if table and results:
        print_table(results, console)
    print_failures(results, console, spec_errors=spec_errors)
    console.print(summary_line(results, seconds, interrupted=interrupted, reports=reports, workers=workers), highlight=False)
    console.file.flush()


def _list(args: argparse.Namespace, console: Console) -> int:
    from rich.markup import escape
    from rich.table import Table

    from stability.spec.registry import FAMILIES

    specs = _load_all(args.paths)
    t = Table(header_style="bold")
    for col in ("spec", "family", "layer", "invariants (expect)", "file"):
        t.add_column(col)
    for s in specs:
        inv = ", ".join(f"{n} ({e.expect})" for n, e in s.invariants())
        t.add_row(escape(s.name), s.family, s.block.layer, inv, escape(s.path))
    console.print(t)
    fam = Table(header_style="bold", title="families")
    fam.add_column("family")
    fam.add_column("block")
    for f in FAMILIES:
        fam.add_row(f.name, escape(f.description))
    console.print(fam)
    known = Table(header_style="bold", title="invariants (stability explain NAME)")
    known.add_column("invariant")
    known.add_column("judged on")
    known.add_column("what it checks")
    for entry in INVARIANTS:
        known.add_row(entry.name, "an optimizer run" if entry.training else "the probe", escape(entry.summary))
    console.print(known)
    return EXIT_OK


def _explain(args: argparse.Namespace, console: Console) -> int:
    from stability.report.explain import explain_text

    console.print(explain_text(args.invariant), highlight=False, markup=False)
    return EXIT_OK


def _schema() -> int:
    from stability.spec.schema import spec_schema

    print(json.dumps(spec_schema(), indent=2))
    return EXIT_OK


def _sweep(args: argparse.Namespace, console: Console, err: Console, argv: list[str] | None) -> int:
    from stability.sweep_cli import sweep_command

    return sweep_command(args, console, err, list(sys.argv[1:] if argv is None else argv))


def main(argv: list[str] | None = None) -> int:
    """The command line. The exit code is the verdict's: a closed or broken stdout or stderr only
    loses terminal output (stability/run/streams.py)."""
    from stability.run.streams import tolerant_streams

    with tolerant_streams():
        return _command(argv)


def _command(argv: list[str] | None) -> int:
    console = Console(highlight=False)
    if not console.is_terminal:  # logs and CI: wide enough for one line per row
        console = Console(highlight=False, width=max(console.width, 160))
    err = Console(stderr=True, highlight=False)
    try:
        args = _parser().parse_args(argv)
        from stability.run.plugins import load_plugins

        load_plugins(getattr(args, "plugin", []))
        only = getattr(args, "only", None)
        if only is not None and only not in INVARIANTS:
            raise UsageError(f"--only {only}: unknown invariant{did_you_mean(only, INVARIANTS.names())}; choose one of {', '.join(INVARIANTS.names())}")
        if args.command == "check":
            return _check(args, console, err)
        if args.command == "list":
            return _list(args, console)
        if args.command == "explain":
            return _explain(args, console)
        if args.command == "sweep":
            return _sweep(args, console, err, argv)
        if args.command == "zoo":
            from stability.zoo_cli import zoo_command

            return zoo_command(args, console, err)
        return _schema()
    except StabilityError as exc:
        print(f"stability: error: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("stability: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
