"""`stability zoo --compare A B`'s report: the numbers that moved between two library releases.

The rows are side B's `compare.json` (`stability.report.release_side`): each expectation of each zoo
family on each case, compared with side A's number on the same case by the baseline rule
(`stability.report.baseline`: its drift limit, its statuses). A row **moved** when the rule calls it
a drift. Each row says which way it moved: up or down, toward its bound (closer to failing, or for
a negative control closer to passing) or away from it. A family that one release refuses (a class
it does not have yet, a config key it does not take) is listed with the reason, not compared.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from stability.numbers import number_text
from stability.run.report_model import CompareRow

__all__ = ["moved", "direction_text", "markdown", "terminal_rows"]


def moved(rows: Sequence[CompareRow]) -> list[CompareRow]:
    """The rows whose number moved past its drift limit (the baseline rule's "drift")."""
    return [r for r in rows if r.status == "drift"]


def direction_text(row: CompareRow) -> str:
    """ "up, toward its bound", "down, away from its bound", …"""
    if row.direction is None:
        return "—"
    toward = row.toward_bound
    where = "" if toward is None else "toward its bound" if toward else "away from its bound"
    return f"{row.direction}, {where}" if where else row.direction


def _fmt(x: float | None) -> str:
    from stability.report.baseline import fmt  # as the baseline's table shows a number

    return fmt(None if x is None else float(x))


def _change(row: CompareRow) -> str:
    c = None if row.change is None else float(row.change)
    if c is None or not math.isfinite(c):
        return number_text(c, nan="nan")  # "—", "inf", "-inf"
    return "0%" if c == 0 else f"{c:+.1%}"


def _limit(row: CompareRow) -> str:
    from stability.report.baseline import fmt_limit

    return "—" if row.limit is None else fmt_limit(float(row.limit))


def terminal_rows(rows: Sequence[CompareRow]) -> list[tuple[str, ...]]:
    """(family, invariant, case, A → B, change, drift limit, direction, verdict) of every moved row."""
    return [
        (
            r.spec,
            r.invariant,
            r.shown or r.case,
            f"{_fmt(r.before)} → {_fmt(r.after)}",
            _change(r),
            _limit(r),
            direction_text(r),
            r.why,
        )
        for r in moved(rows)
    ]


def markdown(
    a: str,
    b: str,
    rows: Sequence[CompareRow],
    refused: Mapping[str, Mapping[str, str]],
    versions: Mapping[str, Mapping[str, Any]],
    *,
    compared: int,
) -> str:
    """The comparison as Markdown, for a pull request's comment."""
    lines = [f"### Zoo numbers: `{a}` → `{b}`", ""]
    ran = {side: ", ".join(f"{k} {v}" for k, v in v_.items() if v) for side, v_ in versions.items()}
    lines += [f"- {side}: {text}" for side, text in ran.items()]
    hit = moved(rows)
    lines += [
        "",
        f"{len(hit)} number(s) moved past their drift limit, of {compared} compared on the same cases and seeds.",
        "",
    ]
    if hit:
        lines += [
            "| family | invariant | case | A → B | change | drift limit | direction |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {f} | {i} | {c} | {ab} | {ch} | {lim} | {d} |" for f, i, c, ab, ch, lim, d, _ in terminal_rows(rows)
        ]
    for side, files in refused.items():
        for file, why in files.items():
            lines.append(f"- not compared, refused under {side}: `{Path(file).name}`: {why.split(': ', 1)[-1]}")
    return "\n".join(lines) + "\n"
