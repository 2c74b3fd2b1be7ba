"""Stage 4 (training): what one language-model run recorded, as plain numbers (no torch), with its
one serialisation (`to_dict` / `from_dict`). `stability.measure.lm_train` fills it; the verdicts of
`stability.judge.lm_invariants` are pure functions of it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from stability.numbers import from_json_safe, json_safe

__all__ = ["LMRun", "PARAMETER_GROUPS"]

#: The parameter groups whose update RMS a run records (stability.measure.lm_train.parameter_group).
PARAMETER_GROUPS: tuple[str, ...] = ("embedding", "attention", "mlp", "norm", "readout")


#: The fields that hold text, not numbers (a number's non-finite values are written as text).
_TEXT = frozenset({"attention_missing"})


@dataclass
class LMRun:
    """One run: the loss of every step's batch (before its update), and at every recorded step
    (`recorded`, every `record_every` steps, the last step and a diverging step) per layer the
    largest attention logit and the attention entropy (nats, mean over rows with two or more
    visible keys, the smallest head's), the output log Z over the scored tokens (mean, max, min),
    the gradient's global RMS before clipping, and per parameter group the RMS of the update
    the step made. Held-out losses: `initial_eval` before training, `final_eval` after (NaN when
    the run diverged), `oracle_eval` the chain's own loss on the same tokens, `entropy_rate` H."""

    lr: float
    seed: int
    steps: int  # steps asked for
    eps: float  # AdamW's ε, which the gradient RMS is read against
    losses: list[float] = field(default_factory=list)
    recorded: list[int] = field(default_factory=list)
    step_lr: list[float] = field(default_factory=list)  # [record]: the learning rate of that step
    max_logit: list[list[float]] = field(default_factory=list)  # [record][layer]
    entropy: list[list[float]] = field(default_factory=list)  # [record][layer]
    logz_mean: list[float] = field(default_factory=list)
    logz_max: list[float] = field(default_factory=list)
    logz_min: list[float] = field(default_factory=list)
    grad_rms: list[float] = field(default_factory=list)
    update_rms: dict[str, list[float]] = field(default_factory=dict)  # group → [record]
    diverged_at: int | None = None
    initial_eval: float = math.nan
    final_eval: float = math.nan
    oracle_eval: float = math.nan
    entropy_rate: float = math.nan
    seconds: float = 0.0
    attention_missing: str = ""  # why no attention logit was captured ("" where they were)

    @property
    def layers(self) -> int:
        return len(self.max_logit[0]) if self.max_logit else 0

    def largest_logit(self) -> list[float]:
        """[record]: the largest attention logit over the layers."""
        return [max(row) if row else math.nan for row in self.max_logit]

    def largest_abs_logz(self) -> list[float]:
        """[record]: max over the scored tokens of |log Z|."""
        return [max(abs(a), abs(b)) for a, b in zip(self.logz_max, self.logz_min, strict=True)]

    def to_dict(self) -> dict[str, Any]:
        return {k: json_safe(v) for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LMRun:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"LMRun has no field {unknown[0]!r}")
        return cls(**{k: v if k in _TEXT else from_json_safe(v) for k, v in data.items()})
