"""The language-model specs of the zoo's decoder families (specs/lm_zoo/): what each measures on
seeds of its corner case, and the same with one of the family's config keys unset (its own
stabiliser removed): the tables in docs/training.md.

    python dev/lm_zoo.py specs/lm_zoo/gemma2_attention_logits.toml [--seeds 8] [--without attn_logit_softcapping]
    python dev/lm_zoo.py specs/lm_zoo/*_lr_sensitivity.toml

An `attention_logits` spec is run on seeds 0 … seeds − 1 (the peak logit of each, the first step
over the bound, the final held-out loss); an `lr_sensitivity` spec on its own ensemble of the corner
case (seed 0 and its derived seeds), exactly as `evaluate_lm` runs it: the LRS of each seed, their
mean, and the mean final loss at every learning rate. `--without KEY` sets block.config.KEY to None
(TOML has no null), e.g. Gemma 2's `attn_logit_softcapping`. CPU time per spec is printed with
the load average; single-threaded runs, so the numbers replay bit for bit.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import torch

from stability.run.lm_training import evaluate_lm
from stability.spec.case import corner_case
from stability.spec.load import load_spec
from stability.spec.schema import Spec


def without(spec: Spec, key: str | None) -> Spec:
    """The spec with block.config[key] = None (the library's way of turning an option off)."""
    if key is None:
        return spec
    options = spec.options.model_copy(update={"config": {**spec.options.config, key: None}})  # type: ignore[union-attr]
    return spec.model_copy(update={"options": options})


def attention(spec: Spec, seeds: int) -> str:
    peaks, firsts, finals = [], [], []
    for seed in range(seeds):
        v, error = evaluate_lm(spec, "attention_logits", corner_case(spec, seed=seed))
        if v is None:
            return f"error: {error}"
        peaks.append(max(x for x in v.extra["max_logit"] if x is not None))
        firsts.append(v.extra.get("first_step"))
        finals.append(v.extra["losses"][-1])
    over = [f for f in firsts if f is not None]
    crossed = (
        f"over 100 on {len(over)}/{seeds} (first at steps {min(over)}–{max(over)})"
        if over
        else f"never over 100 on {seeds}/{seeds}"
    )
    return (
        f"peak {min(peaks):.3g}–{max(peaks):.3g} (median {statistics.median(peaks):.3g}); {crossed}; last "
        f"batch loss {min(finals):.3f}–{max(finals):.3f}"
    )


def sensitivity(spec: Spec) -> str:
    assert spec.expect.lr_sensitivity is not None
    lrs = spec.expect.lr_sensitivity.lrs
    v, error = evaluate_lm(spec, "lr_sensitivity", corner_case(spec, seed=0))
    if v is None:
        return f"error: {error}"
    finals = v.extra["final_loss"]
    curve = [
        statistics.mean(finals[s][i] if finals[s][i] is not None else v.extra["initial_loss"][s] for s in finals)
        for i in range(len(lrs))
    ]
    seeds = " ".join(f"{x:.3f}" for x in v.extra["per_seed"].values())
    return f"LRS {v.observed:.3f} (per seed {seeds}); mean final loss at " + ", ".join(
        f"{lr:g}: {x:.3f}" for lr, x in zip(lrs, curve, strict=True)
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("specs", nargs="+")
    p.add_argument("--seeds", type=int, default=8, help="seeds of an attention_logits spec")
    p.add_argument("--without", default=None, help="a block.config key set to None")
    args = p.parse_args()
    torch.set_num_threads(1)
    for path in args.specs:
        spec = without(load_spec(path), args.without)
        names = [n for n, _ in spec.invariants()]
        t0, w0 = time.process_time(), time.perf_counter()
        text = sensitivity(spec) if "lr_sensitivity" in names else attention(spec, args.seeds)
        cpu, wall = time.process_time() - t0, time.perf_counter() - w0
        label = f"{path}" + (f" without {args.without}" if args.without else "")
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
        print(f"{label}: {text}  [{cpu:.1f} s CPU, {wall:.1f} s wall, load {load:.1f}]", flush=True)


if __name__ == "__main__":
    main()
