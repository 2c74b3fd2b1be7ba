"""One training case run and judged: the optimizer runs a training invariant needs for a case
(its registry entry's `train`), under the per-case time limit and the memory guard (the entry's
`memory` estimate of what the runs hold), with whatever goes wrong turned into an error string (as
`stability.run.engine.evaluate` does for the probe).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from stability.errors import CaseError, SpecError
from stability.judge.verdict import Verdict
from stability.measure.train import TrainRun
from stability.run.guard import check_budget, check_least, format_bytes, time_limit, warm_up
from stability.run.guard import memory_budget as default_budget
from stability.spec.case import Case
from stability.spec.registry import INVARIANTS, Invariant
from stability.spec.schema import Spec

__all__ = ["evaluate", "run_depths", "trained_text", "RunCache"]

#: One optimizer run per (case, depth): trainability and residual_size of one spec share them.
RunCache = dict[tuple[Case, int], TrainRun]


def run_depths(case: Case, compare_depths: tuple[int, int] | None) -> list[int]:
    return list(compare_depths) if compare_depths is not None else [case.depth]


def _check_memory(spec: Spec, entry: Invariant, expectation: Any, case: Case, budget: int | None) -> None:
    """The entry's own estimate of what the case's runs hold (`Invariant.memory`), after the
    family's lower bound from the depth of every network it trains. An entry without one: the
    probe's estimate (parameters ×3, saved activations) at the training set's size for each
    network, an Adam run within 3/5 of the budget (its two moment buffers are two more copies of
    the parameters)."""
    assert spec.train is not None and entry.train_cases is not None
    variants = entry.train_cases(expectation, case)
    if entry.memory is None:
        for v in variants:
            trial = dataclasses.replace(v, batch=spec.train.samples)
            check_budget(
                spec, trial, budget * 3 // 5 if spec.train.optimizer != "sgd" and budget is not None else budget
            )
        return
    budget = default_budget(case.device) if budget is None else budget
    for v in variants:
        check_least(spec, v, budget)
    need = entry.memory(spec, expectation, case)
    if need is not None and need > budget:
        raise CaseError(
            f"refused: this case needs about {format_bytes(need)} for its training runs (the networks, the "
            "optimizer's state, the data and the outputs) "
            f"and the memory budget is {format_bytes(budget)}; narrow space.width/depth/batch/tokens, lower "
            "the [train] sizes "
            "(samples, outputs, vocab, eval_sequences) or raise STABILITY_MEMORY_BUDGET"
        )


def evaluate(
    spec: Spec,
    name: str,
    case: Case,
    *,
    case_timeout: float | None = None,
    memory_budget: int | None = None,
    cache: dict[Any, Any] | None = None,
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
        _check_memory(spec, entry, expectation, case, memory_budget)
        warm_up(case.device)
        with time_limit(limit):
            verdict = entry.train(spec, expectation, case, cache)
    except CaseError as exc:  # the time limit, or refused for memory
        return None, str(exc).replace("--case-timeout", "train.seconds or --case-timeout")
    except torch.OutOfMemoryError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "out of memory"
        return None, f"out of memory on {case.device}: {first}"
    except (
        SpecError
    ):  # bad input found only once the model is built (a language model that is not causal): exit 2, as the probe's
        raise
    except Exception as exc:  # a block raised during training; the run goes on
        return None, "the case does not train: " + " ".join(f"{type(exc).__name__}: {exc}".split())
    return verdict, None


def trained_text(spec: Spec, name: str, case: Case) -> str:
    """What a training invariant trains for `case`, in words (" (optimizer runs at depths 4 and 32,
    width 64)"): its registry entry's `train_cases`, the networks the optimizer runs, which the
    case alone does not name (`compare_depths` trains other depths, `widths` other widths)."""
    entry = INVARIANTS.get(name)
    if entry.train_cases is None:
        return ""
    variants = entry.train_cases(getattr(spec.expect, name), case)
    depths = sorted({v.depth for v in variants})
    widths = sorted({v.width for v in variants})

    def words(key: str, values: list[int]) -> str:
        if len(values) == 1:
            return f"{key} {values[0]}"
        return f"{key}s {', '.join(map(str, values[:-1]))} and {values[-1]}"

    return f" (optimizer runs at {words('depth', depths)}, {words('width', widths)})"
