"""Measure a language-model spec's headline numbers over many seeds: the numbers behind the bounds
of specs/*lm_*.toml (docs/training.md).

    python dev/lm_calibration.py specs/control_lm_attention_logit_growth.toml --seeds 8

For each seed 0 … N−1 the spec's corner case with that seed is run and judged by `evaluate_lm`
exactly as `--case` would, and every declared language-model invariant's observed value is
printed with its min / median / max, how many seeds pass, how many could not be measured, and the
CPU time of one case (what a case of the ci profile costs; thorough draws ten times as many).
Single-threaded, so the numbers replay bit for bit.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from stability.run.lm_training import LMCache, evaluate_lm
from stability.spec.case import corner_case
from stability.spec.load import load_spec


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("spec")
    p.add_argument("--seeds", type=int, default=8)
    args = p.parse_args()
    torch.set_num_threads(1)
    spec = load_spec(args.spec)
    for name, expectation in spec.invariants():
        values: list[float] = []
        passed, errors, t0 = 0, [], time.process_time()
        for seed in range(args.seeds):
            cache: LMCache = {}
            v, error = evaluate_lm(spec, name, corner_case(spec, seed=seed), cache=cache)
            if v is None:
                errors.append(f"seed {seed}: {error}")
                continue
            values.append(v.observed)
            passed += v.passed
        cpu = (time.process_time() - t0) / args.seeds
        spread = (
            f"min {min(values):.4g}, median {statistics.median(values):.4g}, max {max(values):.4g}"
            if values
            else "nothing measured"
        )
        print(
            f"{args.spec}::{name} (expect {expectation.expect}): {passed}/{len(values)} pass, {len(errors)} "
            f"not measured; observed {spread}; {cpu:.2f} s CPU per case"
        )
        print("  values: " + " ".join(f"{x:.3g}" for x in values))
        for line in errors:
            print("  " + line)


if __name__ == "__main__":
    main()
