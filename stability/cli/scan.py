"""The `stability scan` command (docs/scan.md): every model a library registers, at its
initialisation (`stability.run.scan`), reported as a table, `--json`, `--md` and `--html`
(`stability.report.scan`); `--compare A B` scans under two releases and diffs them
(`stability.run.scan_compare`, `stability.report.scan_compare`).

Exit codes: 0 every deviation found is triaged (`--triage`, `stability.judge.scan_triage`); 1 a
deviation no triage entry knows (with `--compare`: anything moved); 2 bad usage, an output path
that would be refused, a side that could not be imported; 5 nothing was judged.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from stability.cli.common import EXIT_FAILED, EXIT_NOTHING, EXIT_OK
from stability.errors import UsageError
from stability.report.text import printable

if TYPE_CHECKING:  # annotations only: a usage error imports no torch
    from stability.judge.scan_triage import Known
    from stability.run.scan import ScanOptions
    from stability.run.scan_rows import ScanRow

__all__ = ["scan_command", "OFFLINE"]

#: Set for every worker: the libraries read nothing from the network (models are built from configs).
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def _budget(raw: str | None) -> int | None:
    from stability.run.guard import parse_size

    if raw is None:
        return None
    try:
        return parse_size(raw)
    except ValueError:
        raise UsageError(f"--memory-budget {raw!r}: write a size like 4GiB or 512MiB") from None


def _outputs(args: argparse.Namespace, *, compare: bool) -> None:
    """Every output path, before anything runs (one line, exit 2, nothing written)."""
    from stability.report.outputs import check_report_path
    from stability.report.scan import check_html

    if args.json:
        check_report_path("--json", args.json, "scan JSON", example="scan.json")
    if args.md:
        check_report_path("--md", args.md, "scan Markdown", example="scan.md")
    if args.html:
        if compare:
            raise UsageError("--html: --compare writes Markdown (--md) and JSON (--json); drop --html")
        check_html(args.html)


def scan_command(args: argparse.Namespace, console: Console, err: Console) -> int:
    from stability.judge.scan_triage import load_triage
    from stability.run.scan import ScanOptions

    _outputs(args, compare=bool(args.compare))
    known = load_triage(args.triage)
    options = ScanOptions(case_timeout=args.case_timeout or None, memory_budget=_budget(args.memory_budget))
    if args.compare:
        from stability.cli.scan_compare import compare_command

        code: int = compare_command(args, console, err, options=options)
        return code
    return _scan(args, console, err, options=options, known=known)


def _scan(
    args: argparse.Namespace, console: Console, err: Console, *, options: ScanOptions, known: tuple[Known, ...]
) -> int:
    from stability.report.outputs import write_atomic
    from stability.report.progress import RunProgress, mode_for
    from stability.report.scan import headline, html_page, markdown, scan_json, terminal_rows, untriaged, write_html
    from stability.run.executors import executor_for
    from stability.run.processes import start_server
    from stability.run.scan import run_scan, warm_up_spec
    from stability.run.scan_plan import plan_scan
    from stability.run.scan_store import ScanStore
    from stability.run.store_file import DEFAULT_DB
    from stability.spec.registry import FAMILIES

    os.environ.update(OFFLINE)
    preload = list(FAMILIES.get("library").preload({"model": f"{args.library}:"}) or [])  # type: ignore[misc]
    if not args.in_process:
        start_server(preload, warm_up=warm_up_spec(args.library, args.pattern))
    executor = executor_for("in-process" if args.in_process else "workers", jobs=args.jobs, env=dict(os.environ))
    with ScanStore(args.db or DEFAULT_DB) as store:
        if not args.quiet and args.library != "transformers":
            err.print(f"scan: keying the {args.library} models by what they build…", highlight=False)
        plan = plan_scan(
            args.library, only=args.pattern, options=options, store=store, resume=args.resume, executor=executor
        )
        if not plan.names:
            print(
                f"stability: error: nothing was judged (no {args.library} model matches --only "
                f"{printable(args.pattern or '')}); exit code {EXIT_NOTHING}",
                file=sys.stderr,
            )
            return EXIT_NOTHING
        if not args.quiet:
            resumed = f" ({len(plan.stored)} stored already)" if plan.stored else ""
            keyed = f" (one per build of {plan.keyed} names)" if plan.keyed else ""
            err.print(
                f"scan: {len(plan.jobs)} {args.library} {plan.release} models to build{keyed}{resumed}, "
                f"{executor.workers} at a time",
                highlight=False,
            )
        labels = [j.label for j in plan.jobs]
        with RunProgress(
            labels,
            mode=mode_for(console, quiet=args.quiet),
            out=console,
            err=err,
            workers=executor.workers,
            noun="model(s)",
            verb="scanning",
        ) as progress:

            def row_done(i: int, row: ScanRow) -> None:
                what = f" ({row.reason})" if row.reason else f", {len(row.deviations)} deviation(s)"
                progress.finished(i, None, line=f"{labels[i]}: {row.status}{what}")

            run = run_scan(plan, executor, store=store, on_row=row_done)
    rows = run.rows
    table = Table(header_style="bold", title=f"stability scan: {args.library} {run.release}")
    for head in ("model", "status", "reduced", "deviations", "stream @2", "stream @4"):
        table.add_column(head, overflow="fold")
    for cells in terminal_rows(rows, known, brief=True):
        if cells[1] != "judged" or cells[3] not in ("none", "—"):
            table.add_row(*(escape(printable(c)) for c in cells))
    if table.row_count:
        console.print(table)
    seconds = run.seconds
    if args.json:
        write_atomic(Path(args.json), scan_json(args.library, run.release, rows, known, seconds))
        console.print(f"wrote {escape(printable(args.json))}")
    if args.md:
        write_atomic(Path(args.md), markdown(args.library, run.release, rows, known, seconds))
        console.print(f"wrote {escape(printable(args.md))}")
    if args.html:
        page = write_html(args.html, html_page(args.library, run.release, rows, known, seconds))
        console.print(f"wrote {escape(printable(str(page)))}")
    console.print(headline(args.library, run.release, rows, known, seconds, run.cpu_seconds), soft_wrap=True)
    if not any(r.built for r in rows):
        return EXIT_NOTHING
    return EXIT_FAILED if untriaged(rows, known) else EXIT_OK
