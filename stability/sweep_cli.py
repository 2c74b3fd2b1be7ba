"""The `stability sweep` command: arguments → a sweep on a backend → the terminal table and the
HTML report. `stability sweep --compare A B` reads budgets from the store instead.

Exit codes: 0 done; 1 `--compare` found a budget that went down; 2 bad usage; 130 interrupted
(every point finished so far is already in the store: `--resume` continues).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from stability.errors import UsageError
from stability.run.store import DEFAULT_DB, Budget, Store, budget_text

__all__ = ["sweep_command", "print_budgets"]

#: Options that choose where points run, not what they compute: kept from the current command
#: line when `--resume` reruns a recorded sweep.
_BACKEND_FLAGS = {"--serial": 0, "--workers": 1, "--scheduler": 1, "--quiet": 0, "-q": 0, "--html": 1}


def _backend_args(argv: list[str]) -> list[str]:
    out, i = [], 0
    while i < len(argv):
        flag = argv[i].split("=", 1)[0]
        if flag in _BACKEND_FLAGS:
            n = 0 if "=" in argv[i] else _BACKEND_FLAGS[flag]
            out.extend(argv[i : i + 1 + n])
            i += 1 + n
        else:
            i += 1
    return out


def _recorded_args(argv: list[str]) -> list[str]:
    """The command line minus `--resume` and the backend options (what a resume reruns)."""
    out, i = [], 0
    while i < len(argv):
        flag = argv[i].split("=", 1)[0]
        if flag == "--resume":
            i += 1
        elif flag in _BACKEND_FLAGS:
            i += 1 + (0 if "=" in argv[i] else _BACKEND_FLAGS[flag])
        else:
            out.append(argv[i])
            i += 1
    return out


def _depth_range(text: str) -> tuple[int, int]:
    lo, sep, hi = text.partition(":")
    try:
        a, b = int(lo), int(hi)
    except ValueError:
        raise UsageError(f"--depth-range {text!r}: write LO:HI with whole numbers, e.g. 1:1024") from None
    if not sep or not 1 <= a <= b:
        raise UsageError(f"--depth-range {text!r}: need 1 <= LO <= HI, e.g. 1:1024")
    return a, b


def _backend(args: argparse.Namespace) -> Any:
    """Where the points run (stability.run.executor.executor_for): `--serial` in one worker process
    at a time (each point isolated from the next), else on Dask."""
    from stability.run.executor import executor_for
    from stability.run.plugins import plugins_environment

    if args.device == "cuda" and not args.scheduler:
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda: CUDA is not available on this machine; use --device cpu, or --scheduler with GPU workers")
    if args.serial:
        if args.scheduler or args.workers:
            raise UsageError("--serial runs one point at a time on this machine; drop --workers / --scheduler, or drop --serial")
        return executor_for("workers", jobs=1, threads=1, env=plugins_environment(args.plugin))
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers {args.workers}: give at least 1, or --serial")
    try:
        return executor_for("dask", jobs=args.workers or 0, scheduler=args.scheduler, gpu=args.device == "cuda", env=plugins_environment(args.plugin))
    except ImportError:
        raise UsageError("Dask distributed is not installed: pip install 'stability[sweep]', or run with --serial") from None
    except OSError as exc:
        raise UsageError(f"--scheduler {args.scheduler}: cannot connect ({exc}); check the address, or run without --scheduler") from None


def sweep_command(args: argparse.Namespace, console: Console, err: Console, argv: list[str]) -> int:
    from stability.spec.load import load_spec

    db = args.db or DEFAULT_DB
    if args.compare:
        with Store(db) as store:
            return _compare(store, args.compare, console)
    if args.resume:
        with Store(db) as store:
            last = store.last_unfinished()
        if last is None:
            if not args.spec:
                raise UsageError(f"--resume: no unfinished sweep is recorded in {db}; start one with `stability sweep SPEC --over ...`")
        else:
            from stability.cli import _parser

            resumed = last[1] + _backend_args(argv)
            console.print(f"resuming sweep {last[0]}: stability {' '.join(resumed)}", highlight=False)
            args = _parser().parse_args(resumed)
            args.db = db
            args.resumed_id = last[0]
    if not args.spec:
        raise UsageError("stability sweep: give a spec file, e.g. stability sweep specs/plain_mlp.toml --over depth=log:2:1024:10")
    from stability.run.grid import parse_axis

    axes = [parse_axis(text) for text in args.over]
    spec = load_spec(args.spec)
    names = swept_invariants(spec, args.only)
    if args.seeds < 1:
        raise UsageError(f"--seeds {args.seeds}: give at least 1 seed per point")
    first = spec.space.seed[0] if args.first_seed is None else args.first_seed
    if first < 0:
        raise UsageError(f"--first-seed {first}: seeds are >= 0")
    seeds = list(range(first, first + args.seeds))
    depth_range = _depth_range(args.depth_range) if args.depth_range else None
    if args.html:
        from stability.report.outputs import check_outputs

        check_outputs(json=None, junit=None, html=args.html)  # the rules of `stability check --html`
    from stability.run.sweep import code_version, run_sweep

    version = code_version()
    Store(db).close()  # a bad --db is reported before a cluster starts
    backend = _backend(args)
    store = Store(db)
    resumed_id = getattr(args, "resumed_id", None)
    sweep_id = resumed_id if resumed_id is not None else store.start_sweep(version, _recorded_args(argv))
    try:
        with _progress(err, disabled=args.quiet) as update:
            result = run_sweep(spec, axes, store, backend, seeds=seeds, device=args.device, depth_range=depth_range, budgets=not args.no_budget, progress=update, version=version, invariants=names)
    except KeyboardInterrupt:
        console.print(f"interrupted: the points finished so far are stored in {db}; `stability sweep --resume --db {db}` continues", highlight=False)
        store.close()
        return 130
    finally:
        backend.close()
    store.finish_sweep(sweep_id)
    store.close()
    print_budgets(result.budgets, console)
    failed = sum(p.failed for p in result.points)
    console.print(
        f"{len(result.points)} grid point(s) × {len(seeds)} seed(s), {len(result.extra_points)} more for the budgets: "
        f"{result.probed} probe(s) run on {result.workers} worker(s), {result.cached} point(s) reused from {db}" + (f", {failed} point(s) failed" if failed else "") + f", in {result.seconds:.1f} s",
        highlight=False,
    )
    if args.html:
        from stability.report.sweep_report import write_sweep_html

        path = write_sweep_html(args.html, result)
        console.print(f"report: {path}", highlight=False)
    return 0


def swept_invariants(spec: Any, only: str | None) -> list[str]:
    """The invariants a sweep of `spec` judges (all it declares, or `--only`'s), refusing up front
    (exit 2) one a sweep cannot measure (its registry entry's `sweep_refusal`)."""
    from stability.spec.registry import INVARIANTS

    declared = [n for n, _ in spec.invariants()]
    if only is not None:
        if only not in INVARIANTS:
            INVARIANTS.get(only)  # raises with the closest names
        if only not in declared:
            raise UsageError(f"--only {only}: {spec.path} does not declare it; it declares {', '.join(declared)}")
        declared = [only]
    for name in declared:
        refusal = INVARIANTS.get(name).sweep_refusal
        if refusal is not None:
            others = [n for n in declared if INVARIANTS.get(n).sweep_refusal is None]
            hint = f"; sweep the others with --only ({', '.join(others)})" if others else "; check it with `stability check`"
            raise UsageError(f"stability sweep {spec.path}: expect.{name} cannot be swept: {refusal}{hint}")
    return declared


class _progress:
    """A rich progress bar: points done (of those known so far), points read from the store, and
    the time left at the rate of the points actually probed."""

    def __init__(self, err: Console, *, disabled: bool) -> None:
        self.bar = Progress(
            TextColumn("sweep"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} points"),
            TextColumn("{task.fields[cached]} cached"),
            TextColumn("ETA {task.fields[eta]}"),
            TimeElapsedColumn(),
            console=err,
            transient=True,
            disable=disabled or not err.is_terminal,
        )
        self.task = self.bar.add_task("sweep", total=0, cached=0, eta="—")
        self.t0 = time.perf_counter()

    def __enter__(self) -> Any:
        self.bar.__enter__()
        return self.update

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(None, None, None)

    def update(self, done: int, cached: int, known: int) -> None:
        probed = done - cached
        eta = "—"
        if probed > 0:
            left = (time.perf_counter() - self.t0) / probed * (known - done)
            eta = f"{left:.0f} s"
        self.bar.update(self.task, completed=done, total=known, cached=cached, eta=eta)


def print_budgets(budgets: list[Budget], console: Console) -> None:
    t = Table(header_style="bold", title="depth budgets (largest depth at which the invariant holds on every seed)")
    for col in ("slice", "invariant", "budget", "deciding case", "why"):
        t.add_column(col, overflow="fold")
    for b in budgets:
        t.add_row(escape(", ".join(f"{k}={v}" for k, v in json.loads(b.slice).items()) or "(whole grid)"), b.invariant, budget_text(b), escape(b.deciding_case or ""), escape(b.detail))
    console.print(t)


def _compare(store: Store, revs: list[str], console: Console) -> int:
    from stability.run.sweep import compare

    va, vb, moved = compare(store, revs[0], revs[1])
    console.print(f"budgets under {va} → {vb}", highlight=False)
    if not moved:
        console.print("no budget moved", highlight=False)
        return 0
    t = Table(header_style="bold")
    for col in ("spec", "slice", "invariant", "seeds", "depths", va, vb, ""):
        t.add_column(col, overflow="fold")
    lowered = False
    for key, a, b in moved:
        down = _rank(b) < _rank(a)
        lowered |= down
        t.add_row(*(escape(str(k)) for k in key), _status_text(a), _status_text(b), "[red]lower[/red]" if down else "higher")
    console.print(t)
    return 1 if lowered else 0


def _rank(v: tuple[Any, ...]) -> float:
    budget, status = v[0], v[1]
    if status == "below":
        return 0.0
    if status == "at_least":
        return float(budget) + 0.5
    return float(budget) if budget is not None else -1.0


def _status_text(v: tuple[Any, ...]) -> str:
    budget, status = v[0], v[1]
    text: str = {"found": str(budget), "at_least": f"≥ {budget}", "below": "< smallest"}.get(status, str(status))
    return text
