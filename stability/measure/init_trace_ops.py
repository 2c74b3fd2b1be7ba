"""Which tensor operation writes what, and where in the code it comes from: what the init recorder
(`stability.measure.init_recorder`) needs to know of one operation.

- `op_kind(func)`: an in-place write (`normal_`, `mul_`, `p[i] = v`, …), `p.data = t`, a creation
  whose law is known (`torch.randn`, `torch.zeros`, `torch.empty`, …), scalar arithmetic or a copy
  (the law follows the tensor), or anything else;
- `where_written(owner)`: the frames of the write being made now: the init function it happened
  in (the outermost frame in torch.nn.init, transformers.initialization or timm.layers.weight_init),
  the innermost of those that gives its law from its arguments (`LAW_FRAMES`), the writer (the
  innermost frame outside torch and those modules), the module whose code the writer is (`scope`),
  and whether the write is PyTorch's constructor default (torch.nn.modules code run while the
  parameter's owning module is constructed);
- `storage_of(t)`: the address a write is attributed by, and `snapshot(t)`: the law of a value set
  at creation (a constant, or computed).
"""

from __future__ import annotations

import math
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from stability.measure.init_trace import Partial, Phase
from stability.measure.init_trace_law import INIT_MODULES, LAW_FRAMES, RecordedLaw, computed, constant

__all__ = [
    "Tracked",
    "Where",
    "where_written",
    "writer_name",
    "self_of",
    "storage_of",
    "snapshot",
    "op_kind",
    "live_at",
    "scale_of",
    "CREATE",
    "ARITH",
    "FOLDS",
    "DRAWS",
]


def skipped(module: str) -> bool:
    """Frames that are not a writer: torch's internals (but its modules' own code), the init
    functions' modules, this recorder."""
    if module in INIT_MODULES or module in ("contextlib", "functools") or module == "torch.nn.modules.module":
        return True
    if module.startswith(("stability.measure.init_trace", "stability.measure.init_recorder")):
        return True
    return (module == "torch" or module.startswith("torch.")) and not module.startswith("torch.nn.modules.")


@dataclass
class Where:
    law_key: tuple[str, str] | None = None
    law_frame: types.FrameType | None = None
    function: str = ""
    writer: str = ""
    site: str = ""
    scope: nn.Module | None = None
    default: bool = False  # torch.nn.modules code while the owner is constructed
    visited: bool = False  # the writer holds the owning module itself (a loop or an apply over modules)


def self_of(f: types.FrameType) -> Any:
    code = f.f_code
    if code.co_argcount and code.co_varnames[0] == "self":
        return f.f_locals.get("self")
    return None


def where_written(owner: nn.Module | None) -> Where:
    """The init function, writer and scope of the write being made now (the module docstring)."""
    w = Where()
    f: types.FrameType | None = sys._getframe(1)
    writer: types.FrameType | None = None
    while f is not None:
        module = f.f_globals.get("__name__", "")
        if writer is None:
            key = (module, f.f_code.co_name)
            if w.law_frame is None and key in LAW_FRAMES:
                w.law_key, w.law_frame = key, f
            if module in INIT_MODULES:
                w.function = f"{module}.{f.f_code.co_qualname}"
            elif not skipped(module):
                writer = f
                w.writer = f"{module}:{f.f_code.co_qualname}"
                w.site = f"{w.writer}:{f.f_lineno}"
                w.visited = owner is not None and any(v is owner for v in f.f_locals.values())
        if writer is not None:
            if w.scope is None:
                s = self_of(f)
                if isinstance(s, nn.Module):
                    w.scope = s
            if owner is not None and f.f_code.co_name == "__init__" and self_of(f) is owner:
                w.default = w.writer.startswith("torch.nn.modules.")
                if w.scope is not None:
                    break
        f = f.f_back
    return w


def storage_of(t: Any) -> int | None:
    """The address of a tensor's storage (None: not a tensor with one)."""
    if not isinstance(t, torch.Tensor) or t.is_meta or t.numel() == 0:
        return None
    try:
        return int(t.untyped_storage().data_ptr()) or None
    except (RuntimeError, NotImplementedError):  # a tensor subclass without storage
        return None


def snapshot(t: torch.Tensor) -> RecordedLaw:
    """The law of a value set at creation: a constant where every element is one, else computed."""
    if not t.is_floating_point() or t.numel() == 0:
        return computed("not floating point")
    if t.is_meta:
        return computed("on the meta device")
    lo, hi = (float(x) for x in torch.aminmax(t.detach().reshape(-1)))
    return constant(lo) if lo == hi and math.isfinite(lo) else computed("set at creation")


NOT_WRITES = frozenset(
    {
        "requires_grad_", "share_memory_", "detach_", "resize_", "resize_as_", "squeeze_", "unsqueeze_", "t_",
        "transpose_", "as_strided_", "swapdims_", "swapaxes_", "set_", "rename_", "retain_grad", "record_stream",
        "_fix_weakref", "storage_offset", "is_set_to",
    }
)  # fmt: skip
INPLACE_DUNDERS = frozenset({"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__"})
CREATE: dict[str, Any] = {
    "empty": lambda a, k: RecordedLaw(kind="empty"),
    "empty_like": lambda a, k: RecordedLaw(kind="empty"),
    "new_empty": lambda a, k: RecordedLaw(kind="empty"),
    "randn": lambda a, k: RecordedLaw(kind="normal", std=1.0),
    "randn_like": lambda a, k: RecordedLaw(kind="normal", std=1.0),
    "rand": lambda a, k: RecordedLaw(kind="uniform", a=0.0, b=1.0),
    "rand_like": lambda a, k: RecordedLaw(kind="uniform", a=0.0, b=1.0),
    "zeros": lambda a, k: constant(0.0),
    "zeros_like": lambda a, k: constant(0.0),
    "new_zeros": lambda a, k: constant(0.0),
    "ones": lambda a, k: constant(1.0),
    "ones_like": lambda a, k: constant(1.0),
    "new_ones": lambda a, k: constant(1.0),
    "full": lambda a, k: full_law(k.get("fill_value", a[1] if len(a) > 1 else None)),
    "full_like": lambda a, k: full_law(k.get("fill_value", a[1] if len(a) > 1 else None)),
    "new_full": lambda a, k: full_law(k.get("fill_value", a[2] if len(a) > 2 else None)),
}
ARITH = {"__mul__": 1, "__rmul__": 1, "mul": 1, "__truediv__": -1, "div": -1, "__add__": 2, "__radd__": 2, "add": 2}
ARITH.update({"__sub__": -2, "sub": -2, "__neg__": 0, "neg": 0})
#: The in-place operations that act on the law already written (its init function stays the one that drew it).
FOLDS = frozenset({"mul_", "div_", "add_", "sub_", "__imul__", "__itruediv__", "__iadd__", "__isub__", "neg_"})
#: The in-place draws and fills that set a whole new law (and whatever the init functions write).
DRAWS = frozenset({"normal_", "uniform_", "fill_", "zero_", "copy_"} | {name for _, name in LAW_FRAMES})
COPIES = frozenset({"clone", "to", "float", "double", "half", "bfloat16", "type", "contiguous", "type_as"})


def full_law(v: Any) -> RecordedLaw:
    return constant(float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else computed("full")


def op_kind(func: Any) -> str:
    name = getattr(func, "__name__", "")
    if name == "__set__" and getattr(func, "__self__", None) is torch._C.TensorBase.data:
        return "data"
    if name in INPLACE_DUNDERS:
        return "setitem" if name == "__setitem__" else "inplace"
    if name.endswith("_") and not name.startswith("_") and name not in NOT_WRITES:
        return "inplace"
    if name in CREATE:
        return "create"
    if name in ARITH:
        return "arith"
    if name in COPIES:
        return "copy"
    return "pass"


def scale_of(op: str, args: tuple[Any, ...], kwargs: Any) -> float:
    """The factor an in-place fold multiplies by (`mul_(s)`: s; `div_(s)`, `p /= s`: 1/s; a shift: 1;
    a tensor operand: 1, its law is computed anyway)."""
    if op == "neg_":
        return -1.0
    operand = args[1] if len(args) > 1 else kwargs.get("other")
    if isinstance(operand, torch.Tensor):
        operand = float(operand.reshape(()).item()) if operand.numel() == 1 and not operand.is_meta else None
    if not isinstance(operand, (int, float)) or isinstance(operand, bool) or not operand:
        return 1.0
    if op in ("mul_", "__imul__"):
        return float(operand)
    if op in ("div_", "__itruediv__", "true_divide_"):
        return 1.0 / float(operand)
    return 1.0


def live_at(owner: nn.Module | None, p: torch.Tensor, created: RecordedLaw) -> bool | None:
    """Whether `owner`'s forward computes anything with its vector `p` at the constant it was created
    with: True when its output on an N(0, 1) input of p's width is not all zero (Gemma's (1 + w)
    RMSNorm at w = 0 is the unit scale), False when it is (a placeholder: IBert's IntLayerNorm
    multiplies by w), None when the forward cannot be run alone. Every tensor of `owner` is put
    back as it was."""
    if owner is None or created.kind != "constant" or p.dim() != 1 or p.is_meta:
        return None
    state = {k: v.detach().clone() for k, v in owner.state_dict().items()}
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, p.numel(), generator=gen, dtype=torch.float64).to(device=p.device, dtype=p.dtype)
    try:
        with torch.no_grad():
            p.fill_(created.value)
            out = owner(x)
    except Exception:  # a forward that needs more than its input (masks, positions, a scaling factor)
        return None
    finally:
        with torch.no_grad():
            owner.load_state_dict(state)
    out = out[0] if isinstance(out, (tuple, list)) and out else out
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        return None
    return bool(out.detach().abs().max() > 0)


def writer_name(where: Where) -> str:
    """The writer's qualified name without its module (`GPT2PreTrainedModel._init_weights`)."""
    return where.writer.partition(":")[2] or where.writer or "?"


@dataclass(eq=False)
class Tracked:
    """A parameter (or a tensor that may become one) and what was written into it."""

    tensor: torch.Tensor
    law: RecordedLaw
    created: RecordedLaw
    phase: Phase = "created"
    writer: str = ""
    function: str = ""
    site: str = ""
    scope: nn.Module | None = None
    frame: types.FrameType | None = None  # the init function's frame of the last write (its later writes are its own)
    partial: list[Partial] = field(default_factory=list)
    scale: float = 1.0  # the product of the scalar factors applied since its law was drawn
    visited: bool = False  # its last whole write came from code holding its owning module (`Where.visited`)
    history: list[str] = field(default_factory=list)
    owner: nn.Module | None = None
    key: int | None = None  # the address of the storage it holds (a parameter's, as registered or reassigned)
    creator: str = ""

    def region(self) -> tuple[int, int]:
        return int(self.tensor.storage_offset()), self.tensor.numel()

    def overwritten(self) -> bool:
        """A vector its own module created as one constant and the init left at another."""
        c, law = self.created, self.law
        own = self.owner is not None and not type(self.owner).__module__.startswith("torch.")
        return own and self.tensor.dim() == 1 and c.kind == law.kind == "constant" and c.value != law.value
