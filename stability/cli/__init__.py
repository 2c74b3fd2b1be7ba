"""The `stability` command: check, list, explain, schema, sweep, zoo, suggest, calibrate, init, scan.

Exit codes: 0 at least one expectation judged and every one met; 1 some expectation not met (the
CI gate); 2 bad spec, bad usage, an unreadable input or a spec that could not run (a broken
factory, a crashed worker), reported after every other spec has run (one line on stderr each,
never a traceback); 3 an internal error of the tool (its traceback); 5 nothing was judged (pytest's
"no tests ran"); 130 interrupted (after the partial summary). `check` (`stability.cli.check`) runs
every spec in its own worker process (`stability.run.worker`).
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from typing import TYPE_CHECKING

from rich.console import Console

from stability.cli.common import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, load_each
from stability.cli.grammar import parser
from stability.cli.usage import refuse_empty
from stability.errors import StabilityError, UsageError, did_you_mean
from stability.report.text import printable
from stability.spec.registry import INVARIANTS

if TYPE_CHECKING:
    from stability.spec.schema import Spec

__all__ = ["main"]


def _load_all(paths: list[str]) -> list[Spec]:
    specs, errors = load_each(paths)
    if errors:
        for exc in errors[:-1]:
            print(f"stability: error: {printable(str(exc))}", file=sys.stderr)
        raise errors[-1]
    return specs


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
    from stability.spec.json_schema import spec_schema

    print(json.dumps(spec_schema(), indent=2))
    return EXIT_OK


def _sweep(args: argparse.Namespace, console: Console, err: Console, argv: list[str] | None) -> int:
    from stability.cli.sweep import sweep_command

    return sweep_command(args, console, err, list(sys.argv[1:] if argv is None else argv))


def main(argv: list[str] | None = None) -> int:
    """The command line. The exit code is the verdict's: a closed or broken stdout or stderr only
    loses terminal output (stability/run/streams.py). Whatever reaches either stream cannot form a
    CI runner's workflow command, except the tool's own annotations (stability/report/text.py)."""
    from stability.report.text import log_safe_streams
    from stability.run.streams import tolerant_streams

    with tolerant_streams(), log_safe_streams():
        try:
            return _command(argv)
        except Exception:  # a fault of the tool: its traceback is shown, neutralised like every other text
            traceback.print_exc()
            print(
                "stability: internal error (the traceback above is the tool's own fault, not the spec's); "
                f"exit code {EXIT_INTERNAL}",
                file=sys.stderr,
            )
            return EXIT_INTERNAL


def _command(argv: list[str] | None) -> int:
    console = Console(highlight=False)
    if not console.is_terminal:  # logs and CI: wide enough for one line per row
        console = Console(highlight=False, width=max(console.width, 160))
    err = Console(stderr=True, highlight=False)
    try:
        grammar = parser()
        args = grammar.parse_args(argv)
        refuse_empty(grammar, args)
        from stability.run.plugins import load_plugins

        load_plugins(getattr(args, "plugin", []))
        only = getattr(args, "only", None)
        if only is not None and only not in INVARIANTS:
            raise UsageError(
                f"--only {only}: unknown invariant{did_you_mean(only, INVARIANTS.names())}; choose one of "
                f"{', '.join(INVARIANTS.names())}"
            )
        if args.command == "check":
            from stability.cli.check import check_command

            return check_command(args, console, err)
        if args.command == "list":
            return _list(args, console)
        if args.command == "explain":
            return _explain(args, console)
        if args.command == "sweep":
            return _sweep(args, console, err, argv)
        if args.command == "zoo":
            from stability.cli.zoo import zoo_command

            return zoo_command(args, console, err)
        if args.command == "scan":
            from stability.cli.scan import scan_command

            return scan_command(args, console, err)
        if args.command == "suggest":
            from stability.cli.suggest import suggest_command

            return suggest_command(args, console, err)
        if args.command == "calibrate":
            from stability.cli.calibrate import calibrate_command

            return calibrate_command(args, console, err)
        if args.command == "init":
            from stability.cli.init import init_command

            return init_command(args, console, err)
        return _schema()
    except StabilityError as exc:
        print(f"stability: error: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("stability: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
