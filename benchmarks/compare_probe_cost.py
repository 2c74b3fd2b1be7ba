"""Probe CPU time with no opt-in measurement, for comparing two checkouts of the package.

Runs `probe` on the plain ReLU MLP of docs/performance.md (depth 256, width 256, batch 64, Kaiming)
and on LayerNorm -> Linear -> ReLU blocks of the same size, one thread, median of 15 process-CPU
timings after 3 warm-up probes, and prints which checkout it imported. Alternate the two:

    PYTHONPATH=/path/to/old/checkout python benchmarks/compare_probe_cost.py
    PYTHONPATH=. python benchmarks/compare_probe_cost.py
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch
from torch import nn

import stability
from stability import probe


def mlp(*, norm: bool, depth: int = 256, width: int = 256) -> nn.Sequential:
    blocks = []
    for _ in range(depth):
        lin = nn.Linear(width, width)
        nn.init.kaiming_normal_(lin.weight)
        blocks.append(nn.Sequential(*([nn.LayerNorm(width)] if norm else []), lin, nn.ReLU()))
    return nn.Sequential(*blocks)


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x = torch.randn(64, 256)  # (B, C)
    where = Path(stability.__file__).resolve().parent.parent
    for name, net in (("plain", mlp(norm=False)), ("layernorm", mlp(norm=True))):
        for _ in range(3):
            probe(net, x)
        times = []
        for _ in range(15):
            t0 = time.process_time()
            probe(net, x)
            times.append(time.process_time() - t0)
        print(f"{where} {name}: {statistics.median(times) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
