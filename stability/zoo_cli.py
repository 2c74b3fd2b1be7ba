"""The `stability zoo` command: the zoo's specs (specs/zoo/, or the paths given) → one row each
(`stability.run.zoo`) → the table in docs/zoo.md between its markers, a page of the HTML report
(`--html DIR` writes DIR/zoo.html), and the terminal.

Every output path (`--md`, `--html`) is checked before anything is measured: a FIFO, a device or
a folder where a file goes, a file without the zoo-table markers, a hand-written DIR/zoo.html
are refused in one line (exit 2), and nothing is written.

Exit codes: 0 done (the table is a measurement, not a gate: `stability check specs/zoo --profile
thorough` judges the specs' expectations); 2 bad usage or a spec that does not load.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from stability.errors import UsageError
from stability.report.text import printable

__all__ = ["zoo_command", "add_zoo_parser"]


def add_zoo_parser(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:  # type: ignore[type-arg]
    z = sub.add_parser("zoo", parents=parents, help="every library model family of specs/zoo/ at initialisation: the table of docs/zoo.md")
    z.add_argument("paths", nargs="*", help="zoo spec files or folders (default: specs/zoo)")
    z.add_argument("--depths", default="4,8,16", metavar="D,D,…", help="the depths of the grid (default 4,8,16); the budget is searched up to the largest")
    z.add_argument("--md", metavar="FILE", help="update the table between the zoo-table markers of FILE (e.g. docs/zoo.md)")
    z.add_argument("--html", metavar="DIR", help="write the table as DIR/zoo.html")
    z.add_argument("--no-budget", action="store_true", help="no depth budgets (the grid only)")
    z.add_argument("--quiet", "-q", action="store_true", help="no progress lines")


def _depths(text: str) -> tuple[int, ...]:
    try:
        depths = tuple(sorted({int(d) for d in text.split(",") if d.strip()}))
    except ValueError:
        raise UsageError(f"--depths {text!r}: give positive integers separated by commas, e.g. 4,16,64") from None
    if not depths or depths[0] < 1:
        raise UsageError(f"--depths {text!r}: give positive integers separated by commas, e.g. 4,16,64")
    return depths


def zoo_command(args: argparse.Namespace, console: Console, err: Console) -> int:
    from stability.report.zoo import check_markdown, check_zoo_html, markdown_table, update_markdown, write_zoo_html
    from stability.run.zoo import ZOO, zoo_row, zoo_specs
    from stability.spec.load import find_specs, load_spec

    depths = _depths(args.depths)
    # Every output path before anything is measured (a minute per family): one line, exit 2.
    if args.md is not None:
        check_markdown(args.md)
    if args.html is not None:
        page = check_zoo_html(args.html)
        if args.md is not None and Path(args.md).resolve() == page:
            raise UsageError(f"--md {printable(args.md)}: is also the page --html writes ({page}); give each its own path")
    paths = args.paths or ([Path("specs/zoo")] if Path("specs/zoo").is_dir() else [ZOO])
    specs = zoo_specs(paths[0]) if not args.paths and len(paths) == 1 else [load_spec(p) for p in find_specs(list(paths))]
    t0 = time.perf_counter()
    rows = []
    for spec in specs:
        rows.append(zoo_row(spec, depths=depths, budget=not args.no_budget, on_case=None if args.quiet else (lambda what: err.print(f"zoo: {escape(printable(what))}", highlight=False))))
    seconds = time.perf_counter() - t0
    table = Table(header_style="bold")
    lines = markdown_table(rows, depths).splitlines()
    for head in lines[0].strip("|").split("|"):
        table.add_column(head.strip())
    for line in lines[2:]:
        table.add_row(*(escape(c.strip()) for c in line.strip("|").split(" | ")))
    console.print(table)
    if args.md is not None:
        update_markdown(args.md, rows, depths)
        console.print(f"wrote {escape(args.md)}")
    if args.html is not None:
        console.print(f"wrote {escape(str(write_zoo_html(args.html, rows, depths, seconds=seconds)))}")
    console.print(f"{len(rows)} zoo families in {seconds:.0f} s")
    return 0
