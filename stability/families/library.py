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

The lookups themselves (the `Target` a name names, transformers' names and config classes, the
timm and torchvision registries, a target's config keys and defaults) are in
`stability.families.library_lookup`; building (`build_model`) and the inputs by modality
(`make_inputs`) are in `stability.families.library_build`.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stability.errors import LibraryMissing, SpecError
from stability.families.library_lookup import (
    LIBRARIES,
    Target,
    config_default,
    config_keys,
    hf_names,
    hf_resolve,
    library_of,
    registry,
)
from stability.families.library_support import (
    check_release,
    check_working,
    first_key_release,
    first_release,
    installed,
    needed_release,
    older_release,
    quiet_imports,
)
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

#: Config keys that would load pretrained weights or read files: refused in any library.
_LOADING = (
    "pretrained",
    "weights",
    "weights_backbone",
    "pretrained_cfg",
    "pretrained_cfg_overlay",
    "pretrained_strict",
    "checkpoint_path",
    "cache_dir",
)


def _refuse(
    file: str, key: str, value: Any, problem: str, choices: Sequence[str], fix: str, *, near: str | None = None
) -> SpecError:
    """A SpecError whose fix lists the choices closest to `near` (default: the value's NAME part)."""
    close = difflib.get_close_matches(str(value).split(":")[-1] if near is None else near, choices, n=3, cutoff=0.6)
    hint = f"close names: {', '.join(close)}" if close else fix
    return SpecError(file, key, problem, value=value, fix=hint)


def _missing(library: str, exc: Exception, *, file: str, key: str, model: str) -> LibraryMissing:
    what = " ".join(f"{type(exc).__name__}: {exc}".split())
    fix = (
        'install it: pip install -e ".[hf]"'
        if library == "transformers"
        else "install it (docs/library-models.md, section 7)"
    )
    return LibraryMissing(file, key, f"{library} does not import here ({what})", value=model, fix=fix)


def _added_later(
    library: str, name: str, first: str, config: Mapping[str, Any], *, file: str, key: str, model: str
) -> SpecError:
    """The refusal of a model the imported release does not have yet, naming the release that has it
    and builds every setting of `config` (library_support.needed_release)."""
    have, need = installed(library), needed_release(library, name, config) or first
    why = (
        f"the release that added {name}"
        if need == first
        else f"{name} came in {first}, and the config this spec sets builds from {need}"
    )
    return SpecError(
        file,
        key,
        f"needs {library} >= {need}, {why} (this environment has {have})",
        value=model,
        fix=f"pip install --no-deps '{library}>={need}'",
    )


def resolve(model: str, *, file: str, key: str = "model", config: Mapping[str, Any] | None = None) -> Target:
    """The target a spec's `"LIBRARY:NAME"` names, or a SpecError (exit 2) with the close names."""
    library, sep, name = str(model).partition(":")
    if not sep or not name or library not in LIBRARIES:
        raise SpecError(
            file,
            key,
            f"names no model of {', '.join(LIBRARIES)}",
            value=model,
            fix='write "LIBRARY:NAME", e.g. "transformers:LlamaModel" or "timm:resnet18"',
        )
    if library == "transformers":
        try:
            check_release(library, file=file, key=key, model=model)
            with (
                quiet_imports()
            ):  # the Auto mappings and a configuration module: transformers imports torchvision with them
                found = hf_resolve(name)
        except SpecError:
            raise
        except Exception as exc:  # not installed, or does not import
            raise _missing(library, exc, file=file, key=key, model=model) from None
        if found is None and (first := first_release(library, name)) is not None:
            raise _added_later(library, name, first, config or {}, file=file, key=key, model=model)
        if found is None:
            raise _refuse(
                file,
                key,
                model,
                "is not a transformers model or config class",
                hf_names(),
                "name a class such as LlamaModel, BertModel or LlamaConfig",
            )
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
    raise _refuse(
        file,
        key,
        model,
        f"is not a {library} registered model or model class",
        sorted({*names, *classes}),
        f"name one of {library}'s registered models",
    )


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
            raise SpecError(
                file,
                f"{key}.{name}",
                "would load pretrained weights or files",
                value=config[name],
                fix="drop it: models are built from their config with random init",
            )
    known, open_ended = config_keys(target)
    for name, value in config.items():
        if not open_ended and name not in known:
            if (first := first_key_release(target.library, target.name, name)) is not None:
                have = installed(target.library)
                problem = (
                    f"needs {target.library} >= {first[0]}, the release that added {first[1]} (this "
                    f"environment has {have})"
                )
                raise SpecError(
                    file,
                    f"{key}.{name}",
                    problem,
                    value=value,
                    fix=f"pip install --no-deps '{target.library}>={first[0]}'",
                )
            problem = f"is not a config key of {target}{older_release(target.library)}"
            raise _refuse(
                file, f"{key}.{name}", value, problem, known, f"see the keyword arguments of {target}", near=name
            )
        check_placeholders(value, file=file, key=f"{key}.{name}")


MODALITIES: tuple[str, ...] = ("tokens", "images", "embeddings")


@dataclass(frozen=True, kw_only=True)
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
        """The config keys whose values the case's width fills (`hidden_size = "width"`,
        `hidden_sizes = ["width", "2*width"]`)."""
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
        raise SpecError(
            file, f"{prefix}inputs", "is not a modality", value=inputs, fix=f"choose one of {', '.join(MODALITIES)}"
        )
    out = LibraryModel(
        target=target, config=dict(config), inputs=inputs, blocks=blocks, shipped=dict(shipped or {}), scale=scale
    )
    if scale == "streamed" and (out.shipped or target.library != "transformers"):
        raise SpecError(
            file,
            f"{prefix}scale",
            '= "streamed" streams a transformers model\'s blocks at the config as given, with no init rule: '
            + (f"{target} has another library" if target.library != "transformers" else "block.shipped is set"),
            value=scale,
            fix='use scale = "shipped" to stream the shipped config, or remove block.shipped'
            if target.library == "transformers"
            else "remove it: the whole model is probed as built",
        )
    if scale == "shipped" and (not out.shipped or target.library != "transformers"):
        why = (
            "streams a transformers model's blocks"
            if target.library != "transformers"
            else "builds the shipped config, which block.shipped gives"
        )
        fix = (
            "remove it: the whole model is probed as built"
            if target.library != "transformers"
            else "give block.shipped (e.g. { hidden_size = 4096, intermediate_size = 11008 })"
        )
        raise SpecError(
            file,
            f"{prefix}scale",
            f'= "shipped" {why}: {target} has {"none" if target.library == "transformers" else "another library"}',
            value=scale,
            fix=fix,
        )
    if out.shipped:
        check_config(target, out.shipped, file=file, key=f"{prefix}shipped")
        missing = [k for k in out.width_keys if k not in out.shipped] if out.width_keys else ["a width"]
        if missing:
            raise SpecError(
                file,
                f"{prefix}shipped",
                f"needs the shipped value of every config key the case's width fills (missing: {', '.join(missing)})",
                value=dict(out.shipped),
                fix='map the width (e.g. config.hidden_size = "width") and give its shipped value '
                "(shipped.hidden_size = 768)",
            )
    return out
