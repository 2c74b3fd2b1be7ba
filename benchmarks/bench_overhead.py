"""The probe's overhead over a bare forward + backward, tracked as a ratio: the networks of
target (a) in docs/performance.md (plain MLP, the two normalised MLPs, conv stack). A ratio of two CPU times
measured in turn in one process moves much less with machine load than either time alone, so a
change that adds per-boundary work shows up here even on a shared runner.

`track_probe_over_bare` is the ratio at one thread (CPU time); `track_probe_over_bare_2_threads`
at two threads by wall time, the target's own clock there (process CPU time at two threads also
counts the second thread spin-waiting). On a runner with other jobs beside it, a second thread is
descheduled at random and the wall-time ratio is noisy: compare it over commits on a quiet
machine, as docs/performance.md says."""

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

        probe_module = internal("measure.probe")
        projection_vector = (
            getattr(probe_module, "projection_vector", None) or internal("measure.probe_pass").projection_vector
        )  # (the pass has its own module since)

        _nets.threads()
        self.blocks, self.x = build_network(network)
        with torch.no_grad():
            r = projection_vector(self.blocks(self.x).shape, 0, dtype=self.x.dtype, device=self.x.device)
        self.bare = _bare(self.blocks, self.x, r)

    def _ratio(self, clock: Any) -> float:
        """Median over 7 interleaved pairs of `clock` time (probe) / (bare forward + backward)."""
        from stability import probe

        def run() -> Any:
            return probe(self.blocks, self.x, seed=0)

        run()
        self.bare()
        probe_t, bare_t = [], []
        for _ in range(7):
            t0 = clock()
            self.bare()
            bare_t.append(clock() - t0)
            t0 = clock()
            run()
            probe_t.append(clock() - t0)
        return float(statistics.median(probe_t) / statistics.median(bare_t))

    def track_probe_over_bare(self, network: str) -> float:
        """One thread (or STABILITY_BENCH_THREADS), CPU time."""
        return self._ratio(time.process_time)

    track_probe_over_bare.unit = "ratio"  # type: ignore[attr-defined]

    def track_probe_over_bare_2_threads(self, network: str) -> float:
        """Two threads, wall time."""
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(2)
        try:
            return self._ratio(time.perf_counter)
        finally:
            torch.set_num_threads(threads)

    track_probe_over_bare_2_threads.unit = "ratio"  # type: ignore[attr-defined]
