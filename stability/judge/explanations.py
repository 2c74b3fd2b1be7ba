"""The explanations of the built-in invariants (`stability explain NAME`): what each measures,
why it fails, how to fix it, and where to read more. Plain text; the numbers and formulas match
the judges, and each is the `explanation` of its registry entry (`stability.judge.catalog`). The
texts live beside the judges they explain: `explanations_signal` (`stability.judge.invariants`,
`stream`), `explanations_theory` (`theory_checks`), `explanations_tokens` (`token_invariants`),
`explanations_training` (`train_invariants`) and `explanations_init` (`init_conformance`); the
works they cite are `stability.judge.references`.

The texts avoid square brackets that open with a letter: the CLI prints through rich, which would
read `[lo, hi]` as a style tag and drop it (tests/test_explain.py checks the CLI prints them unchanged).
"""

from __future__ import annotations

from stability.judge.explanations_init import INIT_EXPLANATIONS
from stability.judge.explanations_signal import SIGNAL_EXPLANATIONS
from stability.judge.explanations_theory import THEORY_EXPLANATIONS
from stability.judge.explanations_tokens import TOKEN_EXPLANATIONS
from stability.judge.explanations_training import TRAINING_EXPLANATIONS
from stability.spec.registry import Explanation

__all__ = ["EXPLANATIONS"]

EXPLANATIONS: dict[str, Explanation] = {
    **SIGNAL_EXPLANATIONS,
    **THEORY_EXPLANATIONS,
    **TRAINING_EXPLANATIONS,
    **TOKEN_EXPLANATIONS,
    **INIT_EXPLANATIONS,
}
