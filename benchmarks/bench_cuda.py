"""CUDA variants: synchronised timing of the probe and of bare forward + backward, and the peak
of `torch.cuda.max_memory_allocated` during one probe. Every setup raises NotImplementedError when
CUDA is absent, which asv reports as skipped (n/a), not as a failure.

asv runs every parameter combination in its own process, so on a CPU-only build of torch the
grid shrinks to one point per benchmark: three skipped runs instead of ninety. Results are stored
per machine, so a CUDA runner's full grid never mixes with a CPU runner's."""

from __future__ import annotations

import torch

from benchmarks import _nets

#: The full grid on a CUDA (or ROCm) build of torch. Decided without initialising CUDA, which
#: would break CUDA in the processes asv's forkserver forks.
GRID = _nets.GRID if (torch.version.cuda or torch.version.hip) else [["plain"], [16], ["linear"]]


def _need_cuda() -> None:
    if not torch.cuda.is_available():
        raise NotImplementedError("CUDA is not available on this machine")


class CudaTime:
    params = GRID
    param_names = _nets.GRID_NAMES
    timeout = 300
    warmup_time = 0.5

    def setup(self, family: str, depth: int, layer: str) -> None:
        _need_cuda()
        self.blocks, self.x = _nets.network(family, depth, layer, device="cuda")
        self.time_probe_cuda(family, depth, layer)  # warm: CUDA context, kernels, allocator
        self.time_forward_backward_cuda(family, depth, layer)

    def time_probe_cuda(self, family: str, depth: int, layer: str) -> None:
        from stability import probe

        probe(self.blocks, self.x, seed=0)  # ends with one host transfer, i.e. synchronised
        torch.cuda.synchronize()

    def time_forward_backward_cuda(self, family: str, depth: int, layer: str) -> None:
        _nets.forward_backward(self.blocks, self.x)
        torch.cuda.synchronize()


class CudaMemory:
    params = GRID
    param_names = _nets.GRID_NAMES
    unit = "bytes"
    timeout = 300

    def setup(self, family: str, depth: int, layer: str) -> None:
        _need_cuda()
        self.blocks, self.x = _nets.network(family, depth, layer, device="cuda")
        self.track_max_memory_allocated_cuda(family, depth, layer)  # warm

    def track_max_memory_allocated_cuda(self, family: str, depth: int, layer: str) -> int:
        from stability import probe

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        probe(self.blocks, self.x, seed=0)
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated())

    track_max_memory_allocated_cuda.unit = "bytes"  # type: ignore[attr-defined]
