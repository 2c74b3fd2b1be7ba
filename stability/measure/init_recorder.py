"""The recorder of the init each parameter actually receives while its model is constructed and
the library (or a user's factory) initialises it (`stability.measure.init_trace` holds what it
records; `stability.judge.init_intent` reads the model's own intent from it).

`InitRecorder.recording()` is entered around construction (`stability.families.construction`):

- a `torch.overrides.TorchFunctionMode` sees every tensor operation. An in-place write
  (`normal_`, `uniform_`, `fill_`, `zero_`, `copy_`, `mul_`, `div_`, `add_`, `sub_`, `clamp_`,
  `erfinv_`, …, `p[i] = v`, `out=`, `p.data = t`) is attributed to the parameter whose **storage**
  it writes (so `.data` and other views map to their parameter; a storage written is held until the
  recording ends, so its address never passes to another tensor). A write over part of a parameter
  (an embedding's padding row) is kept apart from its law.
- `register_module_parameter_registration_hook` sees each parameter as it is registered: its
  owning module, its value then (a constant? which one?) and the arguments the owning module's
  constructor was given (read from the `__init__` frame whose `self` is the module:
  `init_values=1e-6`, `ls_init_value`, …; the model's own are its constructor's).
- each write is attributed to the **init function** it happened in (the outermost frame in
  torch.nn.init, transformers.initialization or timm.layers.weight_init), its **writer** (the
  innermost frame outside torch and those modules: `GPT2PreTrainedModel._init_weights`,
  `LayerScale.reset_parameters`, `MLPBlock.__init__`) and whether it is **PyTorch's constructor
  default** (torch.nn.modules code run while the owning module is constructed: nn.Linear's
  kaiming_uniform_(a=√5), nn.LayerNorm's ones and zeros, nn.Embedding's N(0, 1)). The law is
  folded exactly (`stability.measure.init_trace_law`).

Only the construction is recorded (the builders enter the recording around it alone: the
harness's own rescaling to the shipped width, its moves and its probe come after). Tensors
created by `torch.randn/rand/zeros/ones/full/empty` (and scalar arithmetic on them) carry their
law to the parameter they become (`nn.Parameter(init_values * torch.ones(d))`). A step of the
recording that fails stops it (`failure`), never the construction.
"""

from __future__ import annotations

import contextlib
import sys
import time
import types
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from stability.measure.init_trace import InitTrace, ParameterTrace, Partial, plain_arguments
from stability.measure.init_trace_law import RecordedLaw, computed, constant, fold, law_of_frame
from stability.measure.init_trace_ops import (
    ARITH,
    CREATE,
    DRAWS,
    FOLDS,
    Tracked,
    Where,
    live_at,
    op_kind,
    scale_of,
    self_of,
    snapshot,
    storage_of,
    where_written,
    writer_name,
)

__all__ = ["InitRecorder"]


# ----------------------------------------------------------------------------- the recorder


class _Mode(TorchFunctionMode):
    def __init__(self, recorder: InitRecorder) -> None:
        super().__init__()
        self.recorder = recorder
        self.kinds: dict[Any, str] = {}

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        try:
            kind = self.kinds[func]
        except (KeyError, TypeError):
            kind = op_kind(func)
            with contextlib.suppress(TypeError):
                self.kinds[func] = kind
        out = func(*args, **kwargs)
        if kind != "pass" or "out" in kwargs:
            self.recorder.guarded(self.recorder._event, kind, func, args, kwargs, out)
        return out


class InitRecorder:
    """Records the init of every parameter registered while `recording()` is entered (the module
    docstring); `trace(model)` gives the model's."""

    def __init__(self) -> None:
        self._params: dict[int, Tracked] = {}  # by id(parameter)
        self._storages: dict[int, Tracked] = {}  # parameters, by storage address
        self._pending: dict[int, Tracked] = {}  # tensors that may become parameters, by storage address
        self._arguments: dict[int, tuple[nn.Module, dict[str, Any]]] = {}  # constructor arguments, by id(module)
        self.seconds = 0.0
        self._depth = 0
        #: Why the recording stopped (an operation it could not follow); "" while it runs.
        self.failure = ""

    def __call__(self) -> contextlib.AbstractContextManager[None]:
        """A watcher of a construction (`stability.families.construction.watching`)."""
        return self.recording()

    @property
    def recorded(self) -> bool:
        """Whether any parameter was registered while recording, and the recording ran to its end."""
        return bool(self._params) and not self.failure

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        if self._depth:  # (nested: the outer recording sees everything)
            yield
            return
        self._depth += 1
        start = time.perf_counter()
        handle = nn.modules.module.register_module_parameter_registration_hook(self._hook)
        try:
            with _Mode(self):
                yield
        finally:
            handle.remove()
            self._pending.clear()
            self._depth -= 1
            self.seconds += time.perf_counter() - start

    # -- registration ------------------------------------------------------------------------------

    def _arguments_on_stack(self) -> None:
        """The arguments of every module constructor on the stack (each module once)."""
        f: types.FrameType | None = sys._getframe(2)
        while f is not None:
            if f.f_code.co_name == "__init__":
                s = self_of(f)
                if isinstance(s, nn.Module):
                    code = f.f_code
                    names = code.co_varnames[1 : code.co_argcount + code.co_kwonlyargcount]
                    loc = f.f_locals
                    values = {n: loc[n] for n in names if n in loc}
                    if code.co_flags & 0x08:  # **kwargs
                        extra = loc.get(
                            code.co_varnames[
                                code.co_argcount + code.co_kwonlyargcount + (1 if code.co_flags & 0x04 else 0)
                            ]
                        )
                        if isinstance(extra, dict):
                            values.update({k: v for k, v in extra.items() if isinstance(k, str)})
                    known = self._arguments.get(id(s))
                    # the outermost __init__ of a module (its own class's) is seen last: it wins
                    self._arguments[id(s)] = (s, {**(known[1] if known else {}), **plain_arguments(values)})
            f = f.f_back

    def guarded(self, fn: Any, *args: Any) -> None:
        """Run one step of the recording; the first that raises stops it (the model's own
        construction is never disturbed), and says why (`failure`)."""
        if self.failure:
            return
        try:
            fn(*args)
        except Exception as exc:
            self.failure = f"{type(exc).__name__}: {exc}"

    def _hook(self, module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        self.guarded(self._registered, module, name, param)

    def _registered(self, module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is None:
            return
        self._arguments_on_stack()
        if id(param) in self._params:  # the same parameter registered again (tied weights)
            return
        key = storage_of(param)
        pending = self._pending.pop(key, None) if key is not None else None
        if pending is not None and pending.region() != (param.storage_offset(), param.numel()):
            pending = None
        where = where_written(module)
        if pending is not None:
            tr = pending
            tr.tensor, tr.created = param, pending.law
        else:
            tr = Tracked(param, law=snapshot(param), created=snapshot(param))
        if tr.phase == "created":  # (else: the writer of the law it was drawn with before it was registered)
            tr.writer, tr.site, tr.scope = where.writer, where.site, where.scope
        tr.owner, tr.creator = module, where.writer
        tr.history.append(f"created {tr.created.describe()} by {where.writer.partition(':')[2] or '?'}")
        self._params[id(param)] = tr
        if key is not None:
            self._storages[key] = tr
            tr.key = key

    # -- writes ------------------------------------------------------------------------------------

    def _event(self, kind: str, func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], out: Any) -> None:
        if kind == "create":
            if isinstance(out, torch.Tensor) and out.is_floating_point():
                self._track(out, CREATE[func.__name__](args, kwargs), None)
            return
        if kind in ("arith", "copy"):
            self._derived(kind, func, args, kwargs, out)
            return
        if kind == "data":
            self._data(args)
            return
        if kind == "pass":  # an out= write
            target = kwargs.get("out")
            self._write(target, getattr(func, "__name__", "out"), args, kwargs, index=None, value=None)
            return
        target = args[0] if args else kwargs.get("tensor", kwargs.get("self", kwargs.get("input")))
        name = getattr(func, "__name__", "")
        if kind == "setitem":
            self._write(target, name, args, kwargs, index=args[1], value=args[2])
        else:
            self._write(target, name, args, kwargs, index=None, value=None)

    def _find(self, t: Any) -> tuple[Tracked | None, int | None]:
        key = storage_of(t)
        if key is None:
            return None, None
        return self._storages.get(key) or self._pending.get(key), key

    def _track(self, t: torch.Tensor, law: RecordedLaw, where: Where | None) -> Tracked | None:
        key = storage_of(t)
        if key is None or key in self._storages:
            return None
        tr = Tracked(t, law=law, created=law)
        if where is not None:
            tr.writer, tr.function, tr.site, tr.scope = where.writer, where.function, where.site, where.scope
            tr.phase = "init"
        self._pending[key] = tr
        return tr

    def _derived(self, kind: str, func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], out: Any) -> None:
        """A new tensor computed from a tracked one by a copy or scalar arithmetic: its law follows."""
        if not isinstance(out, torch.Tensor) or not args:
            return
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if len(tensors) != 1 or storage_of(out) == storage_of(tensors[0]):
            return
        src, _ = self._find(tensors[0])
        if src is None:
            return
        law: RecordedLaw | None = src.law
        if kind == "arith":
            op = ARITH[func.__name__]
            scalars = [a for a in args[1:] if not isinstance(a, torch.Tensor)]
            s = scalars[0] if scalars else None
            if op == 0:
                law = src.law.scaled(-1.0)
            elif not isinstance(s, (int, float)) or isinstance(s, bool):
                law = None
            elif op == 1:
                law = src.law.scaled(float(s))
            elif op == -1:
                law = src.law.scaled(1.0 / float(s)) if s else None
            else:
                alpha = kwargs.get("alpha", 1.0)
                sign = -1.0 if op < 0 and func.__name__ != "__rsub__" else 1.0
                law = src.law.shifted(sign * float(alpha) * float(s))
        if law is not None and out.numel() == src.tensor.numel():
            tr = self._track(out, law, None)
            if tr is not None:
                tr.history = [*src.history, f"{func.__name__} → {law.describe()}"]

    def _data(self, args: tuple[Any, ...]) -> None:
        """`p.data = t`: the parameter now holds t's storage and t's law."""
        if len(args) < 2:
            return
        tr = self._params.get(id(args[0]))
        new_key = storage_of(args[1])
        old_key = tr.key if tr is not None else None  # (the parameter holds the new storage already)
        if tr is None or new_key is None or new_key == old_key:
            return
        source = self._pending.pop(new_key, None) or self._storages.get(new_key)
        where = where_written(tr.owner)
        law = source.law if source is not None else snapshot(args[1])
        if old_key is not None:
            self._storages.pop(old_key, None)
        self._storages[new_key] = tr
        tr.key = new_key
        self._set(tr, law, where, f".data = {law.describe()}")

    def _write(
        self, target: Any, op: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], *, index: Any, value: Any
    ) -> None:
        tr, key = self._find(target)
        if tr is None:
            self._untracked(target, key, op, args, kwargs, whole=index is None)
            return
        where = where_written(tr.owner)
        if where.law_frame is not None and where.law_frame is tr.frame:
            return  # a later step of the init function that wrote it
        region = self._region(target, index)
        if region is None or region != tr.region():  # (None: elements chosen by advanced indexing)
            start, numel = (region[0] - int(tr.tensor.storage_offset()), region[1]) if region is not None else (-1, 0)
            law = self._value_law(value) if index is not None else self._law(tr, op, args, kwargs, where, target)
            tr.partial.append(Partial(start=start, numel=numel, law=law))
            tr.history.append(f"{op} of elements [{start}, {start + numel}) → {law.describe()} by {writer_name(where)}")
            if tr.law.kind == "empty":  # filled in parts (a table of sines and cosines, a row at a time)
                tr.law = computed("written in parts")
            return
        law = self._value_law(value) if index is not None else self._law(tr, op, args, kwargs, where, target)
        tr.frame = where.law_frame
        folds = index is None and where.law_frame is None and op in FOLDS
        function, scale = (tr.function, tr.scale * scale_of(op, args, kwargs)) if folds else (where.function, 1.0)
        partial = [
            Partial(start=w.start, numel=w.numel, law=computed(f"{w.law.describe()}, then {op}")) for w in tr.partial
        ]
        self._set(tr, law, where, f"{where.function.rpartition('.')[2] or op} → {law.describe()}")
        tr.function, tr.scale = function, scale
        if folds:  # (the elements written apart are scaled or shifted too: their law is no longer theirs alone)
            tr.partial = partial

    def _untracked(
        self, target: Any, key: int | None, op: str, args: tuple[Any, ...], kwargs: Mapping[str, Any], *, whole: bool
    ) -> None:
        """A whole write with a known law into a tensor not tracked yet: tracked, as it may become a
        parameter (`w = torch.empty(d, d); nn.init.normal_(w); self.w = nn.Parameter(w)`)."""
        if key is None or not whole or not target.is_floating_point():
            return
        if op not in DRAWS and "out" not in kwargs:
            return
        where = where_written(None)
        if where.law_frame is not None and where.law_key is not None:
            law: RecordedLaw | None = law_of_frame(where.law_key, where.law_frame.f_locals, target)
        else:
            law = fold(op, constant(0.0), args, kwargs)
        if law is not None:
            new = self._track(target, law, where)
            if new is not None:
                new.frame = where.law_frame
                new.history.append(
                    f"{where.function.rpartition('.')[2] or op} → {law.describe()} by {writer_name(where)}"
                )

    def _region(self, target: torch.Tensor, index: Any) -> tuple[int, int] | None:
        """(storage offset, number of elements) written; None when it cannot be told (advanced indexing)."""
        view = target
        if index is not None:
            try:
                view = target[index]
            except (IndexError, TypeError, RuntimeError):
                return None
            if storage_of(view) != storage_of(target):  # a copy: advanced indexing
                return None
        return int(view.storage_offset()), view.numel()

    def _value_law(self, value: Any) -> RecordedLaw:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return constant(float(value))
        src, _ = self._find(value)
        if src is not None:
            return src.law
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            return constant(float(value.detach().reshape(()).item()))
        return computed("assigned a computed tensor")

    def _law(
        self,
        tr: Tracked,
        op: str,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        where: Where,
        target: torch.Tensor,
    ) -> RecordedLaw:
        if where.law_frame is not None and where.law_key is not None:
            return law_of_frame(where.law_key, where.law_frame.f_locals, target)
        if op == "copy_":
            src = args[1] if len(args) > 1 else kwargs.get("src")
            found, _ = self._find(src)
            if found is not None and found is not tr:
                return found.law if not found.partial else computed("copied from a tensor written in parts")
            return (
                self._value_law(src)
                if isinstance(src, torch.Tensor) and src.numel() == 1
                else computed("copied from a computed tensor")
            )
        folded = fold(op, tr.law, args, kwargs)
        return folded if folded is not None else computed(op)

    def _set(self, tr: Tracked, law: RecordedLaw, where: Where, what: str) -> None:
        tr.law = law
        tr.phase = "default" if where.default else "init"
        tr.writer, tr.function, tr.site, tr.scope = where.writer, where.function, where.site, where.scope
        tr.visited = where.visited
        tr.partial = []
        tr.history.append(f"{what} by {writer_name(where)}")

    # -- the trace ---------------------------------------------------------------------------------

    def arguments_of(self, module: nn.Module) -> dict[str, Any]:
        """The plain arguments `module`'s constructor was given (empty when it was not recorded)."""
        found = self._arguments.get(id(module))
        return dict(found[1]) if found is not None and found[0] is module else {}

    def trace(self, model: nn.Module) -> InitTrace:
        """Every parameter of `model` (named_parameters: a tied weight once) with its recorded init."""
        paths = {id(m): path for path, m in model.named_modules(remove_duplicate=False)}
        out: list[ParameterTrace] = []
        for name, p in model.named_parameters():
            tr = self._params.get(id(p))
            if tr is None:
                law = computed("created before the recording")
                out.append(
                    ParameterTrace(
                        name=name, law=law, created=law, phase="created", writer="", function="", site="",
                        scope=None, owner="", owner_leaf=False, owner_args={}, creator="",
                        requires_grad=p.requires_grad, recorded=False,
                    )
                )  # fmt: skip
                continue
            owner = self._arguments.get(id(tr.owner)) if tr.owner is not None else None
            out.append(
                ParameterTrace(
                    name=name,
                    law=tr.law,
                    created=tr.created,
                    phase=tr.phase,
                    writer=tr.writer,
                    function=tr.function,
                    site=tr.site,
                    scope=paths.get(id(tr.scope)) if tr.scope is not None else None,
                    owner=_class_name(type(tr.owner)) if tr.owner is not None else "",
                    owner_leaf=tr.owner is not None and next(iter(tr.owner.children()), None) is None,
                    owner_args=dict(owner[1]) if owner else {},
                    creator=tr.creator,
                    requires_grad=p.requires_grad,
                    partial=tuple(tr.partial),
                    history=tuple(tr.history[-8:]),
                    scale=tr.scale,
                    visited=tr.visited,
                    created_live=live_at(tr.owner, p, tr.created) if tr.overwritten() else None,
                )
            )
        return InitTrace(
            parameters=tuple(out),
            model_args=self.arguments_of(model),
            model_module=type(model).__module__,
            seconds=self.seconds,
        )


def _class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"
