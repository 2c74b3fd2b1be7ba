"""Stage 3: a Spec and a Case → the network's blocks and an input tensor.

All randomness comes from the case's seed: weights are drawn on the CPU under a forked, seeded
generator and then moved to the case's device and dtype, so the same case gives the same weights on
CPU and GPU. The input and the probe's loss use their own streams derived from the same seed.

The harness's own families are built here (`BUILDERS`); a user's factory, the `custom` family, is
`stability.families.custom`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import nn

from stability.families.adapters import CallKwargs, modes_while_called, set_modes
from stability.families.blocks import (
    ChannelRMSNorm,
    ChannelsLast,
    DenseLayer,
    HighwayBlock,
    PlainBlock,
    PostNormBlock,
    PreActBlock,
    Scale,
    Transition,
)
from stability.families.discover import ModelRun, inputs_to
from stability.families.embedding import TokenEmbedding, token_ids
from stability.families.init import (
    activation,
    blank_layer,
    init_all,
    init_weight,
    modules_in_order,
    overwritten,
    zero_parameters,
)
from stability.families.transformer import build_transformer
from stability.seeding import seeded
from stability.spec.case import Case
from stability.spec.registry import FAMILIES
from stability.spec.schema import DEFAULT_SIZE, Spec

__all__ = [
    "Network",
    "build",
    "make_input",
    "network_input",
    "derive_seed",
    "torch_dtype",
    "channel_counts",
    "BUILDERS",
]

_DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    return _DTYPES[name]


def derive_seed(seed: int, stream: int) -> int:
    """An independent seed for one random stream (0 weights, 1 input, 2 loss) of a case."""
    return (seed * 0x9E3779B97F4A7C15 + stream * 0xBF58476D1CE4E5B9) % (2**63)


@dataclass(kw_only=True)
class Network:
    """What a probe needs: the blocks, plus an optional stem applied before them, and the extra
    keyword arguments every block is called with (`stability.Stack.call_kwargs`).

    With `model` (a `ModelRun`: a whole model, its inputs and its blocks on the hidden state's
    path), the blocks run inside the model's own forward: every measurement probes the network
    through that forward (`stability.measure.probe.probe_network`), so what the model passes its
    blocks (masks, position tables, biases) reaches them as it ships, and the drawn input is not
    used."""

    blocks: nn.Sequential
    stem: nn.Module | None = None
    head: nn.Module | None = None
    call_kwargs: CallKwargs | None = None
    model: ModelRun | None = None
    #: The model's own token embedding (`stability.Stack.embedding`) and the `nn.Embedding` that reads
    #: the ids: the drawn input is that embedding of token ids (`network_input`), not N(0, 1).
    embedding: Callable[[torch.Tensor], torch.Tensor] | None = None
    tokens: TokenEmbedding | None = None

    @property
    def embedded(self) -> bool:
        """Whether x₀ is the model's own embedding of token ids: its forward from token ids (or
        `inputs_embeds` at the embedding's scale), or a declared `embedding`."""
        return self.embedding is not None or (self.model is not None and self.model.token_inputs)


def build(spec: Spec, case: Case) -> Network:
    """Build the network of one case on `case.device` in `case.dtype`."""
    family = FAMILIES.get(spec.family)
    seed = derive_seed(case.seed, 0)
    collecting = gc.isenabled()
    # a build makes thousands of modules and dicts and no garbage
    # cycles: the collections it set off took ~15% of a ci gate
    gc.disable()
    try:
        with torch.random.fork_rng(devices=[]), seeded(seed):
            if family.user_code or spec.family == "library":
                torch.manual_seed(seed)  # a user's factory, or a library's constructor, may draw on any device
            else:
                # The harness's own builders draw on the CPU only (the module docstring).
                # torch.manual_seed would also queue a lazy CUDA seeding that records the Python
                # stack every call (~0.7 ms deep inside a Hypothesis run).
                torch.default_generator.manual_seed(seed)
            gen = torch.Generator().manual_seed(seed)
            if family.user_code:  # a user's factory builds in its own dtype
                built = family.build(spec, case, gen)
            else:
                with _construction_dtype(case):
                    built = family.build(spec, case, gen)
            net = built if isinstance(built, Network) else Network(blocks=built)
        device = torch.device(case.device)
        dtype = torch_dtype(case.dtype)
        embedding = net.embedding if isinstance(net.embedding, nn.Module) else None
        for module in (net.blocks, net.stem, net.head, net.model.model if net.model is not None else None, embedding):
            if module is not None:
                if _moves(module, device, dtype):
                    module.to(device=device, dtype=dtype)
                set_modes(module, norm_train=spec.probe.mode == "train", dropout_train=spec.probe.dropout == "on")
        if net.model is not None:
            net.model = dataclasses.replace(net.model, inputs=inputs_to(net.model.inputs, device=device, dtype=dtype))
        return net
    finally:
        if collecting:
            gc.enable()


def _moves(root: nn.Module, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether `root.to(device=device, dtype=dtype)` would change anything: a parameter or buffer
    on another device, a floating-point (or complex) one of another dtype, or a module that
    overrides `to` or `_apply` (which may do more than move tensors). A no-op `to` still walks
    and reassigns every tensor: ~6 µs a module, 15% of building a small network."""
    if type(root).to is not nn.Module.to:
        return True
    on_cpu = device == torch.device("cpu")  # (`is_cpu` is cheaper than building each tensor's device)
    for m in modules_in_order(root):
        if type(m)._apply is not nn.Module._apply:
            return True
        for table in (m._parameters, m._buffers):
            for t in table.values():
                if t is not None and (not t.is_cpu if on_cpu else t.device != device):
                    return True
                if t is not None and t.dtype is not dtype and (t.is_floating_point() or t.is_complex()):
                    return True
    return False


@contextlib.contextmanager
def _construction_dtype(case: Case) -> Iterator[None]:
    """Build float64 cases in float64, so that spec constants (init_gain, skip_scale,
    branch_scale, gate_bias, bias_init, projection_spectrum) keep float64 precision instead of
    being rounded to float32 before the final cast; other dtypes are built in float32 as before."""
    if case.dtype != "float64":
        yield
        return
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def make_input(spec: Spec, case: Case) -> torch.Tensor:
    """x ~ N(0, 1) of shape (B, C), (B, C, S, S) or (B, T, C), drawn on the CPU from the case's input stream."""
    gen = torch.Generator().manual_seed(derive_seed(case.seed, 1))
    channels = case.input_width or case.width
    shape: tuple[int, ...] = (case.batch, channels)
    if spec.block.layer == "conv2d":
        shape += (case.spatial or DEFAULT_SIZE, case.spatial or DEFAULT_SIZE)
    elif spec.block.layer == "tokens":  # (B, T, C): channels last
        shape = (case.batch, case.tokens or DEFAULT_SIZE, channels)
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    return x.to(device=case.device, dtype=torch_dtype(case.dtype))


def network_input(spec: Spec, case: Case, net: Network) -> torch.Tensor | None:
    """The drawn input after the network's stem (without gradient): N(0, 1) (`make_input`), or the
    network's own embedding of token ids drawn from the case's input stream (`net.embedding`); None
    for a network whose blocks run inside its model's own forward (`net.model`: the model has its
    own inputs)."""
    if net.model is not None:
        return None
    if net.embedding is not None and net.tokens is not None:
        gen = torch.Generator().manual_seed(derive_seed(case.seed, 1))
        ids = token_ids(net.tokens.vocab, net.tokens.padding, (case.batch, case.tokens or DEFAULT_SIZE), generator=gen)
        modes = dict(norm_train=spec.probe.mode == "train", dropout_train=spec.probe.dropout == "on")
        with torch.no_grad(), modes_while_called(**modes):  # its dropout off, as the blocks' is
            x = net.embedding(ids.to(case.device)).to(device=case.device, dtype=torch_dtype(case.dtype))  # (B, T, C)
    else:
        x = make_input(spec, case)
    if net.stem is not None:
        with torch.no_grad():
            x = net.stem(x)
    return x


def channel_counts(spec: Spec, case: Case) -> list[int]:
    """Channels at each boundary (input of block l, then the output), from the spec's formulas."""
    c0 = case.input_width or case.width
    if spec.family != "dense":
        return [c0] + [case.width] * case.depth
    counts, c = [c0], c0
    for layer in range(1, case.depth + 1):
        c += spec.block.growth
        if spec.block.transition_every and layer % spec.block.transition_every == 0 and layer < case.depth:
            c = max(1, math.floor(spec.block.compression * c))
        counts.append(c)
    return counts


# ----------------------------------------------------------------------------- pieces


def _layer(
    spec: Spec, case: Case, c_in: int, c_out: int, *, kernel: int | None = None, bias: bool = True
) -> nn.Linear | nn.Conv2d:
    """A linear or convolutional layer; without torch's default draws where the case's inits
    overwrite them all (`init.overwritten`: the builders initialise every layer they make)."""
    blank = overwritten(spec, case)
    if spec.block.layer == "conv2d":
        k = spec.block.kernel_size if kernel is None else kernel
        return blank_layer(nn.Conv2d, blank, c_in, c_out, k, padding=k // 2, bias=bias)
    return blank_layer(nn.Linear, blank, c_in, c_out, bias=bias)


def _norm(spec: Spec, channels: int) -> nn.Module:
    kind, conv = spec.block.norm, spec.block.layer == "conv2d"
    if kind == "none":
        return nn.Identity()
    if spec.block.layer == "tokens" and kind == "batch":  # (B, T, C): statistics per channel over (B, T)
        return ChannelsLast(nn.BatchNorm1d(channels))
    if kind == "batch":
        return nn.BatchNorm2d(channels) if conv else nn.BatchNorm1d(channels)
    if kind == "layer":
        return nn.GroupNorm(1, channels) if conv else nn.LayerNorm(channels)
    if kind == "rms":
        return ChannelRMSNorm(channels) if conv else nn.RMSNorm(channels, eps=1e-6)
    # The most groups (≤ norm_groups) that divide the channels and leave each group at least two
    # channels, so a group never holds one value (GroupNorm refuses that, e.g. on a 1×1 image).
    fits = [g for g in range(1, min(spec.block.norm_groups, channels) + 1) if channels % g == 0 and channels // g >= 2]
    group = nn.GroupNorm(max(fits, default=1), channels)
    return ChannelsLast(group) if spec.block.layer == "tokens" else group


def _spectrum_projection(spec: Spec, c: int, gen: torch.Generator) -> torch.Tensor:
    """W_s = U·diag(s)·Vᵀ, s geometric from s_max to s_min, U and V random orthogonal."""
    s_min, s_max = spec.block.projection_spectrum  # type: ignore[misc]
    u = nn.init.orthogonal_(torch.empty(c, c, dtype=torch.float64), generator=gen)
    v = nn.init.orthogonal_(torch.empty(c, c, dtype=torch.float64), generator=gen)
    s = (
        torch.logspace(math.log10(s_max), math.log10(s_min), c, dtype=torch.float64)
        if c > 1
        else torch.tensor([s_min], dtype=torch.float64)
    )
    return (u * s) @ v.T  # (C, C)


def _skip(spec: Spec, c_in: int, c_out: int, gen: torch.Generator, case: Case) -> nn.Module | None:
    kind = spec.block.skip
    if kind == "none":
        return None
    if kind == "identity":
        return nn.Identity()
    if kind == "scaled":
        return Scale(
            torch.tensor(float(spec.block.skip_scale or 0.0)), learnable=False
        )  # the spec requires skip_scale with skip = "scaled"
    if kind == "norm":
        return _norm(spec, c_in)
    proj = _layer(spec, case, c_in, c_out, kernel=1, bias=False)
    init_weight(spec, case, proj.weight, gen)
    if spec.block.projection_spectrum is not None:
        w = _spectrum_projection(spec, c_out, gen).to(proj.weight.dtype)
        with torch.no_grad():
            proj.weight.copy_(w.view_as(proj.weight))
    return proj


def _gain(spec: Spec, case: Case, channels: int) -> nn.Module:
    """Branch scale (fixed) times the ReZero scalar or SkipInit per-channel gain (learnable)."""
    parts: list[nn.Module] = []
    scale = spec.block.branch_scale
    if scale == "1/sqrt(depth)":
        scale = 1.0 / math.sqrt(case.depth)
    elif scale == "1/depth":
        scale = 1.0 / case.depth
    if scale != 1.0:
        parts.append(Scale(torch.tensor(float(scale)), learnable=False))
    if case.branch_init == "rezero":
        parts.append(Scale(torch.tensor(0.0), learnable=True))
    elif case.branch_init == "skipinit":
        parts.append(
            Scale(torch.zeros(channels), learnable=True, channel_dim=-1 if spec.block.layer == "tokens" else 1)
        )
    if not parts:
        return nn.Identity()
    return parts[0] if len(parts) == 1 else nn.Sequential(*parts)


def _build_plain(spec: Spec, case: Case, gen: torch.Generator) -> nn.Sequential:
    blocks = []
    for l in range(case.depth):  # noqa: E741 (l: the boundary index, as in the papers)
        c_in = (case.input_width or case.width) if l == 0 else case.width
        blocks.append(PlainBlock(_layer(spec, case, c_in, case.width), _norm(spec, case.width), activation(spec)))
    net = nn.Sequential(*blocks)
    init_all(spec, case, net, gen)
    return net


def _residual(spec: Spec, case: Case, gen: torch.Generator, *, pre: bool) -> nn.Sequential:
    blocks: list[nn.Module] = []
    w = case.width
    for l in range(case.depth):  # noqa: E741 (l: the boundary index, as in the papers)
        c_in = (case.input_width or w) if l == 0 else w
        if pre:  # F = W2·act(norm(W1·act(norm(x))))  or  W1·act(norm(x)) with one layer
            branch = nn.Sequential(_norm(spec, c_in), activation(spec), _layer(spec, case, c_in, w))
            if spec.block.branch_layers == 2:
                branch.extend([_norm(spec, w), activation(spec), _layer(spec, case, w, w)])
        else:  # F = W2·act(norm(W1 x))  or  W1 x with one layer
            branch = nn.Sequential(_layer(spec, case, c_in, w))
            if spec.block.branch_layers == 2:
                branch.extend([_norm(spec, w), activation(spec), _layer(spec, case, w, w)])
        init_all(spec, case, branch, gen)
        if case.branch_init == "zero":
            zero_parameters(branch[-1])
        skip = _skip(spec, c_in, w, gen, case)
        gain = _gain(spec, case, w)
        if pre:
            blocks.append(PreActBlock(branch, skip, gain))
        else:
            blocks.append(PostNormBlock(branch, skip, gain, _norm(spec, w), activation(spec)))
    return nn.Sequential(*blocks)


def _build_highway(spec: Spec, case: Case, gen: torch.Generator) -> nn.Sequential:
    blocks = []
    for _ in range(case.depth):
        layer = _layer(spec, case, case.width, case.width)
        transform = nn.Sequential(layer, _norm(spec, case.width), activation(spec))
        gate = _layer(spec, case, case.width, case.width, kernel=1)
        init_all(spec, case, transform, gen)
        init_all(spec, case, gate, gen)
        if case.branch_init == "zero":  # H = 0 and W_T = 0: the gate is σ(b_T) everywhere
            zero_parameters(layer)
            with torch.no_grad():
                gate.weight.zero_()
        with torch.no_grad():
            gate.bias.fill_(spec.block.gate_bias)  # type: ignore[union-attr]  # built with bias=True
        blocks.append(HighwayBlock(transform, gate))
    return nn.Sequential(*blocks)


def _build_dense(spec: Spec, case: Case, gen: torch.Generator) -> nn.Sequential:
    counts = channel_counts(spec, case)
    blocks: list[nn.Module] = []
    c = counts[0]
    for l in range(1, case.depth + 1):  # noqa: E741 (l: the boundary index, as in the papers)
        layer = _layer(spec, case, c, spec.block.growth)
        block: nn.Module = DenseLayer(
            _norm(spec, c), activation(spec), layer, channel_dim=-1 if spec.block.layer == "tokens" else 1
        )
        init_all(spec, case, block, gen)
        if case.branch_init == "zero":
            zero_parameters(layer)
        c += spec.block.growth
        if counts[l] != c:  # a transition closes this dense group: C → ⌊θ·C⌋
            trans = Transition(_norm(spec, c), activation(spec), _layer(spec, case, c, counts[l], kernel=1))
            init_all(spec, case, trans, gen)
            block = nn.Sequential(block, trans)
            c = counts[l]
        blocks.append(block)
    return nn.Sequential(*blocks)


#: The built-in families' builders, by family (their registry entries, stability.families.catalog, call these).
BUILDERS: dict[str, Callable[[Spec, Case, torch.Generator], nn.Sequential]] = {
    "plain": _build_plain,
    "postnorm": lambda spec, case, gen: _residual(spec, case, gen, pre=False),
    "preact": lambda spec, case, gen: _residual(spec, case, gen, pre=True),
    "highway": _build_highway,
    "dense": _build_dense,
    "transformer": build_transformer,
}
