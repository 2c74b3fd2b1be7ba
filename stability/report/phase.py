"""Phase diagrams of a sweep: one heatmap per measurement over (an axis, depth), with the depth
budgets and, for plain stacks swept over σ_w², the mean-field depth scale drawn on top.

Measurements (the median over the seeds of a point, in decades):

- *gradient*: log10 r₀, r₀ = ‖∂L/∂x₀‖ / ‖∂L/∂x_L‖ (what `gradient_arrival` judges); the spec's
  bounds [lo, hi] are drawn as contour lines;
- *variance*: log10 s_L / s₀ of the statistic `variance_growth` judges (the variance, or the
  second moment when the spec says so): how much the activations grew or shrank over the stack.

The mean-field line (Schoenholz et al. 2017, §3): a plain stack x_{l+1} = φ(W x_l + b) with
W_ij ~ N(0, σ_w²/N) and b_i ~ N(0, σ_b²) multiplies the squared gradient norm by
χ₁ = σ_w² ∫Dz φ'(√q* z)² per block on average (their eq. 9), so ‖g₀‖² / ‖g_L‖² ≈ χ₁^L and
r₀ ≈ χ₁^(L/2) = exp(−L / (2ξ)) with the depth scale ξ = 1/|ln χ₁| (their ξ_∇). Signals and
gradients propagate through about 6ξ blocks (their Fig. 6, where trainability ends); the report
draws L = 6ξ(σ_w²), which is where r₀ crosses e^(∓3). χ₁ = 1 is the order-to-chaos boundary,
drawn as a vertical line.
"""

from __future__ import annotations

import io
import json
import math
import statistics
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from stability.judge.meanfield import ACTIVATIONS, critical_sigma_w2, mean_field
from stability.measure.measurements import Measurements
from stability.report.figures import power_of_two_ticks
from stability.run.grid import Value, point_key
from stability.run.sweep import SweepResult
from stability.spec.case import corner_case
from stability.spec.registry import FAMILIES

__all__ = [
    "MEASURES",
    "measure_values",
    "heatmap_figure",
    "x_axis_key",
    "mean_field_chi1",
    "depth_scale",
    "to_png",
    "overlay_for",
]

_DPI = 100
#: Colour scale half-range in decades: beyond ±8 decades every cell reads "vanished" / "exploded".
_CLIP = 8.0


def _log10_ratio(m: Any, spec: Any, measure: str) -> float:
    if measure == "gradient":
        a, b = m.grad_norm[0], m.grad_norm[-1]
    else:
        vg = spec.expect.variance_growth
        series = m.act_sq_mean if vg is not None and vg.statistic == "second_moment" else m.act_var
        a, b = series[-1], series[0]
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf  # overflowed on the way (vanishing goes to 0, not to NaN/inf): drawn as exploded
    if b <= 0:
        return math.inf if a > 0 else math.nan
    return math.log10(a / b) if a > 0 else -math.inf


MEASURES: dict[str, str] = {
    "gradient": "gradient arrival: log10 r₀ (median over seeds)",
    "variance": "variance growth: log10 s_L / s₀ (median over seeds)",
}


def measure_values(result: SweepResult, measure: str) -> dict[str, float]:
    """{point key: the median over the point's measured seeds} (NaN when none was measured)."""
    out: dict[str, float] = {}
    for p in [*result.points, *result.extra_points]:
        vals = [
            _log10_ratio(Measurements.from_json(r["m"]), result.spec, measure) for r in p.rows if r["m"] is not None
        ]
        vals = [v for v in vals if not math.isnan(v)]
        out[point_key(p.point)] = statistics.median(vals) if vals else math.nan
    return out


# ----------------------------------------------------------------------------- mean field


def mean_field_chi1(activation: str, sigma_w2: float, sigma_b2: float = 0.0) -> float:
    """χ₁ = σ_w² E[φ'(√q* z)²] at the fixed point q* of the q-map (Poole et al. 2016 eq. 3;
    Schoenholz et al. 2017 eq. 9), from `stability.judge.meanfield`."""
    return float(mean_field(activation, sigma_w2=sigma_w2, sigma_b2=sigma_b2).chi1)


def depth_scale(activation: str, sigma_w2: float, sigma_b2: float = 0.0) -> float:
    """ξ = 1 / |ln χ₁| (inf at χ₁ = 1, the critical line)."""
    return float(mean_field(activation, sigma_w2=sigma_w2, sigma_b2=sigma_b2).xi)


def overlay_for(result: SweepResult, x_key: str | None) -> tuple[str, float] | None:
    """(activation, σ_b²) when the mean-field line applies: a plain stack with Gaussian weights
    swept over σ_w², biases zero or PyTorch's default (σ_b² = 1/(3·fan_in))."""
    spec = result.spec
    law = FAMILIES.get(spec.family).mean_field if spec.family in FAMILIES else None
    plain_law = (
        law is not None and not law(spec, corner_case(spec))[1]
    )  # the family's mean-field law, and not a residual one
    if x_key != "sigma_w2" or not plain_law or spec.block.norm != "none" or spec.block.activation not in ACTIVATIONS:
        return None
    bias = spec.space.bias_init
    if bias == "default":
        fan_in = spec.space.width[0] * (spec.block.kernel_size**2 if spec.block.layer == "conv2d" else 1)
        return spec.block.activation, 1.0 / (3.0 * fan_in)
    if bias == 0.0:
        return spec.block.activation, 0.0
    return None


# ----------------------------------------------------------------------------- figure


def _edges(values: list[float], log: bool) -> np.ndarray:
    """Cell edges around sorted centres (midpoints; geometric on a log axis)."""
    v = np.log(values) if log else np.asarray(values, dtype=float)
    if len(v) == 1:
        mid = np.array([v[0] - 0.5, v[0] + 0.5]) if not log else np.array([v[0] - 0.35, v[0] + 0.35])
    else:
        inner = (v[1:] + v[:-1]) / 2
        mid = np.concatenate([[v[0] - (inner[0] - v[0])], inner, [v[-1] + (v[-1] - inner[-1])]])
    return np.exp(mid) if log else mid


def x_axis_key(result: SweepResult, x: str | None = None) -> str | None:
    """The heatmaps' x axis: `x` (`stability sweep --x KEY`) when given, else the swept axis other
    than depth with the most values (the first given among those tied); None when depth is the
    only axis. Every other swept axis is a facet: one heatmap per value."""
    if x is not None:
        return x
    others = [a for a in result.axes if a.key != "depth"]
    return max(others, key=lambda a: len(a.values)).key if others else None


def heatmap_figure(
    result: SweepResult, measure: str, *, facet: dict[str, Value] | None = None, x: str | None = None
) -> Figure:
    """The phase diagram of one measurement: x = `x_axis_key(result, x)`, y = depth (log)."""
    facet = facet or {}
    values = measure_values(result, measure)
    x_key = x_axis_key(result, x)
    others = [a for a in result.axes if a.key != "depth" and a.key not in facet]
    x_axis = next((a for a in others if a.key == x_key), others[0] if others else None)
    depth_axis = next((a for a in result.axes if a.key == "depth"), None)
    depths = sorted(int(d) for d in depth_axis.values) if depth_axis else [result.spec.space.depth[0]]
    xs: list[Value] = list(x_axis.values) if x_axis else ["—"]
    numeric = x_axis is not None and x_axis.numeric
    if numeric:
        xs = sorted(xs, key=float)
    grid = np.full((len(depths), len(xs)), np.nan)
    for i, d in enumerate(depths):
        for j, xv in enumerate(xs):
            p: dict[str, Value] = {**facet}
            if depth_axis:
                p["depth"] = d
            if x_axis:
                p[x_axis.key] = xv
            grid[i, j] = values.get(point_key(p), math.nan)
    fig = Figure(figsize=(6.4, 5.2), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    cmap = colormaps["RdBu_r"].with_extremes(bad="#bdbdbd")  # grey: not measured (every seed failed to run)
    finite = grid[np.isfinite(grid)]
    half = min(max(float(np.abs(finite).max()) if finite.size else 1.0, 0.5), _CLIP)
    shown = np.clip(np.where(np.isinf(grid), np.sign(grid) * _CLIP, grid), -half, half)
    x_pos = [float(x) for x in xs] if numeric else [float(i) for i in range(len(xs))]
    log_y = depth_axis is not None and len(depths) > 1
    xe = _edges(x_pos, False)
    ye = _edges([float(d) for d in depths], log_y)
    mesh = ax.pcolormesh(xe, ye, np.ma.masked_invalid(shown), cmap=cmap, norm=Normalize(-half, half), shading="flat")
    fig.colorbar(mesh, ax=ax, label="decades (log10)", extend="both" if half >= _CLIP else "neither")
    if log_y:
        ax.set_yscale("log")
        power_of_two_ticks(ax.yaxis, ye[0], ye[-1])
    ax.set_ylim(ye[0], ye[-1])
    ax.set_xlim(xe[0], xe[-1])
    if not numeric:
        ax.set_xticks(x_pos, [str(x) for x in xs])
    ax.set_xlabel("σ_w²" if x_axis is not None and x_axis.key == "sigma_w2" else (x_axis.key if x_axis else ""))
    ax.set_ylabel("depth L (blocks)")
    title = MEASURES[measure]
    if facet:
        title += "\n" + ", ".join(f"{k}={v}" for k, v in facet.items())
    ax.set_title(title, fontsize=10)
    _budgets(ax, result, measure, x_axis.key if x_axis else None, xs, x_pos, facet)
    _mean_field(ax, result, measure, x_axis.key if x_axis else None, xe, ye)
    if ax.get_legend_handles_labels()[0]:  # below the map, so it hides no cell
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=8, ncol=2, frameon=False)
    return fig


def _budgets(
    ax: Any,
    result: SweepResult,
    measure: str,
    x_key: str | None,
    xs: list[Value],
    x_pos: list[float],
    facet: dict[str, Value],
) -> None:
    """The bisected depth budget of the invariant this measurement belongs to, one marker per slice."""
    name = "gradient_arrival" if measure == "gradient" else "variance_growth"
    found: list[tuple[float, int]] = []
    floor: list[tuple[float, int]] = []  # holds at the top of the range: the budget is at least that
    for b in result.budgets:
        if b.invariant != name or b.budget is None:
            continue
        s = json.loads(b.slice)
        if any(s.get(k) != v for k, v in facet.items()):
            continue
        x = s.get(x_key) if x_key else "—"
        if x in xs:
            (floor if b.status == "at_least" else found).append((x_pos[xs.index(x)], b.budget))
    if found:
        ax.plot(
            *zip(*found, strict=True),
            "D",
            color="white",
            markeredgecolor="black",
            markersize=6,
            linestyle="none",
            label="depth budget (bisection)",
        )
    if floor:
        ax.plot(
            *zip(*floor, strict=True),
            "^",
            color="white",
            markeredgecolor="black",
            markersize=7,
            linestyle="none",
            label="holds at the deepest depth searched",
        )


def _mean_field(ax: Any, result: SweepResult, measure: str, x_key: str | None, xe: np.ndarray, ye: np.ndarray) -> None:
    found = overlay_for(result, x_key)
    if found is None:
        return
    activation, sigma_b2 = found
    grid = np.linspace(xe[0], xe[-1], 200)
    grid = grid[grid > 0]
    chis = np.array([mean_field_chi1(activation, float(s), sigma_b2) for s in grid])
    with np.errstate(divide="ignore"):
        line = 6.0 / np.abs(np.log(chis))
    line[~np.isfinite(line)] = np.nan
    ax.plot(grid, line, "--", color="black", linewidth=1.6, label="6ξ (mean field)")
    ga = result.spec.expect.gradient_arrival
    if (
        measure == "gradient"
        and ga is not None
        and not (math.isclose(-math.log(ga.lo), 3, rel_tol=1e-4) and math.isclose(math.log(ga.hi), 3, rel_tol=1e-4))
    ):
        # r₀ ≈ χ₁^(L/2) leaves [lo, hi] at L = 2 ln(1/lo) ξ (χ₁ < 1) or 2 ln(hi) ξ (χ₁ > 1)
        with np.errstate(divide="ignore"):
            budget = np.where(chis < 1, 2 * math.log(1 / ga.lo), 2 * math.log(ga.hi)) / np.abs(np.log(chis))
        budget[~np.isfinite(budget)] = np.nan
        ax.plot(
            grid, budget, "-.", color="#444444", linewidth=1.2, label=f"mean field: r₀ leaves [{ga.lo:g}, {ga.hi:g}]"
        )
    try:
        critical = critical_sigma_w2(activation, sigma_b2)
    except ValueError:  # no order-to-chaos transition for this activation and σ_b²
        critical = math.nan
    if xe[0] <= critical <= xe[-1]:
        ax.axvline(
            critical,
            color="black",
            linestyle=":",
            linewidth=1.2,
            label=f"χ₁ = 1: order | chaos (σ_w² = {critical:.3g})",
        )
    ax.set_ylim(ye[0], ye[-1])


def to_png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI)
    return buf.getvalue()
