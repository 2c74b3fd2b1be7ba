"""Stage 4 (training): the coordinate check's measurement — how far one short run moves every
activation and weight, at several widths of the same case (Yang et al. 2021, "Tensor Programs V";
the `mup` package's coord check). The run itself is `stability.measure.train`'s.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from stability.measure.train import (
    Shapes,
    Task,
    TrainModel,
    TrainRun,
    make_task,
    reference_shapes,
    run_on,
    single_thread,
    trainable,
    trainable_params,
)
from stability.spec.case import Case
from stability.spec.schema import Spec

__all__ = ["UpdateRecord", "UpdateSweep", "measure_update", "update_record", "update_sweep", "log_slope"]


@dataclass
class UpdateRecord:
    """What `train.steps` steps changed at one width: per boundary (h_0 … h_L, then the
    output) the RMS change ‖Δh‖/√n on the training set, and per weight ‖ΔW‖_F / ‖W‖_F."""

    width: int
    rms_delta: list[float]
    weight_change: dict[str, float]
    run: TrainRun


def measure_update(
    model: TrainModel, task: Task, train: Callable[[], TrainRun]
) -> tuple[list[float], dict[str, float], TrainRun]:
    """Run `train()` (which updates `model`) and measure, on `task.x`, RMS(Δh) = ‖h_after − h_before‖/√n
    at every boundary and ‖W_after − W_before‖_F / ‖W_before‖_F for every weight of 2 or more dims."""
    with torch.no_grad():
        before = [h.detach().clone() for h in model.boundaries(task.x)]
    weights = {n: p.detach().clone() for n, p in trainable_params(model) if p.dim() >= 2}
    run = train()
    with torch.no_grad():
        after = model.boundaries(task.x)
    rms = [float((a.double() - b.double()).norm()) / math.sqrt(b.numel()) for a, b in zip(after, before, strict=True)]
    params = dict(trainable_params(model))
    change = {}
    for n, w in weights.items():
        den = float(w.double().norm())
        change[n] = float((params[n].detach().double() - w.double()).norm()) / den if den > 0 else math.inf
    return rms, change, run


def update_record(spec: Spec, case: Case, *, reference: tuple[Shapes, Shapes] | None = None) -> UpdateRecord:
    """Train the case's network and measure how far each boundary and weight moved."""
    with single_thread(case.device):
        model = trainable(spec, case, reference=reference)
        task = make_task(spec, case)
        rms, change, run = measure_update(model, task, lambda: run_on(spec, model, task, case))
    run.depth = case.depth
    return UpdateRecord(case.width, rms, change, run)


def log_slope(widths: Sequence[int], values: Sequence[float]) -> float:
    """Least-squares slope of log(value) against log(width); NaN unless every value is finite and > 0."""
    v = np.asarray(values, dtype=np.float64)
    if not (np.isfinite(v).all() and (v > 0).all()):
        return math.nan
    return float(np.polyfit(np.log(np.asarray(widths, dtype=np.float64)), np.log(v), 1)[0])


@dataclass
class UpdateSweep:
    """The coordinate check of one case: an `UpdateRecord` per width, and per boundary the slope
    of log RMS(Δh) against log width (Yang et al. 2021)."""

    widths: list[int]
    records: list[UpdateRecord]
    slopes: list[float]

    def rms(self, boundary: int) -> list[float]:
        return [r.rms_delta[boundary] for r in self.records]


def update_sweep(spec: Spec, case: Case, widths: Sequence[int]) -> UpdateSweep:
    """`update_record` at every width (the other values of the case held)."""
    assert spec.train is not None
    reference = reference_shapes(spec, case) if spec.train.parametrization == "mup" else None
    records = [update_record(spec, dataclasses.replace(case, width=w), reference=reference) for w in widths]
    n = len(records[0].rms_delta)
    slopes = [log_slope(widths, [r.rms_delta[b] for r in records]) for b in range(n)]
    return UpdateSweep(list(widths), records, slopes)
