"""The language-model invariants' registry entries (stability.spec.registry): `attention_logits`,
`output_logits`, `loss_spike`, `early_warning` and `lr_sensitivity`, each a training invariant
whose run is `stability.measure.lm_train` and whose verdict is `stability.judge.lm_invariants`'.

Built in: `stability.judge.catalog` imports this module, so `check`, pytest, `list`, `explain`,
`schema` and `--only` know them in every process and a spec may declare them. Like the catalogue,
it imports torch only inside its callables. `lm_verdict` is the one place a case's runs are
planned, run (shared through the cache) and judged, for the registry entry and so for
`stability.run.lm_training.evaluate_lm`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from stability.spec.lm_expect import (
    LM_EXPLANATIONS,
    LM_INVARIANTS,
    AttentionLogits,
    EarlyWarning,
    LossSpike,
    LRSensitivity,
    OutputLogits,
)
from stability.spec.lm_keys import LM_NEEDS, check_lm_expect
from stability.spec.registry import Invariant, batch, register_invariant

__all__ = ["ENTRIES", "lm_runs", "lm_verdict"]

#: (case, learning rate, last step run or None for the whole run): the key of one run in the cache.
RunKey = tuple[Any, float, int | None]


def lm_runs(spec: Any, name: str, case: Any) -> list[RunKey]:
    """The runs `name` needs for `case`. lr_sensitivity runs its grid for every seed of its ensemble
    (`stability.measure.ensemble.ensemble_seeds`); early_warning only the first `steps` steps; the
    rest the case at train.lr."""
    from stability.measure.ensemble import ensemble_seeds

    expectation = getattr(spec.expect, name)
    if name == "lr_sensitivity":
        return [
            (dataclasses.replace(case, seed=s), lr, None)
            for s in ensemble_seeds(case.seed, expectation.seeds)
            for lr in expectation.lrs
        ]
    if name == "early_warning":
        return [(case, spec.train.lr, expectation.steps)]
    return [(case, spec.train.lr, None)]


def _run(spec: Any, key: RunKey, cache: dict[Any, Any]) -> Any:
    """The cached run, or the cached whole run for a prefix (the same numbers: the run is
    deterministic and its first steps do not depend on how many follow), or a new one."""
    from stability.measure.lm_train import lm_run

    if key in cache:
        return cache[key]
    case, lr, stop = key
    whole = cache.get((case, lr, None))
    if stop is not None and whole is not None:
        return whole
    run = lm_run(spec, case, lr=lr, stop_at=stop)
    cache[key] = run
    return run


def lm_verdict(spec: Any, name: str, case: Any, cache: dict[Any, Any]) -> Any:
    """Run what `name` needs for `case` (through `cache`, which the invariants of one spec share) and judge it."""
    from stability.judge import lm_invariants as j

    e = getattr(spec.expect, name)
    runs = {k: _run(spec, k, cache) for k in lm_runs(spec, name, case)}
    if name == "lr_sensitivity":
        grid: dict[int, dict[float, Any]] = {}
        for (c, lr, _), r in runs.items():
            grid.setdefault(c.seed, {})[lr] = r
        from stability.judge.lr_sensitivity import lr_sensitivity

        return lr_sensitivity(grid, lrs=e.lrs, max_lrs=e.max_lrs)
    (run,) = runs.values()
    if name == "attention_logits":
        return j.attention_logits(run, max_logit=e.max_logit, max_growth=e.max_growth)
    if name == "output_logits":
        return j.output_logits(run, max_abs_logz=e.max_abs_logz, statistic=e.statistic, after=e.after)
    if name == "loss_spike":
        return j.loss_spike(run, max_factor=e.max_factor, window=e.window)
    return j.early_warning(run, steps=e.steps, name=e.indicator, threshold=e.threshold)


def _train(name: str) -> Any:
    def train(spec: Any, expectation: Any, case: Any, cache: dict[Any, Any]) -> Any:
        return lm_verdict(spec, name, case, cache)

    train.__qualname__ = f"train_{name}"
    return train


def _cases(expectation: Any, case: Any) -> list[Any]:
    """The networks one case trains: the case's (an ensemble's members have its shapes)."""
    return [case]


def _memory(spec: Any, expectation: Any, case: Any) -> int | None:
    """One run at a time (a grid's runs one after another): stability.measure.train_memory.lm_bytes."""
    from stability.measure.train_memory import lm_bytes

    return lm_bytes(spec, case)


def _warning_severity(verdict: Any, expectation: EarlyWarning) -> float:
    """How close a run came to the warning: value/threshold for the indicators that warn above it,
    threshold/value for those that warn below it."""
    from stability.judge.lm_invariants import WARNING_DIRECTION

    v = float(verdict.observed)
    if not math.isfinite(v) or v <= 0:
        return math.inf
    return v / expectation.threshold if WARNING_DIRECTION[expectation.indicator] > 0 else expectation.threshold / v


_REFUSAL = (
    "it is judged on a language-model training run (stability check runs it), not on the probe a sweep point takes"
)
_LABELS = {
    "attention_logits": "largest attention logit over the run",
    "output_logits": "largest |log Z| of the output softmax",
    "loss_spike": "largest loss / running mean of the steps before",
    "early_warning": "early-warning indicator over the first steps",
    "lr_sensitivity": "LR sensitivity: mean over the grid of min(L(η), L₀) − L*",
}
_MODELS: dict[str, type[Any]] = {
    "attention_logits": AttentionLogits,
    "output_logits": OutputLogits,
    "loss_spike": LossSpike,
    "early_warning": EarlyWarning,
    "lr_sensitivity": LRSensitivity,
}

#: The registry entries, in LM_INVARIANTS order.
ENTRIES: tuple[Invariant, ...] = tuple(
    Invariant(
        name=name,
        expectation=_MODELS[name],
        summary=LM_EXPLANATIONS[name].summary,
        label=_LABELS[name],
        explanation=LM_EXPLANATIONS[name],
        phase="training",
        train=_train(name),
        train_cases=_cases,
        memory=_memory,
        check=check_lm_expect,
        severity=_warning_severity if name == "early_warning" else None,
        sweep_refusal=_REFUSAL,
        needs=LM_NEEDS,
    )
    for name in LM_INVARIANTS
)


with batch():
    for _entry in ENTRIES:
        register_invariant(_entry)
