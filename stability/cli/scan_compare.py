"""`stability scan LIBRARY --compare A B [--only P] [--md FILE] [--json FILE]`: both sides scanned
(`stability.run.scan_compare`), diffed (`stability.report.scan_compare`). Exit 1 when anything
moved, 0 when nothing did, 2 when a side could not be imported or both are one release, 5 when
nothing was compared."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from stability.cli.common import EXIT_FAILED, EXIT_NOTHING, EXIT_OK
from stability.report.text import printable
from stability.run.scan import ScanOptions

__all__ = ["compare_command"]


def compare_command(args: argparse.Namespace, console: Console, err: Console, *, options: ScanOptions) -> int:
    from stability.report.outputs import write_atomic
    from stability.report.scan_compare import compare_rows, markdown
    from stability.run.releases import parse_release
    from stability.run.scan_compare import check_sides, scan_side

    a, b = (parse_release(x) for x in args.compare)
    t0 = time.perf_counter()
    check_sides(a, b, args.library)
    jobs = 1 if args.in_process else args.jobs
    with tempfile.TemporaryDirectory(prefix="stability-scan-compare-") as tmp:
        sides = []
        for name, release in (("a", a), ("b", b)):
            if not args.quiet:
                err.print(f"scan --compare: {args.library} under {escape(release.label)}", highlight=False)
            sides.append(
                scan_side(release, args.library, Path(tmp) / name, only=args.pattern, jobs=jobs, options=options)
            )
    side_a, side_b = sides
    comparison = compare_rows(side_a.rows, side_b.rows)
    table = Table(header_style="bold", title=f"{a.label} → {b.label}: what changed at init")
    for head in ("model", "parameter or number", "A", "B"):
        table.add_column(head, overflow="fold")
    for c in comparison.changes:
        what = f"stream {c.what}" if c.kind == "stream" else c.what
        table.add_row(*(escape(printable(x)) for x in (c.model, what, c.before, c.after)))
    if comparison.changes:
        console.print(table)
    if comparison.renamed:
        first = comparison.renamed[0]
        console.print(
            f"renamed with the same laws (not a change of init): {len(comparison.renamed)} parameter group(s), "
            f"e.g. {escape(first[0])}: {escape(first[1])} → {escape(first[2])}",
            soft_wrap=True,
        )
    for n in comparison.not_compared:
        console.print(f"not compared: {escape(printable(n.model))}: A {escape(n.a)}; B {escape(n.b)}", soft_wrap=True)
    versions = {side_a.label: side_a.versions, side_b.label: side_b.versions}
    if args.md:
        write_atomic(Path(args.md), markdown(a.label, b.label, comparison, versions))
        console.print(f"wrote {escape(printable(args.md))}")
    if args.json:
        data = {
            "stability_scan": 1,
            "compare": [a.label, b.label],
            "versions": versions,
            "compared": comparison.compared,
            "changes": [vars(c) for c in comparison.changes],
            "not_compared": [vars(n) for n in comparison.not_compared],
            "renamed": [list(r) for r in comparison.renamed],
        }
        write_atomic(Path(args.json), json.dumps(data, indent=1) + "\n")
        console.print(f"wrote {escape(printable(args.json))}")
    models = len({c.model for c in comparison.changes})
    console.print(
        f"{len(comparison.changes)} change(s) in {models} model(s), of {comparison.compared} compared "
        f"({a.label} → {b.label}) in {time.perf_counter() - t0:.0f} s",
        soft_wrap=True,
    )
    if comparison.compared == 0:
        return EXIT_NOTHING
    return EXIT_FAILED if comparison.changes else EXIT_OK
