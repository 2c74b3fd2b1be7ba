"""Whether a ratio over the stack sets the embedding boundary apart: the one rule `gradient_arrival`
asks (stability.judge.stream's docstring says why the entry is apart; `residual_stream` always
reports it apart).
"""

from __future__ import annotations

from stability.measure.measurements import Measurements

__all__ = ["entry_apart"]


def entry_apart(m: Measurements) -> bool:
    """Whether a ratio over the stack leaves the embedding boundary out by default: x₀ is the model's
    own embedding of token ids (`extra["embedded"]`, stability.families.build.Network.embedded) and
    the stack is pre-norm with the stream the bare sum (`extra["block_form"]`: position "pre",
    stability.measure.block_form). There block 0's norms multiply the gradient at x₀ by about
    1/rms(x₀), a property of the embedding's init (stability.judge.stream's docstring); a post-norm
    block 0, or an input the harness drew, is a block like the others."""
    form = m.extra.get("block_form")
    return bool(m.extra.get("embedded")) and isinstance(form, dict) and form.get("position") == "pre"
