"""Sweep throughput (probes per second of wall time) in this process and on 1 and 2 local Dask
workers, interleaved rounds, nothing cached: the numbers in docs/performance.md.

    python benchmarks/sweep_throughput.py --rounds 2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from stability.run.executor import Executor, InProcessExecutor
from stability.run.grid import parse_axis
from stability.run.store import Store
from stability.run.sweep import run_sweep
from stability.run.sweep_exec import DaskExecutor
from stability.spec.load import load_spec


def main() -> None:
    p = argparse.ArgumentParser(description="sweep throughput at 1 and 2 Dask workers")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--depths", default="8,16,32,64", help="the depth axis (bigger depths: bigger points)")
    args = p.parse_args()
    rounds = args.rounds
    spec = load_spec(Path(__file__).resolve().parent.parent / "specs" / "plain_tanh_mlp.toml")
    axes = [parse_axis(f"depth={args.depths}"), parse_axis("sigma_w2=lin:0.5:3:6")]
    backends: dict[str, Executor] = {
        "in-process": InProcessExecutor(),
        "1 worker": DaskExecutor(n_workers=1),
        "2 workers": DaskExecutor(n_workers=2),
    }
    for name, b in backends.items():  # warm: every worker imports torch and runs one point
        run_sweep(
            spec,
            [parse_axis("depth=2"), parse_axis("sigma_w2=0.5,1")],
            Store(":memory:"),
            b,
            seeds=range(2),
            budgets=False,
            version=f"warm-{name}",
        )
    out: dict[str, list[tuple[int, float, float]]] = {k: [] for k in backends}
    for rep in range(rounds):
        for name, b in backends.items():
            r = run_sweep(spec, axes, Store(":memory:"), b, seeds=range(4), budgets=False, version=f"{name}-{rep}")
            out[name].append((r.probed, r.seconds, r.probed / r.seconds))
            print(name, rep, r.probed, f"{r.seconds:.1f} s", f"{r.probed / r.seconds:.2f} probes/s", flush=True)
    for b in backends.values():
        b.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
