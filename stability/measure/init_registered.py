"""What a registered library model declares for the keys its init reads, read (never replaced) to
tell where a spec's config sets another value (`InitRecord.overrides`, reported by
init_conformance with both values).

A spec copied from a neighbour carries the neighbour's `init_values = 1e-6`; built with it, the
model is not the one the library registers, and a bug in the registered value would pass.
`overrides(target, config)` compares each init key the spec's config sets with the registered
model's own value: a transformers config class's default, or the argument a timm or torchvision
registry entry passes its model's constructor (the registered model built on the meta device,
without the spec's init keys, its constructor's arguments recorded by
`stability.measure.init_trace`). Keys of the architecture (widths, depths, vocabulary sizes) are
not compared: a spec sets those on purpose.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Mapping
from typing import Any

import torch

from stability.families.library import quiet_imports
from stability.families.library_build import construct
from stability.families.library_lookup import Target
from stability.families.library_memory import registered_on_meta
from stability.measure.init_recorder import InitRecorder
from stability.measure.init_stats import Override

__all__ = ["INIT_KEYS", "overrides", "registered_values"]

#: The config keys an init reads: its ranges and factors (transformers' initializer_range, init_std,
#: initializer_factor), layer-scale values (Touvron et al. 2021, CaiT), zero-γ switches (Goyal et al.
#: 2017), depth scaling (Radford et al. 2019) and the Mamba time-step init (Gu, Dao 2023).
INIT_KEYS = frozenset(
    {
        "initializer_range", "init_std", "initializer_factor", "init_values", "ls_init_value",
        "layer_scale_init_value", "layerscale_value", "layer_scale", "head_init_scale", "zero_init_last",
        "zero_init_residual", "rescale_prenorm_residual", "time_step_scale", "time_step_init_scheme",
        "time_step_min", "time_step_max", "time_step_floor", "weight_init", "fix_init",
        "scale_attn_by_inverse_layer_idx",
    }
)  # fmt: skip

_CACHE: dict[str, dict[str, Any]] = {}


def registered_values(target: Target, config: Mapping[str, Any]) -> dict[str, Any]:
    """The registered model's own value of each init key `config` sets (a key it does not declare
    is left out); cached per process."""
    keys = sorted(k for k in config if k in INIT_KEYS)
    if not keys:
        return {}
    rest = {k: v for k, v in config.items() if k not in INIT_KEYS}
    cache = repr((str(target), target.kind, keys, sorted(rest.items(), key=lambda kv: kv[0])))
    if cache not in _CACHE:
        try:
            _CACHE[cache] = _read(target, keys, rest)
        except Exception:  # a registry entry that does not build without the spec's keys: nothing to compare
            _CACHE[cache] = {}
    return _CACHE[cache]


def _read(target: Target, keys: list[str], rest: Mapping[str, Any]) -> dict[str, Any]:
    with quiet_imports():
        lib: Any = importlib.import_module(target.library)
    if target.library == "transformers":
        cls: Any = getattr(lib, target.name)
        config_class = cls if target.kind in ("config", "causal_lm_config") else cls.config_class
        defaults = config_class()
        return {k: getattr(defaults, k) for k in keys if hasattr(defaults, k)}
    recorder = InitRecorder()
    try:
        with torch.random.fork_rng(devices=[]), torch.device("meta"), recorder.recording():
            model = construct(target, dict(rest))
    except Exception:  # a constructor that reads numbers back (linspace(...).tolist()): register-time moves instead
        recorder = InitRecorder()
        with torch.random.fork_rng(devices=[]), registered_on_meta(), recorder.recording():
            model = construct(target, dict(rest))
    given = recorder.arguments_of(model)
    return {k: given[k] for k in keys if k in given}


def overrides(target: Target, config: Mapping[str, Any]) -> tuple[Override, ...]:
    """The init keys `config` sets to another value than the registered model's own."""
    registered = registered_values(target, config)
    out = []
    for key, value in registered.items():
        given = config[key]
        with contextlib.suppress(TypeError, ValueError):
            if isinstance(given, (int, float)) and isinstance(value, (int, float)) and float(given) == float(value):
                continue
        if given != value:
            out.append(Override(key=key, given=given, registered=value, target=str(target)))
    return tuple(out)
