"""`stability suggest SPEC`: the registered remedies that make every expectation of a failing spec
hold, proven by running them on the same cases and seeds (`stability.run.suggest`), ranked, each
with its spec diff and its numbers before and after; `--out FIXED.toml` writes the best one.

Exit codes: 0 a remedy holds (or nothing was unmet), 1 none does (what each did is listed), 2 bad
input (one line: the file, the key, the value, the fix).

`--out` never replaces the spec itself, and replaces an existing file only with `--force` (a
regular file only: never a folder, a device or a FIFO). The written spec is the spec's own text
with the remedy's keys changed (comments and order kept) and its `[expect]` tables as written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rich.console import Console

from stability.cli.common import EXIT_FAILED, EXIT_OK, load_each
from stability.errors import UsageError
from stability.numbers import json_safe
from stability.report.text import printable

__all__ = ["suggest_command", "SUGGEST_JSON_VERSION"]

#: The format version `--json` writes first ("stability_suggest"): a later run replaces only a file
#: that begins with it, never one the user wrote.
SUGGEST_JSON_VERSION = 1


def _list(console: Console) -> int:
    from rich.markup import escape
    from rich.table import Table

    from stability.spec.remedy import REMEDIES

    t = Table(header_style="bold", title="remedies (stability suggest)")
    for col in ("remedy", "kind", "what it changes", "meant for", "reference"):
        t.add_column(col)
    for r in REMEDIES:
        t.add_row(r.name, r.kind, escape(r.summary), ", ".join(sorted(r.fixes)), escape(r.references[0]))
    console.print(t)
    return EXIT_OK


def _check_out(out: str, spec: str, *, force: bool) -> None:
    """--out may not be the spec, and replaces an existing regular file only with --force; the rest
    is what every report path is checked for before the run (`check_report_path`): not standard
    output, not a folder (one named with a trailing slash among them), a device or a FIFO (even
    with --force), inside a folder that can be written, every name short enough for the file system."""
    from stability.report.outputs import check_report_path

    target, source = Path(out), Path(spec)
    if not out.strip():
        raise UsageError("--out: the path is empty; give the file to write the fixed spec to, e.g. --out fixed.toml")
    check_report_path("--out", out, None, example="fixed.toml")
    if target.resolve() == source.resolve() or (
        target.exists() and source.exists() and os.path.samefile(target, source)
    ):
        raise UsageError(
            f"--out {out}: is the spec itself; suggest never overwrites the spec it reads: give another file, "
            f"e.g. --out {source.with_name(source.stem + '_fixed.toml')}"
        )
    if os.path.lexists(target) and not force:
        raise UsageError(f"--out {out}: exists; add --force to replace it, or give another file")


def suggest_command(args: argparse.Namespace, console: Console, err: Console) -> int:
    """`stability suggest ARGS`: the exit code."""
    from stability.cli.grammar import parser
    from stability.cli.usage import refuse_unused

    grammar = parser()
    if args.list:
        if args.spec is not None:
            raise UsageError(f"--list lists the registered remedies and reads no spec; drop {args.spec} or --list")
        refuse_unused(
            grammar,
            args,
            [
                "--out",
                "--force",
                "--only",
                "--profile",
                "--holds",
                "--json",
                "--no-diff",
                "--jobs",
                "--case-timeout",
                "--source-root",
                "--in-process",
            ],
            "--list only lists the registered remedies",
        )
        return _list(console)
    if args.out is None:
        refuse_unused(grammar, args, ["--force"], "--force lets --out replace an existing file, and there is no --out")
    if args.in_process:
        refuse_unused(grammar, args, ["--jobs"], "--in-process runs the remedies in this process, one at a time")
    if not args.spec:
        raise UsageError(
            "stability suggest: give one spec file (stability suggest SPEC [--out FIXED.toml]); --list lists "
            "the remedies"
        )
    if Path(args.spec).is_dir():
        raise UsageError(f"{args.spec}: is a folder; suggest reads one spec file")
    if args.out is not None:
        if args.holds:
            raise UsageError(
                "--out with --holds: the written spec would declare expectations other than yours; run "
                "suggest --holds without --out, or write holds in the spec"
            )
        _check_out(args.out, args.spec, force=args.force)
    if args.json:
        from stability.report.outputs import check_report_path

        check_report_path(
            "--json",
            args.json,
            "suggest JSON",
            example="suggest.json",
            protected={Path(args.spec).resolve(): args.spec},
        )
        if args.out is not None and Path(args.json).resolve() == Path(args.out).resolve():
            raise UsageError(
                f"--json {args.json}: is also the path of --out; give the report and the fixed spec each their own path"
            )
    for root in args.source_root or []:
        if not Path(root).is_dir():
            raise UsageError(f"--source-root {root}: is not a folder; give the folder that holds your factory modules")
    specs, errors = load_each([args.spec])
    if errors:
        raise errors[0]
    spec = specs[0]
    if args.only is not None and getattr(spec.expect, args.only, None) is None:
        raise UsageError(
            f"--only {args.only}: {args.spec} declares no [expect.{args.only}]; choose one of "
            f"{', '.join(n for n, _ in spec.invariants())}"
        )

    from stability.families.factory import roots_environment, source_roots
    from stability.report.outputs import write_atomic
    from stability.report.suggest import print_suggestions
    from stability.run.engine import RunOptions
    from stability.run.executors import executor_for
    from stability.run.plugins import plugins_environment
    from stability.run.suggest import suggest
    from stability.run.worker import deep_stack, default_threads

    roots = [str(Path(r).resolve()) for r in args.source_root or []]
    options = RunOptions(profile=args.profile, case_timeout=args.case_timeout or None)
    threads = default_threads()
    executor = executor_for(
        "in-process" if args.in_process else "workers",
        jobs=args.jobs,
        threads=threads,
        env=plugins_environment(args.plugin, roots_environment(roots)),
    )
    if args.in_process:  # this process is the worker, with a worker's threads and stack (as `check --in-process`)
        import torch

        torch.set_num_threads(threads)  # torch's default, one per core, spins against itself on a loaded runner
        deep_stack()
    else:
        from stability.run.processes import start_server
        from stability.spec.load import preload_modules

        start_server(preload_modules([args.spec]))
    with source_roots(roots):
        found = suggest(args.spec, options=options, executor=executor, only=args.only, holds=args.holds)
    best = found.best
    if args.out is not None and best is not None:
        write_atomic(args.out, best.text)
    if args.json:
        report = {
            "stability_suggest": SUGGEST_JSON_VERSION,
            **found.to_dict(),
        }  # the first key: what makes the file suggest's own
        write_atomic(
            args.json, json.dumps(json_safe(report, nonfinite="null"), indent=2, allow_nan=False, default=str) + "\n"
        )
    print_suggestions(
        found, console, diffs=not args.no_diff, out=args.out if best is not None else None, only=args.only
    )
    if args.out is not None and not found.failing:
        why = "no remedy is for what is unmet" if found.unfixable else "nothing to fix"
        print(f"stability: {printable(args.out)} not written: {why}", file=sys.stderr)
    if (
        found.unfixable and not found.failing
    ):  # unmet, and no remedy is for it (a negative control that was not violated)
        return EXIT_FAILED
    if found.failing and best is None:
        if args.out is not None:
            print(f"stability: {printable(args.out)} not written: no remedy holds", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
