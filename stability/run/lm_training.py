"""One language-model case run and judged, directly: the runs `attention_logits`, `output_logits`,
`loss_spike`, `early_warning` and `lr_sensitivity` need for a case, through the same
`stability.run.training.evaluate` that `stability check` runs them with (the registry entry's
`train`, `stability.judge.lm_catalog.lm_verdict`, under the per-case time limit and the entry's
memory guard, `stability.measure.train_memory.lm_bytes`), with whatever goes wrong turned into an
error string.
"""

from __future__ import annotations

from stability.judge.verdict import Verdict
from stability.measure.lm_records import LMRun
from stability.run.training import evaluate
from stability.spec.case import Case
from stability.spec.lm_expect import LM_INVARIANTS
from stability.spec.schema import Spec

__all__ = ["evaluate_lm", "LMCache"]

#: One run per (case, learning rate, last step run or None for the whole run): the invariants of one spec share them.
LMCache = dict[tuple[Case, float, int | None], LMRun]


def evaluate_lm(
    spec: Spec,
    name: str,
    case: Case,
    *,
    case_timeout: float | None = None,
    memory_budget: int | None = None,
    cache: LMCache | None = None,
) -> tuple[Verdict | None, str | None]:
    """Run what `name` needs for `case` and judge it: (verdict, None), where a verdict that could not
    be measured has `measured=False`; or (None, why the case did not run). The time limit of the case
    (all its runs) is the smaller of train.seconds and `case_timeout`."""
    if name not in LM_INVARIANTS:
        raise ValueError(f"{name!r} is not a language-model invariant; these are {', '.join(LM_INVARIANTS)}")
    if spec.train is None or getattr(spec.expect, name, None) is None:
        raise ValueError(
            f"{spec.path} does not declare [expect.{name}] with a [train] table"
        )  # the loader guarantees both
    return evaluate(spec, name, case, case_timeout=case_timeout, memory_budget=memory_budget, cache=cache)
