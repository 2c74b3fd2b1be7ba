"""CPU time of one probe of a transformer case with the token observers off and on.

    python dev/token_overhead.py [WIDTH TOKENS BATCH]     (default 32 8 2; depth 8)

Interleaved repeats (every configuration once per round, 60 rounds after 5 warm-up rounds), one
thread, `time.process_time` (CPU time, robust to a loaded machine); prints the median and the
quartiles. docs/performance.md ("Token observers") records the numbers.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from stability.families.build import build, make_input
from stability.judge.token_invariants import AttentionEntropyObserver, RankCollapseObserver, TokenShapeObserver
from stability.measure.probe import BoundaryObserver, probe
from stability.spec.case import corner_case
from stability.spec.load import load_spec

CONFIGS: dict[str, Callable[[], list[BoundaryObserver]]] = {
    "off": lambda: [],
    "tokens (shape only)": lambda: [TokenShapeObserver()],
    "rank_collapse": lambda: [RankCollapseObserver()],
    "attention_entropy": lambda: [AttentionEntropyObserver()],
    "all three": lambda: [TokenShapeObserver(), RankCollapseObserver(), AttentionEntropyObserver()],
}


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    width, tokens, batch = (int(a) for a in argv) if argv else (32, 8, 2)
    spec = load_spec(Path(__file__).resolve().parent.parent / "specs" / "transformer_preln.toml")
    case = corner_case(spec, depth=8, width=width, tokens=tokens, batch=batch, seed=3)
    blocks, x = build(spec, case).blocks, make_input(spec, case)
    times: dict[str, list[float]] = {k: [] for k in CONFIGS}
    for rnd in range(65):
        for name, make in CONFIGS.items():
            observers = make()
            t0 = time.process_time()
            probe(blocks, x, seed=1, observers=observers)
            if rnd >= 5:
                times[name].append(time.process_time() - t0)
    base = statistics.median(times["off"])
    print(f"transformer-preln, depth 8, width {width}, tokens {tokens}, batch {batch}:")
    for name, values in times.items():
        q1, med, q3 = statistics.quantiles(values, n=4)
        print(
            f"  {name:20s} median {med * 1e3:6.2f} ms CPU ({(med / base - 1) * 100:+4.0f}%), quartiles "
            f"{q1 * 1e3:.2f}–{q3 * 1e3:.2f} ms"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
