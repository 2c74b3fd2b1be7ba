"""The HTML report of a sweep: DIR/index.html, one self-contained page (the style of
`stability.report.html`): the depth budgets with their deciding cases and reproduce commands, a phase
diagram per measurement (`stability.report.phase`) as embedded PNGs, and the table of every grid point.
Every string from the user (spec names, paths, values) is escaped.
"""

from __future__ import annotations

import base64
import html
import itertools
import json
import math
import time
from pathlib import Path

from stability.errors import UsageError
from stability.numbers import number_text
from stability.report.outputs import write_atomic
from stability.report.phase import MEASURES, heatmap_figure, measure_values, overlay_for, to_png, x_axis_key
from stability.report.style import CSS
from stability.run.grid import Value, fixed_text, point_key
from stability.run.store import budget_text
from stability.run.sweep import SweepResult

__all__ = ["render_sweep_html", "write_sweep_html"]

_MAX_FACETS = 6

_EXTRA_CSS = """
.heatmaps { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 12px; margin: 8px 0; }
.heatmaps figure { margin: 0; }
.heatmaps img { width: 100%; max-width: 640px; height: auto; border: 1px solid #eaeef2; border-radius: 4px; }
.heatmaps figcaption { color: var(--muted); font-size: 12.5px; }
table.budgets td.num { font-weight: 600; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _fmt(x: float) -> str:
    return number_text(x, infinity="∞")


def _slice_text(text: str) -> str:
    d = json.loads(text)
    return ", ".join(f"{k}={v}" for k, v in d.items()) or "(whole grid)"


def _budget_table(result: SweepResult) -> str:
    lo, hi = result.depth_range
    rows = []
    for b in result.budgets:
        failing = b.status in ("found", "below")
        cls = "failed" if b.status == "below" else ""
        why = f"<div>{_e(b.detail)}</div>" if b.detail else ""
        repro = f"<div>reproduce: <code>{_e(b.reproduce)}</code></div>" if b.reproduce else ""
        case = f'<span class="mono case">{_e(b.deciding_case)}</span>' if b.deciding_case and failing else ""
        rows.append(
            f'<tr class="{cls}"><td>{_e(_slice_text(b.slice))}</td><td class="inv">{_e(b.invariant)}</td><td '
            f'class="num">{_e(budget_text(b))}</td><td>{case}{why}{repro}</td></tr>'
        )
    head = "".join(
        f"<th>{h}</th>" for h in ("slice", "invariant", "depth budget", "deciding case (first failing depth)")
    )
    return (
        f"<p>For each slice of the grid and each declared invariant: the largest depth in [{lo}, {hi}] at "
        "which it holds on "
        f"every one of the {len(result.seeds)} seeds, found by bisection. The deciding case is the first seed "
        "that fails one "
        f"block deeper.</p>"
        f'<table class="budgets"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def _facets(result: SweepResult, x: str | None) -> list[dict[str, Value]]:
    x_key = x_axis_key(result, x)
    rest = [a for a in result.axes if a.key not in ("depth", x_key)]
    combos = [
        dict(zip([a.key for a in rest], vals, strict=True)) for vals in itertools.product(*[a.values for a in rest])
    ]
    return combos[:_MAX_FACETS]


def _heatmaps(result: SweepResult, x: str | None) -> str:
    parts = []
    x_key = x_axis_key(result, x)
    overlay = overlay_for(result, x_key)
    for facet in _facets(result, x):
        for measure in MEASURES:
            uri = "data:image/png;base64," + base64.b64encode(
                to_png(heatmap_figure(result, measure, facet=facet, x=x))
            ).decode("ascii")
            caption = (
                f"{MEASURES[measure]}. Blue: shrinks over depth; red: grows; grey: not measured. "
                "White diamonds: the bisected depth budget of "
                f"{'gradient_arrival' if measure == 'gradient' else 'variance_growth'} per column; triangles: "
                "it still holds at the "
                "deepest depth searched."
            )
            if overlay is not None:
                caption += (
                    f" Dashed: the mean-field depth scale 6ξ, ξ = 1/|ln χ₁| ({overlay[0]}, σ_b² = "
                    f"{overlay[1]:.3g}); dotted: χ₁ = 1, the order-to-chaos boundary (Schoenholz et "
                    "al. 2017)."
                )
                ga = result.spec.expect.gradient_arrival
                if (
                    measure == "gradient"
                    and ga is not None
                    and not (
                        math.isclose(-math.log(ga.lo), 3, rel_tol=1e-4)
                        and math.isclose(math.log(ga.hi), 3, rel_tol=1e-4)
                    )
                ):
                    caption += (
                        f" Dash-dotted: the depth at which the mean-field r₀ ≈ χ₁^(L/2) leaves [{ga.lo:g}, {ga.hi:g}]."
                    )
                elif measure == "gradient" and ga is not None:
                    caption += (
                        " The spec's bounds are e^(∓3), so r₀ ≈ χ₁^(L/2) leaves them at L = 6ξ: the "
                        "diamonds should follow the dashed line."
                    )
            label = ", ".join(f"{k}={v}" for k, v in facet.items())
            parts.append(
                f'<figure><img src="{uri}" alt="{_e(measure)} phase diagram {_e(label)}" width="640" '
                f'height="520"><figcaption>{_e(caption)}</figcaption></figure>'
            )
    return f'<div class="heatmaps">{"".join(parts)}</div>'


def _points_table(result: SweepResult) -> str:
    names = result.judged
    values = {m: measure_values(result, m) for m in MEASURES}
    head = ["point", "log10 r₀", "log10 s_L/s₀", *names, "from store", "note"]
    rows = []
    for p in sorted([*result.points, *result.extra_points], key=lambda r: point_key(r.point)):
        key = point_key(p.point)
        cells = [f'<td class="mono">{_e(_slice_text(key))}</td>']
        cells += [f'<td class="num">{_e(_fmt(values[m][key]))}</td>' for m in MEASURES]
        for n in names:
            holds, _, detail, _ = p.verdicts[n]
            mark = "—" if holds is None else ("✓" if holds else "✗")
            cells.append(f'<td class="mark {"ok" if holds else "failed"}" title="{_e(detail)}">{mark}</td>')
        errors = sorted({r["error"] for r in p.rows if r["error"]})
        cells.append(f"<td>{'yes' if p.cached else ''}</td>")
        cells.append(f"<td>{_e('; '.join(errors))}</td>")
        rows.append(f'<tr class="{"failed" if p.failed else ""}">{"".join(cells)}</tr>')
    return (
        f"<details><summary>{len(rows)} point(s) × {len(result.seeds)} seed(s); ✓/✗: the invariant holds on "
        "every seed</summary>"
        f'<table class="cases"><thead><tr>{"".join(f"<th>{_e(h)}</th>" for h in head)}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></details>"
    )


def render_sweep_html(result: SweepResult, *, x: str | None = None) -> str:
    """The page; `x`: the heatmaps' x axis (`stability.report.phase.x_axis_key`)."""
    spec = result.spec
    axes = " · ".join(f"{a.key}: {', '.join(str(v) for v in a.values)}" for a in result.axes) or "no axis (one point)"
    generated = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    failed = sum(p.failed for p in result.points)
    summary = (
        f"{len(result.points)} grid point(s) × {len(result.seeds)} seed(s) (seeds "
        f"{result.seeds[0]}–{result.seeds[-1]}), "
        f"{len(result.extra_points)} more for the budgets; {result.probed} probe(s) run on {result.workers} worker(s), "
        f"{result.cached} point(s) reused from the store, in {result.seconds:.1f} s"
        + (f"; {failed} point(s) could not be measured" if failed else "")
    )
    title = f"stability sweep: {spec.name}"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, '
        'initial-scale=1">'
        f"<title>{_e(title)}</title><style>{CSS}{_EXTRA_CSS}</style></head><body>"
        f"<header><h1>{_e(title)}</h1>"
        f'<p class="summary ok">{_e(summary)}</p>'
        f'<p class="meta">spec <code>{_e(spec.path)}</code> ({_e(spec.family)}: {_e(spec.description)}) · '
        f"axes {_e(axes)} · "
        f"code {_e(result.code_version)} · generated {_e(generated)}</p>"
        '<p class="meta fixed">held fixed at every point: <span '
        f'class="mono">{_e(fixed_text(spec, result.axes))}</span></p></header>'
        f"<main><h2>Depth budgets</h2>{_budget_table(result)}"
        f"<h2>Phase diagrams</h2>{_heatmaps(result, x)}"
        f"<h2>Points</h2>{_points_table(result)}</main></body></html>\n"
    )


def write_sweep_html(dir: str | Path, result: SweepResult, *, x: str | None = None) -> Path:
    folder = Path(dir)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--html {dir}: is a file; give a folder (the report is written to FOLDER/index.html)")
    path = folder / "index.html"
    write_atomic(path, render_sweep_html(result, x=x))
    return path
