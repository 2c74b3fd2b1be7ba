"""The `stability zoo` command: the zoo's specs (specs/zoo/, or the paths given) → one row each
(`stability.run.zoo`) → the table in docs/zoo.md between its markers, a page of the HTML report
(`--html DIR` writes DIR/zoo.html), and the terminal.

Every output path (`--md`, `--html`) is checked before anything is measured: a FIFO, a device or
a folder where a file goes, a file without the zoo-table markers, a hand-written DIR/zoo.html
are refused in one line (exit 2), and nothing is written.

`--compare A B` runs the zoo under two library releases instead (`stability.run.releases`,
`stability.report.zoo_compare`): exit 1 when a number moved past its drift, 0 when none did and at
least one was compared. Its `--md FILE` is checked the same way before either release is installed,
and replaces only an earlier comparison (a file that opens as `markdown` writes it), never another
file; `--html` writes the zoo table's page, which a comparison has none of, and is refused with it,
as `--no-budget` is (a comparison searches no budget).
Two sides that would compare nothing are refused before either runs (`check_sides`: a library that
does not import, a folder that holds none, the same release twice); a side that refuses every spec
is exit 2, and a comparison that compared no number exit 5.

Exit codes: 0 done (the table is a measurement, not a gate: `stability check specs/zoo --profile
thorough` judges the specs' expectations); 2 bad usage or a spec that does not load; with
`--compare`, 1 a number moved and 5 nothing was compared.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from stability.cli.arg_types import depth_list
from stability.errors import UsageError
from stability.report.text import printable

__all__ = ["zoo_command"]


def zoo_command(args: argparse.Namespace, console: Console, err: Console) -> int:
    from stability.report.zoo import check_markdown, check_zoo_html, markdown_table, update_markdown, write_zoo_html
    from stability.run.zoo import ZOO, zoo_row, zoo_specs
    from stability.spec.load import find_specs, load_spec

    if args.compare:
        return compare_command(args, console, err, depths=depth_list("4" if args.depths is None else args.depths))
    depths = depth_list("4,8,16" if args.depths is None else args.depths)
    # Every output path before anything is measured (a minute per family): one line, exit 2.
    if args.md is not None:
        check_markdown(args.md)
    if args.html is not None:
        page = check_zoo_html(args.html)
        if args.md is not None and Path(args.md).resolve() == page:
            raise UsageError(
                f"--md {printable(args.md)}: is also the page --html writes ({page}); give each its own path"
            )
    paths = args.paths or ([Path("specs/zoo")] if Path("specs/zoo").is_dir() else [ZOO])
    specs = (
        zoo_specs(paths[0]) if not args.paths and len(paths) == 1 else [load_spec(p) for p in find_specs(list(paths))]
    )
    t0 = time.perf_counter()
    rows = []
    for spec in specs:
        rows.append(
            zoo_row(
                spec,
                depths=depths,
                budget=not args.no_budget,
                on_case=None
                if args.quiet
                else (lambda what: err.print(f"zoo: {escape(printable(what))}", highlight=False)),
            )
        )
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
        console.print(f"wrote {escape(printable(args.md))}")
    if args.html is not None:
        console.print(f"wrote {escape(printable(str(write_zoo_html(args.html, rows, depths, seconds=seconds))))}")
    console.print(f"{len(rows)} zoo families in {seconds:.0f} s")
    return 0


def compare_command(args: argparse.Namespace, console: Console, err: Console, *, depths: tuple[int, ...]) -> int:
    """`stability zoo --compare A B [PATHS] [--depths D] [--md FILE]` (the module docstring)."""
    import json
    import tempfile

    from stability.cli.common import EXIT_FAILED, EXIT_NOTHING, EXIT_OK
    from stability.cli.grammar import parser
    from stability.cli.usage import given, refuse_unused
    from stability.report.outputs import check_report_path, write_atomic
    from stability.report.zoo_compare import markdown, moved, terminal_rows
    from stability.run.release_sides import check_sides, run_side
    from stability.run.releases import parse_release
    from stability.run.report_model import CompareRow
    from stability.run.zoo import ZOO
    from stability.spec.load import find_specs

    if given(parser(), args, ["--html"]):
        raise UsageError(
            "--html writes the zoo table's page, and --compare writes no table; write the comparison with --md FILE"
        )
    refuse_unused(parser(), args, ["--no-budget"], "--compare measures each family's corner cases and no budget")
    if args.md:  # before two releases are installed and run (minutes): one line, exit 2, nothing written
        check_report_path("--md", args.md, "zoo comparison", example="compare.md")
    a, b = (parse_release(x) for x in args.compare)
    roots = args.paths or ([Path("specs/zoo")] if Path("specs/zoo").is_dir() else [ZOO])
    paths = [str(p) for p in find_specs(list(roots))]
    if not paths:
        raise UsageError(f"--compare: no spec files under {', '.join(map(str, roots))}")
    t0 = time.perf_counter()
    check_sides(a, b, paths)  # both installed, and two sides that would compare nothing refused, before either runs
    with tempfile.TemporaryDirectory(prefix="stability-compare-") as tmp:
        if not args.quiet:
            err.print(f"zoo --compare: {len(paths)} families under {escape(a.label)}", highlight=False)
        side_a = run_side(a, paths, depths=depths, out=Path(tmp) / "a", plugins=args.plugin)
        if not args.quiet:
            err.print(f"zoo --compare: {len(paths)} families under {escape(b.label)}", highlight=False)
        side_b = run_side(
            b, paths, depths=depths, out=Path(tmp) / "b", baseline=side_a / "report.json", plugins=args.plugin
        )
        rows = [CompareRow.model_validate(r) for r in json.loads((side_b / "compare.json").read_text(encoding="utf-8"))]
        refused = {
            a.label: json.loads((side_a / "refused.json").read_text(encoding="utf-8")),
            b.label: json.loads((side_b / "refused.json").read_text(encoding="utf-8")),
        }
        versions = {
            a.label: json.loads((side_a / "versions.json").read_text(encoding="utf-8")),
            b.label: json.loads((side_b / "versions.json").read_text(encoding="utf-8")),
        }
    table = Table(header_style="bold", title=f"{a.label} → {b.label}: numbers that moved past their drift")
    for head in ("family", "invariant", "case", "A → B", "change", "drift limit", "direction", "why"):
        table.add_column(head, overflow="fold")
    for row in terminal_rows(rows):
        table.add_row(*(escape(c) for c in row))
    if moved(rows):
        console.print(table)
    for side, files in refused.items():
        for why in files.values():
            console.print(f"not compared, refused under {escape(side)}: {escape(why)}", soft_wrap=True)
    compared = sum(r.status != "not_comparable" for r in rows)
    if args.md:
        write_atomic(Path(args.md), markdown(a.label, b.label, rows, refused, versions, compared=compared))
        console.print(f"wrote {escape(printable(args.md))}")
    grid = f"{len(paths)} families, depths {','.join(map(str, depths))}"
    console.print(
        f"{len(moved(rows))} number(s) moved past their drift, of {compared} compared ({grid}) in "
        f"{time.perf_counter() - t0:.0f} s",
        soft_wrap=True,
    )
    for side, files in refused.items():
        if len(files) == len(paths):  # this side ran nothing: what it would be compared on was never measured
            raise UsageError(
                f"--compare: {side} refused every spec ({len(files)}), so nothing was compared; "
                "the lines above say why (a release that lacks the models, or needs another torch)"
            )
    if moved(rows):
        return EXIT_FAILED
    if compared == 0:
        print(
            f"stability: error: zoo --compare: nothing was compared ({len(rows)} number(s), none comparable on both "
            f"sides); exit code {EXIT_NOTHING}",
            file=sys.stderr,
        )
        return EXIT_NOTHING
    return EXIT_OK
