"""The timings the README and docs/ quote, measured: a release runs this and commits what it writes.

    python benchmarks/timings.py [NAME ...]      # default: every measurement below

Each measurement runs its command as a fresh process (wall time, and the CPU time of the process
and every process below it, its workers included), records the machine it ran on (CPU model, usable
cores, load average before and after, Python, torch, the commit) in benchmarks/timings.json, and
renders docs/timings.md from that file (tests/test_startup.py checks the two agree, so the page is
never edited by hand). Naming some measurements re-measures those and keeps the others' last
results.

- `startup`: `benchmarks/bench_startup.py`, the commands that never probe (each median of 5);
- `check-ci`: `stability check specs --profile ci -q`, the CI gate on the shipped specs;
- `check`: `stability check specs/*.toml`, the README's first command (the `dev` profile, in a
  fresh copy of `specs/` so no example database from an earlier run is reused);
- `tests`: `python -m pytest -n 2`, the README's second command (the whole test suite);
- `init-decoder`, `init-convnextv2`, `init-resnet50`, `init-nanogpt`: `stability init` on four models
  no spec of the project describes (a transformers decoder, timm's ConvNeXt V2, torchvision's
  ResNet-50, the nanoGPT-style factory of docs/examples/nanogpt), each in a fresh copy of `specs/` and
  `docs/examples/` (docs/your-model.md; the target is at most 60 s on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "timings.json"
PAGE = ROOT / "docs" / "timings.md"

#: name → (what it is, the command, whether it runs in a fresh copy of specs/).
MEASUREMENTS: dict[str, tuple[str, list[str], bool]] = {
    "startup": (
        "the commands that never probe, each the median of 5 fresh processes",
        [sys.executable, "benchmarks/bench_startup.py"],
        False,
    ),
    "check-ci": (
        "the CI gate: every shipped spec, ci profile",
        [sys.executable, "-m", "stability", "check", "specs", "--profile", "ci", "-q"],
        False,
    ),
    "check": (
        "the README's first command: the specs of specs/*.toml (outside specs/zoo/), dev profile, no example "
        "database yet",
        [sys.executable, "-m", "stability", "check", "specs/*.toml"],
        True,
    ),
    "tests": (
        "the README's second command: the whole test suite",
        [sys.executable, "-m", "pytest", "-n", "2", "-q", "-p", "no:cacheprovider"],
        False,
    ),
    "init-decoder": (
        "`stability init` on a transformers decoder the zoo does not have (OLMo)",
        [sys.executable, "-m", "stability", "init", "transformers:OlmoModel", "-q"],
        True,
    ),
    "init-convnextv2": (
        "`stability init` on timm's ConvNeXt V2 (its own init recorded and judged; ConvNeXt V1's table not applied)",
        [sys.executable, "-m", "stability", "init", "timm:convnextv2_atto", "-q"],
        True,
    ),
    "init-resnet50": (
        "`stability init` on torchvision's ResNet-50, at its registered depth",
        [sys.executable, "-m", "stability", "init", "torchvision:resnet50", "-q"],
        True,
    ),
    "init-nanogpt": (
        "`stability init` on the nanoGPT-style factory of docs/examples/nanogpt",
        [sys.executable, "-m", "stability", "init", "docs/examples/nanogpt/model.py:gpt", "-q"],
        True,
    ),
}


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 1
    try:
        import torch

        torch_version = str(torch.__version__)
    except ImportError:
        torch_version = "not installed"
    commit = (
        subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()
        or "unknown"
    )
    return {
        "cpu": model,
        "cores": usable,
        "python": platform.python_version(),
        "torch": torch_version,
        "os": platform.platform(terse=True),
        "commit": commit,
    }


def _tree_cpu(root: int, known: dict[int, float]) -> dict[int, float]:
    """The CPU seconds (user + system, its own) of `root` and every process below it, or once
    below it (`known`: a worker whose parent ended is still counted), read from /proc now. The
    processes a command's workers leave to a server are not in the parent's getrusage: a
    measurement's CPU is the larger of the two lower bounds (a process that lives under 0.1 s is
    seen by getrusage only)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        cpu[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    found: dict[int, float] = {}
    for pid in cpu:
        p = pid
        while p > 1 and p != root and p not in known:
            p = parents.get(p, 0)
        if p == root or p in known:
            found[pid] = cpu[pid]
    return found


def measure(name: str) -> dict[str, Any]:
    what, command, fresh = MEASUREMENTS[name]
    cwd = ROOT
    scratch = None
    if fresh:
        scratch = Path(tempfile.mkdtemp(prefix="stability-timings-"))
        shutil.copytree(ROOT / "specs", scratch / "specs")
        shutil.copytree(ROOT / "docs" / "examples", scratch / "docs" / "examples")
        cwd = scratch
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before = os.getloadavg()[0]
    argv = [
        a for c in command for a in (sorted(str(f.relative_to(cwd)) for f in cwd.glob(c)) if "*" in c else [c])
    ]  # the shell's glob
    with tempfile.TemporaryFile("w+") as stdout:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, stdout=stdout, stderr=subprocess.DEVNULL, text=True)
        sampled: dict[int, float] = {}
        while proc.poll() is None:
            sampled.update(_tree_cpu(proc.pid, sampled))
            time.sleep(0.1)
        wall = time.perf_counter() - t0
        stdout.seek(0)
        out = stdout.read().strip().splitlines()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    reaped = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "what": what,
        "command": " ".join(["python" if c == sys.executable else c for c in command]),
        "wall_s": round(wall, 1),
        "cpu_s": round(max(reaped, sum(sampled.values())), 1),
        "exit": proc.returncode,
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "when": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": machine(),
        "last_lines": out[-12:] if name == "startup" else out[-1:],
    }


def duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s} s" if s < 60 else f"{s // 60} min {s % 60:02d} s"


def render(data: dict[str, Any]) -> str:
    """docs/timings.md from benchmarks/timings.json."""
    lines = [
        "# Timings, measured",
        "",
        "<!-- Written by `python benchmarks/timings.py` from benchmarks/timings.json; do not edit by hand. -->",
        "",
        "Every timing the README and docs/ quote comes from this page, which `benchmarks/timings.py` writes",
        "(a release runs it and commits the result). Each row is one fresh process: its wall time, the CPU",
        "time of it and every process below it (the worker processes too, sampled from /proc), and the",
        "machine's one-minute load average before and after: on a",
        "shared machine the wall time grows with the load, so compare rows by their CPU time and re-measure",
        "on an idle machine before quoting one elsewhere. Example outputs elsewhere in docs/ leave their",
        "times out (`…`).",
        "",
    ]
    for name in MEASUREMENTS:
        row = data.get(name)
        lines.append(f"## `{name}`: {MEASUREMENTS[name][0]}")
        lines.append("")
        if row is None:
            lines += ["Not measured yet: run `python benchmarks/timings.py " + name + "`.", ""]
            continue
        m = row["machine"]
        lines += [
            f"`{row['command']}`: **{duration(row['wall_s'])}** wall, {duration(row['cpu_s'])} CPU, exit "
            f"{row['exit']}, on {row['when']} at commit {m['commit']};",
            f"{m['cpu']}, {m['cores']} usable core(s), load average {row['load_before']} before and "
            f"{row['load_after']} after; Python {m['python']}, torch {m['torch']}, {m['os']}.",
            "",
        ]
        if row["last_lines"]:
            lines += ["```", *row["last_lines"], "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="measure the timings docs/ quote (docs/timings.md)")
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help=f"measurements to run (default all: {', '.join(MEASUREMENTS)})"
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in MEASUREMENTS]
    if unknown:
        parser.error(f"unknown measurement {unknown[0]!r}; choose from {', '.join(MEASUREMENTS)}")
    data: dict[str, Any] = json.loads(DATA.read_text()) if DATA.exists() else {}
    for name in args.names or list(MEASUREMENTS):
        print(f"measuring {name}: {' '.join(MEASUREMENTS[name][1])}", flush=True)
        data[name] = measure(name)
        print(f"  {duration(data[name]['wall_s'])} wall, exit {data[name]['exit']}", flush=True)
        DATA.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        PAGE.write_text(render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
