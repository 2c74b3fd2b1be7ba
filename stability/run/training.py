"""One training case run and judged: the optimizer runs a training invariant needs for a case
(its registry entry's `train`), under the per-case time limit and the memory guard (over every
network its `train_cases` lists), with whatever goes wrong turned into an error string (as
`stability.run.engine.evaluate` does for the probe).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from stability.errors import CaseError
from stability.judge.verdict import Verdict
from stability.measure.train import TrainRun
from stability.run.guard import check_budget, time_limit, warm_up
from stability.spec.case import Case
from stability.spec.registry import INVARIANTS
from stability.spec.schema import Spec

__all__ = ["evaluate", "run_depths", "RunCache"]

#: One optimizer run per (case, depth): trainability and residual_size of one spec share them.
RunCache = dict[tuple[Case, int], TrainRun]


def run_depths(case: Case, compare_depths: tuple[int, int] | None) -> list[int]:
    return list(compare_depths) if compare_depths is not None else [case.depth]


def _check_memory(spec: Spec, variants: Sequence[Case], budget: int | None) -> None:
    """The probe's estimate (parameters ×3, saved activations) at the training set's size; Adam
    keeps two more copies of the parameters, so an Adam run must fit 3/5 of the budget."""
    assert spec.train is not None
    for v in variants:
        trial = dataclasses.replace(v, batch=spec.train.samples)
        if spec.train.optimizer == "adam" and budget is not None:
            check_budget(spec, trial, budget * 3 // 5)
        else:
            check_budget(spec, trial, budget)


def evaluate(
    spec: Spec,
    name: str,
    case: Case,
    *,
    case_timeout: float | None = None,
    memory_budget: int | None = None,
    cache: RunCache | None = None,
) -> tuple[Verdict | None, str | None]:
    """Run what `name` needs for `case` and judge it: (verdict, None), or (None, why it could not
    be measured). The time limit is the smaller of train.seconds and `case_timeout`."""
    assert spec.train is not None
    expectation = getattr(spec.expect, name)
    cache = {} if cache is None else cache
    limit = min(spec.train.seconds, case_timeout) if case_timeout else spec.train.seconds
    if case.device.startswith("cuda") and not torch.cuda.is_available():
        return None, "CUDA is not available on this machine; use --device cpu"
    entry = INVARIANTS.get(name)
    assert entry.train is not None and entry.train_cases is not None  # a training entry has both
    try:
        _check_memory(spec, entry.train_cases(expectation, case), memory_budget)
        warm_up(case.device)
        with time_limit(limit):
            verdict = entry.train(spec, expectation, case, cache)
    except CaseError as exc:  # the time limit, or refused for memory
        return None, str(exc).replace("--case-timeout", "train.seconds or --case-timeout")
    except torch.OutOfMemoryError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "out of memory"
        return None, f"out of memory on {case.device}: {first}"
    except Exception as exc:  # a block raised during training; the run goes on
        return None, "the case does not train: " + " ".join(f"{type(exc).__name__}: {exc}".split())
    return verdict, None
