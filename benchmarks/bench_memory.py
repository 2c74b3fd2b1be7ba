"""Memory: the peak RSS of one probe (construction in setup, the peak reset after it) and the
bytes autograd saves for the backward pass (`stability.measure.memory.saved_activation_bytes`)."""

from __future__ import annotations

from benchmarks import _nets
from benchmarks._compat import internal


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
            saved_activation_bytes = internal("measure.memory").saved_activation_bytes
        except ImportError:  # commits before stability/measure/memory.py existed
            raise NotImplementedError("stability.measure.memory.saved_activation_bytes is not in this commit") from None
        _nets.threads()
        self.count = saved_activation_bytes
        self.blocks, self.x = _nets.network(family, depth, layer)

    def track_saved_activation_bytes(self, family: str, depth: int, layer: str) -> int:
        return int(self.count(self.blocks, self.x))

    track_saved_activation_bytes.unit = "bytes"  # type: ignore[attr-defined]


class DeepCheckpointed:
    """Process peak RSS of a checkpointed probe of a deep pre-activation MLP (depth 2,000, width
    64, batch 256, `checkpoint_every=100`): the shape of the depth-10,000 target of
    `benchmarks/ratios.py` (d) at a fifth of the depth. Under glibc's default malloc settings the
    resident memory of this probe climbs ~0.4 MiB per block even though its live memory does not;
    the harness's own allocator setting (stability/allocator.py) keeps it flat, and this benchmark
    catches a change that loses it. Nothing in the environment is set: asv runs it as a user would."""

    timeout = 900

    def setup(self) -> None:
        from stability import build, load_spec, make_input

        corner_case = internal("spec.case").corner_case

        _nets.threads()
        spec = load_spec(_nets.SPECS_DIR / "preact_mlp.toml")
        case = corner_case(
            spec, depth=2000, width=64, batch=256, weight_init="kaiming_normal", branch_init="default", dtype="float32"
        )
        self.blocks, self.x = build(spec, case).blocks, make_input(spec, case)
        _nets.reset_peak_rss()

    def peakmem_probe_deep_checkpointed(self) -> None:
        from stability import probe

        probe(self.blocks, self.x, seed=0, checkpoint_every=100)
