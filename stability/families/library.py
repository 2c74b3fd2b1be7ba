"""Library models from data: `"transformers:LlamaModel"` and a config mapping, with no Python file.

A spec names a model as `"LIBRARY:NAME"` and gives its config as data:

- **Libraries.** `transformers`, `timm` and `torchvision` (`LIBRARIES`). NAME is a transformers
  model class (a top-level name that is a `PreTrainedModel`, e.g. `LlamaModel`,
  `T5EncoderModel`, `BertModel`) or config class (`LlamaConfig`: the base model of its family,
  as `AutoModel.from_config` builds it); a timm or torchvision registered model name (`resnet50`,
  `vit_small_patch16_224`, as `timm.list_models()` / `torchvision.models.list_models()` list
  them) or a model class one of those returns (`timm:VisionTransformer`). Anything else is
  refused with the close names, so a spec cannot name an arbitrary callable.
- **Config.** Keyword arguments of the config class (transformers: its fields, their aliases and
  `attn_implementation`) or of the model class (timm, torchvision); an unknown key is refused
  with the close names. A string value that is a case key (`"width"`, `"depth"`, `"tokens"`, …),
  `"N*key"` or `"key/N"` is filled from the drawn case (`fill`); lists and tables are filled
  element by element (`depths = [2, 2, "depth", 2]`); other strings are literals
  (`hidden_act = "gelu"`). Keys that would load weights (`pretrained`, `weights`, …) are refused:
  models are built from configs with random init and nothing is downloaded.
- **When.** `resolve` and `check_config` run on the spec alone, by each library's public API (the
  same in every release `stability.families.library_support` supports; an older one is refused).
  For transformers: a name of its top-level package, its config class by the Auto classes' model
  types (`CONFIG_MAPPING`), so only the config's module is imported (a class no Auto class builds,
  `T5EncoderModel`, is imported to read its `config_class`); nothing is built;
  timm and torchvision fill their registries by importing their model modules, so for those
  the check runs after the library's import, still before anything is built.

Building (`build_model`) and the inputs by modality (`make_inputs`) are in
`stability.families.library_build`.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import inspect
import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stability.errors import LibraryMissing, SpecError
from stability.families.library_support import check_release, check_working, first_key_release, first_release, import_library, installed, needed_release, older_release, quiet_imports
from stability.families.library_values import check_placeholders, placeholders

__all__ = [
    "config_default",
    "LIBRARIES",
    "MODALITIES",
    "Target",
    "LibraryModel",
    "parse_library",
    "library_of",
    "resolve",
    "check_config",
    "input_modality",
    "config_keys",
    "quiet_imports",
    "registry",
]

LIBRARIES: tuple[str, ...] = ("transformers", "timm", "torchvision")

#: Config keys that would load pretrained weights or read files: refused in any library.
_LOADING = ("pretrained", "weights", "weights_backbone", "pretrained_cfg", "pretrained_cfg_overlay", "pretrained_strict", "checkpoint_path", "cache_dir")

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


def _refuse(file: str, key: str, value: Any, problem: str, choices: Sequence[str], fix: str, *, near: str | None = None) -> SpecError:
    """A SpecError whose fix lists the choices closest to `near` (default: the value's NAME part)."""
    close = difflib.get_close_matches(str(value).split(":")[-1] if near is None else near, choices, n=3, cutoff=0.6)
    hint = f"close names: {', '.join(close)}" if close else fix
    return SpecError(file, key, problem, value=value, fix=hint)


def _missing(library: str, exc: Exception, *, file: str, key: str, model: str) -> LibraryMissing:
    what = " ".join(f"{type(exc).__name__}: {exc}".split())
    fix = 'install it: pip install -e ".[hf]"' if library == "transformers" else "install it (docs/library-models.md, section 5)"
    return LibraryMissing(file, key, f"{library} does not import here ({what})", value=model, fix=fix)


@functools.cache
def _hf_names() -> tuple[str, ...]:
    """transformers' public top-level names that may be a model or config class (`dir` of the
    package: its lazy module lists every name without importing it; read once per process, as a
    spec's keys are resolved several times and the listing takes a sixth of a second)."""
    return tuple(n for n in dir(_library("transformers")) if re.fullmatch(r"[A-Z][A-Za-z0-9]+", n) and not n.endswith("PreTrainedModel"))


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
    own = [t for t in types if t in mapping and name.lower().replace("_", "").startswith(t.replace("-", "").replace("_", ""))]
    chosen = max(own, key=len) if own else types[0] if len(types) == 1 and types[0] in mapping else None
    if chosen is None:
        return None
    config = typing.cast(type, mapping[chosen])
    return config if config.__name__.removesuffix("Config").lower() == name.lower()[: len(config.__name__) - 6] else None


def _hf_resolve(name: str) -> tuple[str, str] | None:
    """(kind, module) of a transformers model or config class named `name`, by the library's public
    API: a top-level name, a config (a subclass of its config base with a model type) or a model
    (a class an Auto class builds, else a subclass of `PreTrainedModel`, whose module is then
    imported); None when it is neither."""
    lib = _library("transformers")
    if name not in _hf_names():
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
    ok = isinstance(cls, type) and issubclass(cls, _hf_base(lib, "model")) and isinstance(getattr(cls, "config_class", None), type)
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
        cls = _returned_class(builder(n))
        if cls is not None:
            classes.setdefault(cls.__name__, cls)
    return names, classes


def _returned_class(fn: Any) -> type | None:
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
    return Target(library, cls.__name__, "model", cls.__module__.removeprefix("transformers.") if library == "transformers" else library)


def _added_later(library: str, name: str, first: str, config: Mapping[str, Any], *, file: str, key: str, model: str) -> SpecError:
    """The refusal of a model the imported release does not have yet, naming the release that has it
    and builds every setting of `config` (library_support.needed_release)."""
    have, need = installed(library), needed_release(library, name, config) or first
    why = f"the release that added {name}" if need == first else f"{name} came in {first}, and the config this spec sets builds from {need}"
    return SpecError(file, key, f"needs {library} >= {need}, {why} (this environment has {have})", value=model, fix=f"pip install --no-deps '{library}>={need}'")


def resolve(model: str, *, file: str, key: str = "model", config: Mapping[str, Any] | None = None) -> Target:
    """The target a spec's `"LIBRARY:NAME"` names, or a SpecError (exit 2) with the close names."""
    library, sep, name = str(model).partition(":")
    if not sep or not name or library not in LIBRARIES:
        raise SpecError(file, key, f"names no model of {', '.join(LIBRARIES)}", value=model, fix='write "LIBRARY:NAME", e.g. "transformers:LlamaModel" or "timm:resnet18"')
    if library == "transformers":
        try:
            check_release(library, file=file, key=key, model=model)
            with quiet_imports():  # the Auto mappings and a configuration module: transformers imports torchvision with them
                found = _hf_resolve(name)
        except SpecError:
            raise
        except Exception as exc:  # not installed, or does not import
            raise _missing(library, exc, file=file, key=key, model=model) from None
        if found is None and (first := first_release(library, name)) is not None:
            raise _added_later(library, name, first, config or {}, file=file, key=key, model=model)
        if found is None:
            raise _refuse(file, key, model, "is not a transformers model or config class", _hf_names(), "name a class such as LlamaModel, BertModel or LlamaConfig")
        return Target(library, name, found[0], found[1].removeprefix("transformers."))
    try:
        check_release(library, file=file, key=key, model=model)
        names, classes = registry(library)
    except SpecError:
        raise
    except Exception as exc:  # the library is not installed, or does not import
        raise _missing(library, exc, file=file, key=key, model=model) from None
    if name in names:
        return Target(library, name, "registered", library)
    if name in classes:
        return Target(library, name, "model", library)
    if (first := first_release(library, name)) is not None:
        raise _added_later(library, name, first, config or {}, file=file, key=key, model=model)
    raise _refuse(file, key, model, f"is not a {library} registered model or model class", sorted({*names, *classes}), f"name one of {library}'s registered models")


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
        builder = lib.models.model_entrypoint(target.name) if target.library == "timm" else lib.models.get_model_builder(target.name)
    cls = _returned_class(builder)
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
            keys = [n for n, p in inspect.signature(cls).parameters.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        aliases = getattr(cls, "attribute_map", {}) or {}
        return sorted({*keys, *aliases, *_hf_defaults(cls), *_HF_EXTRA}), False
    cls = _target_class(target)
    if cls is object:
        return [], True
    params = inspect.signature(cls).parameters  # the class's __init__, without self
    keys = [n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return keys, any(p.kind is p.VAR_KEYWORD for p in params.values())


def input_modality(lib: LibraryModel) -> str:
    """The modality of the model's inputs, decided from the spec's data and the config class (no
    model module imported): the spec's `inputs`; else images for timm and torchvision; else, for
    transformers, images when the config takes `num_channels` (a vision model's pixel inputs),
    tokens otherwise (`library_build.make_inputs` draws by the same choice, from the built model's
    `main_input_name`)."""
    if lib.inputs is not None:
        return lib.inputs
    if lib.target.library != "transformers":
        return "images"
    keys, _ = config_keys(lib.target)
    return "images" if "num_channels" in keys else "tokens"


def check_config(target: Target, config: Mapping[str, Any], *, file: str, key: str = "config") -> None:
    """Every key of `config` is one the target takes and no value names a case key that does not
    exist (`"4*widht"`), else a SpecError (exit 2) naming the key and the close names."""
    for name in config:
        if name in _LOADING:
            raise SpecError(file, f"{key}.{name}", "would load pretrained weights or files", value=config[name], fix="drop it: models are built from their config with random init")
    known, open_ended = config_keys(target)
    for name, value in config.items():
        if not open_ended and name not in known:
            if (first := first_key_release(target.library, target.name, name)) is not None:
                have = installed(target.library)
                problem = f"needs {target.library} >= {first[0]}, the release that added {first[1]} (this environment has {have})"
                raise SpecError(file, f"{key}.{name}", problem, value=value, fix=f"pip install --no-deps '{target.library}>={first[0]}'")
            problem = f"is not a config key of {target}{older_release(target.library)}"
            raise _refuse(file, f"{key}.{name}", value, problem, known, f"see the keyword arguments of {target}", near=name)
        check_placeholders(value, file=file, key=f"{key}.{name}")


MODALITIES: tuple[str, ...] = ("tokens", "images", "embeddings")


@dataclass(frozen=True)
class LibraryModel:
    """A spec's library model: the target, its config (placeholders unfilled), the modality of its
    inputs (None: the model's own), the blocks to probe (None: discovered) and the shipped config's
    values for the init rule (empty: the library's init as it is)."""

    target: Target
    config: Mapping[str, Any]
    inputs: str | None = None
    blocks: str | None = None
    shipped: Mapping[str, Any] = field(default_factory=dict)
    scale: str = "probed"

    @property
    def width_keys(self) -> list[str]:
        """The config keys whose values the case's width fills (`hidden_size = "width"`, `hidden_sizes = ["width", "2*width"]`)."""
        return [k for k, v in self.config.items() if "width" in placeholders(v)]


def parse_library(
    model: str,
    *,
    config: Mapping[str, Any],
    inputs: str | None = None,
    blocks: str | None = None,
    shipped: Mapping[str, Any] | None = None,
    scale: str = "probed",
    file: str,
    prefix: str = "",
) -> LibraryModel:
    """A spec's library keys, checked before anything is built (`library.resolve`, `check_config`):
    a SpecError (exit 2) names the key, the value and the fix. `prefix` is the keys' table."""
    target = resolve(model, file=file, key=f"{prefix}model", config=config)
    check_config(target, config, file=file, key=f"{prefix}config")
    check_working(target.library, target.name, config, file=file, key=f"{prefix}config")
    if inputs is not None and inputs not in MODALITIES:
        raise SpecError(file, f"{prefix}inputs", "is not a modality", value=inputs, fix=f"choose one of {', '.join(MODALITIES)}")
    out = LibraryModel(target, dict(config), inputs, blocks, dict(shipped or {}), scale)
    if scale == "shipped" and (not out.shipped or target.library != "transformers"):
        why = "streams a transformers model's blocks" if target.library != "transformers" else "builds the shipped config, which block.shipped gives"
        fix = "remove it: the whole model is probed as built" if target.library != "transformers" else "give block.shipped (e.g. { hidden_size = 4096, intermediate_size = 11008 })"
        raise SpecError(file, f"{prefix}scale", f'= "shipped" {why}: {target} has {"none" if target.library == "transformers" else "another library"}', value=scale, fix=fix)
    if out.shipped:
        check_config(target, out.shipped, file=file, key=f"{prefix}shipped")
        missing = [k for k in out.width_keys if k not in out.shipped] if out.width_keys else ["a width"]
        if missing:
            raise SpecError(
                file,
                f"{prefix}shipped",
                f"needs the shipped value of every config key the case's width fills (missing: {', '.join(missing)})",
                value=dict(out.shipped),
                fix='map the width (e.g. config.hidden_size = "width") and give its shipped value (shipped.hidden_size = 768)',
            )
    return out
