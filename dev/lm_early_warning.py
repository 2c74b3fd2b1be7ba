"""Does an indicator over the first N steps of a language-model run predict that it will have
diverged by step M? The detection and false-alarm table in docs/training.md.

    python dev/lm_early_warning.py specs/control_lm_early_warning.toml [--seeds 8] [--save runs.json | --load runs.json]
    python dev/lm_early_warning.py specs/control_lm_early_warning.toml --seeds 4 --depths 2 \
        --schedule constant --lrs 0.1,0.15,0.2,0.25,0.3 --rise 0.3 --lead 50

Over a grid of (learning rate, depth, qk_norm off/on, seed), each run is the spec's case trained
train.steps = M steps exactly as `stability check --case` would (the spec's train.lr, depth and
qk_norm replaced). A run has *diverged by step M* when its loss is non-finite, or when the mean loss
of its last 10 steps has covered less than half of the way from its first loss L₀ to the task's
entropy rate H (`stability.judge.lm_invariants.progress` < 1/2). Each indicator of
`stability.judge.lm_invariants.indicator` is read at N = M/20, M/10, M/5 and M/2; its threshold is
chosen on half of the seeds (the most diverged runs caught with at most 5% false alarms) and the
rates are measured on the other half, both ways round (two folds), so no run is scored by a
threshold fitted to it.
The table also gives, per indicator and N, the share of the diverging runs whose loss had not yet
turned (its 10-step mean had not passed its minimum so far by more than 0.05) at step N, and of
those caught at least M/2 steps before the step D they diverged (`divergence_step`). Then the
shipped invariant (the spec's indicator, N and threshold) on every run: per diverging run the lead
time D − N, D the step it diverged by its loss alone (`divergence_step`), and how many were warned
at least M/2 steps before D.

`--steps`, `--warmup` and `--schedule` replace the spec's train.steps, train.warmup and
train.schedule (a constant rate after the warm-up lets a run near the critical learning rate
diverge late); `--rise` is the rise of the 10-step mean loss above its smallest value so far that
counts as the loss having turned (0.05 nats by default: at a constant rate the batch noise alone
crosses that on a plateau); `--lead` the lead time the last column counts (default M/2); `--ns`
the steps N the indicators are read at (default M/20, M/10, M/5, M/2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from stability.judge.lm_invariants import WARNING_DIRECTION, indicator, progress
from stability.measure.lm_records import LMRun
from stability.measure.lm_train import lm_run
from stability.spec.case import corner_case
from stability.spec.lm_expect import INDICATORS
from stability.spec.load import load_spec

MAX_FALSE_ALARMS = 0.05


def diverged(run: LMRun) -> bool:
    return run.diverged_at is not None or not progress(run, len(run.losses) - 1) >= 0.5


#: The rise of the 10-step mean loss above its minimum so far that counts as the loss having turned (--rise).
RISE = [0.05]


def turned_by(run: LMRun, step: int, *, window: int = 10, rise: float | None = None) -> bool:
    """Whether the loss's running mean had risen `rise` above its minimum so far by `step` (or become non-finite)."""
    rise = RISE[0] if rise is None else rise
    losses = np.asarray(run.losses[: step + 1], dtype=np.float64)
    if not np.isfinite(losses).all():
        return True
    means = np.convolve(losses, np.ones(window) / window, mode="valid")
    return bool(len(means) and (means - np.minimum.accumulate(means)).max() > rise)


def divergence_step(run: LMRun, *, window: int = 10, rise: float | None = None) -> int:
    """When a run that diverged by step M did so, by its loss alone: the first non-finite loss, or
    the last step of the first 10-step window whose mean had risen `rise` above the smallest such
    mean before it (the loss turned); M when neither happened (it only stalled)."""
    rise = RISE[0] if rise is None else rise
    losses = np.asarray(run.losses, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(losses))
    stop = int(bad[0]) if len(bad) else len(losses)
    means = np.convolve(losses[:stop], np.ones(window) / window, mode="valid")
    turned = np.flatnonzero(means - np.minimum.accumulate(means) > rise)
    if len(turned):
        return int(turned[0]) + window - 1
    return stop if len(bad) else run.steps


def threshold(values: list[float], outcome: list[bool], up: bool) -> float:
    """The threshold that catches the most diverged runs with at most MAX_FALSE_ALARMS of the others
    warned: a candidate between consecutive observed values."""
    signed = [(v if up else -v) for v in values]
    healthy = sorted(s for s, d in zip(signed, outcome, strict=True) if not d)
    allowed = int(math.floor(MAX_FALSE_ALARMS * len(healthy)))
    cut = healthy[len(healthy) - 1 - allowed] if healthy else -math.inf  # warn strictly above this
    return cut if up else -cut


def fires(value: float, thr: float, up: bool) -> bool:
    if math.isnan(value):
        return False
    return value > thr if up else value < thr


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("spec")
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--lrs", default="0.1,0.15,0.2,0.25,0.3,0.4,0.5")
    p.add_argument("--depths", default="1,2")
    p.add_argument("--warmup", type=int, help="replace the spec's train.warmup (the divergence comes after it)")
    p.add_argument("--steps", type=int, help="replace the spec's train.steps (M)")
    p.add_argument("--schedule", choices=("constant", "cosine"), help="replace the spec's train.schedule")
    p.add_argument(
        "--rise",
        type=float,
        default=0.05,
        help="the rise of the 10-step mean loss that counts as the loss having turned",
    )
    p.add_argument("--lead", type=int, help="the lead time D - N the last column counts (default M/2)")
    p.add_argument("--ns", help="the steps N the indicators are read at, e.g. 10,20,50 (default M/20, M/10, M/5, M/2)")
    p.add_argument("--save", type=Path)
    p.add_argument("--load", type=Path)
    args = p.parse_args()
    torch.set_num_threads(1)
    spec = load_spec(args.spec)
    assert spec.train is not None
    update = {
        k: v for k, v in (("warmup", args.warmup), ("steps", args.steps), ("schedule", args.schedule)) if v is not None
    }
    spec = spec.model_copy(update={"train": spec.train.model_copy(update=update)})
    RISE[0] = args.rise
    m = spec.train.steps
    lead = m // 2 if args.lead is None else args.lead
    ns = [int(x) for x in args.ns.split(",")] if args.ns else [m // 20, m // 10, m // 5, m // 2]
    keys = [
        (lr, d, qk, s)
        for lr in map(float, args.lrs.split(","))
        for d in map(int, args.depths.split(","))
        for qk in (False, True)
        for s in range(args.seeds)
    ]
    runs: dict[tuple[float, int, bool, int], LMRun] = {}
    if args.load:
        for row in json.loads(args.load.read_text()):
            runs[(row["lr_"], row["depth"], row["qk"], row["seed_"])] = LMRun.from_dict(row["run"])
    t0 = time.process_time()
    for lr, d, qk, s in keys:
        if (lr, d, qk, s) in runs:
            continue
        variant = spec.model_copy(
            update={
                "block": spec.block.model_copy(update={"qk_norm": "layer" if qk else "none"}),
                "train": spec.train.model_copy(update={"lr": lr}),
            }
        )
        runs[(lr, d, qk, s)] = lm_run(variant, dataclasses.replace(corner_case(spec, seed=s), depth=d))
    if args.save:
        args.save.write_text(
            json.dumps(
                [{"lr_": k[0], "depth": k[1], "qk": k[2], "seed_": k[3], "run": r.to_dict()} for k, r in runs.items()]
            )
        )
    keys = [k for k in keys if k in runs]
    outcome = {k: diverged(runs[k]) for k in keys}
    half = args.seeds // 2
    folds = [
        ([k for k in keys if k[3] < half], [k for k in keys if k[3] >= half]),
        ([k for k in keys if k[3] >= half], [k for k in keys if k[3] < half]),
    ]
    n_div = sum(outcome[k] for k in keys)
    print(
        f"{args.spec}: {len(keys)} runs of M = {m} steps ({time.process_time() - t0:.0f} s CPU), {n_div} "
        "diverged by step M"
    )
    by_lr = ", ".join(
        f"{lr:g}: "
        f"{sum(outcome[k] for k in keys if k[0] == lr and not k[2])}/"
        f"{sum(outcome[k] for k in keys if k[0] == lr and k[2])}"
        for lr in sorted({k[0] for k in keys})
    )
    print(
        "diverged by step M, per learning rate (qk_norm off/on, of "
        f"{sum(1 for k in keys if k[0] == keys[0][0] and not k[2])} each): {by_lr}"
    )
    print(
        f"two folds: the threshold from seeds 0-{half - 1} scores seeds {half}-{args.seeds - 1}, and the "
        "other way round; every run is scored once, by a threshold it did not help choose"
    )
    print()
    print(
        "| indicator | N | thresholds (two folds) | diverged runs caught | false alarms | caught before the "
        f"loss turned | caught ≥ {lead} steps before D |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in INDICATORS:
        up = WARNING_DIRECTION[name] > 0
        for n in ns:
            values = {k: indicator(runs[k], name, n) for k in keys}
            thresholds, caught, alarms, early, ahead, n_bad, n_ok = [], 0, 0, 0, 0, 0, 0
            for calib, test in folds:
                thr = threshold([values[k] for k in calib], [outcome[k] for k in calib], up)
                thresholds.append(thr)
                for k in test:
                    hit = fires(values[k], thr, up)
                    if outcome[k]:
                        n_bad += 1
                        caught += hit
                        early += hit and not turned_by(runs[k], n - 1)
                        ahead += hit and divergence_step(runs[k]) - n >= lead
                    else:
                        n_ok += 1
                        alarms += hit
            shown = " / ".join(f"{'>' if up else '<'} {t:.3g}" for t in thresholds)
            rates = (
                f"{caught}/{n_bad} ({100 * caught / max(n_bad, 1):.0f}%) | {alarms}/{n_ok} "
                f"({100 * alarms / max(n_ok, 1):.1f}%)"
            )
            print(
                f"| `{name}` | {n} | {shown} | {rates} | {early}/{caught} | {ahead}/{n_bad} "
                f"({100 * ahead / max(n_bad, 1):.0f}%) |"
            )
    if args.lead is not None:
        print()
        ds = sorted(divergence_step(runs[k]) for k in keys if outcome[k])
        if ds:
            print(
                f"D of the diverging runs (rise {args.rise:g}): min {ds[0]}, median {ds[len(ds) // 2]}, max "
                f"{ds[-1]}; {sum(d >= min(ns) + lead for d in ds)}/{len(ds)} have D ≥ {min(ns)} + "
                f"{lead}"
            )
    lead_table(spec, keys, runs, outcome, m)


def lead_table(
    spec: Any,
    keys: list[tuple[float, int, bool, int]],
    runs: dict[tuple[float, int, bool, int], LMRun],
    outcome: dict[tuple[float, int, bool, int], bool],
    m: int,
) -> None:
    """The shipped invariant (the spec's indicator, steps N and threshold) on every run: per
    diverging run, the lead time D − N of its warning (D its `divergence_step`), and how many were
    warned at least M/2 steps before D."""
    ew = spec.expect.early_warning
    name, n, thr = ew.indicator, ew.steps, ew.threshold
    up = WARNING_DIRECTION[name] > 0
    warned = {k: fires(indicator(runs[k], name, n), thr, up) for k in keys}
    bad = [k for k in keys if outcome[k]]
    ok = [k for k in keys if not outcome[k]]
    leads = {k: divergence_step(runs[k]) - n for k in bad if warned[k]}
    far = sum(v >= m // 2 for v in leads.values())
    print()
    alarms = sum(warned[k] for k in ok)
    print(
        f"the shipped invariant, {name} {'>' if up else '<'} {thr:g} over the first N = {n} of M = {m} steps: "
        f"{len(leads)}/{len(bad)} diverging runs warned, {alarms}/{len(ok)} false alarms;"
    )
    print(
        "lead time D - N (D: the first non-finite loss or the step its 10-step mean loss turned, M when it "
        f"only stalled): {far}/{len(bad)} warned at least M/2 = {m // 2} steps before D"
    )
    if leads:
        v = sorted(leads.values())
        print(
            f"lead times: min {v[0]}, median {v[len(v) // 2]}, max {v[-1]}; D - N >= 0 (warned before D) for "
            f"{sum(x >= 0 for x in v)}, M - N = {m - n} for all"
        )
    print()
    print(
        "| learning rate | depth | qk-norm | diverged (of seeds) | lead time D − N of each diverging run, by "
        "seed (— not warned) |"
    )
    print("| --- | --- | --- | --- | --- |")
    for lr, d, qk in sorted({k[:3] for k in bad}):
        rows = sorted((k for k in bad if k[:3] == (lr, d, qk)), key=lambda k: k[3])
        seeds = sum(1 for k in keys if k[:3] == (lr, d, qk))
        cells = ", ".join(f"{k[3]}: {leads[k]}" if k in leads else f"{k[3]}: —" for k in rows)
        print(f"| {lr:g} | {d} | {'on' if qk else 'off'} | {len(rows)}/{seeds} | {cells} |")


if __name__ == "__main__":
    main()
