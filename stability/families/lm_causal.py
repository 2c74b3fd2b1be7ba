"""Whether a language model reads only earlier tokens, for the whole of its run: the run scores the
prediction of token t + 1 from the logits at position t, and a model that reads a later token sees
the answer. Two checks, both asked by `stability.measure.lm_train.lm_run`:

- `check_causal`, on the built model and again on the trained one: sequences that share a prefix
  and differ in every token from a split s on must give the same logits before s, at every split
  (`SPLITS` of them, evenly spaced, in a longer sequence), in eval mode and in train mode (the mode
  the run trains in: a model may attend causally only in one of them). Dropout draws the same
  masks for both sequences (the same seed before each forward), buffers a train-mode forward
  updates (BatchNorm's running statistics) are restored, and the caller's RNG and mode are left as
  they were. A gate that starts at zero
  and opens in training is caught after training.
- `check_held_out`, by the task itself: the tokens are drawn from a seeded Markov chain whose own
  conditional probabilities are the best any predictor from earlier tokens can do, on average
  (its expected loss is the entropy rate; `stability.measure.lm_task`). Per held-out token the
  model's loss minus the chain's has a conditional mean ≥ 0 (a KL divergence) for every model
  that reads only earlier tokens, so their differences are a supermartingale: a mean difference
  more than `HELD_OUT_Z` standard errors below 0 (over at least `HELD_OUT_TOKENS` tokens) is
  proof that the model sees the answer, whatever way it reads it.

A model that fails either is bad input for the run (`SpecError`, exit 2), named by the spec key
that chose it, with the numbers.
"""

from __future__ import annotations

import math

import torch

from stability.errors import SpecError
from stability.families.build import torch_dtype
from stability.families.lm_models import TokenModel
from stability.spec.case import Case
from stability.spec.schema import DEFAULT_SIZE, Spec

__all__ = ["check_causal", "check_held_out", "not_causal", "HELD_OUT_Z", "HELD_OUT_TOKENS", "SPLITS", "splits_of"]

#: How many standard errors below the chain's own loss a held-out loss must lie to prove that the
#: model sees later tokens: a Gaussian tail of 1e-9, and under 1e-8 for Student's t at 100 tokens.
HELD_OUT_Z = 6.0
#: The fewest held-out tokens the task's test decides on (fewer: its standard error is no estimate).
HELD_OUT_TOKENS = 100


def not_causal(spec: Spec, model: TokenModel, why: str) -> SpecError:
    """The refusal of a model that reads later tokens: `why` says how it was seen."""
    config = getattr(model.module, "config", None)
    if spec.family == "library":
        key, value = "block.model", spec.options.model
    elif spec.family == "custom":
        key, value = "block.factory", spec.block.factory
    else:
        key, value = "block.causal", spec.block.causal
    if getattr(config, "is_decoder", True) is False:
        fix = (
            "set is_decoder = true in block.config (the model then attends causally), or name a decoder-only causal LM"
        )
    elif spec.family == "library":
        fix = 'name a decoder-only causal LM (e.g. "transformers:GPT2LMHeadModel", "transformers:LlamaForCausalLM")'
    elif spec.family == "custom":
        fix = (
            "attend causally, in train mode as in eval mode (scaled_dot_product_attention(..., is_causal=True), "
            "or a lower-triangular mask), and read no later token through any other path"
        )
    else:
        fix = "the transformer family attends causally by construction: this is a fault of the harness; report it"
    return SpecError(
        spec.path,
        key,
        f"is not causal: {why}, so it sees the next token the language-model run asks it to predict",
        value=value,
        fix=fix,
    )


#: The most splits one check tries (every split of a sequence of up to this many tokens and one).
SPLITS = 16


def splits_of(tokens: int) -> list[int]:
    """Where the later tokens start: every position from 1 to T − 1, or `SPLITS` of them evenly
    spaced from 1 to T − 1 in a longer sequence."""
    if tokens - 1 <= SPLITS:
        return list(range(1, tokens))
    return sorted({1 + round(i * (tokens - 2) / (SPLITS - 1)) for i in range(SPLITS)})


def check_causal(spec: Spec, case: Case, model: TokenModel, *, steps: int | None = None) -> None:
    """Raise `not_causal` when the logits before a split move with the tokens after it (the module
    docstring), in eval or in train mode; `steps`: how many training steps the model has had."""
    assert spec.train is not None
    t, vocab = case.tokens or DEFAULT_SIZE, spec.train.vocab
    splits = splits_of(t)
    if not splits:
        return
    device = torch.device(case.device)
    forked = [device.index or 0] if device.type == "cuda" else []
    first = ((torch.arange(2 * t).reshape(2, t) * 7 + 3) % vocab).to(device)  # (2, T), the same for every case
    module = model.module
    was = module.training
    saved = {name: b.detach().clone() for name, b in module.named_buffers()}
    tolerance = 64 * torch.finfo(torch_dtype(case.dtype)).eps
    after = f"after {steps} training steps " if steps else ""

    def logits(tokens: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(0)  # the same dropout masks for every sequence
        out: torch.Tensor = model.logits(tokens).double()  # (2, T, V)
        return out

    try:
        with torch.no_grad(), torch.random.fork_rng(devices=forked):
            for mode in ("eval", "train"):
                module.train(mode == "train")
                base = logits(first)
                for s in splits:
                    second = first.clone()
                    second[:, s:] = (second[:, s:] + 1 + torch.arange(t - s, device=device) % (vocab - 1)) % vocab
                    moved = float((base[:, :s] - logits(second)[:, :s]).abs().max())
                    scale = float(base[:, :s].abs().max())
                    if moved > tolerance * max(scale, 1.0):
                        raise not_causal(
                            spec,
                            model,
                            f"{after}in {mode} mode its logits at positions 0-{s - 1} moved by up to {moved:.3g} "
                            f"(of {scale:.3g}) when the tokens after them changed",
                        )
    finally:
        module.train(was)
        with torch.no_grad():
            for name, b in module.named_buffers():
                if name in saved and b.shape == saved[name].shape:
                    b.copy_(saved[name])


def check_held_out(
    spec: Spec,
    model: TokenModel,
    model_loss: torch.Tensor,
    chain_loss: torch.Tensor,
    *,
    entropy_rate: float,
    steps: int,
) -> None:
    """Raise `not_causal` when the model's held-out loss per token (`model_loss`, nats) lies more
    than `HELD_OUT_Z` standard errors below the chain's own on the same tokens (`chain_loss`, in
    the same order): no model that reads only earlier tokens beats, on average, the chain that drew
    them (the module docstring)."""
    d = model_loss.double().flatten() - chain_loss.double().flatten()  # (N,): the model's loss minus the chain's
    n = d.numel()
    if n < HELD_OUT_TOKENS or not bool(torch.isfinite(d).all()):
        return
    gain, spread = -float(d.mean()), float(d.std())
    se = spread / math.sqrt(n)
    if not (gain > 0 and gain > HELD_OUT_Z * se):
        return
    z = gain / se if se > 0 else math.inf
    loss, chain = float(model_loss.double().mean()), float(chain_loss.double().mean())
    side = "below" if loss < entropy_rate else "above"
    raise not_causal(
        spec,
        model,
        f"after {steps} training steps its held-out loss is {loss:.4g} nats per token ({side} the task's entropy "
        f"rate {entropy_rate:.4g}), {gain:.3g} ± {se:.2g} below the loss of the chain that drew the {n} held-out "
        f"tokens ({chain:.4g}), {z:.3g} standard errors: no model that reads only earlier tokens beats that chain",
    )
