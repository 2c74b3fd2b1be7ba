"""Plugins: modules that register a project's own invariants and families (stability.spec.registry)
in every process of a run.

A plugin is a module name (`my_project.stability_plugin`) or the path of a `.py` file, named by
the person running the check (never by a spec): `--plugin` on the command line, the environment
variable `STABILITY_PLUGINS` (an `os.pathsep`-separated list), or the pytest ini option
`stability_plugins`. Each is imported once per process, in the command's process and in every
worker process before it reads its task (the worker's environment carries the list), so a spec that
names a plugin's invariant or family validates, runs and is judged alike on every path. A file is
imported under a name derived from its path, the same in every process, so what it defines pickles.
A plugin that cannot be imported is a usage error (exit 2) naming it.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from stability.errors import UsageError
from stability.families.factory import import_file

__all__ = ["PLUGINS_ENV", "load_plugins", "plugins_environment", "configured_plugins"]

PLUGINS_ENV = "STABILITY_PLUGINS"
_loaded: dict[str, ModuleType] = {}


def configured_plugins(extra: Sequence[str] = ()) -> list[str]:
    """`extra` then `$STABILITY_PLUGINS`, each once, in order."""
    env = [p for p in os.environ.get(PLUGINS_ENV, "").split(os.pathsep) if p.strip()]
    return list(dict.fromkeys([*extra, *env]))


def plugins_environment(extra: Sequence[str], env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) with `extra` put in front of `$STABILITY_PLUGINS`, file
    paths made absolute: what a worker process needs to load the same plugins."""
    out = dict(os.environ if env is None else env)
    names = [str(Path(p).resolve()) if p.endswith(".py") else p for p in configured_plugins(extra)]
    if names:
        out[PLUGINS_ENV] = os.pathsep.join(names)
    return out


def load_plugins(extra: Sequence[str] = ()) -> list[ModuleType]:
    """Import every configured plugin (each once per process)."""
    return [_load(name) for name in configured_plugins(extra)]


def _load(name: str) -> ModuleType:
    key = str(Path(name).resolve()) if name.endswith(".py") else name
    if key in _loaded:
        return _loaded[key]
    try:
        module = _load_file(Path(key)) if name.endswith(".py") else importlib.import_module(name)
    except UsageError:
        raise
    except SystemExit as exc:
        raise UsageError(
            f"plugin {name}: called sys.exit({exc.code!r}) while importing; a plugin must only register entries"
        ) from None
    except Exception as exc:
        raise UsageError(
            f"plugin {name}: does not import ({' '.join(f'{type(exc).__name__}: {exc}'.split())}); fix it, or "
            f"drop it from --plugin / ${PLUGINS_ENV}"
        ) from None
    _loaded[key] = module
    return module


def _load_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise UsageError(f"plugin {path}: no such file; give a module name or the path of a .py file")
    return import_file(path, kind="plugin", label=path.stem)
