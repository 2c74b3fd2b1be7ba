"""`stability calibrate`'s terminal output: every band's spread per depth, the bounds the spec
declares now and the band the spread sets (`stability.run.calibrate.Calibration`)."""

from __future__ import annotations

import math

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from stability.run.bands import BandFit, Calibration

__all__ = ["print_calibration", "bounds_text"]


def bounds_text(lo: float | None, hi: float | None) -> str:
    """`[0.8, 3.6]`, `≤ 1e-05`, `≥ 0.5`, or `—` where neither is set."""
    if lo is not None and hi is not None:
        return f"[{lo:g}, {hi:g}]"
    if hi is not None:
        return f"≤ {hi:g}"
    if lo is not None:
        return f"≥ {lo:g}"
    return "—"


def _spread(fit: BandFit, depth: int) -> str:
    s = next((s for s in fit.spreads if s.depth == depth), None)
    if s is None or math.isnan(s.lo):
        return "undefined"
    text = f"{s.lo:.3g}–{s.hi:.3g}"
    return f"{text} ({s.undefined} undefined)" if s.undefined else text


def print_calibration(calibration: Calibration, console: Console) -> None:
    """The table (one row per band), then how it was measured, in one line."""
    t = Table(header_style="bold", title=f"calibration of {escape(calibration.path)}")
    for col in ("invariant", "number", *(f"depth {d}" for d in calibration.depths), "declared", "band"):
        t.add_column(col)
    for fit in calibration.fits:
        band = fit.problem or bounds_text(*fit.proposed)
        t.add_row(
            fit.invariant,
            escape(fit.label),
            *(_spread(fit, d) for d in calibration.depths),
            bounds_text(*fit.current),
            escape(band),
        )
    console.print(t)
    console.print(
        f"{calibration.cases} networks ({calibration.seeds_text()}, at depths "
        f"{', '.join(map(str, calibration.depths))}) in {calibration.seconds:.1f} s; each band is the spread "
        f"widened by ×{calibration.margin:g} (min / {calibration.margin:g}, max × {calibration.margin:g}, two "
        f"significant digits, outward); measured on {escape(', '.join(calibration.releases))}",
        highlight=False,
        soft_wrap=True,
    )
