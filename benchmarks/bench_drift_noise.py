"""How much each judged number moves between seeds of the same case, and between two replays of one
case (docs/ci.md, "The default drift and the noise it sits above").

    python -m benchmarks.bench_drift_noise [--seeds 16]

For each spec and case: the observed number of every declared invariant at `seeds` seeds; the table
gives the median and the largest |relative change| between two seeds (each seed against the
median seed's number) and the change between two replays of seed 0 (0 when the replay is bit for
bit).
"""

from __future__ import annotations

import argparse
import math
import statistics

from stability.report.baseline import relative_change
from stability.run.engine import RunOptions, run_spec
from stability.spec.load import load_spec

CASES = [
    ("specs/plain_mlp.toml", "depth=8,width=256,batch=16"),
    (
        "specs/preact_mlp.toml",
        "depth=16,width=64,batch=16,weight_init=kaiming_normal,branch_init=default,dtype=float32",
    ),
    ("specs/transformer_preln.toml", "depth=4,width=32,tokens=8"),
    ("specs/zoo/gpt2.toml", "depth=4"),
    ("specs/zoo/llama.toml", "depth=4"),
    ("specs/zoo/bert.toml", "depth=4"),
]


def observed(path: str, case: str, seed: int) -> dict[str, float]:
    spec = load_spec(path)
    result = run_spec(spec, RunOptions(profile="ci"), case=f"{case},seed={seed}")
    return {
        r.name: r.verdict.observed
        for r in result.results
        if r.verdict is not None and math.isfinite(r.verdict.observed)
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=16)
    args = parser.parse_args()
    print("| spec | case | invariant | median over seeds | seed-to-seed change: median | largest | replay change |")
    print("| --- | --- | --- | --: | --: | --: | --: |")
    for path, case in CASES:
        runs = [observed(path, case, s) for s in range(args.seeds)]
        again = observed(path, case, 0)
        for name in runs[0]:
            values = [r[name] for r in runs if name in r]
            mid = statistics.median(values)
            changes = [abs(relative_change(mid, v)) for v in values]
            print(
                f"| {path} | {case} | {name} | {mid:.4g} | {statistics.median(changes):.1%} | "
                f"{max(changes):.1%} | {abs(relative_change(runs[0][name], again[name])):.0%} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
