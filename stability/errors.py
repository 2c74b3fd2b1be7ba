"""Errors the harness raises on purpose. Each one renders as a single line that says how to fix it.

`SpecError` and `UsageError` are bad input (exit code 2); `CaseError` is a problem with one drawn
case (a custom factory that raises, a case over the memory budget) and becomes a failed verdict for
that case rather than ending the run.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

__all__ = ["StabilityError", "SpecError", "LibraryMissing", "UsageError", "CaseError", "BlockError", "did_you_mean"]


def did_you_mean(value: object, choices: Iterable[object]) -> str:
    """' (did you mean "x"?)' for the closest choice, or '' when nothing is close."""
    names = [str(c) for c in choices]
    close = difflib.get_close_matches(str(value), names, n=1, cutoff=0.5)
    return f' (did you mean "{close[0]}"?)' if close else ""


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class StabilityError(Exception):
    """Base of every error the harness raises on purpose."""


class SpecError(StabilityError):
    """A spec file that cannot be used: names the file, the key path, the bad value and the fix."""

    def __init__(
        self,
        file: str,
        key: str | None,
        problem: str,
        *,
        value: Any = ...,
        fix: str | None = None,
    ) -> None:
        self.file, self.key, self.value, self.problem, self.fix = file, key, value, problem, fix
        where = f"{file}: {key}" if key else file
        shown = "" if value is ... else f" = {_show(value)}"
        text = f"{where}{shown}: {problem}"
        if fix:
            text += f"; {fix}"
        super().__init__(" ".join(text.split()))


class LibraryMissing(SpecError):
    """A spec names a model of a library that does not import here (transformers, timm or
    torchvision not installed): a spec error for `stability check` (exit 2: a gate never passes a
    spec it could not run), a skip that says what to install for the pytest plugin."""


class UsageError(StabilityError):
    """Bad command-line or API usage (a path that does not exist, an unknown --case key)."""


class CaseError(StabilityError):
    """One drawn case could not be built or probed; reported for that case, the run goes on."""


class BlockError(CaseError):
    """A block raised, or returned something that is not a tensor, during the probe's forward
    pass. For a custom factory this is bad input (the blocks do not chain); for a built-in family
    it fails the case."""
