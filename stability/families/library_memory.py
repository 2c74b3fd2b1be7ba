"""The memory model of `family = "library"` (the guard's estimate, `stability.run.guard`), from the
case's own config and nothing the size of the model allocated.

**Built without memory.** The case's model is constructed with every parameter and buffer on the
meta device (under `torch.device("meta")`; where a constructor needs real numbers, such as timm's
drop-path rates from `torch.linspace(...).tolist()`, each parameter and buffer is moved to the
meta device as the module registers it instead, the `init_empty_weights` pattern: one
parameter's memory at a time, and only its pages that the constructor writes). Its parameters are
counted exactly there (each tensor once, tied weights included once).

**One pass without memory.** The meta model's tensors become fake tensors
(`torch._subclasses.fake_tensor`: shapes, dtypes and devices, no storage; transformers skips
its data-dependent mask checks for them) and the probe's forward runs on the case's inputs up to
the last probed block, with a saved-tensors hook: the bytes of every tensor autograd keeps for the
backward pass, each storage once (a norm and the linear after it save the same input), the
parameters' own storages not counted again. Where a forward cannot run on fake tensors (a kernel
without a fake rule, such as a grouped matmul that insists on bfloat16, or a data-dependent
branch, DeBERTa's relative positions), the saved tensors are left out: the estimate is then the
parameters' part alone, a lower bound that still refuses a model that cannot fit.

**The peak.** The probe holds the model, then autograd's saved tensors at the end of its forward;
the backward frees them as it goes while each block's gradients come and go (the large ones are
freed by their hook as they are produced: `stability.measure.reductions`). A seed ensemble
(an invariant whose registry entry has `ensemble`, with `probe.ensemble` > 1) builds and probes
its members one at a time while the case's own network is held, so two models are resident then.
With `block.shipped`, the init rule builds the model at depth 1 (or its smallest depth,
`library_depth`) at both widths once per process
(`library_build.init_factors`) while the case's model is resident. So:

    peak = resident + max(models · P, P + P₁ + P₁,shipped) + S + G

with P the parameters and buffers of the case's model in the case's dtype, models 1 (2 with an
ensemble), P₁ the depth-1 models of the init rule, S the saved tensors, and G the backward pass's
working set: the gradient of the largest parameter and of the largest saved activation, twice each
(autograd's result and the norm's row copy), and `resident` the memory this process holds
already (its resident set: the interpreter, torch, the library). Measured against the peak
resident set of `stability check SPEC --case …` in docs/library-models.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator
from typing import Any

__all__ = ["LibraryFootprint", "count_bytes", "footprint", "meta_model", "registered_on_meta", "resident_bytes"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class LibraryFootprint:
    """What one case's model takes, in bytes (the module docstring): `params` its parameters and
    buffers in the case's dtype, `saved` the tensors autograd keeps in the probe's forward,
    `largest_param` the largest parameter of the probed blocks (the backward's largest gradient)
    and `largest_saved` the largest saved activation."""

    params: int
    saved: int
    largest_param: int
    largest_saved: int
    count: int  # parameters (elements), each tensor once
    params_float32: int  # the parameters and buffers as constructed, before the cast to the case's dtype


def resident_bytes() -> int:
    """This process's resident set size now (Linux `/proc/self/statm`; 0 where there is none)."""
    import os

    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


@contextlib.contextmanager
def registered_on_meta(*, buffers: bool = True) -> Iterator[None]:
    """Every parameter (and, with `buffers`, every buffer) a module registers is moved to the meta
    device at once."""
    import torch
    from torch import nn

    register_parameter, register_buffer = nn.Module.register_parameter, nn.Module.register_buffer

    def parameter(self: nn.Module, name: str, param: Any) -> None:
        if param is not None and param.device.type != "meta":
            param = nn.Parameter(param.data.to("meta"), requires_grad=param.requires_grad)
        register_parameter(self, name, param)

    def buffer(self: nn.Module, name: str, tensor: Any, persistent: bool = True) -> None:
        if buffers and isinstance(tensor, torch.Tensor) and tensor.device.type != "meta":
            tensor = tensor.to("meta")
        register_buffer(self, name, tensor, persistent)

    nn.Module.register_parameter = parameter  # type: ignore[method-assign]
    nn.Module.register_buffer = buffer  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = register_parameter  # type: ignore[method-assign]
        nn.Module.register_buffer = register_buffer  # type: ignore[method-assign]


def meta_model(lib: Any, config: dict[str, Any]) -> Any:
    """The model of `lib` (a `LibraryModel`) built from the filled `config` with every tensor on
    the meta device (the module docstring)."""
    import torch

    from stability.families.library_build import construct

    try:
        with torch.device("meta"):
            model = construct(lib.target, config)
    except Exception:  # a constructor that reads numbers back (linspace(...).tolist()): register-time moves instead
        with registered_on_meta():
            model = construct(lib.target, config)
    stray = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.device.type != "meta"]
    if stray:  # (a tensor assigned outside register_parameter/register_buffer)
        model.to("meta")
    return model


def count_bytes(model: Any, dtype: Any) -> tuple[int, int, int]:
    """(bytes in `dtype`, largest tensor's bytes, elements) of the parameters and buffers, each tensor once."""
    seen: set[int] = set()
    total = largest = count = 0
    for is_param, tensors in ((True, model.parameters()), (False, model.buffers())):
        for t in tensors:
            if id(t) in seen:
                continue
            seen.add(id(t))
            size = t.numel() * (dtype.itemsize if t.is_floating_point() else t.element_size())
            total += size
            largest = max(largest, size)
            if is_param:
                count += t.numel()
    return total, largest, count


class _Stop(BaseException):
    """Ends the forward at the last probed block."""


def _saved(model: Any, lib: Any, config: dict[str, Any], values: dict[str, Any], dtype: Any) -> tuple[int, int, int]:
    """(bytes autograd saves, the largest saved activation, the largest parameter of the probed
    blocks) in the probe's forward of the meta model, run on fake tensors up to the last probed
    block (the backward stops at the first block's input: nothing before it gets a gradient)."""
    import torch
    from torch import nn
    from torch._subclasses.fake_tensor import FakeTensorMode

    from stability.families.discover import discover, run_model
    from stability.families.library_build import make_inputs

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    cpu = torch.device("cpu")
    faked: dict[int, torch.Tensor] = {}  # id of a meta tensor → its fake (tied weights stay tied)

    def fake(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in faked:
            meta = t.detach().to(dtype) if t.is_floating_point() else t.detach()
            f = mode.fake_tensor_converter.from_meta_and_device(mode, meta, cpu)
            faked[id(t)] = nn.Parameter(f, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else f
        return faked[id(t)]

    for m in model.modules():
        for name, p in list(m._parameters.items()):
            if p is not None:
                m._parameters[name] = fake(p)
        for name, b in list(m._buffers.items()):
            if b is not None:
                m._buffers[name] = fake(b)
    owned = {t.untyped_storage()._cdata for t in [*model.parameters(), *model.buffers()]}
    inputs = make_inputs(model, lib.target, config, values, modality=lib.inputs, seed=0, device=cpu, dtype=dtype)
    storages: dict[int, int] = {}  # storage → bytes: a tensor saved twice (or two views of it) is kept once

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage._cdata not in owned:  # a parameter (or a view of one: a linear's transposed weight) is counted in P
            storages[storage._cdata] = storage.nbytes()
        return t

    # A kernel with no fake rule (Mixtral's grouped expert matmul) makes torch log the error with its
    # traceback before it raises; `footprint` takes the raise as "parameters only", so the log line is
    # not the user's to read (it would land in the spec's captured output).
    quiet = logging.getLogger("torch._subclasses.fake_tensor")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        with mode:
            found = discover(model, inputs, blocks=lib.blocks)
            handle = found.blocks.modules[-1].register_forward_hook(_raise_stop)
            try:
                with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                    run_model(model, inputs)
            except _Stop:
                pass
            finally:
                handle.remove()
    finally:
        quiet.setLevel(level)
    largest_param = max(
        (p.numel() * p.element_size() for block in found.blocks.modules for p in block.parameters()), default=0
    )
    return sum(storages.values()), max(storages.values(), default=0), largest_param


def _largest_block_param(model: Any, dtype: Any) -> int:
    """The largest parameter, in `dtype`, of the longest run of blocks discovery considers
    (`discover.block_runs`), found without a forward: what the backward's largest gradient is
    where the fake forward cannot run (the embeddings before the blocks get none). 0 without a run."""
    from stability.families.discover import block_runs

    runs = block_runs(model)
    if not runs:
        return 0
    run = max(runs, key=lambda r: len(r.modules))
    sizes = [
        p.numel() * (dtype.itemsize if p.is_floating_point() else p.element_size())
        for m in run.modules
        for p in m.parameters()
    ]
    return max(sizes, default=0)


def _raise_stop(module: Any, args: Any, output: Any) -> None:
    raise _Stop


def footprint(lib: Any, values: dict[str, Any], dtype: Any) -> LibraryFootprint:
    """The footprint of `lib`'s model for one case (`values`: `Case.as_dict()`) in `dtype`; raises
    what building the config raises."""
    from stability.families.library_values import fill

    config = fill(lib.config, values)
    model = meta_model(lib, config)
    import torch

    params, largest, count = count_bytes(model, dtype)
    float32 = count_bytes(model, torch.float32)[0]
    try:
        saved, largest_saved, largest_param = _saved(model, lib, config, values, dtype)
    except Exception:  # a forward fake tensors cannot run (a kernel with no fake rule, a data-dependent branch):
        saved, largest_saved = 0, 0  # the parameters alone, a lower bound that still refuses what cannot fit
        largest_param = _largest_block_param(model, dtype) or largest
    return LibraryFootprint(
        params=params,
        saved=saved,
        largest_param=largest_param,
        largest_saved=largest_saved,
        count=count,
        params_float32=float32,
    )
