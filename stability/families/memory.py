"""The built-in families' memory models, for the guard (`stability.run.guard`): parameters plus the
activations autograd saves for the backward pass, from the same formulas the builder uses
(channels per boundary, layers per block), plus a fixed cost per block for the Python module
objects, parameter tensors and autograd nodes, which dominates for deep, narrow stacks. Each is
deliberately an over-estimate (a handful of saved tensors per layer), so a refused case is
refused with margin. Each family's entry (stability.families.catalog) names its estimate and its
per-block overhead.
"""

from __future__ import annotations

from stability.spec.case import Case
from stability.spec.schema import DEFAULT_SIZE, Spec

__all__ = [
    "SAVED_PER_BLOCK",
    "OVERHEAD_PER_BLOCK",
    "CUSTOM_MIN_PER_BLOCK",
    "item_bytes",
    "stack_bytes",
    "transformer_bytes",
]

#: Saved tensors per layer-sized activation, by family: a generous count of what autograd keeps
#: (layer input, norm input and statistics, activation output, the addition's operands).
SAVED_PER_BLOCK = {"plain": 4, "postnorm": 9, "preact": 9, "highway": 8, "dense": 4, "transformer": 16}
#: Fixed bytes per block besides tensor data: module objects, parameter tensors, autograd nodes and
#: hooks. Measured peak on CPU at width 4 (torch 2.13): plain ~25 KiB, dense ~30 KiB, highway ~40-55
#: KiB, postnorm/preact ~45-62 KiB per block; these are those with margin.
OVERHEAD_PER_BLOCK = {
    "plain": 48 * 2**10,
    "postnorm": 96 * 2**10,
    "preact": 96 * 2**10,
    "highway": 96 * 2**10,
    "dense": 64 * 2**10,
    "transformer": 192 * 2**10,
}
#: A custom block is at least one module with a parameter (a bare nn.Linear measures ~14 KiB).
CUSTOM_MIN_PER_BLOCK = 8 * 2**10


def item_bytes(case: Case) -> int:
    """Bytes per element of the case's dtype."""
    from stability.families.build import torch_dtype

    return torch_dtype(case.dtype).itemsize


def _overhead(spec: Spec, case: Case) -> int:
    return case.depth * OVERHEAD_PER_BLOCK[spec.family]


def stack_bytes(spec: Spec, case: Case) -> int:
    """The MLP, conv and token stacks of plain, postnorm, preact, highway and dense: O(1) for every
    family but dense, which walks its channel counts (O(depth))."""
    from stability.families.build import channel_counts

    item = item_bytes(case)
    conv = spec.block.layer == "conv2d"
    k2 = spec.block.kernel_size**2 if conv else 1
    pixels = (case.spatial or DEFAULT_SIZE) ** 2 if conv else 1
    if spec.block.layer == "tokens":
        pixels = case.tokens or DEFAULT_SIZE  # (B, T, C): T positions per channel
    per_block = SAVED_PER_BLOCK[spec.family]
    if spec.family == "dense":
        counts = channel_counts(spec, case)
        pairs = [(c_in, c_out, 1) for c_in, c_out in zip(counts[:-1], counts[1:], strict=True)]
    else:  # boundaries are [c0, w, w, …, w]: one c0 → w block, then depth − 1 blocks w → w
        c0, w = case.input_width or case.width, case.width
        pairs = [(c0, w, 1), (w, w, case.depth - 1)]
    params = 0
    acts = 0
    for c_in, c_out, n in pairs:
        if spec.family == "dense":
            params += n * c_in * spec.block.growth * k2
        else:
            layers = 1 if spec.family == "plain" else 2
            params += n * (layers * c_in * c_out * k2 + (c_in * c_out if spec.block.skip == "projection" else 0))
        acts += n * per_block * case.batch * max(c_in, c_out) * pixels
    # weights, their gradients, one optimiser-free copy; then the fixed cost of every block
    return int((params * 3 + acts) * item) + _overhead(spec, case)


def transformer_bytes(spec: Spec, case: Case) -> int:
    """Parameters (4·C² attention + 2·r·C² MLP per block, times 3 as above) plus saved activations:
    16 token-sized tensors and the MLP's hidden ones (B·T·r·C, 3 of them), and the attention
    scores and probabilities (B·H·T², 3 of them) per block."""
    from stability.families.transformer import head_count

    item = item_bytes(case)
    c, t, b = case.width, case.tokens or DEFAULT_SIZE, case.batch
    hidden = max(1, round(spec.block.mlp_ratio * c)) if spec.block.mlp else 0
    params = case.depth * (4 * c * c + 2 * c * hidden + 8 * c + hidden)
    acts = case.depth * b * t * (SAVED_PER_BLOCK["transformer"] * c + 3 * hidden + 3 * head_count(spec, c) * t)
    return int((params * 3 + acts) * item) + _overhead(spec, case)
