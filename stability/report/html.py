"""Stage 6 (HTML): SpecResults → DIR/index.html, one self-contained page.

The page holds the verdict table (spec × invariant), then one section per spec with its
description, its plots (`stability.report.spec_plots`) embedded as base64 `data:` URIs and the table of
every probed case. No server, no network, no external CSS or JavaScript: the file can be attached
to a CI run and opened anywhere. Every string that came from a user (spec names, descriptions,
paths, messages, commands) goes through `html.escape`, so a description holding `<script>` shows
as text. The file is written atomically, like the other reports.
"""

from __future__ import annotations

import base64
import html
import struct
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from stability.errors import UsageError
from stability.numbers import number_text
from stability.report.baseline import Comparison, fmt, fmt_change, fmt_limit, headline
from stability.report.formats import summary_line
from stability.report.outputs import write_atomic
from stability.report.render import spec_pngs
from stability.report.spec_plots import training_caption, variance_band
from stability.report.style import CSS
from stability.report.suggest import suggestion_line
from stability.run.results import CaseRecord, InvariantResult, SpecResult
from stability.spec.case import Case
from stability.spec.registry import FAMILIES

__all__ = ["render_html", "write_html"]


def _e(value: object) -> str:
    """Escape anything for HTML text and attribute values."""
    return html.escape(str(value), quote=True)


def _fmt(x: float | None) -> str:
    return number_text(x, nan="nan")


def _status(r: InvariantResult) -> str:
    return r.status


def _mark(met: bool, applicable: bool = True) -> str:
    if not applicable:
        return "n/a"
    return "✓" if met else "✗"


def _anchor(index: int) -> str:
    return f"spec-{index}"


# ----------------------------------------------------------------------------- verdict table


def _observed(r: InvariantResult) -> str:
    v = r.verdict
    if v is None:
        return "—"
    growth = v.extra.get("growth")
    return _fmt(v.observed) + (f" ({growth})" if growth else "")


def _case_text(text: str) -> str:
    """A case string, escaped, that may wrap after each comma."""
    return ",<wbr>".join(_e(part) for part in text.split(","))


def _verdict_rows(index: int, res: SpecResult) -> list[str]:
    rows = []
    span = len(res.results) + sum(not r.met for r in res.results)
    spec_cls = "spec-name" + ("" if res.met else " failed")
    for n, r in enumerate(res.results):
        status = _status(r)
        v = r.verdict
        case = r.case.varying(res.spec) if r.case is not None else ""
        reproduce = (
            f"<details><summary>command</summary><code>{_e(r.reproduce)}</code></details>"
            if r.reproduce and r.met
            else ""
        )
        name = (
            f'<td class="{spec_cls}" rowspan="{span}"><a href="#{_anchor(index)}">{_e(res.spec.name)}</a></td>'
            if n == 0
            else ""
        )
        rows.append(
            f'<tr class="{status}">{name}'
            f'<td class="inv">{_e(r.name)}</td><td>{_e(r.expect)}</td>'
            f'<td class="mark" title="{_e(status)}">{_mark(r.met, r.applicable)}</td>'
            f'<td class="num">{_e(_observed(r))}</td>'
            f'<td class="bound">{_e(v.bound) if v is not None else ("not applicable" if not r.applicable else "")}</td>'
            f'<td class="case mono">{_case_text(case)}</td>'
            f"<td>{reproduce}</td></tr>"
        )
        if not r.met:
            parts = [f"<div>{_e(r.message)}</div>"]
            if r.error:
                parts.append(f"<div>error: {_e(r.error)}</div>")
            if r.reproduce:
                parts.append(f"<div>reproduce: <code>{_e(r.reproduce)}</code></div>")
            parts.append(f"<div>explain: <code>stability explain {_e(r.name)}</code></div>")
            rows.append(f'<tr class="detail {status}"><td colspan="7">{"".join(parts)}</td></tr>')
    return rows


def _verdict_table(results: list[SpecResult]) -> str:
    head = "".join(
        f"<th>{h}</th>"
        for h in ("spec", "invariant", "expect", "met", "observed", "bound", "deciding case", "reproduce")
    )
    body = "".join(row for i, res in enumerate(results) for row in _verdict_rows(i, res))
    return f'<table class="verdicts"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _baseline_section(c: Comparison | None) -> str:
    """The comparison with a baseline (`stability check --baseline`): before → after per case."""
    if c is None:
        return ""
    head = "".join(
        f"<th>{h}</th>" for h in ("spec", "invariant", "", "before → after", "change", "drift limit", "case", "why")
    )
    rows = []
    for d in c.deltas:
        cls = {"drift": "failed", "within": "ok"}.get(d.status, "not_applicable")
        mark = {"drift": "✗", "within": "✓"}.get(d.status, "n/a")
        rows.append(
            f'<tr class="{cls}"><td>{_e(d.key.spec)}</td><td class="inv">{_e(d.key.invariant)}</td><td '
            f'class="mark">{mark}</td>'
            f'<td class="num">{_e(fmt(d.before))} → {_e(fmt(d.after))}</td><td '
            f'class="num">{_e(fmt_change(d))}</td><td '
            f'class="num">{_e(fmt_limit(d.limit))}</td>'
            f'<td class="case mono">{_case_text(d.shown)}</td><td>{_e(d.why)}</td></tr>'
        )
    changed = "".join(
        f"<p>changed since the baseline in <code>{_e(file)}</code>: {_e('; '.join(changes))}</p>"
        for file, changes in c.changed.items()
    )
    table = (
        f'<table class="verdicts"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>' if rows else ""
    )
    return f'<h2 id="baseline">Against the baseline</h2><p class="meta">{_e(headline(c))}</p>{table}{changed}'


# ----------------------------------------------------------------------------- one spec


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _statistic(res: SpecResult) -> str:
    vg = res.spec.expect.variance_growth
    return vg.statistic if vg is not None else "variance"


def _case_roles(res: SpecResult) -> dict[Case, list[tuple[str, bool]]]:
    """For each case that decided an invariant: (invariant, expectation met)."""
    roles: dict[Case, list[tuple[str, bool]]] = {}
    for r in res.results:
        if r.case is not None and r.applicable:  # a not-applicable invariant decided nothing
            roles.setdefault(r.case, []).append((r.name, r.met))
    return roles


def _case_row(res: SpecResult, record: CaseRecord, roles: list[tuple[str, bool]]) -> str:
    m = record.measurements
    failed = any(not met for _, met in roles) or record.error is not None
    cls = "failed" if failed else ("deciding" if roles else "")
    cells = [
        f'<td class="mark">{"✗" if failed else ""}</td>',
        f'<td class="case mono">{_case_text(record.case.varying(res.spec) or str(record.case))}</td>',
    ]
    ratio = m.gradient_ratio if m is not None else None
    cells.append(f'<td class="num">{_e(_fmt(ratio))}</td>')
    values = None if m is None else (m.act_var if _statistic(res) == "variance" else m.act_sq_mean)
    if values and values[0] > 0:
        cells.append(f'<td class="num">{_e(_fmt(max(v / values[0] for v in values)))}</td>')
    else:
        cells.append('<td class="num">—</td>')
    if res.spec.expect.identity_at_init is not None:
        cells.append(f'<td class="num">{_e(_fmt(m.identity_error if m is not None else None))}</td>')
    judged = res.verdicts.get(record.case, {})
    for name, _ in res.spec.invariants():
        v = judged.get(name)
        if v is None:  # not applicable here, or a training invariant (judged on optimizer runs, not on these cases)
            cells.append('<td class="mark" title="not applicable">—</td>')
            continue
        cells.append(
            f'<td class="mark {"ok" if v.passed else "failed"}" '
            f'title="{"holds" if v.passed else "violated"}">{_mark(v.passed)}</td>'
        )
    cells.append(f'<td class="num">{record.seconds:.2f}</td>')
    notes = [f"{'failing' if not met else 'deciding'} case of {name}" for name, met in roles]
    if record.error:
        notes.append(f"error: {record.error}")
    other = record.measurements.extra.get("within_budget") if record.measurements is not None else None
    if isinstance(other, dict):
        notes.append(str(other.get("text", "")))
    cells.append(f"<td>{_e('; '.join(notes))}</td>")
    return f'<tr class="{cls}">{"".join(cells)}</tr>'


_CASE_COLUMNS = (
    "failed: ✗ when the case decided an unmet expectation or could not be measured; gradient ratio r₀ = "
    "‖∂L/∂x₀‖ / ‖∂L/∂x_L‖; "
    "max Var (or E(x²)) ratio: the largest ratio of a boundary's statistic to the input's; identity error: "
    "‖f(x) − x‖ / ‖x‖; "
    "one ✓/✗ column per invariant (— where it does not apply); seconds: build and probe time of the case."
)


def _cases_table(res: SpecResult) -> str:
    roles = _case_roles(res)
    records = sorted(res.cases.values(), key=lambda rec: (rec.case.depth, str(rec.case)))
    names = [n for n, _ in res.spec.invariants()]
    identity = ["identity error"] if res.spec.expect.identity_at_init is not None else []
    ratio = "max Var ratio" if _statistic(res) == "variance" else "max E(x²) ratio"
    head = ["failed", "case", "gradient ratio r₀", ratio, *identity, *names, "seconds", "note"]
    body = "".join(_case_row(res, rec, roles.get(rec.case, [])) for rec in records)
    failing = sum(any(not met for _, met in roles.get(rec.case, [])) for rec in records)
    opened = " open" if failing else ""
    return (
        f"<details{opened}><summary>{len(records)} probed case(s); ✓/✗ per invariant on each case</summary>"
        f'<p class="facts">{_e(_CASE_COLUMNS)}</p>'
        f'<table class="cases"><thead><tr>{"".join(f"<th>{_e(h)}</th>" for h in head)}</tr></thead>'
        f"<tbody>{body}</tbody></table></details>"
    )


def _messages(res: SpecResult) -> str:
    items = []
    for r in res.results:
        status = _status(r)
        items.append(f'<li class="{status}"><span class="mark">{_mark(r.met, r.applicable)}</span>{_e(r.message)}</li>')
        if not r.met and res.suggestions is not None and (line := suggestion_line(res, r.name)) is not None:
            items.append(f'<li class="suggest"><span class="mark">→</span>suggest: {_e(line)}{_diff(res)}</li>')
    return f'<ul class="messages">{"".join(items)}</ul>'


def _diff(res: SpecResult) -> str:
    """The best remedy's spec diff, folded (rendered from the suggestion; nothing computed here)."""
    best = res.suggestions.best if res.suggestions is not None else None
    if best is None:
        return ""
    return f"<details><summary>the spec diff of {_e(best.remedy)}</summary><pre>{_e(best.diff)}</pre></details>"


#: Renders one spec's figures to {name: PNG bytes}: `spec_pngs` inline, or `Renderer.pngs`.
PngSource = Callable[[SpecResult], dict[str, bytes]]


def _figures(res: SpecResult, pngs: PngSource = spec_pngs) -> str:
    parts = []
    for key, png in pngs(res).items():
        uri = _data_uri(png)
        width, height = struct.unpack(
            ">II", png[16:24]
        )  # the PNG's own size (IHDR): a legend below the plot makes it taller
        parts.append(
            f'<figure><img src="{uri}" alt="{_e(key)} plot of {_e(res.spec.name)}" width="{width}" '
            f'height="{height}"><figcaption>{_e(figure_caption(res, key))}</figcaption></figure>'
        )
    return f'<div class="plots">{"".join(parts)}</div>'


def figure_caption(res: SpecResult, key: str) -> str:
    """What the figure `key` of `spec_figures(res)` shows; it mentions a shaded band exactly when
    the figure draws one."""
    expect = res.spec.expect
    if key not in (
        "gradient",
        "variance",
        "identity",
    ):  # a training invariant's figure (stability/report/spec_plots.py)
        return training_caption(key)
    if key == "gradient":
        what = "Gradient norm at each boundary relative to the output's; the invariant judges the left end (l = 0). "
        bound = (
            "Shaded: the declared bound. "
            if expect.gradient_arrival is not None
            else "No bound: gradient_arrival is not declared. "
        )
        return what + bound + "A line that stops short has a zero or non-finite gradient there (a collapse)."
    if key == "variance":
        what = "Activation statistic at each boundary relative to the input's. "
        vg = expect.variance_growth
        if vg is None:
            bound = "No band: variance_growth is not declared. "
        elif variance_band(res) is not None:
            bound = "Shaded: the ratios the spec allows. "
        else:
            bound = (
                f'No band: max_growth = "{vg.max_growth}" limits how the ratio grows with depth (judged '
                "from a fit over the probed depths), not its value at each boundary. "
            )
        return what + bound + "A line that stops short has a zero or non-finite value there."
    ia = expect.identity_at_init
    bound = (
        f"Shaded: errors up to atol = {ia.atol:g}. "
        if ia is not None and ia.atol > 0
        else "Green line at 0: the bound, exactly 0 (bit-exact). "
    )
    return (
        "Identity at initialisation, zero-branch cases only: at each boundary, the relative change of the "
        "second moment from "
        "the input's (solid) and of the gradient norm from the output's (dashed); both stay at 0 while every "
        "block is the "
        "identity, and a line leaves 0 after the first block that changes its input. Dots: the errors the "
        "invariant judges, "
        "‖f(x) − x‖/‖x‖ at the output and ‖∂L/∂x − ∂L/∂y‖/‖∂L/∂y‖ at the input. "
        + bound
        + "Symmetric-log axis: values below 1e-9 are drawn on a linear scale, so 0 is on the axis."
    )


def _spec_section(index: int, res: SpecResult, pngs: PngSource = spec_pngs) -> str:
    spec = res.spec
    status = "ok" if res.met else "failed"
    facts = [
        f"<span>file <code>{_e(spec.path)}</code></span>",
        f"<span>profile {_e(res.profile)}</span>",
        f"<span>{len(res.cases)} case(s) probed in {res.seconds:.1f} s</span>",
        f"<span>family {_e(spec.family)}: "
        f"{_e(FAMILIES.get(spec.family).description if spec.family in FAMILIES else spec.family)}</span>",
    ]
    return (
        f'<section class="spec {status}" id="{_anchor(index)}">'
        f'<h2><span class="mark {status}">{_mark(res.met)}</span> {_e(spec.name)}<span '
        f'class="family">{_e(spec.family)}</span></h2>'
        f'<p class="description">{_e(spec.description)}</p>'
        f'<p class="facts">{"".join(facts)}</p>'
        f"{_messages(res)}{_figures(res, pngs)}{_cases_table(res)}</section>"
    )


# ----------------------------------------------------------------------------- page


def render_html(
    results: Iterable[SpecResult],
    *,
    seconds: float = 0.0,
    interrupted: bool = False,
    pngs: PngSource = spec_pngs,
    comparison: Comparison | None = None,
) -> str:
    """The whole report as one HTML document (a string). `pngs` renders a spec's plots
    (`stability.report.render.Renderer.pngs` takes them from a background process); `comparison`
    is the run against a baseline, shown after the verdicts."""
    results = list(results)
    met = all(res.met for res in results) and not interrupted
    summary = summary_line(results, seconds, interrupted=interrupted)
    profiles = sorted({res.profile for res in results})
    generated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    failing = [f'<a href="#{_anchor(i)}">{_e(res.spec.name)}</a>' for i, res in enumerate(results) if not res.met]
    jump = f"<p>not met: {', '.join(failing)}</p>" if failing else ""
    # Sections of specs with an unmet expectation come first: that is what a reader opens the page for.
    order = sorted(range(len(results)), key=lambda i: (results[i].met, i))
    sections = "".join(_spec_section(i, results[i], pngs) for i in order)
    title = f"stability report: {'pass' if met else 'FAIL'}"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, '
        'initial-scale=1">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>"
        f"<header><h1>stability report</h1>"
        f'<p class="summary {"ok" if met else "failed"}">{_mark(met)} {_e(summary)}</p>'
        f'<p class="meta">profile {_e(", ".join(profiles) or "—")} · generated {_e(generated)} · '
        f"✗ rows: the expectation was not met; <code>stability explain NAME</code> says why and how to fix it</p>"
        f"{jump}</header>"
        f"<main><h2>Verdicts</h2>{_verdict_table(results)}{_baseline_section(comparison)}{sections}</main></body></html>\n"
    )


def write_html(
    dir: str | Path,
    results: Iterable[SpecResult],
    *,
    seconds: float = 0.0,
    interrupted: bool = False,
    pngs: PngSource = spec_pngs,
    comparison: Comparison | None = None,
) -> Path:
    """Write DIR/index.html (atomically) and return its path."""
    folder = Path(dir)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--html {dir}: is a file; give a folder (the report is written to FOLDER/index.html)")
    path = folder / "index.html"
    write_atomic(path, render_html(results, seconds=seconds, interrupted=interrupted, pngs=pngs, comparison=comparison))
    return path
