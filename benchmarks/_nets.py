"""Networks the asv benchmarks measure: one per (family, depth, layer kind), built from a spec.

Built through the public pipeline (`parse_spec` → `corner_case` → `build` / `make_input`), so the
same benchmark runs unchanged on every commit whose pipeline has those four functions. Sizes are
small on purpose (linear: width 64, batch 16; conv2d: 8 channels, 8×8, batch 4) so that
`asv run --quick` over the whole grid takes minutes on a laptop CPU.

Timings use one intra-op thread unless STABILITY_BENCH_THREADS says otherwise: on a shared
two-core machine a second OpenMP thread made single ops 10-100× slower at random (a parallel
region waits for a descheduled thread), which no benchmark statistic can undo.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

import stability  # noqa: F401  (imported once by asv's forkserver, not once per benchmark)
from benchmarks._compat import internal

FAMILIES = ["plain", "preact", "postnorm", "highway", "dense"]
DEPTHS = [16, 64, 256]
LAYERS = ["linear", "conv2d"]
GRID = [FAMILIES, DEPTHS, LAYERS]
GRID_NAMES = ["family", "depth", "layer"]
SPECS_DIR = Path(__file__).resolve().parent.parent / "specs"

_FAMILY_BLOCK = {
    "plain": 'norm = "none"',
    "preact": 'norm = "layer"',
    "postnorm": 'norm = "layer"',
    "highway": 'norm = "layer"',
    "dense": 'norm = "layer"\ngrowth = 8\ntransition_every = 8\ncompression = 0.5',
}


def threads() -> None:
    torch.set_num_threads(int(os.environ.get("STABILITY_BENCH_THREADS", "1")))


def spec_text(family: str, layer: str) -> str:
    width, batch = (8, 4) if layer == "conv2d" else (64, 16)
    spatial = "spatial = 8\n" if layer == "conv2d" else ""
    return f"""
name = "bench-{family}-{layer}"
description = "asv benchmark network"
family = "{family}"

[block]
layer = "{layer}"
activation = "relu"
{_FAMILY_BLOCK[family]}

[space]
depth = [1, 256]
width = {width}
batch = {batch}
{spatial}weight_init = ["kaiming_normal"]
branch_init = ["default"]
dtype = ["float32"]
device = ["cpu", "cuda"]
seed = 0

[expect.gradient_arrival]
lo = 1e-30
hi = 1e30
"""


def network(family: str, depth: int, layer: str, *, device: str = "cpu") -> tuple[Any, torch.Tensor]:
    """(blocks, x) for one grid point, on `device`, seed 0."""
    from stability import build, make_input, parse_spec

    corner_case = internal("spec.case").corner_case

    spec = parse_spec(spec_text(family, layer))
    case = corner_case(spec, depth=depth, device=device)
    net = build(spec, case)
    x = make_input(spec, case)
    if net.stem is not None:
        with torch.no_grad():
            x = net.stem(x)
    return net.blocks, x


def forward_backward(blocks: Any, x: torch.Tensor, r: torch.Tensor | None = None) -> None:
    """The bare training-step work the probe is compared with: one forward, one backward to the
    input and every parameter, no statistics."""
    params = [p for p in blocks.parameters() if p.requires_grad]
    x0 = x.detach().requires_grad_(True)
    y = blocks(x0)
    torch.autograd.grad(y, [x0, *params], grad_outputs=torch.ones_like(y) if r is None else r)


def reset_peak_rss() -> None:
    """Reset the process's peak RSS to its current RSS (Linux ≥ 4.0), so that an asv `peakmem_`
    benchmark reports the peak of the measured call, not of construction in setup."""
    import gc

    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
