"""`stability explain [INVARIANT]`: what an invariant measures, why it fails, how to fix it, and
where to read more, from its registry entry's `explanation` (stability.spec.registry; the
built-in texts are stability.judge.explanations). Plain text only.
"""

from __future__ import annotations

import textwrap

from stability.errors import UsageError, did_you_mean
from stability.spec.registry import FAMILIES, INVARIANTS, Invariant

__all__ = ["explain_text", "known_invariants"]


def known_invariants() -> tuple[str, ...]:
    return INVARIANTS.names()


def _overview() -> str:
    width = max(len(n) for n in INVARIANTS.names())
    lines = ["Invariants (run `stability explain NAME` for the formula, the causes and the fixes):", ""]
    lines += [f"  {entry.name:<{width}}  {entry.summary}" for entry in INVARIANTS]
    return "\n".join(lines)


def _indent(text: str) -> str:
    return "\n".join(("  " + line) if line else "" for line in text.splitlines())


def _not_measured(invariant: Invariant) -> list[str]:
    """The families a spec cannot measure the invariant on (they lack a capability it needs), as a
    section of its own; none when every family can."""
    lines = [
        f"family '{fam.name}': {fam.lacks[need]}"
        for fam in FAMILIES
        for need in sorted(invariant.needs)
        if need in fam.lacks
    ]
    if not lines:
        return []
    wrapped = "\n".join(textwrap.fill(line, width=94, initial_indent="- ", subsequent_indent="  ") for line in lines)
    return ["Not measured on (a spec declaring it for these families is refused)", _indent(wrapped), ""]


def _bands(invariant: Invariant) -> list[str]:
    """The numbers it bounds by measured bands (its registry entry's `bands`), as a section."""
    if not invariant.bands:
        return []
    lines = [f"{b.label}: {' and '.join(k for k in (b.lo, b.hi) if k is not None)}" for b in invariant.bands]
    text = "\n".join(textwrap.fill(line, width=94, initial_indent="- ", subsequent_indent="  ") for line in lines)
    how = (
        "`stability calibrate SPEC` measures each over 8 seeds at depths 1, 2, 4 and 8 and prints the band it "
        "sets (the spread widened by ×1.25; --write puts it in the spec); `stability init TARGET` writes a spec "
        "with them"
    )
    return ["Bands measured, not guessed", _indent(text), _indent(textwrap.fill(how, width=96)), ""]


def explain_text(name: str | None = None) -> str:
    """The explanation of one invariant, or with `None` the list of invariants.

    Raises `UsageError` for an unknown name, with the closest known one."""
    if name is None:
        return _overview()
    if name not in INVARIANTS:
        names = INVARIANTS.names()
        raise UsageError(
            f"unknown invariant '{name}'{did_you_mean(name, names)}; choose one of {', '.join(names)} (or run "
            "`stability explain` for the list)"
        )
    invariant = INVARIANTS.get(name)
    entry = invariant.explanation
    refs = "\n".join(
        textwrap.fill(ref, width=94, initial_indent="- ", subsequent_indent="  ") for ref in entry.references
    )
    return "\n".join(
        [
            f"{name}: {entry.summary}",
            "",
            "What the harness computes",
            _indent(entry.computes_text()),
            "",
            "Why it typically fails",
            _indent(entry.fails),
            "",
            "Usual fixes",
            _indent(entry.fixes),
            "",
            *_bands(invariant),
            *_not_measured(invariant),
            "References",
            _indent(refs),
        ]
    )
