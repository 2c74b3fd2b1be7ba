"""`stability scan`'s report: its rows (`stability.run.scan_rows`) as a terminal table, JSON
(`--json`), Markdown (`--md`) and an HTML page (`--html DIR` writes DIR/scan.html), each deviation
marked with its triage (`stability.judge.scan_triage`: a known bug, an intended init, or new).

Every format says how many models were tried, how many were built and judged, and names every
other one with its reason, so a model that could not be built is never silently missing.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stability.judge.scan_triage import Known, triaged
from stability.run.scan_rows import ScanRow, StreamAt

__all__ = [
    "FORMAT",
    "untriaged",
    "headline",
    "stream_cell",
    "deviation_text",
    "scan_json",
    "markdown",
    "html_page",
    "terminal_rows",
    "write_html",
    "check_html",
]

#: The version of `--json`'s layout (its first key).
FORMAT = 1


def untriaged(rows: Sequence[ScanRow], known: tuple[Known, ...]) -> list[tuple[ScanRow, Any]]:
    """Every (row, deviation) no triage entry matches: what fails a scan."""
    return [(r, d) for r in rows for d in r.deviations if triaged(known, r.library, r.name, d.parameter) is None]


def headline(
    library: str,
    release: str,
    rows: Sequence[ScanRow],
    known: tuple[Known, ...],
    seconds: float,
    cpu: float | None = None,
) -> str:
    """`transformers 5.25.0: 631 models tried, 590 built and judged (93.5 %), …; 1500 s (2900 s of
    CPU in the workers)`."""
    tried = len(rows)
    built = sum(r.built for r in rows)
    share = f" ({100 * built / tried:.1f} %)" if tried else ""
    deviating = sum(bool(r.deviations) for r in rows)
    new = untriaged(rows, known)
    others = {s: sum(r.status == s for r in rows) for s in ("not built", "failed", "timed out")}
    rest = ", ".join(f"{n} {s}" for s, n in others.items() if n)
    return (
        f"{library} {release}: {tried} model{'' if tried == 1 else 's'} tried, {built} built and judged{share}"
        + (f", {rest}" if rest else "")
        + f"; {deviating} with deviations, {len(new)} deviation(s) not triaged; {seconds:.0f} s"
        + ("" if cpu is None else f" ({cpu:.0f} s of CPU in the workers)")
    )


def _g(x: float | None) -> str:
    return "—" if x is None else f"{x:.3g}"


def stream_cell(s: StreamAt | None) -> str:
    """`g₀/g₁ 1.5, g₁/g_L 1.2, Var 3.6` or why not measured."""
    if s is None:
        return "—"
    if s.error is not None:
        return s.error
    n = s.numbers
    return f"g₀/g₁ {_g(n.get('entry'))}, g₁/g_L {_g(n.get('stream'))}, Var {_g(n.get('variance'))}"


def deviation_text(row: ScanRow, d: Any, known: tuple[Known, ...]) -> str:
    """`h.*.attn.c_proj.weight: normal(std=0.02), declared normal(std=0.0071) [source] (bug: #47458)`."""
    k = triaged(known, row.library, row.name, d.parameter)
    mark = f" ({k.verdict}: {k.source})" if k is not None else " (not triaged)"
    return f"{d.parameter}: {d.recorded}, declared {d.declared} [{d.source}]{mark}"


def _status(row: ScanRow) -> str:
    if row.built:
        return "judged"
    return f"{row.status}: {row.reason or ''}"


def _at(row: ScanRow, i: int) -> StreamAt | None:
    return row.stream[i] if len(row.stream) > i else None


def _brief(row: ScanRow, known: tuple[Known, ...]) -> str:
    """`3 (1 not triaged): a.*.weight, b.weight, …`: the deviating groups, for the terminal."""
    groups = [d.parameter for d in row.deviations]
    new = sum(triaged(known, row.library, row.name, g) is None for g in groups)
    shown = ", ".join(groups[:4]) + (", …" if len(groups) > 4 else "")
    return f"{len(groups)} ({new} not triaged): {shown}"


def terminal_rows(rows: Sequence[ScanRow], known: tuple[Known, ...], *, brief: bool = False) -> list[tuple[str, ...]]:
    """(model, status, reduced, deviations, stream at the first depth, at the second) per row; the
    deviations in full, or with `brief` their groups only (the terminal: the full text is in the files)."""
    out: list[tuple[str, ...]] = []
    for r in rows:
        full = "; ".join(deviation_text(r, d, known) for d in r.deviations)
        devs = (_brief(r, known) if brief else full) if r.deviations else ("none" if r.built else "—")
        reduced = f"{r.rung}, {r.parameters:,} parameters" if r.rung and r.parameters is not None else "—"
        out.append((r.name, _status(r), reduced, devs, stream_cell(_at(r, 0)), stream_cell(_at(r, 1))))
    return out


def scan_json(library: str, release: str, rows: Sequence[ScanRow], known: tuple[Known, ...], seconds: float) -> str:
    """The rows as JSON, each deviation with its triage ("bug", "intended" or null)."""
    items = []
    for r in rows:
        d = r.to_dict()
        for dev in d["deviations"]:
            k = triaged(known, library, r.name, dev["parameter"])
            dev["triage"] = None if k is None else {"verdict": k.verdict, "source": k.source}
        items.append(d)
    data = {
        "stability_scan": FORMAT,
        "library": library,
        "release": release,
        "seconds": seconds,
        "summary": headline(library, release, rows, known, seconds),
        "rows": items,
    }
    return json.dumps(data, indent=1, allow_nan=False) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(library: str, release: str, rows: Sequence[ScanRow], known: tuple[Known, ...], seconds: float) -> str:
    """The rows as Markdown: the headline, then one table row per model."""
    depths = next((tuple(s.depth for s in r.stream) for r in rows if r.stream), ())
    heads = ["model", "status", "reduced", "deviations", *(f"stream @{d}" for d in depths)]
    lines = [
        f"### stability scan: {library} {release}",
        "",
        headline(library, release, rows, known, seconds),
        "",
        "| " + " | ".join(heads) + " |",
        "|" + "---|" * len(heads),
    ]
    for cells in terminal_rows(rows, known):
        lines.append("| " + " | ".join(_md(c) for c in cells[: len(heads)]) + " |")
    return "\n".join(lines) + "\n"


_CSS = (
    "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
    "padding:3px 6px;vertical-align:top;font-size:13px}th{background:#eee}.bad{color:#a00}.ok{color:#070}"
)


def html_page(library: str, release: str, rows: Sequence[ScanRow], known: tuple[Known, ...], seconds: float) -> str:
    """The rows as one HTML page."""
    depths = next((tuple(s.depth for s in r.stream) for r in rows if r.stream), ())
    heads = ["model", "status", "reduced", "deviations", *(f"stream @{d}" for d in depths)]
    body = []
    for r, cells in zip(rows, terminal_rows(rows, known), strict=True):
        cls = "bad" if untriaged([r], known) or not r.built else "ok"
        tds = "".join(f"<td>{html.escape(c)}</td>" for c in cells[: len(heads)])
        body.append(f"<tr class='{cls}'>{tds}</tr>")
    title = f"stability scan: {html.escape(library)} {html.escape(release)}"
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>stability scan</title><style>{_CSS}</style>"
        f"</head><body><h1>{title}</h1><p>{html.escape(headline(library, release, rows, known, seconds))}</p>"
        "<table><tr>"
        + "".join(f"<th>{html.escape(h)}</th>" for h in heads)
        + "</tr>"
        + "".join(body)
        + "</table></body></html>\n"
    )


def check_html(folder: str | Path) -> Path:
    """The page `--html DIR` writes (DIR/scan.html), checked before anything runs."""
    from stability.report.outputs import check_report_path

    return check_report_path("--html", str(folder), "scan HTML", page="scan.html")


def write_html(folder: str | Path, page: str) -> Path:
    from stability.report.outputs import write_atomic

    path = Path(folder) / "scan.html"
    write_atomic(path, page)
    return path
