"""The `stability` command: check, list, explain, schema.

Exit codes: 0 at least one expectation judged and every one met; 1 some expectation not met (the
CI gate); 2 bad spec, bad usage, an unreadable input or a spec that could not run (a broken
factory, a crashed worker), reported after every other spec has run (one line on stderr each,
never a traceback); 5 nothing was judged (pytest's "no tests ran"); 130 interrupted (after the
partial summary). `check` (`stability.check_cli`) runs every spec in its own worker process
(`stability.run.worker`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from rich.console import Console

from stability.errors import StabilityError, UsageError, did_you_mean
from stability.report.text import printable
from stability.run.devices import CHOICES as DEVICE_CHOICES
from stability.spec.registry import INVARIANTS

if TYPE_CHECKING:
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
    c.add_argument("--baseline", metavar="FILE", help="compare each expectation's number with this JSON report's, on its cases; exit 1 when one moved past its drift, either way")
    c.add_argument("--update-baseline", action="store_true", help="write this run's JSON report to the --baseline FILE (the comparison is shown, not failed on)")
    c.add_argument("--suggest", action="store_true", help="for each unmet expectation, try the registered remedies and show the best one beside the failure (stability suggest; docs/suggest.md)")
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
    from stability.suggest_cli import add_suggest_parser

    add_suggest_parser(sub, [plugins])
    return p


def _load_all(paths: list[str]) -> list[Spec]:
    from stability.check_cli import load_each

    specs, errors = load_each(paths)
    if errors:
        for exc in errors[:-1]:
            print(f"stability: error: {printable(str(exc))}", file=sys.stderr)
        raise errors[-1]
    return specs


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
    loses terminal output (stability/run/streams.py). Whatever reaches either stream cannot form a
    CI runner's workflow command, except the tool's own annotations (stability/report/text.py)."""
    from stability.report.text import log_safe_streams
    from stability.run.streams import tolerant_streams

    with tolerant_streams(), log_safe_streams():
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
            from stability.check_cli import check_command

            return check_command(args, console, err)
        if args.command == "list":
            return _list(args, console)
        if args.command == "explain":
            return _explain(args, console)
        if args.command == "sweep":
            return _sweep(args, console, err, argv)
        if args.command == "zoo":
            from stability.zoo_cli import zoo_command

            return zoo_command(args, console, err)
        if args.command == "suggest":
            from stability.suggest_cli import suggest_command

            return suggest_command(args, console, err)
        return _schema()
    except StabilityError as exc:
        print(f"stability: error: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("stability: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
