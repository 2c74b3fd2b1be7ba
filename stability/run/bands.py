"""The band a number's spread sets (`stability calibrate`, `stability init`; the networks and the
numbers are `stability.run.calibrate`'s): over every depth and seed, [min / margin, max × margin],
rounded outward to two significant digits, margin 1.25, docs/zoo.md's: a ninth network falls
outside eight networks' range with probability 2/9 (1/9 at each end), so the extremes alone would
fail healthy networks; widened by a quarter of their value, a band judges the case's ensemble
median, which lies inside the members' range, with room left for the draws the sample missed.
A hi below `RESOLUTION` units in the last place of the case's number type (an identity block's
change, 0 to rounding) is raised to it: a band narrower than the rounding would judge the rounding.
And the words written beside each band in a spec (`written_bands`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from stability.spec.registry import Band

__all__ = ["MARGIN", "RESOLUTION", "Spread", "BandFit", "Calibration", "band_of", "written_bands"]

MARGIN = 1.25
#: The narrowest hi a band gets, in units of the case's number type's epsilon (float32: 9.5e-7).
RESOLUTION = 8
_EPS = {"float32": 2.0**-23, "float64": 2.0**-52, "bfloat16": 2.0**-7, "float16": 2.0**-10}


@dataclass(frozen=True, kw_only=True)
class Spread:
    """One band's number at one depth: its smallest and largest value over the seeds (nan when it
    is undefined on every network there), and on how many networks it was undefined."""

    depth: int
    lo: float
    hi: float
    undefined: int = 0


@dataclass(frozen=True, kw_only=True)
class BandFit:
    """One band of one invariant: the spread per depth, the bounds the spec declares now (None:
    unset), the band the spread sets, and why there is none (`problem`)."""

    invariant: str
    number: str
    label: str
    lo_key: str | None
    hi_key: str | None
    spreads: tuple[Spread, ...]
    current: tuple[float | None, float | None]
    proposed: tuple[float | None, float | None]
    problem: str | None = None

    @property
    def least(self) -> float:
        return min((s.lo for s in self.spreads if not math.isnan(s.lo)), default=math.nan)

    @property
    def most(self) -> float:
        return max((s.hi for s in self.spreads if not math.isnan(s.hi)), default=math.nan)

    def spread_text(self) -> str:
        """`1: 1–1, 2: 1.32–1.39, 4: 1.78–2.05` (docs/zoo.md's notation)."""
        return ", ".join(
            f"{s.depth}: undefined" if math.isnan(s.lo) else f"{s.depth}: {s.lo:.3g}–{s.hi:.3g}" for s in self.spreads
        )


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """Every band of every declared invariant with bands (`BandFit`), and how they were measured."""

    path: str
    depths: tuple[int, ...]
    seeds: tuple[int, ...]
    margin: float
    releases: tuple[str, ...]
    fits: tuple[BandFit, ...]
    cases: int
    seconds: float

    def seeds_text(self) -> str:
        return f"{len(self.seeds)} seeds of seed {self.seeds[0]}'s ensemble"


def band_of(
    invariant: str,
    band: Band,
    per_depth: Mapping[int, Sequence[float]],
    *,
    current: tuple[float | None, float | None] = (None, None),
    margin: float = MARGIN,
    dtype: str = "float32",
) -> BandFit:
    """The band a number's values over depths and seeds set (the module docstring, step 3)."""
    spreads = []
    for depth, values in sorted(per_depth.items()):
        live = [v for v in values if math.isfinite(v)]
        spreads.append(
            Spread(
                depth=depth,
                lo=min(live) if live else math.nan,
                hi=max(live) if live else math.nan,
                undefined=len(values) - len(live),
            )
        )
    fit = BandFit(
        invariant=invariant,
        number=band.number,
        label=band.label,
        lo_key=band.lo,
        hi_key=band.hi,
        spreads=tuple(spreads),
        current=current,
        proposed=(None, None),
    )
    undefined = sum(s.undefined for s in spreads)
    if not any(per_depth.values()):
        return dataclasses.replace(fit, problem="it applies to none of the calibrated networks (applies_when)")
    if undefined:
        where = ", ".join(f"depth {s.depth}" for s in spreads if s.undefined)
        problem = f"undefined on {undefined} network(s) ({where}: a zero or non-finite variance or gradient)"
        return dataclasses.replace(fit, problem=problem)
    least, most = fit.least, fit.most
    lo = hi = None
    if band.lo is not None:
        if not least > 0:
            return dataclasses.replace(fit, problem=f"its smallest value is {least:.3g}: no positive lower bound holds")
        lo = _down(least / margin)
    if band.hi is not None:
        hi = _up(max(most * margin, RESOLUTION * _EPS.get(dtype, _EPS["float32"])))
    return dataclasses.replace(fit, proposed=(lo, hi))


def _digits(x: float, rounding: Callable[[float], float]) -> float:
    """`x` rounded to two significant digits by `rounding` (floor or ceil), written exactly ("3.6",
    not 3.6000000001)."""
    exponent = math.floor(math.log10(x)) - 1
    mantissa = rounding(round(x / 10.0**exponent, 9))
    return float(f"{int(mantissa)}e{exponent}")


def _down(x: float) -> float:
    return _digits(x, math.floor)


def _up(x: float) -> float:
    return _digits(x, math.ceil)


def written_bands(
    calibration: Calibration, *, keys: Callable[[str, str], bool] | None = None
) -> dict[str, tuple[float, str]]:
    """`expect.NAME.KEY` → (the band's bound, the comment beside it) for every proposed bound
    (`keys(invariant, key)` chooses which): the band's first key carries its spread per depth, the
    seeds, the margin and the releases; its second one the arithmetic, pointing at the first."""
    from stability.spec.edit import COMMENT_MARK

    out: dict[str, tuple[float, str]] = {}
    m = f"{calibration.margin:g}"
    releases = ", ".join(calibration.releases)
    for fit in calibration.fits:
        if fit.problem is not None:
            continue
        sides = [
            (key, value, f"{fit.least:.3g} / {m}" if i == 0 else f"{fit.most:.3g} × {m}")
            for i, (key, value) in enumerate(zip((fit.lo_key, fit.hi_key), fit.proposed, strict=True))
            if key is not None and value is not None and (keys is None or keys(fit.invariant, key))
        ]
        for j, (key, value, arithmetic) in enumerate(sides):
            if j == 0:
                text = (
                    f"{COMMENT_MARK}: {fit.label} {fit.spread_text()} (depth: min–max over "
                    f"{calibration.seeds_text()}); {arithmetic}; {releases}"
                )
            else:
                text = f"{COMMENT_MARK}: {arithmetic} (the spread: beside {sides[0][0]})"
            out[f"expect.{fit.invariant}.{key}"] = (value, text)
    return out
