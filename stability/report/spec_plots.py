"""Stage 6 (pictures, per spec): a SpecResult → its figures, chosen per declared invariant.

- the probe invariants' figures (`stability.report.plots`): *gradient arrival* and *activation
  variance* for every spec that probes, *identity at initialisation* when it declares
  `identity_at_init`, each with its bound and its deciding case from the result;
- each training invariant's figures (`stability.report.train_plots`, and
  `stability.report.lm_plots` for the language-model invariants), chosen in `FIGURES`, with
  their captions.

The HTML report (`stability.report.html`, through `stability.report.render`) draws what
`spec_figures` returns, in its order.
"""

from __future__ import annotations

import math
from typing import Any

from matplotlib.figure import Figure

from stability.report import lm_plots as lp
from stability.report.plots import Highlight, gradient_figure, identity_figure, variance_figure
from stability.report.train_plots import CAPTIONS, loss_figure, update_size_figure
from stability.run.results import CaseRecord, InvariantResult, SpecResult
from stability.spec.registry import INVARIANTS

__all__ = ["FIGURES", "spec_figures", "training_figures", "training_caption", "variance_band", "identity_records"]


def variance_band(result: SpecResult) -> tuple[float | None, float | None] | None:
    """The ratio band the spec's variance_growth allows at every boundary, or None when it only
    limits the growth class (linear, polynomial, …), which is not a band."""
    vg = result.spec.expect.variance_growth
    if vg is None:
        return None
    hi = vg.max_ratio
    if vg.max_growth in ("bounded", "decaying"):
        hi = vg.bounded_ratio if hi is None else min(hi, vg.bounded_ratio)
    if hi is None and vg.min_ratio is None:
        return None
    return (vg.min_ratio, hi)


def identity_records(result: SpecResult) -> list[CaseRecord]:
    """The probed cases `identity_at_init` was judged on (those it applies to: zero-branch inits,
    every case of a custom spec), from the result's verdicts."""
    return [r for r in result.cases.values() if result.verdicts.get(r.case, {}).get("identity_at_init") is not None]


def _highlight(result: InvariantResult | None) -> Highlight | None:
    if result is None or result.case is None:
        return None
    return Highlight(result.case, failed=not result.met)


def _result(spec_result: SpecResult, name: str) -> InvariantResult | None:
    return next((r for r in spec_result.results if r.name == name), None)


def spec_figures(result: SpecResult) -> dict[str, Figure]:
    """The figures of one spec: {"gradient": …, "variance": …}, and "identity" when the spec
    declares `identity_at_init`, after its training invariants' (`training_figures`)."""
    spec = result.spec
    trained = training_figures(result)
    if all(INVARIANTS.get(name).training for name, _ in spec.invariants()):
        return trained  # nothing was probed: no gradient or variance plot to draw
    records = list(result.cases.values())
    ga = spec.expect.gradient_arrival
    vg = spec.expect.variance_growth
    statistic = vg.statistic if vg is not None else "variance"
    figures = trained | {
        "gradient": gradient_figure(
            records,
            bound=(ga.lo, ga.hi) if ga is not None else None,
            highlight=_highlight(_result(result, "gradient_arrival")),
            title="gradient arrival" + ("" if ga is not None else " (not declared)"),
        ),
        "variance": variance_figure(
            records,
            statistic=statistic,
            band=variance_band(result),
            highlight=_highlight(_result(result, "variance_growth")),
            title=("activation variance" if statistic == "variance" else "activation second moment")
            + ("" if vg is not None else " (not declared)"),
        ),
    }
    ia = spec.expect.identity_at_init
    if ia is not None:
        figures["identity"] = identity_figure(
            identity_records(result),
            atol=ia.atol,
            highlight=_highlight(_result(result, "identity_at_init")),
        )
    return figures


# ----------------------------------------------------------------------------- training invariants


def _loss(r: InvariantResult, expectation: Any, spec: Any) -> dict[str, Figure]:
    return {
        f"loss:{r.name}": loss_figure(
            r.verdict.extra if r.verdict else {}, title=f"training loss ({r.name}, deciding case)"
        )
    }


def _update_size(r: InvariantResult, expectation: Any, spec: Any) -> dict[str, Figure]:
    v = r.verdict
    assert v is not None
    return {
        "update_size": update_size_figure(
            v.extra, failed=not v.passed, title="update size against width (deciding case)"
        )
    }


def _lm(r: InvariantResult, expectation: Any, spec: Any) -> dict[str, Figure]:
    """The language-model figures of one verdict (stability.report.lm_plots)."""
    v = r.verdict
    assert v is not None
    x, failed = v.extra, not v.passed
    title = f"training loss ({r.name}, lr {x.get('lr', math.nan):g}, deciding case)"
    if r.name == "attention_logits":
        return {
            "attention_logits": lp.attention_logit_figure(x, expectation, failed=failed),
            f"lm_loss:{r.name}": lp.lm_loss_figure(x, title=title),
        }
    if r.name == "output_logits":
        return {
            "log_z": lp.log_z_figure(x, expectation, failed=failed, steps_total=spec.train.steps),
            f"lm_loss:{r.name}": lp.lm_loss_figure(x, title=title),
        }
    if r.name == "loss_spike":
        return {"loss_spike": lp.loss_spike_figure(x, expectation, failed=failed)}
    if r.name == "early_warning":
        return {"early_warning": lp.early_warning_figure(x, expectation, failed=failed)}
    return {"lr_losses": lp.lr_loss_figure(x), "lr_curve": lp.lr_curve_figure(x, expectation, failed=failed)}


#: The figures each training invariant's verdict is drawn as; any other training invariant gets
#: its loss curves (`extra["curves"]`, as trainability's).
FIGURES = {
    "update_size": _update_size,
    **dict.fromkeys(("attention_logits", "output_logits", "loss_spike", "early_warning", "lr_sensitivity"), _lm),
}


def training_caption(key: str) -> str:
    """What the figure `key` of `training_figures` shows."""
    kind = key.split(":")[0]
    return {**CAPTIONS, **lp.LM_CAPTIONS}.get(kind, CAPTIONS["loss"])


def training_figures(result: SpecResult) -> dict[str, Figure]:
    """The figures of every training invariant the spec declares and that was measured."""
    figures: dict[str, Figure] = {}
    for r in result.results:
        if r.name in INVARIANTS and INVARIANTS.get(r.name).training and r.verdict is not None and r.verdict.extra:
            figures |= FIGURES.get(r.name, _loss)(r, getattr(result.spec.expect, r.name), result.spec)
    return figures
