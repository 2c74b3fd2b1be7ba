"""How a public module of the package (`stability`, `stability.extend`) exports what its internal
modules define: each name is imported from its module on first use (PEP 562), so importing the
public module stays cheap (no torch), and the module's `__all__` is checked when it is imported,
as Hypothesis checks its own exports: every name in it is defined here or lazily, and every public
name the module holds is in it.
"""

from __future__ import annotations
import __future__

import importlib
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_exports", "check_exports", "public_names"]


def lazy_exports(
    module: str, lazy: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(`__getattr__`, `__dir__`) for the public module `module` with globals `namespace`: a name
    of `lazy` (public name → the module that defines it; a module of its own where the value is
    `module.NAME`) is imported on first use and kept in `namespace`."""

    def getattr_(name: str) -> Any:
        where = lazy.get(name)
        if where is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        imported = importlib.import_module(where)
        value = imported if where == f"{module}.{name}" else getattr(imported, name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *lazy})

    return getattr_, dir_


def public_names(namespace: Mapping[str, Any]) -> set[str]:
    """The names `namespace` (a module's globals) holds that a reader takes as public: not
    underscored, not a module (a subpackage, an imported module), not `from __future__ import annotations`."""
    return {
        name
        for name, value in namespace.items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType) and value is not __future__.annotations
    }


def check_exports(module: str, names: Sequence[str], lazy: Mapping[str, str], namespace: Mapping[str, Any]) -> None:
    """Raise when `__all__` (`names`) and what `module` provides disagree: a name twice, a name with
    no definition (neither in `namespace` nor in `lazy`), or a public name outside `__all__`."""
    defined = public_names(namespace) | set(lazy)
    twice = sorted({n for n in names if list(names).count(n) > 1})
    missing = sorted(n for n in names if n not in defined)
    extra = sorted(n for n in defined if n not in names)
    if twice or missing or extra:
        raise RuntimeError(
            f"{module}: __all__ names {missing} with no definition and {twice} twice; "
            f"{extra} are public but not in __all__"
        )
