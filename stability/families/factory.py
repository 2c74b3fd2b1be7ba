"""Where a custom spec's factory may come from, and how it is loaded.

A spec is data, and data must not choose which code runs: `factory = "os:system"` with
`factory_args = { command = "…" }` would otherwise run a shell command. The rule (the threat model
is written out in docs/specs.md):

- The factory's module must resolve, by path and **without importing anything**, to a `.py` file
  inside an allowed root: the spec file's own folder (the module may be dotted, `pkg.mod`, for
  `pkg/mod.py` below it), or a source root configured by the person running the check
  (`stability check --source-root DIR`, the `STABILITY_SOURCE_ROOTS` environment variable, a
  path list, or the pytest ini option `stability_source_roots`). A spec cannot widen its own roots.
- Nothing under the standard library, the interpreter's prefixes or any `site-packages` /
  `dist-packages` folder is ever accepted, even below a configured root. So `os:system`,
  `subprocess:run`, `builtins:exec`, `shutil:rmtree` and `sys:exit` are all refused before any
  import.
- The module is imported under its own name only when that name resolves to the very same file
  through the normal import path; otherwise (`specs/json.py` against the standard library's
  `json`) it is loaded from its file under a private name. The root is appended to `sys.path`
  (never put in front), so sibling modules of the factory import, and nothing in a spec folder can
  shadow the standard library.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import os
import stat
import sys
import sysconfig
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from stability.errors import SpecError, did_you_mean

__all__ = ["SOURCE_ROOTS_ENV", "source_roots", "configured_roots", "roots_environment", "locate_factory", "load_factory"]

#: Environment variable holding extra source roots (an `os.pathsep`-separated list of folders).
SOURCE_ROOTS_ENV = "STABILITY_SOURCE_ROOTS"
_THREAT_MODEL = "see 'Threat model' in docs/specs.md"
_configured: list[Path] = []


@contextlib.contextmanager
def source_roots(roots: Sequence[str | Path]) -> Iterator[None]:
    """Allow factories from `roots` (besides each spec's folder) inside the `with` block."""
    added = [Path(r) for r in roots]
    _configured.extend(added)
    try:
        yield
    finally:
        del _configured[len(_configured) - len(added) :]


def configured_roots() -> list[Path]:
    """The source roots in force: those of `source_roots(...)` plus `$STABILITY_SOURCE_ROOTS`."""
    env = [Path(p) for p in os.environ.get(SOURCE_ROOTS_ENV, "").split(os.pathsep) if p.strip()]
    return [*_configured, *env]


def roots_environment(roots: Sequence[str | Path]) -> dict[str, str]:
    """This process's environment with `roots` put in front of `$STABILITY_SOURCE_ROOTS`: what a
    worker process needs to allow the same factories as `source_roots(roots)` does here."""
    env = dict(os.environ)
    if roots:
        env[SOURCE_ROOTS_ENV] = os.pathsep.join([*map(str, roots), *filter(None, [env.get(SOURCE_ROOTS_ENV)])])
    return env


def _forbidden_folders() -> list[Path]:
    """The standard library, the interpreter's prefixes and every site-packages folder."""
    names = ("stdlib", "platstdlib", "purelib", "platlib")
    paths = {sysconfig.get_paths()[n] for n in names if n in sysconfig.get_paths()}
    paths |= {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    return [Path(p).resolve() for p in paths if p]


def _forbidden(file: Path) -> bool:
    if any(part in ("site-packages", "dist-packages") for part in file.parts):
        return True
    return any(file.is_relative_to(folder) for folder in _forbidden_folders())


def _split(spec_path: str, target: str) -> tuple[str, str]:
    mod_name, sep, fn_name = target.partition(":")
    parts = mod_name.split(".")
    if not sep or not fn_name.isidentifier() or not all(p.isidentifier() for p in parts):
        raise SpecError(spec_path, "block.factory", "is not 'module:function'", value=target, fix='write e.g. "my_blocks:make_blocks"')
    return mod_name, fn_name


def locate_factory(spec_path: str, target: str) -> tuple[str, str, Path, Path]:
    """(module name, function name, the module's file, its root) for `target`, found by path
    alone; raises SpecError when it is not a regular `.py` file in an allowed root."""
    mod_name, fn_name = _split(spec_path, target)
    parts = mod_name.split(".")
    roots = [Path(spec_path).resolve().parent, *(r.resolve() for r in configured_roots())]
    for root in roots:
        for candidate in (root.joinpath(*parts[:-1], parts[-1] + ".py"), root.joinpath(*parts, "__init__.py")):
            try:
                st = candidate.stat()
            except OSError:
                continue
            file = candidate.resolve()
            if not stat.S_ISREG(st.st_mode) or not file.is_relative_to(root) or _forbidden(file):
                continue
            return mod_name, fn_name, file, root
    where = ", ".join(str(r) for r in roots)
    raise SpecError(
        spec_path,
        "block.factory",
        f"module '{mod_name}' was not found as a .py file of your own code (looked in: {where}); a factory must live beside "
        f"the spec or under a --source-root, never in the standard library or site-packages ({_THREAT_MODEL})",
        value=target,
        fix=f"put {parts[-1]}.py beside the spec, or pass --source-root FOLDER",
    )


def _same_file(name: str, file: Path) -> bool:
    """Does `import name` find `file` through the normal import path? Only top-level names are
    looked up (find_spec on a dotted name would import its parent package)."""
    top = name.split(".")[0]
    if top in sys.modules:
        origin = getattr(sys.modules[top], "__file__", None)
    else:
        try:
            found = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            return False
        origin = found.origin if found is not None else None
    if origin is None:
        return False
    top_file = Path(origin).resolve()
    expected = file if "." not in name else None
    if expected is not None:
        return top_file == expected
    return file.is_relative_to(top_file.parent) if top_file.name == "__init__.py" else False


def _import(mod_name: str, file: Path, root: Path) -> Any:
    if str(root) not in sys.path:
        sys.path.append(str(root))  # after the standard library and site-packages: shadows nothing
    if _same_file(mod_name, file):
        return importlib.import_module(mod_name)
    private = f"_stability_factory_{hashlib.sha1(str(file).encode()).hexdigest()[:12]}_{mod_name.replace('.', '_')}"
    if private in sys.modules:
        return sys.modules[private]
    module_spec = importlib.util.spec_from_file_location(private, file)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"cannot load {file}")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[private] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[private]
        raise
    return module


def load_factory(spec_path: str, target: str) -> Callable[..., Any]:
    """Locate (by the rule above), import and return the factory function. A module that fails
    to import, or exits while importing, is a SpecError naming the module."""
    mod_name, fn_name, file, root = locate_factory(spec_path, target)
    try:
        module = _import(mod_name, file, root)
    except SystemExit as exc:
        raise SpecError(spec_path, "block.factory", f"module '{mod_name}' called sys.exit({exc.code!r}) while importing", value=target, fix="a factory module must not exit") from None
    except Exception as exc:
        raise SpecError(
            spec_path,
            "block.factory",
            f"module '{mod_name}' does not import ({type(exc).__name__}: {exc})",
            value=target,
            fix=f"fix {file}",
        ) from None
    fn = getattr(module, fn_name, None)
    if fn is None or not callable(fn):
        names = [n for n in dir(module) if callable(getattr(module, n)) and not n.startswith("_")]
        raise SpecError(spec_path, "block.factory", f"module '{mod_name}' has no function '{fn_name}'{did_you_mean(fn_name, names)}", value=target)
    return fn  # type: ignore[no-any-return]
