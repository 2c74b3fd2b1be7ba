"""The mutation check's sample and its tally (docs/mutation.md).

    python dev/mutation/mutation_sample.py draw        # draw the sample into dev/mutation/mutation_sample.txt
    python dev/mutation/mutation_sample.py tally       # the sample's results per module, with 95% intervals
    python dev/mutation/mutation_sample.py survivors   # the sampled mutants no test killed, one a line

Run from the repository root after `mutmut run` has generated the mutants once (any run does: it
writes every mutant's name under mutants/). The sample is a uniform random sample without
replacement of every mutant mutmut generates for the modules in `[tool.mutmut] only_mutate`,
drawn with a fixed seed from the sorted names, so the same source gives the same sample. The drawn
names are kept in dev/mutation/mutation_sample.txt: a later run re-checks the same mutants even after
tests (or a fix to a sampled function) were added.
"""

from __future__ import annotations

import argparse
import math
import random
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

SEED = 20261130
SIZE = 400
LIST = Path(__file__).with_name("mutation_sample.txt")
MUTMUT = str(Path(sys.executable).with_name("mutmut"))


def results() -> dict[str, str]:
    """Every generated mutant's name → its status (killed, survived, timeout, not checked, ...)."""
    out = subprocess.run([MUTMUT, "results", "--all", "true"], capture_output=True, text=True, check=True).stdout
    status: dict[str, str] = {}
    for line in out.splitlines():
        name, sep, rest = line.strip().partition(": ")
        if sep and ".x" in name:
            status[name] = rest.strip()
    return status


def sample(names: list[str], *, size: int = SIZE, seed: int = SEED) -> list[str]:
    """A uniform random sample of `size` names without replacement (all of them when fewer)."""
    ordered = sorted(names)
    return sorted(random.Random(seed).sample(ordered, min(size, len(ordered))))


def module(name: str) -> str:
    """stability.measure.probe.x_probe__mutmut_3 → stability/measure/probe.py"""
    return name.split(".x")[0].replace(".", "/") + ".py"


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion k/n (Wilson 1927), 95% by default."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["draw", "tally", "survivors"])
    parser.add_argument("--size", type=int, default=SIZE)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--list", type=Path, default=LIST, help="the file of sampled names (default: %(default)s)")
    args = parser.parse_args()
    status = results()
    if args.what == "draw":
        args.list.write_text("\n".join(sample(list(status), size=args.size, seed=args.seed)) + "\n", encoding="utf-8")
        return
    chosen = [n for n in args.list.read_text(encoding="utf-8").split() if n in status]
    if args.what == "survivors":
        print("\n".join(n for n in chosen if status[n] in ("survived", "suspicious", "no tests")))
        return
    rows: dict[str, Counter[str]] = defaultdict(Counter)
    for name in chosen:
        rows[module(name)][status[name]] += 1
        rows["all"][status[name]] += 1
    print(f"sample of {len(chosen)} of {len(status)} mutants ({args.list.name})")
    print(
        f"{'module':26} {'sampled':>7} {'killed':>6} {'timeout':>7} {'survived':>8} {'no tests':>8} "
        f"{'unrun':>5}  kill rate [95% interval]"
    )
    for mod in sorted(rows, key=lambda m: (m == "all", m)):
        c = rows[mod]
        n = sum(c.values())
        dead = c["killed"] + c["timeout"]
        unrun = c["not checked"] + c["skipped"]
        judged = n - unrun  # a mutant no selected test runs ("no tests") counts as not killed
        lo, hi = wilson(dead, judged)
        rate = f"{dead / judged:6.1%} [{lo:.1%}, {hi:.1%}]" if judged else "-"
        print(
            f"{mod:26} {n:7d} {c['killed']:6d} {c['timeout']:7d} {c['survived'] + c['suspicious']:8d} "
            f"{c['no tests']:8d} {unrun:5d}  {rate}"
        )


if __name__ == "__main__":
    main()
