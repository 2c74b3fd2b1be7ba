"""Suggestions rendered (`stability.run.suggestions.Suggestions`): the terminal output of `stability
suggest`, and the one line beside a failure that `stability check --suggest`, the HTML report and
the GitHub job summary show. Rendering only: nothing here runs or judges a remedy."""

from __future__ import annotations

import shlex

from rich.console import Console
from rich.markup import escape

from stability.numbers import number_text
from stability.report.text import printable
from stability.run.results import SpecResult
from stability.run.suggestions import Attempt, Numbers, Suggestions

__all__ = ["suggestion_line", "suggestion_of", "print_suggestions", "numbers_text"]


def _g(x: float | None) -> str:
    return number_text(x)


def numbers_text(n: Numbers) -> str:
    """`gradient_arrival 0.00169 → 0.93 at the failing case, closest 0.61 over 9 case(s) (bound [0.01, 10])`."""
    text = f"{n.invariant} {_g(n.before)} → {_g(n.after)} at the failing case"
    if n.closest is not None:
        text += f", closest {_g(n.closest)} over {n.examples} case(s)"
    return text + (f" (bound {n.bound})" if n.bound else "")


def suggestion_of(res: SpecResult) -> Suggestions | None:
    s: Suggestions | None = res.suggestions
    return s


def suggestion_line(res: SpecResult, name: str) -> str | None:
    """The suggestion for the unmet expectation `name` of `res`, in one line (None when no
    suggestion was computed for it)."""
    s = suggestion_of(res)
    if s is None or not any(r.name == name for r in s.failing):
        return None
    best = s.best
    if best is None:
        tried = ", ".join(f"{a.remedy} ({a.status})" for a in s.attempts) or "none applies"
        return f"no registered remedy makes every expectation hold (tried: {tried})"
    n = next((x for x in best.numbers if x.invariant == name), None)
    numbers = f": {numbers_text(n)}" if n is not None else ""
    more = f"; {len(s.ranked) - 1} more hold" if len(s.ranked) > 1 else ""
    command = f"stability suggest {shlex.quote(s.path)} --out FIXED.toml"
    return f"{best.remedy}: {best.changed()}{numbers}{more} ({command})"


def _attempt_lines(a: Attempt, index: int | None) -> list[str]:
    head = f"{index}. " if index is not None else "- "
    lines = [f"{head}{a.remedy}: {a.changed()}", f"   {a.summary}"]
    lines += [f"   {numbers_text(n)}" for n in a.numbers]
    if a.detail:
        lines.append(f"   {a.status}: {a.detail}" if not a.held else f"   {a.detail}")
    lines += [f"   ref: {r}" for r in a.references]
    return lines


def _none_applies(s: Suggestions) -> str:
    """Why no remedy was tried: for a family built by a user's factory, that suggest edits the spec
    and the network is the factory's code, with the remedies meant for what failed to write there."""
    from stability.spec.registry import FAMILIES
    from stability.spec.remedy import REMEDIES

    names = {r.name for r in s.failing}
    failed = ", ".join(sorted(names))
    if s.family in FAMILIES and FAMILIES.get(s.family).user_code:
        meant = ", ".join(r.name for r in REMEDIES if r.fixes & names) or "none is registered"
        return (
            f"no remedy applies to a {s.family} spec: its network is its factory's code, which suggest does not edit; "
            f"the remedies meant for {failed}, to write in the factory: {meant} (`stability suggest --list`)"
        )
    return f"no registered remedy applies to this {s.family} spec for {failed} (`stability suggest --list` lists them)"


def print_suggestions(
    s: Suggestions, console: Console, *, diffs: bool = True, out: str | None = None, only: str | None = None
) -> None:
    """`stability suggest`'s output: what failed, the remedies that hold (ranked, each with its
    diff and numbers), then what every other remedy tried did."""

    def say(text: str, style: str | None = None) -> None:
        body = escape(printable(text))
        console.print(f"[{style}]{body}[/{style}]" if style else body, highlight=False, soft_wrap=True)

    if not s.failing:
        say(f"{s.path}: every expectation declared to hold is met in profile {s.profile}; nothing to fix")
        for line in s.unfixable:
            say(f"  not met, and no remedy is for it: {line}", "yellow")
        return
    say(f"{s.path}: {len(s.failing)} expectation(s) not met in profile {s.profile}:")
    for r in s.failing:
        say(f"  ✗ {r.message}", "red")
    ranked = s.ranked
    if ranked:
        say(
            f"{len(ranked)} remedy(ies) make every expectation hold, best first (fewest changes, then margin):", "green"
        )
        for i, a in enumerate(ranked, 1):
            for line in _attempt_lines(a, i):
                say(line)
            if diffs:
                for line in a.diff.rstrip("\n").splitlines():
                    say(f"   {line}", "cyan" if line.startswith("+") else "magenta" if line.startswith("-") else "dim")
    else:
        say("no registered remedy makes every expectation hold", "red")
    others = [a for a in s.attempts if not a.held]
    if others:
        say(f"{len(others)} other remedy(ies) tried:")
        for a in others:
            for line in _attempt_lines(a, None):
                say(line, "dim")
    if not s.attempts:
        say(_none_applies(s), "yellow")
    if out is not None and ranked:
        say(
            f"wrote {out}: {ranked[0].remedy} ({ranked[0].changed()}); the [expect] tables are as you wrote them",
            "green",
        )
        if only is not None:
            say(
                f"  (--only {only}: the spec's other expectations were not run; `stability check {out}` runs them)",
                "yellow",
            )
    for line in s.unfixable:
        say(f"also not met, and no remedy is for it: {line}", "yellow")
    say(f"{len(s.attempts)} remedy(ies) tried in {s.seconds:.1f} s")
