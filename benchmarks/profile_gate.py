"""Where the ci gate's time goes: the shipped specs run in this process (`--in-process`, one torch
thread) from the state a worker process starts in (the forkserver's imports, warm-up and frozen
heap: `stability.run._forkserver`), with a timer around each part, CPU time of this process by
part.

    python benchmarks/profile_gate.py [--specs specs] [--json FILE] [--cprofile FILE]

Parts (exclusive: a part's time excludes the parts it calls): building networks (`build`, their
inputs `make_input`), single probes (`probe`), the ensembles' vectorised passes (`probe_seeds`),
the rest of the ensembles (their members' stems and the loop of `probe` where vmap cannot run:
under `probe` then), and everything else (Hypothesis's generation and shrinking, the engine,
judging, the JSON report). The imports and the warm-up are timed on their own first (torch
included, in this process). `--json FILE` writes the gate's report (two of them, before and
after a change, must agree number for number); `--cprofile FILE` also runs the gate under cProfile
(slower: its numbers are for the shape of the profile, not for the totals). Not an asv
benchmark: nothing runs at import.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SPECS = Path(__file__).resolve().parent.parent / "specs"

#: (part, module, function) timed; every module that imported the function by name is patched too.
PARTS = [
    ("build", "stability.families.build", "build"),
    ("build", "stability.families.build", "make_input"),
    ("probe", "stability.measure.probe", "probe"),
    ("probe_seeds", "stability.measure.batched", "probe_seeds"),
    ("ensemble (rest)", "stability.measure.ensemble", "_probe_members"),
]


class Timers:
    """Exclusive CPU and wall time per part: a stack of open calls, each charged its own time."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.wall: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._stack: list[list[Any]] = []  # [part, cpu at start, wall at start, cpu of children, wall of children]

    def wrap(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            frame: list[Any] = [part, time.process_time(), time.perf_counter(), 0.0, 0.0]
            self._stack.append(frame)
            try:
                return fn(*args, **kwargs)
            finally:
                self._stack.pop()
                cpu, wall = time.process_time() - frame[1], time.perf_counter() - frame[2]
                self.cpu[part] = self.cpu.get(part, 0.0) + cpu - frame[3]
                self.wall[part] = self.wall.get(part, 0.0) + wall - frame[4]
                self.calls[part] = self.calls.get(part, 0) + 1
                if self._stack:
                    self._stack[-1][3] += cpu
                    self._stack[-1][4] += wall

        return timed


def _install(timers: Timers) -> None:
    import importlib

    for part, module, name in PARTS:
        original = getattr(importlib.import_module(module), name)
        timed = timers.wrap(part, original)
        for mod in list(sys.modules.values()):
            if (
                mod is not None
                and getattr(mod, "__name__", "").startswith("stability")
                and getattr(mod, name, None) is original
            ):
                setattr(mod, name, timed)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--specs", default=str(SPECS))
    ap.add_argument("--json", default=None, help="write the gate's JSON report here")
    ap.add_argument("--cprofile", default=None, help="also write a cProfile of the gate here (pstats)")
    args = ap.parse_args(argv)

    c0, w0 = time.process_time(), time.perf_counter()
    import torch

    import stability.cli as cli
    import stability.measure.ensemble  # noqa: F401 (imported before patching, as the engine imports it)
    import stability.run._forkserver  # noqa: F401 (a worker's starting state: warmed up, heap frozen)
    import stability.run.engine  # noqa: F401

    imports = (time.process_time() - c0, time.perf_counter() - w0)
    torch.set_num_threads(1)
    timers = Timers()
    _install(timers)
    command = ["check", args.specs, "--profile", "ci", "-q", "--in-process"] + (
        ["--json", args.json] if args.json else []
    )
    c1, w1 = time.process_time(), time.perf_counter()
    if args.cprofile:
        import cProfile

        profiler = cProfile.Profile()
        code = profiler.runcall(cli.main, command)
        profiler.dump_stats(args.cprofile)
    else:
        code = cli.main(command)
    cpu, wall = time.process_time() - c1, time.perf_counter() - w1
    parts = sorted(timers.cpu, key=lambda p: -timers.cpu[p])
    rest_cpu = cpu - sum(timers.cpu.values())
    rest_wall = wall - sum(timers.wall.values())
    print(
        f"exit {code}; imports {imports[0]:.2f} s CPU ({imports[1]:.2f} s wall); the gate {cpu:.2f} s CPU "
        f"({wall:.2f} s wall), one thread, in this process"
    )
    print("| part | calls | CPU s | share | wall s |\n|---|---|---|---|---|")
    for p in parts:
        print(f"| {p} | {timers.calls[p]} | {timers.cpu[p]:.2f} | {timers.cpu[p] / cpu:.0%} | {timers.wall[p]:.2f} |")
    print(f"| Hypothesis, engine, judging, reports | | {rest_cpu:.2f} | {rest_cpu / cpu:.0%} | {rest_wall:.2f} |")
    return 0 if code == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
