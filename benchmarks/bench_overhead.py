"""The probe's overhead over a bare forward + backward, tracked as a ratio: the networks of
target (a) in docs/performance.md (plain MLP, the two normalised MLPs, conv stack). A ratio of two CPU times
measured in turn in one process moves much less with machine load than either time alone, so a
change that adds per-boundary work shows up here even on a shared runner."""

from __future__ import annotations

import statistics
import time
from typing import Any

from benchmarks import _nets
from benchmarks._compat import internal
from benchmarks.ratios import NETWORKS


class Overhead:
    params = [list(NETWORKS)]
    param_names = ["network"]
    timeout = 600

    def setup(self, network: str) -> None:
        import torch

        from benchmarks.ratios import _bare
        from benchmarks.ratios import network as build_network

        projection_vector = internal("measure.probe").projection_vector

        _nets.threads()
        self.blocks, self.x = build_network(network)
        with torch.no_grad():
            r = projection_vector(self.blocks(self.x).shape, 0, dtype=self.x.dtype, device=self.x.device)
        self.bare = _bare(self.blocks, self.x, r)

    def track_probe_over_bare(self, network: str) -> float:
        """Median over 7 interleaved pairs of CPU time (probe) / CPU time (bare forward + backward)."""
        from stability import probe

        def run() -> Any:
            return probe(self.blocks, self.x, seed=0)

        run()
        self.bare()
        probe_t, bare_t = [], []
        for _ in range(7):
            t0 = time.process_time()
            self.bare()
            bare_t.append(time.process_time() - t0)
            t0 = time.process_time()
            run()
            probe_t.append(time.process_time() - t0)
        return statistics.median(probe_t) / statistics.median(bare_t)

    track_probe_over_bare.unit = "ratio"  # type: ignore[attr-defined]
