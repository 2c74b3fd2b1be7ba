"""The learning-rate sensitivity of a language-model spec with and without qk-layernorm and z-loss
(Wortsman et al. 2023, Fig. 1), on the same grid and seeds: the table in docs/training.md.

    python dev/lm_lr_sensitivity.py specs/control_lm_lr_sensitivity.toml [--seeds 8] [--z-loss 1e-4]

The spec declares [expect.lr_sensitivity]; it is run as it is, with block.qk_norm = "layer", with
train.z_loss, and with both, each over the spec's grid for the ensemble of the corner case (seed 0
and seeds − 1 derived ones), exactly as `evaluate_lm` runs it. Printed: per variant the LRS of each
seed, their mean, the mean final loss at every learning rate (the LR-sensitivity curve), whether
the variant's LRS is below the spec's own on every seed, and the CPU time. Single-threaded runs,
so the numbers replay bit for bit.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from stability.run.lm_training import evaluate_lm
from stability.spec.case import corner_case
from stability.spec.load import load_spec
from stability.spec.schema import Spec


def variant(spec: Spec, *, qk_norm: bool, z_loss: float, seeds: int) -> Spec:
    """The spec with qk_norm = "layer" and/or train.z_loss set, and its ensemble of `seeds`."""
    assert spec.train is not None and spec.expect.lr_sensitivity is not None
    block = spec.block.model_copy(update={"qk_norm": "layer"} if qk_norm else {})
    train = spec.train.model_copy(update={"z_loss": z_loss} if z_loss else {})
    expect = spec.expect.model_copy(
        update={"lr_sensitivity": spec.expect.lr_sensitivity.model_copy(update={"seeds": seeds})}
    )
    return spec.model_copy(update={"block": block, "train": train, "expect": expect})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("spec")
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--z-loss", type=float, default=1e-4)
    args = p.parse_args()
    torch.set_num_threads(1)
    spec = load_spec(args.spec)
    lrs = spec.expect.lr_sensitivity.lrs
    print(f"{args.spec}: grid {lrs}, seeds {args.seeds} (the ensemble of seed 0)")
    print("| variant | LRS per seed | mean LRS | mean final loss at " + ", ".join(f"{lr:g}" for lr in lrs) + " | CPU |")
    print("| --- | --- | --- | --- | --- |")
    base: dict[str, float] | None = None
    for name, qk, z in (
        ("as shipped", False, 0.0),
        ("qk_norm", True, 0.0),
        (f"z_loss {args.z_loss:g}", False, args.z_loss),
        (f"qk_norm + z_loss {args.z_loss:g}", True, args.z_loss),
    ):
        t0 = time.process_time()
        v, error = evaluate_lm(
            variant(spec, qk_norm=qk, z_loss=z, seeds=args.seeds), "lr_sensitivity", corner_case(spec, seed=0)
        )
        if v is None:
            print(f"| {name} | error: {error} | | | |")
            continue
        per_seed: dict[str, float] = v.extra["per_seed"]
        finals = v.extra["final_loss"]
        curve = [
            statistics.mean(finals[s][i] if finals[s][i] is not None else v.extra["initial_loss"][s] for s in finals)
            for i in range(len(lrs))
        ]
        lower = 0 if base is None else sum(per_seed[s] < base[s] for s in per_seed)
        below = (
            ""
            if base is None
            else (" (below on every seed)" if lower == len(per_seed) else f" (below on {lower}/{len(per_seed)} seeds)")
        )
        base = per_seed if base is None else base
        seeds = " ".join(f"{x:.3f}" for x in per_seed.values())
        print(
            f"| {name} | {seeds} | {v.observed:.3f}{below} | "
            + " / ".join(f"{x:.3f}" for x in curve)
            + f" | {time.process_time() - t0:.0f} s |",
            flush=True,
        )


if __name__ == "__main__":
    main()
