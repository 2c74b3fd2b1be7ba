"""`stability scan LIBRARY --compare A B`'s report: what changed at init between two releases, model
by model, from the rows each side's scan wrote (`stability.report.scan_side`).

- **Init, exactly.** Every parameter group's recorded law on side A against side B's
  (`h.*.attn.c_proj.weight: N(0, 0.007071²) → N(0, 0.02²)`), compared at full precision (each
  law's `exact` form), shown as a reader reads it (at full precision where that is what differs);
  a group present on one side only is a change too (`absent`). Where a side's recorder gave
  no laws, the deviations from the declared init are compared instead (one that appears or goes).
- **The stream.** Each of the residual stream's numbers at each depth (`STREAM_KEYS`) on the same
  case and seed on both sides, moved past the drift of `[expect.residual_stream]` by the baseline
  rule (`stability.report.baseline.relative_change`, the expectation's default `drift`).
- **Renamed.** Parameter groups that exist on one side only are paired, in order, with groups of
  the other side that have the same law and attribute; where every such group pairs, the model's
  modules were renamed (transformers 5's `encoder.layer.*` → `layers.*`) and the pairs are listed
  apart, not as changes. A group left unpaired is a change (`absent` on one side).
- **Not compared.** A model judged on one side only, with each side's status and reason.

Exit codes (the command's): 1 anything moved, 0 nothing did, 5 nothing was compared.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from stability.report.baseline import relative_change
from stability.run.scan_rows import STREAM_KEYS, ScanRow

__all__ = ["Change", "NotCompared", "Comparison", "compare_rows", "change_text", "markdown", "DRIFT"]


def _drift() -> float:
    from stability.spec.expectations import ResidualStream

    return float(ResidualStream.model_fields["drift"].default)


#: How far a stream number may move (relative) before it counts: `[expect.residual_stream]`'s drift.
DRIFT = _drift()


@dataclass(frozen=True, kw_only=True)
class Change:
    """One thing that moved: a parameter group's law (`kind` "init"), a deviation that appeared or
    went ("deviation"), or a stream number past its drift ("stream", `what` naming it)."""

    model: str
    kind: Literal["init", "deviation", "stream"]
    what: str
    before: str
    after: str


@dataclass(frozen=True, kw_only=True)
class NotCompared:
    """A model not judged on both sides, with each side's status (and reason)."""

    model: str
    a: str
    b: str


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """Every change, every model not compared, how many were compared, and the parameter groups
    renamed with their laws unchanged (model, name in A, name in B): no change of init."""

    changes: tuple[Change, ...]
    not_compared: tuple[NotCompared, ...]
    compared: int
    renamed: tuple[tuple[str, str, str], ...] = ()


def _laws(row: ScanRow) -> dict[str, tuple[str, str]] | None:
    """Each group's (exact law, law as shown)."""
    if row.laws is None:
        return None
    return {law.parameter: (law.exact or law.law, law.law) for law in row.laws}


def _stream(row: ScanRow) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in row.stream:
        for k in STREAM_KEYS:
            v = s.numbers.get(k)
            if k != "change" and v is not None and math.isfinite(v):
                out[f"{k} @{s.depth}"] = v
    return out


def _status(row: ScanRow | None) -> str:
    if row is None:
        return "absent"
    return row.status + (f" ({row.reason})" if row.reason else "")


def compare_rows(a: Sequence[ScanRow], b: Sequence[ScanRow], *, drift: float = DRIFT) -> Comparison:
    """The changes from side A's rows to side B's (the module docstring), models in B's order."""
    rows_a = {r.name: r for r in a}
    rows_b = {r.name: r for r in b}
    names = list(rows_b) + [n for n in rows_a if n not in rows_b]
    changes: list[Change] = []
    skipped: list[NotCompared] = []
    renamed: list[tuple[str, str, str]] = []
    compared = 0
    for name in names:
        ra, rb = rows_a.get(name), rows_b.get(name)
        if ra is None or rb is None or not ra.built or not rb.built:
            if ra is not None or rb is not None:
                skipped.append(NotCompared(model=name, a=_status(ra), b=_status(rb)))
            continue
        compared += 1
        la, lb = _laws(ra), _laws(rb)
        if la is not None and lb is not None:
            moved = _renames(la, lb)
            renamed += [(name, x, y) for x, y in moved.items()]
            paired = set(moved) | set(moved.values())
            for group in list(lb) + [g for g in la if g not in lb]:
                if group in paired:
                    continue
                old, new = la.get(group, ("absent", "absent")), lb.get(group, ("absent", "absent"))
                if old[0] != new[0]:
                    shown = (old[1], new[1]) if old[1] != new[1] else (old[0], new[0])
                    changes.append(Change(model=name, kind="init", what=group, before=shown[0], after=shown[1]))
        else:
            da = {d.parameter: d for d in ra.deviations}
            db = {d.parameter: d for d in rb.deviations}
            for group in list(db) + [g for g in da if g not in db]:
                before = f"{da[group].recorded}, declared {da[group].declared}" if group in da else "as declared"
                after = f"{db[group].recorded}, declared {db[group].declared}" if group in db else "as declared"
                if before != after:
                    changes.append(Change(model=name, kind="deviation", what=group, before=before, after=after))
        sa, sb = _stream(ra), _stream(rb)
        for key in sb:
            if key in sa and abs(relative_change(sa[key], sb[key])) > drift:
                changes.append(
                    Change(model=name, kind="stream", what=key, before=f"{sa[key]:.4g}", after=f"{sb[key]:.4g}")
                )
    return Comparison(changes=tuple(changes), not_compared=tuple(skipped), compared=compared, renamed=tuple(renamed))


def _renames(la: Mapping[str, tuple[str, str]], lb: Mapping[str, tuple[str, str]]) -> dict[str, str]:
    """Groups of A only paired with groups of B only, in order, where both have the same exact law
    and the same attribute (`weight`, `bias`): a module renamed between releases (`encoder.layer.*`
    to `layers.*`), its init unchanged. Pairing is all or nothing: unless every group of A only and
    of B only pairs so, none is taken as a rename."""
    gone = [g for g in la if g not in lb]
    new = [g for g in lb if g not in la]
    if not gone or len(gone) != len(new):
        return {}
    out: dict[str, str] = {}
    free = list(new)
    for g in gone:
        match = next((h for h in free if lb[h][0] == la[g][0] and h.rpartition(".")[2] == g.rpartition(".")[2]), None)
        if match is None:
            return {}
        out[g] = match
        free.remove(match)
    return out


def change_text(c: Change) -> str:
    """`GPT2Model: h.*.attn.c_proj.weight: N(0, 0.007071²) → N(0, 0.02²)`."""
    what = f"stream {c.what}" if c.kind == "stream" else c.what
    return f"{c.model}: {what}: {c.before} → {c.after}"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(
    a: str, b: str, comparison: Comparison, versions: Mapping[str, Mapping[str, str | None]], *, drift: float = DRIFT
) -> str:
    """The comparison as Markdown, for a pull request's comment."""
    lines = [f"### stability scan --compare: `{a}` → `{b}`", ""]
    for side, v in versions.items():
        lines.append(f"- {side}: " + ", ".join(f"{k} {x}" for k, x in v.items() if x))
    c = comparison
    lines += [
        "",
        f"{len(c.changes)} change(s) in {len({x.model for x in c.changes})} model(s), of {c.compared} compared "
        f"(the init exactly; the stream past a drift of {drift:.0%}).",
        "",
    ]
    if c.changes:
        lines += ["| model | parameter or number | A | B |", "|---|---|---|---|"]
        for x in c.changes:
            what = f"stream {x.what}" if x.kind == "stream" else f"`{x.what}`"
            lines.append(f"| {_md(x.model)} | {_md(what)} | {_md(x.before)} | {_md(x.after)} |")
    if c.renamed:
        models = sorted({m for m, _, _ in c.renamed})
        first = c.renamed[0]
        lines += [
            "",
            f"Renamed with the same laws, not a change of init: {len(c.renamed)} parameter group(s) of "
            f"{', '.join(models)} (e.g. `{first[1]}` → `{first[2]}`).",
        ]
    if c.not_compared:
        lines += ["", f"Not compared ({len(c.not_compared)}):", ""]
        lines += [f"- {_md(n.model)}: A {_md(n.a)}; B {_md(n.b)}" for n in c.not_compared]
    return "\n".join(lines) + "\n"
