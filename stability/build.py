"""Stage 3: a Spec and a Case → the network's blocks and an input tensor.

All randomness comes from the case's seed: weights are drawn on the CPU under a forked, seeded
generator and then moved to the case's device and dtype, so the same case gives the same weights on
CPU and GPU. The input and the probe's loss use their own streams derived from the same seed.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from stability.blocks import (
    ChannelRMSNorm,
    DenseLayer,
    HighwayBlock,
    PlainBlock,
    PostNormBlock,
    PreActBlock,
    Scale,
    Transition,
)
from stability.case import Case
from stability.errors import CaseError, SpecError
from stability.spec import Spec

__all__ = ["Network", "build", "make_input", "derive_seed", "torch_dtype", "channel_counts"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}
_NONLINEARITY: dict[str, Literal["relu", "tanh", "sigmoid", "linear"]] = {"relu": "relu", "gelu": "relu", "tanh": "tanh", "sigmoid": "sigmoid", "identity": "linear"}


def torch_dtype(name: str) -> torch.dtype:
    return _DTYPES[name]


def derive_seed(seed: int, stream: int) -> int:
    """An independent seed for one random stream (0 weights, 1 input, 2 loss) of a case."""
    return (seed * 0x9E3779B97F4A7C15 + stream * 0xBF58476D1CE4E5B9) % (2**63)


@dataclass
class Network:
    """What a probe needs: the blocks, plus an optional stem applied before them."""

    blocks: nn.Sequential
    stem: nn.Module | None = None
    head: nn.Module | None = None


def build(spec: Spec, case: Case) -> Network:
    """Build the network of one case on `case.device` in `case.dtype`."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(case.seed, 0))
        gen = torch.Generator().manual_seed(derive_seed(case.seed, 0))
        if spec.family == "custom":
            net = _build_custom(spec, case)
        else:
            with _construction_dtype(case):
                net = Network(_BUILDERS[spec.family](spec, case, gen))
    device = torch.device(case.device)
    dtype = torch_dtype(case.dtype)
    for module in (net.blocks, net.stem, net.head):
        if module is not None:
            module.to(device=device, dtype=dtype)
            module.train(spec.probe.mode == "train")
    return net


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
    """x ~ N(0, 1) of shape (B, C) or (B, C, S, S), drawn on the CPU from the case's input stream."""
    gen = torch.Generator().manual_seed(derive_seed(case.seed, 1))
    channels = case.input_width or case.width
    shape: tuple[int, ...] = (case.batch, channels)
    if spec.block.layer == "conv2d":
        shape += (case.spatial or 8, case.spatial or 8)
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    return x.to(device=case.device, dtype=torch_dtype(case.dtype))


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


def _layer(spec: Spec, c_in: int, c_out: int, *, kernel: int | None = None, bias: bool = True) -> nn.Linear | nn.Conv2d:
    if spec.block.layer == "conv2d":
        k = spec.block.kernel_size if kernel is None else kernel
        return nn.Conv2d(c_in, c_out, k, padding=k // 2, bias=bias)
    return nn.Linear(c_in, c_out, bias=bias)


def _norm(spec: Spec, channels: int) -> nn.Module:
    kind, conv = spec.block.norm, spec.block.layer == "conv2d"
    if kind == "none":
        return nn.Identity()
    if kind == "batch":
        return nn.BatchNorm2d(channels) if conv else nn.BatchNorm1d(channels)
    if kind == "layer":
        return nn.GroupNorm(1, channels) if conv else nn.LayerNorm(channels)
    if kind == "rms":
        return ChannelRMSNorm(channels) if conv else nn.RMSNorm(channels, eps=1e-6)
    # The most groups (≤ norm_groups) that divide the channels and leave each group at least two
    # channels, so a group never holds one value (GroupNorm refuses that, e.g. on a 1×1 image).
    fits = [g for g in range(1, min(spec.block.norm_groups, channels) + 1) if channels % g == 0 and channels // g >= 2]
    return nn.GroupNorm(max(fits, default=1), channels)


def _act(spec: Spec) -> nn.Module:
    act: nn.Module = {
        "relu": nn.ReLU,
        "gelu": nn.GELU,
        "tanh": nn.Tanh,
        "sigmoid": nn.Sigmoid,
        "identity": nn.Identity,
    }[spec.block.activation]()
    return act


def _init_weight(spec: Spec, case: Case, w: torch.Tensor, gen: torch.Generator) -> None:
    kind, s = case.weight_init, spec.space
    nl = _NONLINEARITY[spec.block.activation]
    with torch.no_grad():
        if kind == "default":
            return
        if kind == "kaiming_normal":
            nn.init.kaiming_normal_(w, nonlinearity=nl, generator=gen)
        elif kind == "kaiming_uniform":
            nn.init.kaiming_uniform_(w, nonlinearity=nl, generator=gen)
        elif kind == "xavier_normal":
            nn.init.xavier_normal_(w, generator=gen)
        elif kind == "xavier_uniform":
            nn.init.xavier_uniform_(w, generator=gen)
        elif kind == "orthogonal":
            nn.init.orthogonal_(w, generator=gen)
        elif kind == "normal":
            nn.init.normal_(w, std=s.init_std, generator=gen)
        elif kind == "identity":  # W = gain · I (Dirac kernel for convolutions)
            if w.dim() == 2:
                nn.init.eye_(w)
            else:
                nn.init.dirac_(w)
            w.mul_(s.init_gain)


def _init_all(spec: Spec, case: Case, module: nn.Module, gen: torch.Generator) -> None:
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            _init_weight(spec, case, m.weight, gen)
            if m.bias is not None and spec.space.bias_init != "default":
                with torch.no_grad():
                    m.bias.fill_(float(spec.space.bias_init))


def _zero(layer: nn.Module) -> None:
    with torch.no_grad():
        for p in layer.parameters(recurse=False):
            p.zero_()


def _spectrum_projection(spec: Spec, c: int, gen: torch.Generator) -> torch.Tensor:
    """W_s = U·diag(s)·Vᵀ, s geometric from s_max to s_min, U and V random orthogonal."""
    s_min, s_max = spec.block.projection_spectrum  # type: ignore[misc]
    u = nn.init.orthogonal_(torch.empty(c, c, dtype=torch.float64), generator=gen)
    v = nn.init.orthogonal_(torch.empty(c, c, dtype=torch.float64), generator=gen)
    s = torch.logspace(math.log10(s_max), math.log10(s_min), c, dtype=torch.float64) if c > 1 else torch.tensor([s_min], dtype=torch.float64)
    return (u * s) @ v.T  # (C, C)


def _skip(spec: Spec, c_in: int, c_out: int, gen: torch.Generator, case: Case) -> nn.Module | None:
    kind = spec.block.skip
    if kind == "none":
        return None
    if kind == "identity":
        return nn.Identity()
    if kind == "scaled":
        return Scale(torch.tensor(float(spec.block.skip_scale or 0.0)), learnable=False)  # the spec requires skip_scale with skip = "scaled"
    if kind == "norm":
        return _norm(spec, c_in)
    proj = _layer(spec, c_in, c_out, kernel=1, bias=False)
    _init_weight(spec, case, proj.weight, gen)
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
        parts.append(Scale(torch.zeros(channels), learnable=True))
    if not parts:
        return nn.Identity()
    return parts[0] if len(parts) == 1 else nn.Sequential(*parts)


def _build_plain(spec: Spec, case: Case, gen: torch.Generator) -> nn.Sequential:
    blocks = []
    for l in range(case.depth):  # noqa: E741 (l: the boundary index, as in the papers)
        c_in = (case.input_width or case.width) if l == 0 else case.width
        blocks.append(PlainBlock(_layer(spec, c_in, case.width), _norm(spec, case.width), _act(spec)))
    net = nn.Sequential(*blocks)
    _init_all(spec, case, net, gen)
    return net


def _residual(spec: Spec, case: Case, gen: torch.Generator, *, pre: bool) -> nn.Sequential:
    blocks: list[nn.Module] = []
    w = case.width
    for l in range(case.depth):  # noqa: E741 (l: the boundary index, as in the papers)
        c_in = (case.input_width or w) if l == 0 else w
        if pre:  # F = W2·act(norm(W1·act(norm(x))))  or  W1·act(norm(x)) with one layer
            branch = nn.Sequential(_norm(spec, c_in), _act(spec), _layer(spec, c_in, w))
            if spec.block.branch_layers == 2:
                branch.extend([_norm(spec, w), _act(spec), _layer(spec, w, w)])
        else:  # F = W2·act(norm(W1 x))  or  W1 x with one layer
            branch = nn.Sequential(_layer(spec, c_in, w))
            if spec.block.branch_layers == 2:
                branch.extend([_norm(spec, w), _act(spec), _layer(spec, w, w)])
        _init_all(spec, case, branch, gen)
        if case.branch_init == "zero":
            _zero(branch[-1])
        skip = _skip(spec, c_in, w, gen, case)
        gain = _gain(spec, case, w)
        if pre:
            blocks.append(PreActBlock(branch, skip, gain))
        else:
            blocks.append(PostNormBlock(branch, skip, gain, _norm(spec, w), _act(spec)))
    return nn.Sequential(*blocks)


def _build_highway(spec: Spec, case: Case, gen: torch.Generator) -> nn.Sequential:
    blocks = []
    for _ in range(case.depth):
        layer = _layer(spec, case.width, case.width)
        transform = nn.Sequential(layer, _norm(spec, case.width), _act(spec))
        gate = _layer(spec, case.width, case.width, kernel=1)
        _init_all(spec, case, transform, gen)
        _init_all(spec, case, gate, gen)
        if case.branch_init == "zero":  # H = 0 and W_T = 0: the gate is σ(b_T) everywhere
            _zero(layer)
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
        layer = _layer(spec, c, spec.block.growth)
        block: nn.Module = DenseLayer(_norm(spec, c), _act(spec), layer)
        _init_all(spec, case, block, gen)
        if case.branch_init == "zero":
            _zero(layer)
        c += spec.block.growth
        if counts[l] != c:  # a transition closes this dense group: C → ⌊θ·C⌋
            trans = Transition(_norm(spec, c), _act(spec), _layer(spec, c, counts[l], kernel=1))
            _init_all(spec, case, trans, gen)
            block = nn.Sequential(block, trans)
            c = counts[l]
        blocks.append(block)
    return nn.Sequential(*blocks)


_BUILDERS = {
    "plain": _build_plain,
    "postnorm": lambda spec, case, gen: _residual(spec, case, gen, pre=False),
    "preact": lambda spec, case, gen: _residual(spec, case, gen, pre=True),
    "highway": _build_highway,
    "dense": _build_dense,
}


# ----------------------------------------------------------------------------- custom


def _resolve_factory(spec: Spec) -> Any:
    target = spec.block.factory or ""
    mod_name, _, fn_name = target.partition(":")
    for folder in (str(Path(spec.path).resolve().parent), str(Path.cwd())):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    try:
        module = importlib.import_module(mod_name)
    except Exception as exc:
        raise SpecError(
            spec.path, "block.factory", f"module '{mod_name}' does not import ({type(exc).__name__}: {exc})",
            value=target, fix="check the module name and that its folder is on PYTHONPATH or beside the spec",
        ) from None
    fn = getattr(module, fn_name, None)
    if fn is None or not callable(fn):
        names = [n for n in dir(module) if callable(getattr(module, n)) and not n.startswith("_")]
        from stability.errors import did_you_mean

        raise SpecError(
            spec.path, "block.factory", f"module '{mod_name}' has no function '{fn_name}'{did_you_mean(fn_name, names)}",
            value=target,
        )
    return fn


def _build_custom(spec: Spec, case: Case) -> Network:
    fn = _resolve_factory(spec)
    values: dict[str, Any] = {
        **case.as_dict(),
        "init": case.weight_init,
        "layer": spec.block.layer,
        "torch_dtype": torch_dtype(case.dtype),
        **spec.block.factory_args,
    }
    params = inspect.signature(fn).parameters
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = values if takes_all else {k: v for k, v in values.items() if k in params}
    try:
        out = fn(**kwargs)
    except CaseError:  # the per-case time limit or memory refusal, not a broken factory
        raise
    except Exception as exc:
        raise SpecError(
            spec.path, "block.factory", f"raised {type(exc).__name__}: {exc} (case {case})",
            value=spec.block.factory, fix="fix the factory; it receives " + ", ".join(sorted(kwargs)),
        ) from None
    if isinstance(out, nn.Sequential):
        return Network(out)
    if isinstance(out, nn.Module) and isinstance(getattr(out, "blocks", None), nn.Module):
        blocks = out.blocks
        if not isinstance(blocks, nn.Sequential):
            blocks = nn.Sequential(*blocks.children()) if not isinstance(blocks, nn.ModuleList) else nn.Sequential(*blocks)  # type: ignore[union-attr]  # getattr → Tensor | Module; checked a Module above
        return Network(blocks, stem=getattr(out, "stem", None), head=getattr(out, "head", None))
    raise SpecError(
        spec.path, "block.factory", f"returned {type(out).__name__}, not an nn.Sequential or a module with a `blocks` attribute",
        value=spec.block.factory, fix="return nn.Sequential(*blocks)",
    )
