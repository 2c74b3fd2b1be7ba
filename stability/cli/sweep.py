"""The `stability sweep` command: arguments → a sweep on a backend → the terminal table and the
HTML report. `stability sweep --compare A B` reads budgets from the store instead.

Exit codes: 0 done; 1 `--compare` found a budget that went down; 2 bad usage, refused before
anything runs (the rules of `stability check`: the factory rule, the report paths, the memory
budget; and the sweep's own bounds: `MAX_SEEDS` seeds, `MAX_PROBES` probes, `stability.run.grid`'s
grid sizes, and the backend options of `stability.cli.sweep_backend`: at most `WORKERS_PER_CORE`
local workers per core, a `--scheduler` address Dask can parse), or nothing comparable for
`--compare`; 130 interrupted (every point finished so far is already in the store: `--resume`
continues).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from stability.cli.common import factories_allowed
from stability.cli.grammar import parser
from stability.cli.sweep_backend import backend_for, check_backend
from stability.cli.usage import refuse_unused
from stability.errors import UsageError
from stability.report.text import printable
from stability.run.store import Budget, Store, budget_text
from stability.run.store_file import DEFAULT_DB, check_store

__all__ = ["sweep_command", "print_budgets", "MAX_SEEDS", "MAX_PROBES"]

#: The most seeds one point may have (`--seeds`).
MAX_SEEDS = 10_000
#: The most probes a sweep's grid may ask for (points × seeds; the budgets' bisection adds a few more).
MAX_PROBES = 1_000_000
#: The largest seed a spec may name (`space.seed`).
_MAX_SEED = 2**63 - 1

#: Options that choose where and how long points run, not what they compute: kept from the
#: current command line when `--resume` reruns a recorded sweep, and not part of what it matches.
_BACKEND_FLAGS = {
    "--serial": 0,
    "--workers": 1,
    "--scheduler": 1,
    "--quiet": 0,
    "-q": 0,
    "--html": 1,
    "--case-timeout": 1,
    "--x": 1,
    "--verbose": 0,
}


#: What only a sweep that runs reads: `--compare` refuses each of them.
_RUNNING_FLAGS = (
    "--over --resume --html --seeds --first-seed --depth-range --no-budget --serial --workers --scheduler "
    "--device --x --only --case-timeout --verbose"
).split()


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


def _shown(text: object) -> str:
    """A path, a revision or a command line from the user in a console line: its control
    characters escaped and its brackets read as text, not as rich markup (`x[/y].sqlite` is a
    file name, not a closing tag)."""
    return escape(printable(str(text)))


def _check_x(x: str | None, axes: list[Any]) -> None:
    """`--x KEY` names a swept key other than depth (the heatmaps' x axis), or is refused."""
    swept = [a.key for a in axes if a.key != "depth"]
    if x is not None and x not in swept:
        raise UsageError(
            f"--x {x}: the heatmaps' x axis must be a swept key other than depth; "
            + (f"choose one of {', '.join(swept)}" if swept else "this sweep has none (add --over KEY=VALUES)")
        )


def sweep_command(args: argparse.Namespace, console: Console, err: Console, argv: list[str]) -> int:
    db = DEFAULT_DB if args.db is None else args.db
    if args.compare:
        why = "--compare reads budgets from the store and runs nothing"
        if args.spec:
            raise UsageError(f"{why}; drop SPEC")
        refuse_unused(parser(), args, _RUNNING_FLAGS, why)
        with Store(db, read_only=True) as store:
            return _compare(store, args.compare, console)
    resumed_id = None
    if args.resume:
        with Store(db) as store:
            last = store.last_unfinished(_recorded_args(argv) if args.spec else None)
        if last is None:
            if not args.spec:
                raise UsageError(
                    f"--resume: no unfinished sweep is recorded in {db}; start one with `stability sweep SPEC "
                    "--over ...`"
                )
            console.print(
                f"--resume: no unfinished sweep of this spec and grid is recorded in {_shown(db)}; running it "
                "(stored points are reused)",
                highlight=False,
            )
        else:
            resumed = last[1] + _backend_args(argv)
            console.print(f"resuming sweep {last[0]}: stability {_shown(' '.join(resumed))}", highlight=False)
            args = parser().parse_args(resumed)
            args.db = db
            resumed_id = last[0]
    if not args.spec:
        raise UsageError(
            "stability sweep: give a spec file, e.g. stability sweep specs/plain_mlp.toml --over depth=log:2:1024:10"
        )
    if args.html is None:
        refuse_unused(
            parser(), args, ["--x"], "--x sets the x axis of the HTML report's phase diagrams, and there is no --html"
        )
    if args.no_budget:
        refuse_unused(
            parser(),
            args,
            ["--depth-range"],
            "--depth-range is where the budgets are searched, and --no-budget searches none",
        )
    if args.serial:
        refuse_unused(
            parser(), args, ["--verbose"], "--verbose shows the Dask cluster's warnings, and --serial starts none"
        )
    plan = _plan(args)
    if plan is None:
        return 2
    _check_x(getattr(args, "x", None), plan.axes)
    from stability.run.grid import fixed_text
    from stability.run.sweep import run_sweep

    check_store(db)  # a bad --db is reported before a cluster starts, and nothing is created until one has
    backend = backend_for(args)
    try:
        store = Store(db)
    except BaseException:
        backend.close()
        raise
    sweep_id = resumed_id if resumed_id is not None else store.start_sweep(plan.version, _recorded_args(argv))
    try:
        with _progress(err, disabled=args.quiet) as update:
            result = run_sweep(
                plan.spec,
                plan.axes,
                store,
                backend,
                seeds=plan.seeds,
                device=args.device,
                depth_range=plan.depth_range,
                budgets=not args.no_budget,
                progress=update,
                version=plan.version,
                invariants=plan.names,
                case_timeout=args.case_timeout or None,
            )
    except KeyboardInterrupt:
        console.print(
            f"interrupted: the points finished so far are stored in {_shown(db)}; `stability sweep --resume "
            f"--db {_shown(db)}` continues",
            highlight=False,
        )
        store.close()
        return 130
    finally:
        backend.close()
    store.finish_sweep(sweep_id)
    store.close()
    print_budgets(result.budgets, console, fixed=fixed_text(plan.spec, plan.axes))
    failed = sum(p.failed for p in result.points)
    console.print(
        f"{len(result.points)} grid point(s) × {len(plan.seeds)} seed(s), {len(result.extra_points)} more for "
        "the budgets: "
        f"{result.probed} probe(s) run on {result.workers} worker(s), {result.cached} point(s) reused from {_shown(db)}"
        + (f", {failed} point(s) failed" if failed else "")
        + f", in {result.seconds:.1f} s",
        highlight=False,
    )
    _print_failed([p for p in (*result.points, *result.extra_points) if p.failed], console)
    if args.html:
        from stability.report.sweep_report import write_sweep_html

        drawn = time.perf_counter()
        path = write_sweep_html(args.html, result, x=getattr(args, "x", None))
        console.print(
            f"report: {_shown(path)} (its phase diagrams drawn in {time.perf_counter() - drawn:.1f} s)", highlight=False
        )
    return 0


#: How many failed points the summary names (with their reasons) before it counts the rest.
_FAILED_SHOWN = 5


def _print_failed(failed: list[Any], console: Console) -> None:
    """One line per point that could not be measured (a crash, the time limit, a refusal), with
    the reason of its first seed: such a point is never stored, and the next sweep probes it again."""
    for p in failed[:_FAILED_SHOWN]:
        where = ",".join(f"{k}={v}" for k, v in p.point.items()) or "(the corner case)"
        reason = next((r["error"] for r in p.rows if r["error"]), "not measured")
        console.print(
            f"failed point {escape(printable(where))}: {escape(printable(' '.join(str(reason).split())))}",
            highlight=False,
            soft_wrap=True,
        )
    if len(failed) > _FAILED_SHOWN:
        console.print(f"... and {len(failed) - _FAILED_SHOWN} more failed point(s)", highlight=False)


@dataclass(frozen=True)
class _Plan:
    spec: Any
    axes: list[Any]
    seeds: list[int]
    depth_range: tuple[int, int] | None
    names: list[str]
    version: str


def _plan(args: argparse.Namespace) -> _Plan | None:
    """Everything `stability sweep SPEC` can refuse, refused before any store, process or cluster
    exists (UsageError or SpecError: one line, exit 2): the spec, the factory rule (the one
    `stability check` applies), the axes and the grid's size, the seeds, the depth range, every
    point applied to the spec once, the report path, the memory budget and the backend options.
    None when the factory rule refused the spec (`stability.cli.common.factories_allowed` has printed why)."""
    import os

    from stability.run.grid import check_points, grid_points, grid_size, parse_axis
    from stability.spec.load import load_spec

    spec = load_spec(args.spec)
    if factories_allowed([spec], [])[1]:  # refused (and said so, in check's words): nothing runs
        return None
    axes = [parse_axis(text) for text in args.over]
    points = grid_size(axes)
    names = swept_invariants(spec, args.only)
    if not 1 <= args.seeds <= MAX_SEEDS:
        raise UsageError(f"--seeds {args.seeds}: give at least 1 seed per point, and at most {MAX_SEEDS:,}")
    if points * args.seeds > MAX_PROBES:
        raise UsageError(
            f"--seeds {args.seeds} on {points:,} grid point(s) is {points * args.seeds:,} probes; a sweep "
            f"runs at most {MAX_PROBES:,}: give fewer seeds or points"
        )
    first = spec.space.seed[0] if args.first_seed is None else args.first_seed
    if not 0 <= first <= _MAX_SEED - (args.seeds - 1):
        raise UsageError(
            f"--first-seed {first}: seeds lie in [0, 2**63 - 1], so with --seeds {args.seeds} the first is at "
            f"most {_MAX_SEED - (args.seeds - 1)}"
        )
    seeds = list(range(first, first + args.seeds))
    depth_range = _depth_range(args.depth_range) if args.depth_range else None
    check_points(spec, grid_points(axes), seed=first, device=args.device)
    if args.html is not None:
        from stability.report.outputs import check_outputs

        check_outputs(
            json=None, junit=None, html=args.html, inputs=[spec.path]
        )  # the rules of `stability check --html`
    if os.environ.get("STABILITY_MEMORY_BUDGET"):
        from stability.run.guard import memory_budget

        memory_budget("cpu")  # raises UsageError naming the variable, as `stability check` does
    check_backend(args)
    from stability.run.store_keys import code_version  # asks git: after every refusal

    return _Plan(spec, axes, seeds, depth_range, names, code_version())


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
            hint = (
                f"; sweep the others with --only ({', '.join(others)})"
                if others
                else "; check it with `stability check`"
            )
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


def print_budgets(budgets: list[Budget], console: Console, *, fixed: str | None = None) -> None:
    """The depth budgets, under a header naming what the sweep held fixed (`fixed`:
    `stability.run.grid.fixed_text`), so a budget is read with the network it was measured on."""
    title = "depth budgets (largest depth at which the invariant holds on every seed)"
    if fixed is not None:
        title += f"\nheld fixed at every point: {fixed}"
    t = Table(header_style="bold", title=escape(title))
    for col in ("slice", "invariant", "budget", "deciding case", "why"):
        t.add_column(col, overflow="fold")
    for b in budgets:
        t.add_row(
            escape(", ".join(f"{k}={v}" for k, v in json.loads(b.slice).items()) or "(whole grid)"),
            b.invariant,
            budget_text(b),
            escape(b.deciding_case or ""),
            escape(b.detail),
        )
    console.print(t)


def _compare(store: Store, revs: list[str], console: Console) -> int:
    from stability.run.sweep_compare import compare

    found = compare(store, revs[0], revs[1])  # nothing comparable: UsageError, exit 2
    va, vb, moved = found.version_a, found.version_b, found.moved
    console.print(f"budgets under {_shown(va)} → {_shown(vb)}: {found.compared} compared", highlight=False)
    if found.only_a or found.only_b:
        console.print(
            f"not compared: {found.only_a} budget(s) stored only under {_shown(va)} and {found.only_b} only "
            f"under {_shown(vb)} (another spec content, grid or device)",
            highlight=False,
        )
    if not moved:
        console.print("no budget moved", highlight=False)
        return 0
    t = Table(header_style="bold")
    for col in ("spec", "slice", "invariant", "seeds", "depths", _shown(va), _shown(vb), ""):
        t.add_column(col, overflow="fold")
    lowered = False
    for (name, slice_, invariant, seeds, depths, device), a, b in moved:
        down = _rank(b) < _rank(a)
        lowered |= down
        shown = name if device == "cpu" else f"{name} ({device})"
        t.add_row(
            *(escape(str(k)) for k in (shown, slice_, invariant, seeds, depths)),
            _status_text(a),
            _status_text(b),
            "[red]lower[/red]" if down else "higher",
        )
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
