"""Spec-level checks of the language-model keys: the transformer's `qk_norm`, `attn_softcap` and
`sigma_reparam`, the `[train]` keys of the language-model run (task = "markov"), and the
`[expect.NAME]` tables of its invariants, checked when a spec is loaded, before anything is built."""

from __future__ import annotations

from typing import Any

from stability.errors import SpecError
from stability.spec.lm_expect import LM_INVARIANTS
from stability.spec.registry import FAMILIES, INVARIANTS
from stability.spec.schema import DEFAULT_SIZE, Spec

__all__ = ["check_lm_keys", "check_lm_expect", "MAX_STATES", "LM_TRAIN_KEYS", "LM_NEEDS", "CAUSAL_LM_SUFFIXES"]

#: What the language-model run needs of a family (`Family.lacks`; the invariants' `Invariant.needs`):
#: a language model it can build (stability.families.lm_models: the transformer family's blocks, a
#: transformers causal LM, or a factory's module from token ids to logits).
LM_NEEDS = frozenset({"language_model"})
#: How the transformers classes a language-model spec may name end (the causal LMs: a model with its head).
CAUSAL_LM_SUFFIXES = ("ForCausalLM", "LMHeadModel")
#: The most k-gram states a Markov task may have (vocab ** order): its rows are vocab ** (order + 1) float64 numbers.
MAX_STATES = 65_536
#: [train] keys read by the language-model run only.
LM_TRAIN_KEYS = (
    "vocab",
    "order",
    "concentration",
    "eval_sequences",
    "betas",
    "eps",
    "weight_decay",
    "decay",
    "clip",
    "schedule",
    "min_lr_ratio",
    "z_loss",
    "logit_softcap",
    "tied",
    "record_every",
)
#: [train] keys of the regression and label tasks, which the language-model run does not read.
_TASK_KEYS = ("samples", "input_dim", "outputs")


def _set(data: dict[str, Any], table: str, key: str) -> bool:
    return isinstance(data.get(table), dict) and key in data[table]


def _head_dims(spec: Spec) -> list[int]:
    """Every head dimension the space can draw (width / heads), smallest first."""
    b, w = spec.block, spec.space.width
    widths = list(w.values) if w.values is not None else [w[0]]
    if b.head_dim is not None:
        return [b.head_dim]
    return sorted({v // (b.heads or 1) for v in widths})


def check_lm_keys(spec: Spec, data: dict[str, Any]) -> None:
    """The block's stability options and the [train] keys of the language-model run (called from
    `stability.spec.combinations` for every spec; which families read the block options is the
    family registry's `block_keys`)."""
    f, b, s, t = spec.path, spec.block, spec.space, spec.train
    if b.qk_norm == "layer" and _head_dims(spec)[0] < 2:
        raise SpecError(
            f,
            "block.qk_norm",
            f"LayerNorm over a head of {_head_dims(spec)[0]} channel sets it to 0",
            value=b.qk_norm,
            fix='use qk_norm = "rms", or heads of at least 2 channels (block.head_dim)',
        )
    if b.sigma_reparam and b.residual in ("deepnorm", "gpt2"):
        raise SpecError(
            f,
            "block.sigma_reparam",
            f"divides every weight by its spectral norm, which undoes residual = '{b.residual}''s weight scaling",
            value=True,
            fix="remove one of them",
        )
    if b.sigma_reparam and "zero" in s.branch_init:
        raise SpecError(
            f,
            "space.branch_init",
            "'zero' zeroes the last layer of each branch, whose sigma_reparam scale gamma/sigma(W) is "
            "undefined at W = 0",
            value=s.branch_init,
            fix='use "default"',
        )
    if t is None:
        return
    if t.task != "markov":
        for key in LM_TRAIN_KEYS:
            if _set(data, "train", key):
                raise SpecError(
                    f,
                    f"train.{key}",
                    'applies to the language-model run (train.task = "markov")',
                    value=data["train"][key],
                    fix='remove it, or set train.task = "markov"',
                )
        if t.optimizer == "adamw":
            raise SpecError(
                f,
                "train.optimizer",
                'AdamW runs the language-model task (train.task = "markov")',
                value="adamw",
                fix='use "sgd" or "adam", or set train.task = "markov"',
            )
        return
    _check_markov(spec, data)


def _check_markov(spec: Spec, data: dict[str, Any]) -> None:
    f, s, t = spec.path, spec.space, spec.train
    assert t is not None
    declared = [n for n, _ in spec.invariants() if INVARIANTS.get(n).training and n not in LM_INVARIANTS]
    if declared:
        raise SpecError(
            f,
            f"expect.{declared[0]}",
            'runs the regression or label task, and train.task = "markov" trains a language model',
            fix='use task = "teacher" or "labels" for it, in a spec of its own',
        )
    lacks = FAMILIES.get(spec.family).lacks
    missing = sorted(LM_NEEDS & set(lacks))
    if missing:
        raise SpecError(
            f,
            "train.task",
            f"family '{spec.family}' {lacks[missing[0]]}",
            value="markov",
            fix='use family = "transformer" (block.layer = "tokens"), "library" (a transformers causal LM) '
            'or "custom" (a factory returning the language model)',
        )
    lm_check = FAMILIES.get(spec.family).lm_check
    if lm_check is not None:
        lm_check(spec, data)
    for key in _TASK_KEYS:
        if _set(data, "train", key):
            raise SpecError(
                f,
                f"train.{key}",
                "sizes the regression and label tasks; the language model reads vocab, order and the case's "
                "batch and tokens",
                value=data["train"][key],
                fix="remove it",
            )
    if t.optimizer != "adamw":
        raise SpecError(
            f,
            "train.optimizer",
            "the language-model run trains with AdamW",
            value=t.optimizer,
            fix='set optimizer = "adamw"',
        )
    if t.parametrization != "sp":
        raise SpecError(
            f,
            "train.parametrization",
            "the language-model run has the standard parametrisation only",
            value=t.parametrization,
            fix='remove it (or use "sp")',
        )
    if t.vocab**t.order > MAX_STATES:
        raise SpecError(
            f,
            "train.order",
            f"an order-{t.order} chain over {t.vocab} tokens has {t.vocab**t.order} states, more than {MAX_STATES}",
            value=t.order,
            fix="lower train.order or train.vocab",
        )
    if not all(0.0 <= beta < 1.0 for beta in t.betas):
        raise SpecError(
            f, "train.betas", "AdamW's betas lie in [0, 1)", value=list(t.betas), fix="use e.g. [0.9, 0.95]"
        )
    shortest = (s.tokens or (DEFAULT_SIZE, DEFAULT_SIZE))[0]
    if shortest < t.order:
        raise SpecError(
            f,
            "space.tokens",
            f"an order-{t.order} chain scores the tokens after the first {t.order}, so a sequence needs at "
            f"least {t.order}",
            value=list(s.tokens or ()),
            fix=f"start the range at {t.order}",
        )
    if _set(data, "train", "min_lr_ratio") and t.schedule != "cosine":
        raise SpecError(
            f,
            "train.min_lr_ratio",
            'is where the cosine decay ends (train.schedule = "cosine")',
            value=t.min_lr_ratio,
            fix='remove it or set schedule = "cosine"',
        )
    if t.record_every > t.steps:
        raise SpecError(
            f,
            "train.record_every",
            f"is above train.steps = {t.steps}, so only the last step would be recorded",
            value=t.record_every,
            fix=f"use at most {t.steps}",
        )


def check_transformer_lm(spec: Spec, data: Any) -> None:
    """The transformer family's language model attends causally."""
    if not spec.block.causal:
        raise SpecError(
            spec.path,
            "block.causal",
            "a language model predicts each token from the ones before it, and bidirectional attention sees the answer",
            value=False,
            fix="set causal = true",
        )


def check_library_lm(spec: Spec, data: Any) -> None:
    """A library language model: a transformers causal LM (or a config class, built as its causal
    LM) over train.vocab tokens, trained as the library initialises it."""
    f, t = spec.path, spec.train
    assert t is not None
    opts: Any = spec.options
    library, _, name = str(opts.model).partition(":")
    if library != "transformers" or not (name.endswith(CAUSAL_LM_SUFFIXES) or name.endswith("Config")):
        raise SpecError(
            f,
            "block.model",
            'is not a transformers causal language model: the language-model run (train.task = "markov") '
            "trains a model from token ids to next-token logits",
            value=opts.model,
            fix="name a transformers class ending in ForCausalLM or LMHeadModel (e.g. "
            '"transformers:GPT2LMHeadModel", "transformers:LlamaForCausalLM") or its config '
            "class",
        )
    vocab = opts.config.get("vocab_size")
    if vocab is not None and vocab != t.vocab:
        raise SpecError(
            f,
            "block.config.vocab_size",
            f"differs from train.vocab = {t.vocab}, the chain's vocabulary",
            value=vocab,
            fix=f"set it to {t.vocab}, or remove it (train.vocab fills it)",
        )
    for key, why in (
        ("shipped", "the language-model run trains the model as the library initialises it"),
        ("blocks", "the language-model run trains the whole model"),
    ):
        if getattr(opts, key):
            raise SpecError(f, f"block.{key}", why, value=getattr(opts, key), fix="remove it")
    if opts.inputs not in (None, "tokens"):
        raise SpecError(
            f,
            "block.inputs",
            "the language model reads token ids",
            value=opts.inputs,
            fix='remove it (or use "tokens")',
        )


def check_lm_expect(spec: Spec) -> None:
    """The language-model invariants' tables against the run (their registry entries' `check`)."""
    f, t, e = spec.path, spec.train, spec.expect
    declared = next(n for n, _ in spec.invariants() if n in LM_INVARIANTS)
    if t is None:
        raise SpecError(
            f,
            "train",
            f"is required by expect.{declared} (the language-model run it judges)",
            fix='add [train] with task = "markov", optimizer = "adamw", steps, lr (see docs/training.md)',
        )
    if t.task != "markov":
        raise SpecError(
            f,
            "train.task",
            f"expect.{declared} judges a language-model run",
            value=t.task,
            fix='set train.task = "markov" and optimizer = "adamw" (see docs/training.md)',
        )
    al = getattr(e, "attention_logits", None)
    if al is not None and al.max_logit is None and al.max_growth is None:
        raise SpecError(
            f,
            "expect.attention_logits",
            "bounds nothing: both max_logit and max_growth are unset",
            fix="set max_logit = 100.0 or max_growth",
        )
    ew = getattr(e, "early_warning", None)
    if ew is not None and ew.steps >= t.steps:
        raise SpecError(
            f,
            "expect.early_warning.steps",
            f"must be below train.steps = {t.steps}: the warning comes before the run ends",
            value=ew.steps,
            fix=f"use e.g. {max(1, t.steps // 4)}",
        )
    ls = getattr(e, "loss_spike", None)
    if ls is not None and ls.window >= t.steps:
        raise SpecError(
            f,
            "expect.loss_spike.window",
            f"must be below train.steps = {t.steps}",
            value=ls.window,
            fix=f"use e.g. {max(1, t.steps // 10)}",
        )
