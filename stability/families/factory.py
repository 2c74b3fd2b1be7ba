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

import ast
import contextlib
import dataclasses
import hashlib
import importlib
import importlib.util
import os
import stat
import sys
import sysconfig
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from stability.errors import SpecError, did_you_mean

if TYPE_CHECKING:
    from stability.spec.schema import Spec

__all__ = [
    "SOURCE_ROOTS_ENV",
    "source_roots",
    "configured_roots",
    "roots_environment",
    "locate_factory",
    "load_factory",
    "import_file",
    "EXTRA_NAMES",
    "Parameter",
    "filled_names",
    "signature_error",
    "source_parameters",
    "check_factory",
]

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
        raise SpecError(
            spec_path,
            "block.factory",
            "is not 'module:function'",
            value=target,
            fix='write e.g. "my_blocks:make_blocks"',
        )
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
        f"module '{mod_name}' was not found as a .py file of your own code (looked in: {where}); a factory "
        "must live beside "
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
    return import_file(file, kind="factory", label=mod_name.replace(".", "_"))


def import_file(path: Path, *, kind: str, label: str) -> ModuleType:
    """Import a user's `.py` file (a factory's module, a plugin) under a private name made from its
    path, `_stability_{kind}_{hash}_{label}`: the same in every process of a run, so what the file
    defines pickles, and never a name the standard library or the user's own packages hold. Once per
    process; a file whose import fails (or exits) is left out of `sys.modules`, so it can be fixed
    and imported again. Raises ImportError when the file cannot be loaded as a module."""
    private = f"_stability_{kind}_{hashlib.sha1(os.fsencode(path)).hexdigest()[:12]}_{label}"
    if private in sys.modules:
        return sys.modules[private]
    module_spec = importlib.util.spec_from_file_location(private, path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"cannot load {path}")
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
        raise SpecError(
            spec_path,
            "block.factory",
            f"module '{mod_name}' called sys.exit({exc.code!r}) while importing",
            value=target,
            fix="a factory module must not exit",
        ) from None
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
        raise SpecError(
            spec_path,
            "block.factory",
            f"module '{mod_name}' has no function '{fn_name}'{did_you_mean(fn_name, names)}",
            value=target,
        )
    return fn  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------- the factory's parameters

#: What fills a factory's parameters, by name, besides the case's own values (`Case.as_dict`) and
#: `block.factory_args`: the case's weight init under its short name, the spec's layer, and the
#: case's dtype as a `torch.dtype` (`stability.families.custom.build_custom` passes them).
EXTRA_NAMES = ("init", "layer", "torch_dtype")


@dataclass(frozen=True)
class Parameter:
    """One parameter of a factory, as `inspect` (in the worker) or the source (in the parent) reads it."""

    name: str
    kind: Literal["POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD", "VAR_POSITIONAL", "KEYWORD_ONLY", "VAR_KEYWORD"]
    has_default: bool


def filled_names(spec: Spec) -> list[str]:
    """Every name a factory of `spec` can be given: the case's values, `EXTRA_NAMES`, `vocab` for a
    language-model spec (train.task = "markov") and the keys of `block.factory_args`."""
    from stability.spec.case import Case

    lm = (
        ("vocab",) if spec.train is not None and spec.train.task == "markov" else ()
    )  # a language model's vocabulary (train.vocab)
    return sorted({*(f.name for f in dataclasses.fields(Case)), *EXTRA_NAMES, *lm, *spec.block.factory_args})


def signature_error(spec: Spec, params: Sequence[Parameter]) -> SpecError | None:
    """The one rule for a factory's signature (exit 2, before any case is judged): a key of
    `block.factory_args` that no parameter takes (unless the factory takes `**kwargs`, which
    receives every name), or a required parameter that nothing fills (positional-only, or a name
    neither the case nor `factory_args` gives). None when the factory can be called."""
    target = spec.block.factory or ""
    takes_all = any(p.kind == "VAR_KEYWORD" for p in params)
    named = [p.name for p in params if p.kind in ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY")]
    if not takes_all:
        for key, value in spec.block.factory_args.items():
            if key not in named:
                return SpecError(
                    spec.path,
                    f"block.factory_args.{key}",
                    f"is not a parameter of {target}({', '.join(named)}){did_you_mean(key, named)}",
                    value=value,
                    fix=f"rename it to one of the factory's parameters, add a `{key}` parameter, or let the "
                    "factory take **kwargs",
                )
    names = set(filled_names(spec))
    missing = [
        p.name
        for p in params
        if not p.has_default
        and (
            p.kind == "POSITIONAL_ONLY" or (p.kind in ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY") and p.name not in names)
        )
    ]
    if missing:
        known = ", ".join(n for n in filled_names(spec) if n not in spec.block.factory_args)
        return SpecError(
            spec.path,
            "block.factory",
            f"asks for {', '.join(repr(m) for m in missing)}, which nothing fills (its parameters are filled "
            f"by name from the case: {known}; and from block.factory_args)",
            value=spec.block.factory,
            fix="rename the parameter to one of those, give it a default, or set it in block.factory_args "
            f"(e.g. factory_args = {{ {missing[0]} = ... }})",
        )
    return None


def source_parameters(file: Path, fn_name: str) -> list[Parameter] | None:
    """The parameters of `fn_name` as `file` spells them, read with `ast` (nothing is imported or
    run): a top-level `def`, or a top-level class's `__init__` without `self`. None where the
    source alone cannot say: a name bound by an assignment or an import, a decorated function or
    class (a decorator may change the signature), a class without its own `__init__`, a name bound
    more than once, a file that does not parse. The worker then checks the imported function
    (`inspect.signature`) under the same rule."""
    try:
        tree = ast.parse(file.read_bytes(), filename=str(file))
    except (OSError, SyntaxError, ValueError):
        return None
    bound = [node for node in tree.body if fn_name in _names_bound(node)]
    if len(bound) != 1:
        return None
    node = bound[0]
    if isinstance(node, ast.ClassDef):
        if node.decorator_list:
            return None
        init = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "__init__"]
        if len(init) != 1 or init[0].decorator_list:
            return None
        params = _ast_parameters(init[0].args)
        return params[1:] if params and params[0].kind in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD") else None
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.decorator_list:
        return _ast_parameters(node.args)
    return None


def _names_bound(node: ast.stmt) -> set[str]:
    """The top-level names one statement of a module binds (defs, classes, assignments, imports,
    and any name stored anywhere inside a compound statement)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    names: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            names.add(sub.id)
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(sub.name)
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in sub.names}
    return names


def _ast_parameters(args: ast.arguments) -> list[Parameter]:
    positional = [*args.posonlyargs, *args.args]
    first_default = len(positional) - len(args.defaults)
    params = [
        Parameter(
            a.arg, "POSITIONAL_ONLY" if i < len(args.posonlyargs) else "POSITIONAL_OR_KEYWORD", i >= first_default
        )
        for i, a in enumerate(positional)
    ]
    if args.vararg is not None:
        params.append(Parameter(args.vararg.arg, "VAR_POSITIONAL", True))
    params += [
        Parameter(a.arg, "KEYWORD_ONLY", d is not None) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
    ]
    if args.kwarg is not None:
        params.append(Parameter(args.kwarg.arg, "VAR_KEYWORD", True))
    return params


def check_factory(spec: Spec) -> None:
    """Before anything runs, in a process that never imports the spec's code: the factory is found
    under the rule above (`locate_factory`, by path) and its signature, read from its source
    (`source_parameters`), takes every key of `block.factory_args` and asks for nothing that
    nothing fills (`signature_error`). Raises SpecError; a signature the source cannot tell is
    left to the worker's check."""
    _, fn_name, file, _ = locate_factory(spec.path, spec.block.factory or "")
    params = source_parameters(file, fn_name)
    if params is not None and (error := signature_error(spec, params)) is not None:
        raise error
