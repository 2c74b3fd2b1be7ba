"""Measure a training spec's headline number over many seeds: the numbers behind the bounds in
specs/*.toml that declare a training invariant (docs/training.md).

    python dev/training_calibration.py specs/mup_update_size.toml --seeds 20

For each seed 0 … N-1 the spec's corner case (the first value of every range and list) with that
seed is trained exactly as `stability check --case` would, and the verdict's observed value is
printed with its min / median / max. Run single-threaded (torch.set_num_threads(1)) so that the
numbers replay bit-exactly.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from stability.run.training import evaluate
from stability.spec.case import corner_case
from stability.spec.load import load_spec
from stability.spec.registry import INVARIANTS


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("spec")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--branch-init", help="override the corner case's branch_init")
    args = p.parse_args()
    torch.set_num_threads(1)
    spec = load_spec(args.spec)
    for name, _ in spec.invariants():
        if not INVARIANTS.get(name).training:
            continue
        values, ratios, passed, t0 = [], [], 0, time.process_time()
        for seed in range(args.seeds):
            case = corner_case(spec, seed=seed, **({"branch_init": args.branch_init} if args.branch_init else {}))
            v, error = evaluate(spec, name, case)
            if v is None:
                print(f"seed {seed}: error {error}")
                continue
            values.append(v.observed)
            if "depth_ratio" in v.extra:
                ratios.append(v.extra["depth_ratio"])
            passed += v.passed
        finite = [x for x in values if x == x]
        spread = (
            f"min {min(finite):.4g}, median {statistics.median(finite):.4g}, max {max(finite):.4g}"
            if finite
            else "no finite value"
        )
        print(
            f"{args.spec}::{name}: {passed}/{len(values)} pass; observed {spread}; non-finite "
            f"{len(values) - len(finite)}; {time.process_time() - t0:.1f} s CPU"
        )
        print("  values: " + " ".join(f"{x:.3g}" for x in values))
        if ratios:
            print(
                f"  deep/shallow ratio: min {min(ratios):.4g}, median {statistics.median(ratios):.4g}, max "
                f"{max(ratios):.4g}: " + " ".join(f"{x:.3g}" for x in ratios)
            )


if __name__ == "__main__":
    main()
