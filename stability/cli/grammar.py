"""The `stability` command line's grammar: every subcommand's options (`parser`), its one-line
usage errors (exit 2, never argparse's usage block), and the option values' own parsers (the
`--case-timeout` seconds, the `--jobs` and `--threads` counts, and `cores`, the usable cores that
`--jobs auto` means). A value given as '' is refused for every option and argument
(`refuse_empty`), and an option that does nothing in the mode a command runs in is refused by the
command (`given`, the options set away from their defaults). The commands read what it parses; it
imports none of them. What a command refuses of what was parsed (an empty value, an option its
mode ignores) is `stability.cli.usage`'s.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

from stability.cli.arg_types import count, seconds
from stability.errors import UsageError
from stability.run.devices import CHOICES as DEVICE_CHOICES
from stability.spec.registry import INVARIANTS

__all__ = ["parser"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def parser() -> argparse.ArgumentParser:

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
        help="a module (or .py file) that registers invariants or families, imported in every process of the "
        "run (repeatable; also $STABILITY_PLUGINS)",
    )

    c = sub.add_parser("check", parents=[plugins], help="check specs and exit non-zero when an expectation is not met")
    c.add_argument("paths", nargs="*", help="spec files or folders (default: ./specs)")
    c.add_argument(
        "--profile",
        choices=["ci", "dev", "thorough"],
        help="search budget (default: STABILITY_PROFILE, else ci under CI, else dev)",
    )
    c.add_argument("--device", default="cpu", choices=list(DEVICE_CHOICES), help="where cases run (default cpu)")
    c.add_argument("--case", help="replay one case, e.g. depth=23,width=8,init=xavier_normal,seed=5")
    c.add_argument(
        "--only", metavar="INVARIANT", help=f"check one invariant ({', '.join(INVARIANTS.names())}, or a plugin's)"
    )
    c.add_argument("--json", metavar="FILE", help="write the machine-readable report")
    c.add_argument("--junit", metavar="FILE", help="write JUnit XML (one testcase per spec and invariant)")
    c.add_argument("--html", metavar="DIR", help="write a self-contained HTML report with plots")
    _workers(
        c,
        "run N specs at once",
        in_process="run specs in this process, without worker isolation (for debugging; a factory can then "
        "change global state; its output is not captured)",
    )
    c.add_argument(
        "--memory-budget",
        metavar="SIZE",
        help="refuse cases estimated above SIZE (4GiB = 4*2**30 B, 4GB = 4e9 B, 4G = 4GiB; default half the free RAM)",
    )
    c.add_argument(
        "--deterministic", action="store_true", help="torch.use_deterministic_algorithms(True) (for CUDA runs)"
    )
    c.add_argument("--quiet", "-q", action="store_true", help="only the summary and failures")
    c.add_argument(
        "--threads",
        type=count("threads"),
        default=None,
        metavar="N",
        help="torch threads per worker (default: STABILITY_THREADS, else 1)",
    )
    c.add_argument(
        "--source-root",
        action="append",
        metavar="DIR",
        help="a folder whose .py files custom factories may come from, besides each spec's own folder (repeatable)",
    )
    c.add_argument(
        "-s",
        "--no-capture",
        action="store_true",
        help="let the specs' own code (factories, blocks) print to this terminal as it runs; by default what "
        "it prints is captured and shown with the spec's failures",
    )
    c.add_argument(
        "--seed",
        type=int,
        default=None,
        metavar="N",
        help="Hypothesis seed for the search, to repeat a dev or thorough run (default: random; ci is derandomized)",
    )
    c.add_argument(
        "--sarif",
        metavar="FILE",
        help="write SARIF 2.1.0 (code scanning: one result per unmet expectation, at its line in the spec)",
    )
    c.add_argument(
        "--github",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="GitHub Actions job summary ($GITHUB_STEP_SUMMARY) and ::error annotations on the specs' lines "
        "(default: on when GITHUB_ACTIONS=true)",
    )
    c.add_argument(
        "--baseline",
        metavar="FILE",
        help="compare each expectation's number with this JSON report's, on its cases; exit 1 when one moved "
        "past its drift, either way",
    )
    c.add_argument(
        "--update-baseline",
        action="store_true",
        help="write this run's JSON report to the --baseline FILE (the comparison is shown, not failed on)",
    )
    c.add_argument(
        "--suggest",
        action="store_true",
        help="for each unmet expectation, try the registered remedies and show the best one beside the "
        "failure (stability suggest; docs/suggest.md)",
    )
    c.add_argument(
        "--changed",
        action="store_true",
        help="the paths are changed files (and spec folders, default ./specs): check the specs they change, "
        "directly or through a factory module",
    )

    ls = sub.add_parser(
        "list", parents=[plugins], help="list specs, the families they use, and every registered invariant and family"
    )
    ls.add_argument("paths", nargs="*")

    e = sub.add_parser("explain", parents=[plugins], help="what an invariant means, why it fails, and the usual fixes")
    e.add_argument("invariant", nargs="?")

    sub.add_parser("schema", parents=[plugins], help="print the JSON Schema of the spec format")

    sw = sub.add_parser(
        "sweep",
        parents=[plugins],
        help="a spec over a grid: phase diagrams and depth budgets, stored in SQLite (docs/sweeps.md)",
    )
    sw.add_argument("spec", nargs="?", help="one spec file")
    sw.add_argument(
        "--over",
        action="append",
        default=[],
        metavar="KEY=VALUES",
        help="an axis, e.g. depth=log:2:1024:10, sigma_w2=lin:0.5:3:11, width=64,256 (repeat for more)",
    )
    sw.add_argument("--seeds", type=int, default=8, metavar="N", help="seeds per point, the ensemble (default 8)")
    sw.add_argument(
        "--first-seed", type=int, metavar="S", help="first seed of the ensemble (default: the spec's first seed)"
    )
    sw.add_argument(
        "--depth-range",
        metavar="LO:HI",
        help="depths the budget bisection searches (default: the depth axis's range, else the spec's)",
    )
    sw.add_argument("--no-budget", action="store_true", help="only the grid, no depth budgets")
    sw.add_argument("--db", default=None, metavar="PATH", help="results database (default .stability/results.sqlite)")
    sw.add_argument(
        "--resume",
        action="store_true",
        help="rerun the last unfinished sweep recorded in the database (stored points are never recomputed)",
    )
    sw.add_argument(
        "--compare",
        nargs=2,
        metavar=("REV_A", "REV_B"),
        help="budgets that moved between two code versions (git revisions); exit 1 if one went down",
    )
    sw.add_argument("--serial", action="store_true", help="run in this process instead of on Dask workers")
    sw.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="local Dask worker processes (default: one per CPU core; at most 4 per core)",
    )
    sw.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="use a running Dask cluster instead of a local one")
    sw.add_argument(
        "--device",
        default="cpu",
        choices=["cpu", "cuda"],
        help="where points run (cuda points need workers with the GPU resource)",
    )
    sw.add_argument("--html", metavar="DIR", help="write the report with the phase diagrams to DIR/index.html")
    sw.add_argument(
        "--x",
        metavar="KEY",
        help="the phase diagrams' x axis, a swept key (default: the swept axis with the most values; the "
        "others are facets)",
    )
    sw.add_argument("--only", metavar="INVARIANT", help="sweep one of the invariants the spec declares")
    sw.add_argument(
        "--case-timeout",
        type=seconds,
        default=120.0,
        metavar="S",
        help="per-case time limit in seconds, enforced by the parent on every backend (default 120; 0 = none)",
    )
    sw.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    sw.add_argument(
        "--verbose",
        action="store_true",
        help="let the Dask cluster's own log warnings (workers restarted or killed at shutdown) reach stderr",
    )
    add_zoo_parser(sub, [plugins])
    add_suggest_parser(sub, [plugins])
    add_calibrate_parsers(sub, [plugins])
    add_scan_parser(sub, [plugins])
    return p


def _measuring(p: argparse.ArgumentParser) -> None:
    """The options `calibrate` and `init` share: which networks, how they run."""
    p.add_argument("--depths", metavar="D,D,…", help="the depths measured (default: 1,2,4,8, those the space admits)")
    p.add_argument("--seeds", type=count("seeds"), default=8, metavar="N", help="networks per depth (default 8)")
    _workers(p, "measure N depths at once")


def add_calibrate_parsers(
    sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    parents: list[argparse.ArgumentParser],
) -> None:
    c = sub.add_parser(
        "calibrate",
        parents=parents,
        help="every banded number's spread over seeds and depths, and the band it sets (--write: into the spec)",
    )
    c.add_argument("spec", nargs="?", help="one spec file")
    c.add_argument("--write", action="store_true", help="rewrite the spec's bands in place (comments and order kept)")
    c.add_argument(
        "--source-root",
        action="append",
        metavar="DIR",
        help="a folder whose .py files custom factories may come from (repeatable)",
    )
    _measuring(c)
    i = sub.add_parser(
        "init",
        parents=parents,
        help="write a calibrated spec for a library model or a factory, and check it (docs/your-model.md)",
    )
    i.add_argument(
        "target",
        nargs="?",
        help="transformers:CLASS, timm:NAME, torchvision:NAME, or a factory "
        "(module:function, path/to/file.py:function)",
    )
    i.add_argument(
        "--out",
        metavar="SPEC",
        help="the spec file to write (default: under ./specs, or beside the factory); never one init did not write",
    )
    i.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    _measuring(i)


def add_scan_parser(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:  # type: ignore[type-arg]
    s = sub.add_parser(
        "scan",
        parents=parents,
        help="every model a library registers, at initialisation: its init against what it declares, its stream "
        "at two depths (docs/scan.md)",
    )
    s.add_argument("library", choices=["transformers", "timm", "torchvision"], help="the library to scan")
    s.add_argument(
        "--only",
        dest="pattern",
        metavar="PATTERN",
        help="only the models whose name matches (shell patterns, comma-separated, any case: 'Vit*,Bert*')",
    )
    s.add_argument("--json", metavar="FILE", help="write every row as JSON")
    s.add_argument("--md", metavar="FILE", help="write the rows (or, with --compare, the changes) as Markdown")
    s.add_argument("--html", metavar="DIR", help="write the rows as DIR/scan.html")
    s.add_argument(
        "--db",
        metavar="PATH",
        default=None,
        help="the results store the rows go to (default .stability/results.sqlite)",
    )
    s.add_argument(
        "--resume",
        action="store_true",
        help="skip the models the store holds for this library release and this code version",
    )
    s.add_argument(
        "--triage",
        metavar="FILE",
        help="the known deviations and their verdicts (default: the shipped stability/judge/scan_triage.toml)",
    )
    s.add_argument(
        "--compare",
        nargs=2,
        metavar=("A", "B"),
        help="scan under two releases (transformers==4.53.3, a folder of packages or a virtual environment) and diff "
        "every model's recorded init exactly, and its stream past its drift (exit 1 when anything moved)",
    )
    _workers(s, "scan N models at once", timeout="time limit of one model")
    s.add_argument("--memory-budget", metavar="SIZE", help="the memory one case may take (e.g. 4GiB)")
    s.add_argument("--quiet", "-q", action="store_true", help="no progress bar or lines")


def add_zoo_parser(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:  # type: ignore[type-arg]
    z = sub.add_parser(
        "zoo",
        parents=parents,
        help="every library model family of specs/zoo/ at initialisation: the table of docs/zoo.md",
    )
    z.add_argument("paths", nargs="*", help="zoo spec files or folders (default: specs/zoo)")
    z.add_argument(
        "--depths",
        default=None,
        metavar="D,D,…",
        help="the depths of the grid (default 4,8,16; with --compare 4); the budget is searched up to the largest",
    )
    z.add_argument(
        "--md", metavar="FILE", help="update the table between the zoo-table markers of FILE (e.g. docs/zoo.md)"
    )
    z.add_argument("--html", metavar="DIR", help="write the table as DIR/zoo.html")
    z.add_argument("--no-budget", action="store_true", help="no depth budgets (the grid only)")
    z.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    z.add_argument(
        "--compare",
        nargs=2,
        metavar=("A", "B"),
        help="run every zoo family under two library releases (transformers==4.53.3, a folder of packages or "
        "a virtual environment) on the same cases: every number that moved past its "
        "drift (exit 1)",
    )


def add_suggest_parser(sub: argparse._SubParsersAction, parents: list[argparse.ArgumentParser]) -> None:  # type: ignore[type-arg]
    s = sub.add_parser(
        "suggest",
        parents=parents,
        help="try every remedy that applies to a failing spec and list those that make every expectation "
        "hold (docs/suggest.md)",
    )
    s.add_argument("spec", nargs="?", help="one spec file with an unmet expectation")
    s.add_argument(
        "--out",
        metavar="FIXED.toml",
        help="write the best remedy's spec there (its [expect] tables unchanged; never the spec itself)",
    )
    s.add_argument("--force", action="store_true", help="let --out replace an existing file")
    s.add_argument("--only", metavar="INVARIANT", help="fix this invariant only (the others are neither fixed nor run)")
    s.add_argument(
        "--profile",
        choices=["ci", "dev", "thorough"],
        default="ci",
        help="the search budget of every run (default ci: derandomized, the cases CI draws)",
    )
    s.add_argument(
        "--holds",
        action="store_true",
        help='read each expect = "violated" as "holds": what removes a negative control\'s failure (not with --out)',
    )
    s.add_argument("--json", metavar="FILE", help="write every remedy tried, its diff and its numbers as JSON")
    s.add_argument("--no-diff", action="store_true", help="leave the diffs out of the terminal output")
    s.add_argument("--list", action="store_true", help="list the registered remedies and exit")
    _workers(s, "run N remedies at once")
    s.add_argument(
        "--source-root",
        action="append",
        metavar="DIR",
        help="a folder whose .py files custom factories may come from (repeatable)",
    )


def _workers(
    p: argparse.ArgumentParser,
    jobs: str,
    *,
    timeout: str = "per-case time limit",
    in_process: str = "run in this process, without worker isolation (for debugging)",
) -> None:
    """The worker options every measuring command shares (`--jobs`, `--case-timeout`, `--in-process`),
    each command naming what its workers run."""
    p.add_argument(
        "--jobs",
        "-j",
        type=count("jobs", auto=True),
        default="auto",
        metavar="N",
        help=f"{jobs}, each in its own worker process (default auto: one per usable core)",
    )
    p.add_argument(
        "--case-timeout",
        type=seconds,
        default=120.0,
        metavar="S",
        help=f"{timeout} in seconds (default 120; 0 = none)",
    )
    p.add_argument("--in-process", action="store_true", help=in_process)
