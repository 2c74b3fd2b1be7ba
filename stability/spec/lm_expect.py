"""Stage 1: the `[expect.NAME]` tables of the language-model invariants (judged on a run of
`stability.measure.lm_train`), and the texts `stability explain` gives for each. Their registry
entries are `stability.judge.lm_catalog`'s, built in like the other invariants.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema

from stability.spec.registry import Explanation
from stability.spec.schema import Expectation

__all__ = [
    "LM_INVARIANTS",
    "INDICATORS",
    "AttentionLogits",
    "OutputLogits",
    "LRSensitivity",
    "LossSpike",
    "EarlyWarning",
    "LM_EXPLANATIONS",
    "LM_REFERENCES",
]

#: The invariants judged on a language-model run, in the order a spec's are judged.
LM_INVARIANTS: tuple[str, ...] = ("attention_logits", "output_logits", "loss_spike", "early_warning", "lr_sensitivity")
#: What `early_warning` can read over the first steps (stability.judge.lm_invariants.indicator).
INDICATORS: tuple[str, ...] = ("logit_growth", "max_logit", "min_entropy", "loss_progress")


class AttentionLogits(Expectation):
    """The largest attention logit (over layers, heads, queries and the keys they see) at every
    recorded step ≤ max_logit; with max_growth, its fitted growth ≤ max_growth × per 100 steps."""

    max_logit: float | None = Field(100.0, gt=0.0)
    max_growth: float | None = Field(None, gt=1.0)


class OutputLogits(Expectation):
    """|log Z| of the output softmax ≤ max_abs_logz at every recorded step from `after`·steps on:
    the largest over the scored tokens (statistic = "max") or of the mean over them ("mean")."""

    max_abs_logz: float = Field(20.0, gt=0.0)
    statistic: Literal["max", "mean"] = "max"
    after: float = Field(0.0, ge=0.0, lt=1.0)


def _lr_grid(value: Any) -> Any:
    if (
        isinstance(value, list)
        and len(value) >= 3
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        floats = [float(v) for v in value]
        if not all(math.isfinite(v) and v > 0 for v in floats) or floats != sorted(set(floats)):
            raise ValueError(
                f"must be at least three increasing positive learning rates (got {value}); e.g. [0.001, "
                "0.003, 0.01, 0.03, 0.1, 0.3]"
            )
        return floats
    raise ValueError("expected a list of at least three learning rates, e.g. [0.001, 0.003, 0.01, 0.03, 0.1, 0.3]")


class LRSensitivity(Expectation):
    """LRS = mean over the grid `lrs` of min(L(η), L₀) − L* (Wortsman et al. 2023, eq. 1), per seed
    of an ensemble of `seeds` (the case's and seeds − 1 derived ones); the mean over the seeds
    ≤ max_lrs."""

    lrs: Annotated[
        list[float],
        BeforeValidator(_lr_grid),
        WithJsonSchema({"type": "array", "items": {"type": "number", "exclusiveMinimum": 0}, "minItems": 3}),
    ]
    seeds: int = Field(8, ge=1, le=64)
    max_lrs: float = Field(gt=0.0)


class LossSpike(Expectation):
    """No step's loss exceeds max_factor × the mean of the `window` steps before it."""

    max_factor: float = Field(2.0, gt=1.0)
    window: int = Field(10, ge=1, le=1000)


class EarlyWarning(Expectation):
    """Over the first `steps` steps of the run (its schedule unchanged, the rest not run), the
    indicator does not cross `threshold` (above it for logit_growth and max_logit, below it for
    min_entropy and loss_progress): a run predicted to diverge fails at step `steps`."""

    steps: int = Field(ge=1, le=10_000)
    indicator: Literal["logit_growth", "max_logit", "min_entropy", "loss_progress"] = "logit_growth"
    threshold: float = Field(gt=0.0)


# ----------------------------------------------------------------------------- explain texts

LM_REFERENCES: dict[str, str] = {
    "wortsman": (
        "Wortsman, Liu, Xiao, Everett, Alemi, Adlam, Co-Reyes, Gur, Kumar, Novak, Pennington, "
        "Sohl-Dickstein, Xu, Lee, Gilmer, Kornblith (2023). "
        '"Small-scale proxies for large-scale Transformer training instabilities". arXiv:2309.14322.'
    ),
    "dehghani": 'Dehghani et al. (2023). "Scaling Vision Transformers to 22 Billion Parameters" '
    "(qk-layernorm). ICML 2023, arXiv:2302.05442.",
    "palm": 'Chowdhery et al. (2022). "PaLM: Scaling Language Modeling with Pathways" (z-loss). arXiv:2204.02311.',
    "gemma2": 'Gemma Team (2024). "Gemma 2: Improving Open Language Models at a Practical Size" (logit '
    "soft-capping). arXiv:2408.00118.",
    "sigma": (
        'Zhai, Likhomanenko, Littwin, Busbridge, Ramapuram, Zhang, Gu, Susskind (2023). "Stabilizing '
        'Transformer Training by Preventing Attention Entropy Collapse" '
        "(sigma-reparam). ICML 2023, arXiv:2303.06296."
    ),
    "adamw": 'Loshchilov, Hutter (2019). "Decoupled Weight Decay Regularization". ICLR 2019, arXiv:1711.05101.',
}

#: name → summary, computes, fails, fixes, references (keys of LM_REFERENCES).
_TEXTS: dict[str, dict[str, Any]] = {
    "attention_logits": {
        "summary": "the largest attention logit stays bounded while the language model trains",
        "computes": """\
A language model (token embedding, the spec's transformer blocks, a readout) is trained on the
Markov token task (train.task = "markov") with AdamW. At every recorded step, a forward pre-hook
on each attention softmax reads the logits that enter it,

    s_ij = q_i . k_j / sqrt(d)     (after attn_softcap, over the keys j that query i can see)
    l_t  = max over layers, heads, batch, i, j of s_ij
    holds when l_t <= max_logit at every recorded step, and (with max_growth) when the
          least-squares fit l_t ~ exp(r t) grows by at most max_growth per 100 steps

The message names the first step and layer over the bound. A run that diverged before anything
was recorded is not measured (never "violated as expected").""",
        "fails": """\
- No qk-layernorm at a high learning rate: the query and key weights grow together, the logits
  grow quadratically with them, attention becomes one-hot (entropy near 0) and the loss
  stalls or diverges (Wortsman et al. 2023, Sec. 3.1; Dehghani et al. 2023).
- Too short a warm-up, or too large a learning rate for the width and depth.""",
        "fixes": """\
- qk_norm = "layer" (or "rms"): |s| <= sqrt(d) g_q g_k.
- attn_softcap = 50.0 (Gemma 2): |s| < cap.
- sigma_reparam = true (Zhai et al. 2023); a longer train.warmup; a lower train.lr.""",
        "references": ("wortsman", "dehghani", "gemma2", "sigma"),
    },
    "output_logits": {
        "summary": "the output softmax's log-partition log Z stays near 0 while the language model trains",
        "computes": """\
The same run as attention_logits. At every recorded step, over the scored tokens,

    log Z = log sum_v exp(z_v)          (z the readout's logits)
    holds when max |log Z| (statistic = "max") or |mean log Z| ("mean") <= max_abs_logz
          at every recorded step from after * train.steps on

The cross-entropy does not change when every logit moves by the same amount, so nothing but an
auxiliary loss pins log Z: it drifts as the predictions grow confident.""",
        "fails": """\
- No z-loss: log Z drifts far from 0 late in training (Wortsman et al. 2023, Sec. 3.2), where
  low-precision arithmetic then rounds the logits' differences away and the loss diverges.
- No weight decay on the readout.""",
        "fixes": """\
- train.z_loss = 1e-4: the loss adds z_loss * mean(log^2 Z) (Chowdhery et al. 2022, PaLM).
- train.weight_decay; train.logit_softcap (Gemma 2) bounds each logit, and so log Z by
  cap + log V.""",
        "references": ("wortsman", "palm", "gemma2"),
    },
    "loss_spike": {
        "summary": "no training step raises the loss far above its recent average",
        "computes": """\
The same run as attention_logits; the loss of every step's batch, before its update:

    spike_t = loss_t / mean(loss_(t-window) ... loss_(t-1))
    holds when spike_t <= max_factor for every step t >= window

A non-finite loss after finite ones is an infinite spike; a run with fewer than window + 1
steps is not measured.""",
        "fails": """\
- A learning rate at the edge of stability; attention-logit growth or output-logit divergence;
  the AdamW epsilon larger than the gradient RMS, which turns a small gradient into a large
  step once it grows again (Wortsman et al. 2023, Sec. 3.4).""",
        "fixes": """\
- qk_norm, z_loss, gradient clipping (train.clip), a longer warm-up, a lower learning rate;
  train.eps below the gradient RMS the run records.
- A readout whose logits move less per step: train.tied = true (logits h.E^T/sqrt(width); with
  Adam an untied readout's logits can move by about lr * width in one step, see
  specs/control_lm_loss_spike.toml), or train.logit_softcap.""",
        "references": ("wortsman",),
    },
    "early_warning": {
        "summary": "an indicator over the first steps predicts no divergence, so the full run need not be waited for",
        "computes": """\
The first `steps` steps of the same run (the schedule of the full run, the rest not run). The
indicator, over the recorded steps t <= steps:

    logit_growth   max_t l_t / l_0          (l_t the largest attention logit)   warns above threshold
    max_logit      max_t l_t                                                     warns above threshold
    min_entropy    min_t of the attention entropy (nats, smallest layer)         warns below threshold
    loss_progress  (L_0 - L) / (L_0 - H), L the mean loss of the last 10 steps,   warns below threshold
                   L_0 the first loss, H the task's entropy rate
    holds when the indicator does not warn

dev/lm_early_warning.py measures each indicator's detection and false-alarm rates over a grid
of learning rates, sizes, qk-norm on and off and seeds (docs/training.md has the table).""",
        "fails": """\
- A run headed for attention-logit divergence: its largest logit has already grown many times
  over in the first steps, long before the loss shows it.""",
        "fixes": """\
- As for attention_logits: qk_norm, a longer warm-up, a lower learning rate.""",
        "references": ("wortsman", "dehghani"),
    },
    "lr_sensitivity": {
        "summary": "the final loss depends little on the learning rate over a log grid (Wortsman et al.'s LR "
        "sensitivity)",
        "computes": """\
For each seed of an ensemble (the case's and seeds - 1 derived ones) and each learning rate eta
of the grid lrs, the run of attention_logits at that rate; on held-out sequences,

    L_0      the loss before training,  L(eta) the loss after it (a diverged run: L_0)
    L*       min over the grid of L(eta)
    LRS      mean over the grid of min(L(eta), L_0) - L*      (Wortsman et al. 2023, eq. 1)
    holds when the mean of LRS over the seeds <= max_lrs

The best possible loss is the task's entropy rate H, known in closed form.""",
        "fails": """\
- Attention-logit growth and output-logit divergence at the high end of the grid; slow progress
  at the low end (a fixed number of steps).""",
        "fixes": """\
- qk_norm and z_loss (Wortsman et al. 2023, Fig. 1), a longer warm-up, independent weight decay
  (train.decay = "independent"), muP; train.eps below the gradient RMS.""",
        "references": ("wortsman", "dehghani", "palm", "adamw"),
    },
}

#: What `stability explain NAME` prints for each language-model invariant.
LM_EXPLANATIONS: dict[str, Explanation] = {
    name: Explanation(
        summary=t["summary"],
        computes=t["computes"],
        fails=t["fails"],
        fixes=t["fixes"],
        references=tuple(LM_REFERENCES[r] for r in t["references"]),
    )
    for name, t in _TEXTS.items()
}
