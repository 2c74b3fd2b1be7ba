"""Memory: the peak RSS of one probe (construction in setup, the peak reset after it) and the
bytes autograd saves for the backward pass (`stability.memory.saved_activation_bytes`)."""

from __future__ import annotations

from benchmarks import _nets


class PeakMemory:
    """Process peak RSS while one call runs. asv's `peakmem_` reads the process's maximum RSS, so
    it includes the interpreter, torch and the network's parameters; setup resets the peak after
    construction (Linux `clear_refs`), so construction's transient memory is not counted."""

    params = _nets.GRID
    param_names = _nets.GRID_NAMES
    timeout = 300

    def setup(self, family: str, depth: int, layer: str) -> None:
        _nets.threads()
        self.blocks, self.x = _nets.network(family, depth, layer)
        self.peakmem_probe(family, depth, layer)  # warm: the first call's one-off allocations
        _nets.reset_peak_rss()

    def peakmem_probe(self, family: str, depth: int, layer: str) -> None:
        from stability import probe

        probe(self.blocks, self.x, seed=0)


class SavedActivations:
    """Bytes of the distinct activation storages autograd keeps between forward and backward."""

    params = _nets.GRID
    param_names = _nets.GRID_NAMES
    unit = "bytes"
    timeout = 300

    def setup(self, family: str, depth: int, layer: str) -> None:
        try:
            from stability.memory import saved_activation_bytes
        except ImportError:  # commits before stability/memory.py existed
            raise NotImplementedError("stability.memory.saved_activation_bytes is not in this commit") from None
        _nets.threads()
        self.count = saved_activation_bytes
        self.blocks, self.x = _nets.network(family, depth, layer)

    def track_saved_activation_bytes(self, family: str, depth: int, layer: str) -> int:
        return self.count(self.blocks, self.x)

    track_saved_activation_bytes.unit = "bytes"  # type: ignore[attr-defined]
