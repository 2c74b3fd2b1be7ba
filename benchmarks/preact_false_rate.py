"""How often `variance_growth` fails on `specs/preact_mlp.toml` per drawn case (it holds, so every
failure is a false verdict): N cases drawn uniformly from the spec's space with full-size branches
(`branch_init = "default"`; the zero/ReZero/SkipInit inits start at the identity), each judged as
`stability check` judges it (the ensemble verdict).

    OMP_NUM_THREADS=1 nice -n 19 .venv/bin/python benchmarks/preact_false_rate.py --cases 300 --seed 11 --depth 3 8

Prints the number of failures, the judged classes and the wall time, then each failing case.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

from stability import load_spec
from stability.run.engine import evaluate, judge
from stability.spec.case import Case

SPEC = Path(__file__).resolve().parent.parent / "specs" / "preact_mlp.toml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--depth", type=int, nargs=2, default=(3, 64), metavar=("LO", "HI"))
    args = ap.parse_args()
    spec = load_spec(SPEC)
    rng = random.Random(args.seed)
    failed: list[tuple[str, str]] = []
    judged: dict[str, int] = {}
    t0 = time.perf_counter()
    for _ in range(args.cases):
        case = Case(
            depth=rng.randint(*args.depth),
            width=rng.choice([16, 24, 32, 48, 64]),
            batch=rng.randint(4, 16),
            spatial=None,
            input_width=None,
            weight_init=rng.choice(["kaiming_normal", "xavier_normal", "default"]),
            branch_init="default",
            dtype=rng.choice(["float32", "float64"]),
            device="cpu",
            seed=rng.randrange(2**16),
        )
        v = judge(spec, "variance_growth", evaluate(spec, case))
        lowest = str(v.extra.get("lowest"))
        judged[lowest] = judged.get(lowest, 0) + 1
        if not v.passed:
            failed.append((str(case), v.detail))
    print(
        f"{args.cases} cases, depth {args.depth[0]}-{args.depth[1]}: {len(failed)} failed; judged {judged}; "
        f"{time.perf_counter() - t0:.0f} s"
    )
    for case_text, detail in failed:
        print(f"  {case_text}: {detail}")


if __name__ == "__main__":
    main()
