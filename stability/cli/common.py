"""What the `stability` commands share, below all of them: the exit codes (what each means:
`stability.cli`), the specs a command's paths name (`load_each`), and the factory rule every
command applies before anything runs (`factories_allowed`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from stability.errors import SpecError, UsageError
from stability.report.text import printable

if TYPE_CHECKING:
    from stability.spec.schema import Spec

__all__ = [
    "EXIT_OK",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_NOTHING",
    "load_each",
    "factories_allowed",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
#: Nothing was judged (every spec skipped for its device, --only naming an undeclared invariant, a
#: replayed case no invariant applies to): pytest's "no tests were collected" code.
EXIT_NOTHING = 5
#: A fault of the tool itself, not of the input or the network checked (pytest's "internal error"
#: code): never read as a verdict, as Python's own exit code 1 for an uncaught exception would be.
EXIT_INTERNAL = 3


def _default_paths(paths: list[str]) -> list[str]:
    if paths:
        return paths
    if not Path("specs").is_dir():
        raise UsageError(
            "no path given and there is no ./specs folder; run `stability check PATH` with a spec file or folder"
        )
    return ["specs"]


def load_each(paths: list[str]) -> tuple[list[Spec], list[SpecError]]:
    """Every spec that loads, and one SpecError per file that does not. Two specs with one name
    are refused outright (UsageError-like SpecError, nothing runs): the reports key on names."""
    from stability.spec.load import find_specs, load_spec

    files = find_specs(list(_default_paths(paths)))
    if not files:
        raise UsageError(f"{', '.join(paths) or 'specs'}: no *.toml spec files found; add one (see `stability schema`)")
    specs: list[Spec] = []
    errors: list[SpecError] = []
    for f in files:
        try:
            specs.append(load_spec(f))
        except SpecError as exc:
            errors.append(exc)
    names: dict[str, str] = {}
    for s in specs:
        if s.name in names:
            for error in errors:
                print(f"stability: error: {printable(str(error))}", file=sys.stderr)
            raise SpecError(
                s.path, "name", f"is already used by {names[s.name]}", value=s.name, fix="give each spec a unique name"
            )
        names[s.name] = s.path
    return specs, errors


def factories_allowed(specs: list[Spec], roots: list[str]) -> tuple[list[Spec], list[SpecError]]:
    """Custom specs whose factory is found under the factory rule (by path, importing nothing)
    and whose signature, read from its source, takes every `factory_args` key and asks for nothing
    unfilled (`stability.families.factory.check_factory`); one SpecError, printed now, for each
    spec refused: it does not run."""
    from stability.families.factory import check_factory, source_roots
    from stability.spec.registry import FAMILIES

    allowed: list[Spec] = []
    refused: list[SpecError] = []
    with source_roots(roots):
        for spec in specs:
            try:
                if FAMILIES.get(spec.family).user_code and spec.block.factory:
                    check_factory(spec)
                allowed.append(spec)
            except SpecError as exc:
                print(f"stability: error: {printable(str(exc))}", file=sys.stderr)
                refused.append(exc)
    return allowed, refused
