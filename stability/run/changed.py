"""`stability check --changed PATH ...`: which specs a set of changed files affects (the pre-commit
hook, `.pre-commit-hooks.yaml`).

The paths are the files a commit changes (pre-commit passes them) and, optionally, the folders
the specs live in (default `./specs`). A spec is affected when its own file changed, or when it
is a custom spec whose factory module (`factory = "module:function"`, found by the factory rule,
`stability.families.factory.locate_factory`, without importing anything) is one of the changed
`.py` files. Only specs under the folders count: a changed `pyproject.toml` or an example spec
elsewhere is not a spec of this check. A module the factory imports is not followed: list such
helper modules' specs by changing them together, or run `stability check` on the folder.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from stability.errors import SpecError
from stability.families.factory import locate_factory, source_roots
from stability.spec.load import find_specs, load_spec
from stability.spec.registry import FAMILIES

__all__ = ["affected_specs", "DEFAULT_FOLDER"]

DEFAULT_FOLDER = "specs"


def affected_specs(paths: Sequence[str], *, roots: Sequence[str] = ()) -> list[str]:
    """The spec files (under the folders among `paths`, else ./specs) that the files among `paths`
    affect, in the folders' sorted order. `roots`: extra source roots for factories."""
    folders = [p for p in paths if Path(p).is_dir()] or ([DEFAULT_FOLDER] if Path(DEFAULT_FOLDER).is_dir() else [])
    changed = {Path(p).resolve() for p in paths if not Path(p).is_dir()}
    affected: list[str] = []
    with source_roots(list(roots)):
        for file in find_specs(list(folders)):
            if file.resolve() in changed:
                affected.append(str(file))
                continue
            try:
                spec = load_spec(file)
                if not FAMILIES.get(spec.family).user_code or not spec.block.factory:
                    continue
                module = locate_factory(spec.path, spec.block.factory)[2]
            except SpecError:
                continue  # an unchanged spec that does not load is not this commit's
            if module.resolve() in changed:
                affected.append(str(file))
    return affected
