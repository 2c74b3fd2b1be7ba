"""What `stability scan` builds of a library: every model it registers (`scan_targets`) and, for
one, the arguments its library builds it with, reduced by `stability.families.library_reduce` to
the smallest rung of the ladder that builds (`plan_build`), on the meta device (nothing allocated).

**Which models.** transformers: each model type's base model, as the Auto API names it
(`transformers.models.auto.modeling_auto.MODEL_MAPPING_NAMES`: model type → base model class), one
target per class (a class several model types map to is one target, the others listed with it).
timm: every registered model name (`timm.list_models()`). torchvision: every model builder
(`torchvision.models.list_models()`).

**Their arguments as shipped.** transformers: the default instance of the class's config
(`config_class()`, as `to_dict` gives it, nested configs as mappings). timm and torchvision: the
arguments the builder passes to its model class, read by building the registered model once on
the meta device with the class's `__init__` wrapped to record them (`constructor_arguments`).

**What is built.** transformers: the class from the reduced config (`transformers:Class`). timm
and torchvision: the model class with the reduced arguments (`timm:VisionTransformer`) where the
builder's return annotation names it and no argument is a module or tensor the builder made (a
detection model's backbone), so the same constructor call the builder makes runs at the reduced
size; otherwise the registered name gets the reduced values as keyword arguments, which its own
defaults then take (timm's `dict(model_args, **kwargs)`). A rung that does not
build, or builds a model past `max_parameters`, gives way to the next; when none builds, the reason
of the last one tried is the row's.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from stability.errors import CaseError
from stability.families.library_lookup import Target, config_keys, registry
from stability.families.library_reduce import LADDER, Plan, at_depth, plan, template
from stability.families.library_support import import_library, quiet_imports

__all__ = [
    "ScanTarget",
    "ScanBuild",
    "Modality",
    "scan_targets",
    "plan_build",
    "constructor_arguments",
    "build_key",
    "MAX_PARAMETERS",
]

Modality = Literal["tokens", "images", "other"]

#: The largest model (parameters at the smaller depth) a scan builds for real.
MAX_PARAMETERS = 150_000_000


@dataclass(frozen=True, kw_only=True)
class ScanTarget:
    """One model of a library to scan: `name` is a transformers class name or a timm/torchvision
    registered name; `also` the other names it stands for (model types of one class)."""

    library: str
    name: str
    also: tuple[str, ...] = ()


def scan_targets(library: str) -> list[ScanTarget]:
    """Every model of `library` a scan tries (the module docstring), in the library's order."""
    lib = import_library(library)
    if library == "transformers":
        auto = importlib.import_module("transformers.models.auto.modeling_auto")
        by_class: dict[str, list[str]] = {}
        for model_type, names in auto.MODEL_MAPPING_NAMES.items():
            for name in names if isinstance(names, (tuple, list)) else (names,):
                by_class.setdefault(str(name), []).append(str(model_type))
        return [ScanTarget(library=library, name=n, also=tuple(types[1:])) for n, types in by_class.items()]
    if library == "timm":
        return [ScanTarget(library=library, name=n) for n in lib.list_models()]
    if library == "torchvision":
        return [ScanTarget(library=library, name=n) for n in lib.models.list_models()]
    raise ValueError(f"no such library: {library}")


@dataclass(frozen=True, kw_only=True)
class ScanBuild:
    """The model a scan builds for one target: `model` as the library family names it
    (`"LIBRARY:NAME"`), the arguments as shipped (`shipped`), the rung's `plan`, its parameter
    count at depth `depths[0]` and its input modality."""

    model: str
    shipped: dict[str, Any]
    plan: Plan
    parameters: int
    modality: Modality
    input_name: str = ""
    tried: tuple[str, ...] = field(default_factory=tuple)  # the rungs that did not build, with why

    def config(self, depth: int) -> dict[str, Any]:
        """The arguments at `depth`."""
        return at_depth(self.shipped, self.plan, depth) if self.plan.rung != "default" else {}

    def template(self) -> dict[str, Any] | None:
        """The arguments with the library family's `"depth"` placeholder for every layer count (one
        config for every depth), where the plan allows it (`library_reduce.template`); else None."""
        return template(self.shipped, self.plan) if self.plan.rung != "default" else None

    def changed(self, depth: int) -> dict[str, Any]:
        """The arguments at `depth` that differ from the shipped ones, by dotted path (what a row shows)."""
        new = self.config(depth)
        out: dict[str, Any] = {}

        def walk(a: Any, b: Any, path: str) -> None:
            if isinstance(a, Mapping) and isinstance(b, Mapping):
                for k in b:
                    walk(a.get(k), b[k], f"{path}.{k}" if path else str(k))
            elif a != b:
                out[path] = b

        walk(self.shipped, new, "")
        return out


@contextlib.contextmanager
def _recording(cls: type) -> Iterator[dict[str, Any]]:
    """Record the arguments of the first call of `cls.__init__` (bound by name) while inside."""
    real = cls.__init__  # type: ignore[misc]
    got: dict[str, Any] = {}
    signature = inspect.signature(real)

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        if not got and type(self) is cls:
            bound = signature.bind(self, *args, **kwargs)
            got.update({k: v for k, v in bound.arguments.items() if k != "self"})
            extra = got.pop(next((n for n, p in signature.parameters.items() if p.kind is p.VAR_KEYWORD), ""), {})
            got.update(extra)
        real(self, *args, **kwargs)

    cls.__init__ = init  # type: ignore[misc]
    try:
        yield got
    finally:
        cls.__init__ = real  # type: ignore[misc]


def constructor_arguments(library: str, name: str) -> tuple[type, dict[str, Any]]:
    """(the class a timm or torchvision builder returns, the arguments it passes to it), read by
    building the registered model on the meta device twice: once to learn the class, once with
    its `__init__` recording."""
    from stability.families.library_memory import meta_model

    target = Target(library, name, "registered", library)
    lib = _Lib(target)
    cls = type(meta_model(lib, {}))
    with _recording(cls) as got:
        meta_model(lib, {})
    return cls, dict(got)


@dataclass(frozen=True)
class _Lib:
    """The part of `stability.families.library.LibraryModel` the meta build reads."""

    target: Target
    inputs: str | None = None
    blocks: str | None = None


def _shipped(target: ScanTarget) -> tuple[Target, dict[str, Any], Target | None]:
    """(what to build at the default, the arguments as shipped, what to build with reduced
    arguments: None when they go to `first` as overrides)."""
    if target.library == "transformers":
        lib = import_library("transformers")
        with quiet_imports():
            cls = getattr(lib, target.name, None)
        if not isinstance(cls, type) or not issubclass(cls, lib.PreTrainedModel):
            raise CaseError(f"transformers does not export {target.name} as a model class")
        model = Target("transformers", target.name, "model", cls.__module__.removeprefix("transformers."))
        known = set(config_keys(model)[0])  # not the bookkeeping to_dict adds (`_name_or_path`, versions)
        default = cls.config_class()  # type: ignore[attr-defined]
        return model, {k: v for k, v in default.to_dict().items() if k in known}, model
    cls, args = constructor_arguments(target.library, target.name)
    registered = Target(target.library, target.name, "registered", target.library)
    classes = registry(target.library)[1]
    built = any(_made(v) for v in args.values())  # a backbone the builder made, maybe inside a partial
    if classes.get(cls.__name__) is cls and not built:
        return registered, args, Target(target.library, cls.__name__, "model", target.library)
    return registered, args, None


def _made(value: Any) -> bool:
    """Whether `value` holds a module or tensor the builder made (timm's hybrid ViTs pass their
    backbone inside `partial(HybridEmbed, backbone=...)`): built on the meta device by
    `constructor_arguments`, it cannot be passed on, so the registered builder makes it again."""
    import functools

    if isinstance(value, (nn.Module, torch.Tensor)):
        return True
    if isinstance(value, functools.partial):
        return any(_made(v) for v in (*value.args, *value.keywords.values()))
    if isinstance(value, Mapping):
        return any(_made(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_made(v) for v in value)
    return False


def _modality(model: Any, library: str) -> Modality:
    if library != "transformers":
        return "images"
    main = getattr(model, "main_input_name", "input_ids")
    return "tokens" if main == "input_ids" else "images" if main == "pixel_values" else "other"


def _count(model: Any) -> int:
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def plan_build(target: ScanTarget, *, depth: int = 2, max_parameters: int = MAX_PARAMETERS) -> ScanBuild:
    """The smallest rung of the ladder that builds `target` at `depth` on the meta device within
    `max_parameters` (the module docstring); a CaseError naming why when none does."""
    from stability.families.library_memory import meta_model

    default, shipped, reduced = _shipped(target)
    tried: list[str] = []
    last = ""
    for rung in LADDER:
        p = plan(shipped, rung)
        if rung.name == "default":
            build, config = default, {}
        elif reduced is not None:
            build, config = reduced, at_depth(shipped, p, depth)
        else:  # the reduced values as the registered builder's keyword arguments
            build, config = default, {k: v for k, v in at_depth(shipped, p, depth).items() if shipped.get(k) != v}
        if rung.name != "default" and not p.changes and not p.layers:
            continue  # nothing to reduce: the default is this rung
        try:
            model = meta_model(_Lib(build), config)
        except Exception as exc:  # the library refuses this config: the next rung
            last = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            tried.append(f"{rung.name}: {last}")
            continue
        n = _count(model)
        if n > max_parameters:
            last = f"{n:,} parameters, more than the scan's limit of {max_parameters:,}"
            tried.append(f"{rung.name}: {last}")
            continue
        if build is default and rung.name != "default":
            shipped_view = {k: shipped[k] for k in config}
            return ScanBuild(
                model=f"{build.library}:{build.name}",
                shipped=shipped_view,
                plan=_only(p, set(config)),
                parameters=n,
                modality=_modality(model, target.library),
                input_name=str(getattr(model, "main_input_name", "")),
                tried=tuple(tried),
            )
        return ScanBuild(
            model=f"{build.library}:{build.name}",
            shipped=shipped,
            plan=p,
            parameters=n,
            modality=_modality(model, target.library),
            input_name=str(getattr(model, "main_input_name", "")),
            tried=tuple(tried),
        )
    first = tried[0] if tried else last
    raise CaseError(
        f"no rung of the reducer builds within the limit: {first}" + (f"; {tried[-1]}" if len(tried) > 1 else "")
    )


def _only(p: Plan, keys: set[str]) -> Plan:
    """The plan restricted to the top-level arguments `keys` (a builder's overrides)."""

    def keep(d: Mapping[tuple[str, ...], Any]) -> dict[tuple[str, ...], Any]:
        return {k: v for k, v in d.items() if k[0] in keys}

    return Plan(
        rung=p.rung,
        factor=p.factor,
        changes=keep(p.changes),
        layers=keep(p.layers),
        per_layer=keep(p.per_layer),
        refs=keep(p.refs),
        stages=tuple(s for s in p.stages if s[0] in keys),
        exact=p.exact,
    )


def _stable(value: Any) -> Any:
    """`value` as plain data that reads the same in every process: a class or function by its
    qualified name, a `functools.partial` by its function and arguments, containers element-wise."""
    import functools

    if isinstance(value, Mapping):
        return {str(k): _stable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_stable(v) for v in value]
    if isinstance(value, functools.partial):
        return {"partial": _stable(value.func), "args": _stable(value.args), "kwargs": _stable(value.keywords)}
    if isinstance(value, type) or callable(value):
        return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', type(value).__qualname__)}"
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return f"{type(value).__module__}.{type(value).__qualname__}({value!s})"


def build_key(target: ScanTarget, *, depth: int = 2, max_parameters: int = MAX_PARAMETERS) -> str:
    """What a scan builds for `target` at `depth`, as text: two targets with one key build one
    model (the same class from the same reduced arguments), so a scan builds it once. A target
    whose plan fails has a key of its own."""
    import json

    try:
        b = plan_build(target, depth=depth, max_parameters=max_parameters)
    except Exception:  # noqa: BLE001 -- its own row will say why
        return f"{target.library}:{target.name} (not built)"
    return json.dumps([b.model, _stable(b.config(depth))], sort_keys=True)
