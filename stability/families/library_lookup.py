"""What an installed library says of a name, by its public API, with nothing built: the
`Target` a `"LIBRARY:NAME"` names; for transformers, its top-level names and the config class of a
model class by the Auto API's name mappings (only the configuration module is imported); the timm
and torchvision registries; the library target of a built model (`library_of`); and the config keys
a target takes and their defaults. These are queries only: `stability.families.library` checks a
spec's library keys against them and words the refusals.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stability.families.library_support import import_library, quiet_imports

__all__ = [
    "LIBRARIES",
    "Target",
    "hf_names",
    "hf_resolve",
    "registry",
    "library_of",
    "config_default",
    "config_keys",
    "default_config",
    "returned_class",
]

LIBRARIES: tuple[str, ...] = ("transformers", "timm", "torchvision")

#: Keyword arguments every transformers config takes besides its fields (PreTrainedConfig.__post_init__).
_HF_EXTRA = ("attn_implementation", "experts_implementation", "output_attentions")


@dataclass(frozen=True)
class Target:
    """What a spec's `"LIBRARY:NAME"` names: `kind` is "model" (a class), "config" (a transformers
    config class) or "registered" (a timm/torchvision registry name); `module` is the transformers
    module that defines it ("models.llama.modeling_llama"), else the library."""

    library: str
    name: str
    kind: str
    module: str

    def __str__(self) -> str:
        return f"{self.library}:{self.name}"


def _library(name: str) -> Any:
    return import_library(name)


@functools.cache
def hf_names() -> tuple[str, ...]:
    """transformers' public top-level names that may be a model or config class (`dir` of the
    package: its lazy module lists every name without importing it; read once per process, as a
    spec's keys are resolved several times and the listing takes a sixth of a second)."""
    return tuple(
        n
        for n in dir(_library("transformers"))
        if re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", n)  # Qwen2_5_VLModel, xLSTMModel: underscores, a lower-case start
        and any(c.isupper() for c in n)
        and not n.isupper()
        and not n.endswith("PreTrainedModel")
    )


@functools.cache
def _hf_model_types() -> dict[str, tuple[str, ...]]:
    """Model class name → the model types whose Auto class builds it, from the Auto API's name
    mappings (`transformers.models.auto.modeling_auto.*_MAPPING_NAMES`, every release since 4.1x):
    read without importing a model module."""
    auto = importlib.import_module("transformers.models.auto.modeling_auto")
    out: dict[str, set[str]] = {}
    for attr in dir(auto):
        mapping = getattr(auto, attr) if attr.endswith("MAPPING_NAMES") else None
        if not isinstance(mapping, Mapping):
            continue
        for model_type, names in mapping.items():
            for n in names if isinstance(names, (tuple, list)) else (names,):
                if isinstance(n, str):
                    out.setdefault(n, set()).add(str(model_type))
    return {n: tuple(sorted(t)) for n, t in out.items()}


def _hf_base(lib: Any, kind: str) -> type:
    """transformers' base class of its models (`PreTrainedModel`) or configs (`PreTrainedConfig`,
    `PretrainedConfig` before 5.0)."""
    if kind == "model":
        return typing.cast(type, lib.PreTrainedModel)
    return typing.cast(type, getattr(lib, "PreTrainedConfig", None) or lib.PretrainedConfig)


def _hf_config_by_type(name: str) -> type | None:
    """The config class of model class `name` by its model types (`CONFIG_MAPPING`, which imports
    the configuration module only): the model type named like the class (`llama` for LlamaModel,
    where `exaone` builds it too), else the one type whose Auto class builds it; None otherwise."""
    types = _hf_model_types().get(name, ())
    mapping = _library("transformers").CONFIG_MAPPING
    own = [
        t
        for t in types
        if t in mapping and name.lower().replace("_", "").startswith(t.replace("-", "").replace("_", ""))
    ]
    chosen = max(own, key=len) if own else types[0] if len(types) == 1 and types[0] in mapping else None
    if chosen is None:
        return None
    config = typing.cast(type, mapping[chosen])
    return (
        config if config.__name__.removesuffix("Config").lower() == name.lower()[: len(config.__name__) - 6] else None
    )


def hf_resolve(name: str) -> tuple[str, str] | None:
    """(kind, module) of a transformers model or config class named `name`, by the library's public
    API: a top-level name, a config (a subclass of its config base with a model type) or a model
    (a class an Auto class builds, else a subclass of `PreTrainedModel`, whose module is then
    imported); None when it is neither."""
    lib = _library("transformers")
    if name not in hf_names():
        return None
    if name.endswith("Config"):
        cls = getattr(lib, name)  # a configuration module only
        ok = isinstance(cls, type) and issubclass(cls, _hf_base(lib, "config")) and bool(getattr(cls, "model_type", ""))
        return ("config", cls.__module__) if ok else None
    config = _hf_config_by_type(name)
    if config is not None:
        return "model", config.__module__
    with quiet_imports():
        cls = getattr(lib, name)  # not built by an Auto class (T5EncoderModel): its model module is imported
    ok = (
        isinstance(cls, type)
        and issubclass(cls, _hf_base(lib, "model"))
        and isinstance(getattr(cls, "config_class", None), type)
    )
    return ("model", cls.__module__) if ok else None


@functools.cache
def registry(library: str) -> tuple[list[str], dict[str, type]]:
    """A timm or torchvision registry: its model names, and the classes their builders return (by name)."""
    lib = _library(library)
    if library == "timm":
        names, builder = list(lib.list_models()), lib.models.model_entrypoint
    else:
        names, builder = list(lib.models.list_models()), lib.models.get_model_builder
    classes: dict[str, type] = {}
    for n in names:
        cls = returned_class(builder(n))
        if cls is not None:
            classes.setdefault(cls.__name__, cls)
    return names, classes


def returned_class(fn: Any) -> type | None:
    """The class a timm or torchvision builder's return annotation names (None: none it can read)."""
    try:
        ret = typing.get_type_hints(fn).get("return")
    except Exception:  # an annotation that does not evaluate: no class to check against
        return None
    return ret if isinstance(ret, type) else None


def library_of(model: Any) -> Target | None:
    """The target a built model is an instance of, when its class comes from an allowed library
    (a factory's return value: `GPT2Model`, `timm`'s `ResNet`); None otherwise."""
    cls = type(model)
    library = cls.__module__.split(".", 1)[0]
    if library not in LIBRARIES:
        return None
    return Target(
        library,
        cls.__name__,
        "model",
        cls.__module__.removeprefix("transformers.") if library == "transformers" else library,
    )


def _hf_config_class(target: Target) -> type:
    """The config class of a transformers target, importing its configuration module only (the
    model module too when its package defines several configs, e.g. CLIP's)."""
    with quiet_imports():  # (transformers imports a class's module on first access: torchvision with it)
        lib = _library("transformers")
        if target.kind == "config":
            return typing.cast(type, getattr(lib, target.name))
        return _hf_config_by_type(target.name) or typing.cast(type, getattr(lib, target.name).config_class)


def _hf_defaults(cls: type) -> list[str]:
    """The attributes of a default config of `cls` (`to_dict`): before 5.0 the keys every config
    takes (`pad_token_id`, `bos_token_id`, …) are read from `**kwargs`, not named in a signature."""
    try:
        return [k for k in cls().to_dict() if not k.startswith("_")]
    except Exception:  # a config that needs arguments: its signature alone
        return []


def _target_class(target: Target) -> type:
    """The class whose keyword arguments a timm/torchvision config holds."""
    _, classes = registry(target.library)
    if target.kind == "model":
        return classes[target.name]
    lib = _library(target.library)
    with quiet_imports():
        builder = (
            lib.models.model_entrypoint(target.name)
            if target.library == "timm"
            else lib.models.get_model_builder(target.name)
        )
    cls = returned_class(builder)
    return cls if cls is not None else object


def config_default(target: Target, key: str) -> Any:
    """The value `key` takes in the target's config when a spec does not set it (a transformers
    config's default, a timm/torchvision keyword's default); None when there is none to read."""
    try:
        if target.library == "transformers":
            return getattr(_hf_config_class(target)(), key, None)
        p = inspect.signature(_target_class(target)).parameters.get(key)
        return None if p is None or p.default is p.empty else p.default
    except Exception:  # a config that needs arguments, a class without a signature
        return None


def config_keys(target: Target) -> tuple[list[str], bool]:
    """(the config keys the target takes, whether it takes any other too: a `**kwargs` class)."""
    if target.library == "transformers":
        cls = _hf_config_class(target)
        if dataclasses.is_dataclass(cls):
            keys = [f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")]
        else:
            keys = [
                n
                for n, p in inspect.signature(cls).parameters.items()
                if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            ]
        aliases = getattr(cls, "attribute_map", {}) or {}
        return sorted({*keys, *aliases, *_hf_defaults(cls), *_HF_EXTRA}), False
    cls = _target_class(target)
    if cls is object:
        return [], True
    params = inspect.signature(cls).parameters  # the class's __init__, without self
    keys = [n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return keys, any(p.kind is p.VAR_KEYWORD for p in params.values())


def default_config(target: Target) -> tuple[dict[str, Any], dict[str, str]]:
    """A transformers target's default config as data (`to_dict` of its config class built with no
    arguments: the values a spec leaves to the library) and its aliases (`attribute_map`: the
    common name → the class's own, `hidden_size` → `n_embd`); ({}, {}) for another library or a
    config that needs arguments."""
    if target.library != "transformers":
        return {}, {}
    try:
        cls = _hf_config_class(target)
        values = {k: v for k, v in cls().to_dict().items() if not k.startswith("_")}
    except Exception:  # a config that needs arguments
        return {}, {}
    return values, dict(getattr(cls, "attribute_map", {}) or {})
