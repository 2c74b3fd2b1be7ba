"""What a command refuses of what was parsed (stability/cli/usage.py), each a real CLI call with its
exit code 2 and its one line: a value given as '' is refused for every option and argument (an unset
shell variable expands to ''), and an option the mode a command runs in does nothing with is refused,
never silently ignored."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cli_support import PLAIN, Cli, one_error


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["zoo", "--depths", ""], "zoo --depths ''"),
        (["zoo", "--compare", "", ""], "zoo --compare ''"),
        (["check", "{spec}", "--json", ""], "check --json ''"),
        (["check", "{spec}", "--case", ""], "check --case ''"),
        (["check", "{spec}", "--baseline", ""], "check --baseline ''"),
        (["check", ""], "check PATHS ''"),
        (["check", "{spec}", "--source-root", ""], "check --source-root ''"),
        (["sweep", "{spec}", "--db", ""], "sweep --db ''"),
        (["suggest", "{spec}", "--out", ""], "suggest --out ''"),
        (["list", ""], "list PATHS ''"),
    ],
)
def test_an_empty_value_is_refused_never_read_as_not_given(
    write_spec: Callable[..., Path], cli: Cli, args: list[str], needle: str
) -> None:
    """`--depths ''` ran the zoo on its default depths and `--compare '' ''` compared the current
    folder with itself: both exit 0. An unset shell variable expands to ''."""
    path = write_spec(PLAIN.format(extra="", expect=""))
    one_error(cli(*(str(path) if a == "{spec}" else a for a in args)), needle, "an empty value")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["check", "{spec}", "--in-process", "--jobs", "3"], "--jobs: --in-process runs the specs in this process"),
        (["check", "{spec}", "--case", "depth=1", "--seed", "4"], "--seed: --case replays one case"),
        (["suggest", "{spec}", "--list"], "--list lists the registered remedies and reads no spec"),
        (["suggest", "--list", "--json", "x.json", "--holds"], "--holds, --json: --list only lists"),
        (["suggest", "{spec}", "--force"], "--force: --force lets --out replace an existing file"),
        (["suggest", "{spec}", "--in-process", "-j", "3"], "--jobs: --in-process runs the remedies"),
        (["sweep", "--compare", "a", "b", "--seeds", "3"], "--seeds: --compare reads budgets from the store"),
        (["sweep", "--compare", "a", "b", "--serial", "--x", "width"], "--serial, --x: --compare reads budgets"),
        (["sweep", "{spec}", "--over", "width=4,8", "--x", "width"], "--x: --x sets the x axis of the HTML report"),
        (["sweep", "{spec}", "--no-budget", "--depth-range", "1:8"], "--depth-range: --depth-range is where"),
        (["sweep", "{spec}", "--serial", "--verbose"], "--verbose: --verbose shows the Dask cluster's warnings"),
        (["zoo", "--compare", "a", "b", "--no-budget"], "--no-budget: --compare measures each family's corner cases"),
    ],
)
def test_an_option_the_mode_does_nothing_with_is_refused(
    write_spec: Callable[..., Path], cli: Cli, args: list[str], needle: str
) -> None:
    path = write_spec(PLAIN.format(extra="", expect=""))
    one_error(cli(*(str(path) if a == "{spec}" else a for a in args)), needle, "drop")
