"""The `stability` command: check, list, explain, schema.

Exit codes: 0 every expectation met; 1 some expectation not met (the CI gate); 2 bad spec or bad
usage (one line on stderr, never a traceback); 130 interrupted (after the partial summary).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from rich.console import Console

from stability.errors import SpecError, StabilityError, UsageError

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="stability", description="Property-based stability checks for deep networks.")
    p.add_argument("--version", action="version", version="stability 0.1.0")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    c = sub.add_parser("check", help="check specs and exit non-zero when an expectation is not met")
    c.add_argument("paths", nargs="*", help="spec files or folders (default: ./specs)")
    c.add_argument("--profile", choices=["ci", "dev", "thorough"], help="search budget (default: STABILITY_PROFILE, else ci under CI, else dev)")
    c.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto", "all"], help="where cases run (default cpu)")
    c.add_argument("--case", help="replay one case, e.g. depth=23,width=8,init=xavier_normal,seed=5")
    c.add_argument("--only", choices=["gradient_arrival", "variance_growth", "identity_at_init", "mean_shift"], help="check one invariant")
    c.add_argument("--json", metavar="FILE", help="write the machine-readable report")
    c.add_argument("--junit", metavar="FILE", help="write JUnit XML (one testcase per spec and invariant)")
    c.add_argument("--html", metavar="DIR", help="write a self-contained HTML report with plots")
    c.add_argument("--case-timeout", type=float, default=120.0, metavar="S", help="per-case time limit in seconds (default 120; 0 = none)")
    c.add_argument("--memory-budget", metavar="SIZE", help="refuse cases estimated above SIZE (e.g. 4GiB; default half the free RAM)")
    c.add_argument("--deterministic", action="store_true", help="torch.use_deterministic_algorithms(True) (for CUDA runs)")
    c.add_argument("--quiet", "-q", action="store_true", help="only the summary and failures")

    ls = sub.add_parser("list", help="list specs and the families they use")
    ls.add_argument("paths", nargs="*")

    e = sub.add_parser("explain", help="what an invariant means, why it fails, and the usual fixes")
    e.add_argument("invariant", nargs="?")

    sub.add_parser("schema", help="print the JSON Schema of the spec format")
    return p


def _default_paths(paths: list[str]) -> list[str]:
    if paths:
        return paths
    if not Path("specs").is_dir():
        raise UsageError("no path given and there is no ./specs folder; run `stability check PATH` with a spec file or folder")
    return ["specs"]


def _load_all(paths: list[str]) -> list:
    from stability.spec import find_specs, load_spec

    files = find_specs(_default_paths(paths))
    if not files:
        raise UsageError(f"{', '.join(paths) or 'specs'}: no *.toml spec files found; add one (see `stability schema`)")
    specs, errors = [], []
    for f in files:
        try:
            specs.append(load_spec(f))
        except SpecError as exc:
            errors.append(exc)
    if errors:
        for exc in errors[:-1]:
            print(f"stability: error: {exc}", file=sys.stderr)
        raise errors[-1]
    names: dict[str, str] = {}
    for s in specs:
        if s.name in names:
            raise SpecError(s.path, "name", f"is already used by {names[s.name]}", value=s.name, fix="give each spec a unique name")
        names[s.name] = s.path
    return specs


def _check(args: argparse.Namespace, console: Console, err: Console) -> int:
    import torch

    from stability.engine import RunOptions, run_spec
    from stability.guard import parse_size
    from stability.report import print_failures, print_table, summary_line, write_json, write_junit

    specs = _load_all(args.paths)
    if args.case and len(specs) != 1:
        raise UsageError(f"--case replays one case of one spec, but {len(specs)} specs were given; pass a single spec file")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: CUDA is not available on this machine; use --device cpu or auto")
    if args.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    budget = None
    if args.memory_budget:
        try:
            budget = parse_size(args.memory_budget)
        except ValueError:
            raise UsageError(f"--memory-budget {args.memory_budget!r}: write a size like 4GiB or 512MiB") from None
    devices = ["cpu", "cuda"] if args.device == "all" and torch.cuda.is_available() else [
        "cuda" if args.device == "auto" and torch.cuda.is_available() else ("cpu" if args.device in ("auto", "all") else args.device)
    ]
    t0 = time.perf_counter()
    results = []
    interrupted = False
    show_progress = console.is_terminal and not os.environ.get("CI") and not args.quiet
    try:
        from rich.progress import Progress

        with Progress(console=err, transient=True, disable=not show_progress) as progress:
            task = progress.add_task("checking", total=len(specs) * len(devices))
            for device in devices:
                options = RunOptions(profile=args.profile, device=device, case_timeout=args.case_timeout or None, memory_budget=budget, deterministic=args.deterministic)
                for spec in specs:
                    progress.update(task, description=f"{spec.name} ({device})")
                    if device not in spec.space.device and not args.case:
                        progress.advance(task)
                        continue
                    results.append(run_spec(spec, options, case=args.case, only=args.only))
                    progress.advance(task)
    except KeyboardInterrupt:
        interrupted = True
    seconds = time.perf_counter() - t0
    if not args.quiet or interrupted:
        print_table(results, console)
    print_failures(results, console)
    console.print(summary_line(results, seconds, interrupted=interrupted), highlight=False)
    if interrupted:  # a partial run must not replace the last complete report
        kept = [f for f in (args.json, args.junit, args.html) if f]
        if kept:
            print(f"stability: interrupted; not written (any previous report is left as it was): {', '.join(kept)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if args.json:
        write_json(args.json, results, seconds=seconds, interrupted=interrupted)
    if args.junit:
        write_junit(args.junit, results, seconds=seconds)
    if args.html:
        from stability.html import write_html

        write_html(args.html, results, seconds=seconds)
    return EXIT_OK if all(r.met for r in results) else EXIT_FAILED


def _list(args: argparse.Namespace, console: Console) -> int:
    from rich.markup import escape
    from rich.table import Table

    from stability.spec import FAMILIES, describe_family

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
        fam.add_row(f, escape(describe_family(f)))
    console.print(fam)
    return EXIT_OK


def _explain(args: argparse.Namespace, console: Console) -> int:
    from stability.explain import explain_text

    console.print(explain_text(args.invariant), highlight=False, markup=False)
    return EXIT_OK


def _schema() -> int:
    from stability.spec import spec_schema

    print(json.dumps(spec_schema(), indent=2))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    console = Console(highlight=False)
    if not console.is_terminal:  # logs and CI: wide enough for one line per row
        console = Console(highlight=False, width=max(console.width, 160))
    err = Console(stderr=True, highlight=False)
    try:
        args = _parser().parse_args(argv)
        if args.command == "check":
            return _check(args, console, err)
        if args.command == "list":
            return _list(args, console)
        if args.command == "explain":
            return _explain(args, console)
        return _schema()
    except StabilityError as exc:
        print(f"stability: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("stability: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
