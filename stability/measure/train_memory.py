"""Stage 4 (training): how much memory one case's training runs hold at most, for the guard that
refuses a case before anything is built (`stability.run.training`). Each training invariant's
registry entry names its estimate (`Invariant.memory`), so `stability check`, the pytest plugin
and `stability.run.lm_training.evaluate_lm` refuse the same cases.

Both start from the family's memory model at the run's batch (`Family.estimate`: parameters ×3,
the activations autograd saves, per-block overhead) and add what the run puts around the blocks.
They are over-estimates, like the families' own (stability.families.memory). Torch is imported
only when an estimate is made (the dtype's size, the teacher's width).
"""

from __future__ import annotations

import dataclasses

from stability.families.memory import item_bytes
from stability.spec.case import Case
from stability.spec.registry import FAMILIES
from stability.spec.schema import DEFAULT_SIZE, Spec

__all__ = ["train_bytes", "lm_bytes", "ADAM_STATE"]

#: Copies of the parameters an optimizer keeps beyond the weights, their gradients and one more
#: (the families' ×3): Adam and AdamW two moment buffers, SGD without momentum none.
ADAM_STATE = {"sgd": 0, "adam": 2, "adamw": 2}


def train_bytes(spec: Spec, case: Case) -> int | None:
    """One run of `stability.measure.train` (the regression and label tasks), full batch: the
    blocks at batch = train.samples (×5/3 under Adam, for its two moments), the input layer and
    the readout (weights, gradients, a copy and the optimizer's moments), the training set (also
    in float64, as it is drawn), the readout's outputs with the loss's and the backward pass's
    copies (6 of samples × outputs), and the teacher in float64 (its two weights, hidden layer and
    targets, 3 copies while they are standardised) or the labels. None when the family has no
    memory model (a user's factory)."""
    from stability.measure.train import TEACHER_HIDDEN

    assert spec.train is not None
    t = spec.train
    blocks = FAMILIES.get(spec.family).estimate(spec, dataclasses.replace(case, batch=t.samples))
    if blocks is None:
        return None
    state = ADAM_STATE[t.optimizer]
    conv = spec.block.layer == "conv2d"
    pixels = (case.spatial or DEFAULT_SIZE) ** 2 if conv else 1
    d_in = t.input_dim * pixels  # one flattened input
    head = t.input_dim * case.width * (9 if conv else 1) + case.width + case.width * t.outputs + t.outputs
    data = t.samples * d_in
    outputs = t.samples * t.outputs
    if t.task == "teacher":
        teacher = d_in * TEACHER_HIDDEN + TEACHER_HIDDEN * t.outputs + t.samples * TEACHER_HIDDEN + 3 * outputs
    else:
        teacher = t.samples  # int64 labels
    item = item_bytes(case)
    return int(blocks * (3 + state) // 3 + (head * (3 + state) + data + 6 * outputs) * item + (data + teacher) * 8)


def lm_bytes(spec: Spec, case: Case) -> int | None:
    """One run of `stability.measure.lm_train`: the blocks at the case's batch with AdamW's two
    moment buffers and the update measurement's copy (×5/3), the token and position embeddings and
    the readout (×5: weights, gradients, a copy, two moments), the logits of a batch (3 saved
    copies) and of the held-out set (2), in float32 at least (the loss is), and the chain's rows and
    their cumulative sums in float64. None when the family has no memory model."""
    assert spec.train is not None
    t = spec.train
    blocks = FAMILIES.get(spec.family).estimate(spec, case)
    if blocks is None:
        return None
    item = max(item_bytes(case), 4)
    tokens = case.tokens or DEFAULT_SIZE
    head = t.vocab * case.width * (1 if t.tied else 2) + tokens * case.width
    logits = (3 * case.batch + 2 * t.eval_sequences) * tokens * t.vocab
    chain = 2 * t.vocab ** (t.order + 1)
    return int(blocks * 5 // 3 + (5 * head + logits) * item + chain * 8)
