"""One language-model case run and judged, directly: the runs `attention_logits`, `output_logits`,
`loss_spike`, `early_warning` and `lr_sensitivity` need for a case (`stability.judge.lm_catalog.lm_verdict`),
under the per-case time limit and a memory guard that counts the language model's own parts, with
whatever goes wrong turned into an error string, as `stability.run.training.evaluate` does. With the
plugin `stability.judge.lm_catalog` loaded, `stability check` runs the same `lm_verdict` through the
registry (and `stability.run.training.evaluate`, whose memory guard is the transformer family's).
"""

from __future__ import annotations

import torch

from stability.errors import CaseError
from stability.judge.lm_catalog import lm_runs, lm_verdict
from stability.judge.verdict import Verdict
from stability.measure.lm_records import LMRun
from stability.run.guard import estimate_bytes, format_bytes, memory_budget, time_limit, warm_up
from stability.spec.case import Case
from stability.spec.lm_expect import LM_INVARIANTS
from stability.spec.schema import DEFAULT_SIZE, Spec

__all__ = ["evaluate_lm", "LMCache", "lm_bytes"]

#: One run per (case, learning rate, last step run or None for the whole run): the invariants of one spec share them.
LMCache = dict[tuple[Case, float, int | None], LMRun]


def lm_bytes(spec: Spec, case: Case) -> int | None:
    """The blocks' estimate (`stability.run.guard.estimate_bytes`) with AdamW's two moment buffers and
    the update measurement's copy (5/3 of it), plus the embeddings and readout (×5 likewise), the
    logits of a batch (3 saved copies) and of the held-out set, and the chain's rows and their CDF
    in float64. None for a custom factory."""
    assert spec.train is not None
    t = spec.train
    blocks = estimate_bytes(spec, case)
    if blocks is None:
        return None
    item = torch.empty((), dtype=torch.float32 if case.dtype in ("bfloat16", "float16") else getattr(torch, case.dtype)).element_size()
    tokens = case.tokens or DEFAULT_SIZE
    head = t.vocab * case.width * (1 if t.tied else 2) + tokens * case.width
    logits = (3 * case.batch + 2 * t.eval_sequences) * tokens * t.vocab
    chain = 2 * t.vocab ** (t.order + 1) * 8
    return int(blocks * 5 // 3 + (5 * head + logits) * item + chain)


def _check_memory(spec: Spec, case: Case, budget: int | None) -> None:
    need = lm_bytes(spec, case)
    budget = memory_budget(case.device) if budget is None else budget
    if need is not None and need > budget:
        raise CaseError(
            f"refused: this case needs about {format_bytes(need)} (the blocks, embeddings, readout, AdamW's state and the logits) and the memory budget is "
            f"{format_bytes(budget)}; narrow space.width/depth/batch/tokens, lower train.vocab or raise STABILITY_MEMORY_BUDGET"
        )


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
        raise ValueError(f"{spec.path} does not declare [expect.{name}] with a [train] table")  # the loader guarantees both
    cache = {} if cache is None else cache
    limit = min(spec.train.seconds, case_timeout) if case_timeout else spec.train.seconds
    if case.device.startswith("cuda") and not torch.cuda.is_available():
        return None, "CUDA is not available on this machine; use --device cpu"
    try:
        for c in dict.fromkeys(k[0] for k in lm_runs(spec, name, case)):
            _check_memory(spec, c, memory_budget)
        warm_up(case.device)
        with time_limit(limit):
            verdict = lm_verdict(spec, name, case, cache)
    except CaseError as exc:  # the time limit, or refused for memory
        return None, str(exc).replace("--case-timeout", "train.seconds or --case-timeout")
    except torch.OutOfMemoryError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "out of memory"
        return None, f"out of memory on {case.device}: {first}"
    except Exception as exc:  # a block raised during training; the run goes on
        return None, "the case does not train: " + " ".join(f"{type(exc).__name__}: {exc}".split())
    return verdict, None
