"""Shared material for tests that run the command line (test_cli_usage, test_guard, test_baseline_bounds,
test_zoo_compare, test_plugin, …): a short plain tanh stack with a place for extra tables (`{extra}`) and
expectations (`{expect}`), and `one_error`, the assertion that a run exited 2 with one
`stability: error:` line on stderr and no traceback."""

from __future__ import annotations

from collections.abc import Callable

#: The `cli` fixture (tests/conftest.py): runs `stability ARGS…` in this process → (exit code, stdout, stderr).
Cli = Callable[..., tuple[int, str, str]]

PLAIN = """\
name = "plain"
description = "a short plain tanh stack"
family = "plain"

[block]
activation = "tanh"

[space]
depth = [1, 2]
width = 4
batch = 2
dtype = ["float64"]
{extra}
[expect.gradient_arrival]
lo = 0.01
hi = 100.0
{expect}
"""


def one_error(result: tuple[int, str, str], *needles: str, code: int = 2) -> str:
    """The run exited `code` (2: bad input) with one line on stderr, `stability: error: …`, holding
    every needle, and no traceback on either stream; returns the line."""
    got, out, err = result
    assert got == code, (got, out, err)
    assert "Traceback" not in out + err, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("stability: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]
