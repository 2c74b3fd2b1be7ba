"""stability/run/lm_training.py: evaluate_lm runs what each language-model invariant needs (one run
shared by the invariants of a spec, the grid × ensemble of lr_sensitivity, a prefix for
early_warning), turns the time limit, the memory guard and a run that cannot be judged into an
error (never a verdict a negative control could meet), and replays bit for bit."""

from __future__ import annotations

import pytest

from stability.judge.lm_catalog import lm_runs
from stability.judge.verdict import is_evidence
from stability.measure.train_memory import lm_bytes
from stability.run.lm_training import LMCache, evaluate_lm
from stability.spec.case import corner_case
from stability.spec.load import parse_spec

SPEC = """
name = "lm"
description = "d"
family = "transformer"
[block]
layer = "tokens"
norm = "layer"
causal = true
head_dim = 8
[space]
depth = 1
width = 16
tokens = 8
batch = 4
[train]
task = "markov"
optimizer = "adamw"
vocab = 8
lr = {lr}
steps = 12
record_every = 3
seconds = {seconds}
[expect.attention_logits]
expect = "{expect}"
max_logit = 1000.0
[expect.output_logits]
max_abs_logz = 1000.0
[expect.loss_spike]
window = 4
max_factor = 10.0
[expect.early_warning]
steps = 6
threshold = 1000.0
[expect.lr_sensitivity]
lrs = [0.001, 0.01, 0.1]
seeds = 2
max_lrs = 10.0
"""


def spec(*, lr: float = 0.01, seconds: float = 30.0, expect: str = "holds"):  # type: ignore[no-untyped-def]
    return parse_spec(SPEC.format(lr=lr, seconds=seconds, expect=expect))


def met(s, name: str, verdict, error: str | None) -> bool:  # type: ignore[no-untyped-def]
    """The engine's rule: met by evidence only, passed as expected."""
    return (
        error is None
        and verdict is not None
        and is_evidence(verdict)
        and verdict.passed == (getattr(s.expect, name).expect == "holds")
    )


def test_the_invariants_share_one_run_and_early_warning_reads_its_prefix() -> None:
    s = spec()
    case = corner_case(s, seed=4)
    cache: LMCache = {}
    for name in ("attention_logits", "output_logits", "loss_spike"):
        v, error = evaluate_lm(s, name, case, cache=cache)
        assert error is None and v is not None and v.passed, (name, error)
    assert list(cache) == [(case, 0.01, None)]
    v, error = evaluate_lm(s, "early_warning", case, cache=cache)
    assert error is None and v is not None and v.passed and list(cache) == [(case, 0.01, None)]
    alone, _ = evaluate_lm(s, "early_warning", case)  # a run of 6 steps: the same number
    assert alone is not None and alone.observed == v.observed


def test_lr_sensitivity_runs_its_grid_for_every_seed_of_its_ensemble() -> None:
    s = spec()
    case = corner_case(s, seed=1)
    keys = lm_runs(s, "lr_sensitivity", case)
    assert [(k[0].seed, k[1]) for k in keys][:3] == [(1, 0.001), (1, 0.01), (1, 0.1)] and len(
        {k[0].seed for k in keys}
    ) == 2
    cache: LMCache = {}
    v, error = evaluate_lm(s, "lr_sensitivity", case, cache=cache)
    assert error is None and v is not None and v.passed and len(cache) == 6
    assert set(v.extra["per_seed"]) == {str(k[0].seed) for k in keys}


def test_a_run_that_diverges_before_the_bound_is_crossed_is_not_measured_and_no_control_is_met_on_it() -> None:
    """lr = 1e30: the first update makes the loss non-finite; nothing crossed a bound before."""
    for expect in ("holds", "violated"):
        s = spec(lr=1e30, expect=expect)
        v, error = evaluate_lm(s, "attention_logits", corner_case(s))
        assert (
            error is None
            and v is not None
            and not v.measured
            and v.detail.startswith("not measured: the run diverged at step 1")
        ), v
        assert not met(s, "attention_logits", v, error)


def test_the_time_limit_and_the_memory_guard_are_errors() -> None:
    s = spec(seconds=1e-6)
    v, error = evaluate_lm(s, "attention_logits", corner_case(s))
    assert v is None and error is not None and "train.seconds or --case-timeout" in error
    s = spec()
    need = lm_bytes(s, corner_case(s))
    assert need is not None and need > 0
    v, error = evaluate_lm(s, "attention_logits", corner_case(s), memory_budget=need - 1)
    assert v is None and error is not None and error.startswith("refused: this case needs about")
    v, error = evaluate_lm(s, "attention_logits", corner_case(s), memory_budget=need)
    assert error is None


def test_a_case_replays_bit_for_bit() -> None:
    s = spec(lr=0.1)
    first, _ = evaluate_lm(s, "attention_logits", corner_case(s, seed=9))
    second, _ = evaluate_lm(s, "attention_logits", corner_case(s, seed=9))
    assert first is not None and second is not None and first == second


def test_only_the_language_model_invariants_are_evaluated() -> None:
    with pytest.raises(ValueError, match="not a language-model invariant"):
        evaluate_lm(spec(), "trainability", corner_case(spec()))
