"""Time: forward + backward of the built network, and the full probe, over the grid
family × depth × layer kind. Construction happens in setup and is not timed.

The clock is the process's CPU time (`time.process_time`), not wall time: the work runs on one
thread (see `_nets.threads`), so CPU time is the time the work took, and a busy neighbour on a
shared runner, which stretches wall time by 50% at random, does not read as a regression. On this
suite's development box two runs of identical code differed by 1.55× in wall time and were flagged
by `asv continuous -f 1.1`; in CPU time they agree. The CUDA variants keep wall time.
"""

from __future__ import annotations

import time

from benchmarks import _nets


class _OnTheGrid:
    """The grid, the clock, and a network built in setup (not timed) and then warmed by one call
    of the benchmark itself: a process's first backward costs ~0.4 s, and `asv run --quick` times
    a single call."""

    params = _nets.GRID
    param_names = _nets.GRID_NAMES
    timeout = 300
    warmup_time = 0.2
    timer = time.process_time

    def setup(self, family: str, depth: int, layer: str) -> None:
        _nets.threads()
        self.blocks, self.x = _nets.network(family, depth, layer)
        self.run()

    def run(self) -> None:
        raise NotImplementedError


class ForwardBackward(_OnTheGrid):
    """Bare forward + backward (input and parameter gradients): the probe's baseline."""

    def run(self) -> None:
        _nets.forward_backward(self.blocks, self.x)

    def time_forward_backward(self, family: str, depth: int, layer: str) -> None:
        self.run()


class Probe(_OnTheGrid):
    """`probe`: one forward + one backward with every boundary's statistics."""

    def run(self) -> None:
        from stability import probe

        probe(self.blocks, self.x, seed=0)

    def time_probe(self, family: str, depth: int, layer: str) -> None:
        self.run()
