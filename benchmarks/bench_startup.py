"""Start-up: how long the commands that never probe take, each a fresh `python -m stability`
process, and that none of them imports torch (`stability --help`, `--version`, `list`,
`explain`, `schema`, and usage errors of `check` and `sweep`). The target is under 1 s each on an
idle machine: none of them imports torch (about 2 s of CPU alone), and tests/test_startup.py
checks that they do not.

As an asv benchmark (`asv run -b Startup`) each command is one `time_` parameter; as a script,

    python benchmarks/bench_startup.py [--repeat N]

prints the median wall time of N runs (default 5) of each command, in turn, and exits 1 when one
is 1 s or more.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The shipped specs of the built-in families (specs/*.toml). A library spec (`family = "library"`,
#: specs/zoo/) imports its library to validate its config when it is loaded, and the library
#: imports torch, so commands over specs/zoo/ start in seconds, by that family's design.
BUILT_IN = sorted(str(p) for p in (ROOT / "specs").glob("*.toml"))

#: The commands that answer without probing: name → arguments of `python -m stability`.
COMMANDS: dict[str, list[str]] = {
    "help": ["--help"],
    "version": ["--version"],
    "list": ["list", *BUILT_IN],
    "explain": ["explain", "gradient_arrival"],
    "schema": ["schema"],
    "usage-error-argparse": ["check", "--bogus"],
    "usage-error-path": ["check", str(ROOT / "specs" / "no_such_spec.toml")],
    "usage-error-case": ["check", *BUILT_IN, "--case", "depth=3"],
    "usage-error-sweep": ["sweep", str(ROOT / "specs" / "plain_mlp.toml"), "--over", "nope=1,2"],
}

#: Expected exit codes: the usage errors exit 2.
EXIT = {name: (2 if name.startswith("usage-error") else 0) for name in COMMANDS}

#: Under this many seconds on an idle machine.
TARGET_S = 1.0


def run(name: str) -> float:
    """Wall seconds of one fresh process running the command; raises if its exit code is wrong."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "stability", *COMMANDS[name]], cwd=ROOT, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - t0
    if done.returncode != EXIT[name]:
        raise RuntimeError(
            f"stability {' '.join(COMMANDS[name])}: exit {done.returncode}, expected {EXIT[name]}: {done.stderr[-500:]}"
        )
    return seconds


class Startup:
    """One fresh process per sample (asv times the call)."""

    params = [list(COMMANDS)]
    param_names = ["command"]
    timeout = 120
    number = 1
    repeat = 5

    def time_command(self, command: str) -> None:
        run(command)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each command (default 5), interleaved")
    args = parser.parse_args(argv)
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.repeat):  # interleaved: machine load spreads over every command alike
        for name in COMMANDS:
            samples[name].append(run(name))
    slow = []
    for name, xs in samples.items():
        median = statistics.median(xs)
        shown = (
            " ".join(COMMANDS[name])
            if len(COMMANDS[name]) < 6
            else f"{COMMANDS[name][0]} specs/*.toml {' '.join(COMMANDS[name][len(BUILT_IN) + 1 :])}"
        )
        print(
            f"{name:24s} median {median:.3f} s  (min {min(xs):.3f}, max {max(xs):.3f}; {len(xs)} runs)  "
            f"stability {shown}"
        )
        if median >= TARGET_S:
            slow.append(name)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"target: median under {TARGET_S:g} s each; load average {load:.2f} on {os.cpu_count()} CPU(s)")
    if slow:
        print(f"over the target: {', '.join(slow)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
