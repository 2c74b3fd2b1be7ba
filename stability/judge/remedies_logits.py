"""The built-in remedies for logits that grow in training (`stability.spec.remedy`): the attention
logits, the output logits and the loss spikes they cause, written as a change to the transformer
family's keys, a language-model run's `[train]` keys, or a library config's qk-norm key.

Each remedy, the change it makes and what it is meant for:

- `qk_norm` — the change: `block.qk_norm = "layer"`; a library config's qk-norm key; meant for:
  attention logits, early warning, LR sensitivity, entropy.
- `attention_softcap` — the change: `block.attn_softcap`; meant for: attention logits, early
  warning, entropy.
- `z_loss` — the change: `train.z_loss = 1e-4`; meant for: output logits, LR sensitivity, loss
  spikes.
- `logit_softcap` — the change: `train.logit_softcap = 30`; meant for: output logits, loss spikes.
- `tied_readout` — the change: `train.tied = true`; meant for: loss spikes.

The remedies for signal propagation at initialisation are `stability.judge.remedies`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stability.judge.remedies_spec import is_transformer, library_key, library_value
from stability.spec.remedy import Remedy, register_remedy

__all__ = ["ATTENTION_CAP", "LOGIT_CAP"]

_LOGITS = frozenset({"attention_logits", "early_warning", "lr_sensitivity", "attention_entropy"})
_QK_NORM_KEYS = ("qk_norm", "use_qk_norm", "qk_layernorm")


def _markov(spec: Any) -> bool:
    return spec.train is not None and spec.train.task == "markov"


def _qk_applies(spec: Any, data: Mapping[str, Any]) -> bool:
    if is_transformer(spec):
        return bool(spec.block.qk_norm == "none")
    key = library_key(spec, _QK_NORM_KEYS)
    return key is not None and not library_value(spec, key)


def _qk_edit(spec: Any, data: Mapping[str, Any]) -> dict[str, Any]:
    if is_transformer(spec):
        b, w = spec.block, spec.space.width
        head = b.head_dim or (min(w.values) if getattr(w, "values", None) else w[0]) // (b.heads or 1)
        return {"block.qk_norm": "layer" if head >= 2 else "rms"}
    return {f"block.config.{library_key(spec, _QK_NORM_KEYS)}": True}


#: Gemma 2's caps: 50 on the attention logits, 30 on the final logits (Gemma Team 2024, sec. 2).
ATTENTION_CAP, LOGIT_CAP = 50.0, 30.0


def _softcap_edit(spec: Any, data: Mapping[str, Any]) -> dict[str, Any]:
    cap = ATTENTION_CAP
    bound = getattr(getattr(spec.expect, "attention_logits", None), "max_logit", None)
    if bound is not None and bound <= cap:  # a cap above the declared bound cannot keep the logits below it
        cap = bound / 2
    return {"block.attn_softcap": cap}


def _train_applies(key: str, off: Any) -> Any:
    def applies(spec: Any, data: Mapping[str, Any]) -> bool:
        return _markov(spec) and getattr(spec.train, key) == off

    return applies


_BUILT_IN = (
    Remedy(
        name="qk_norm",
        summary="normalise each head's queries and keys (qk-layernorm), so the attention logits cannot grow "
        "with the weights",
        fixes=_LOGITS,
        applies=_qk_applies,
        edit=_qk_edit,
        references=(
            "Dehghani et al. (2023). Scaling Vision Transformers to 22 Billion Parameters. ICML 2023.",
            "Wortsman et al. (2023). Small-scale proxies for large-scale Transformer training instabilities. "
            "arXiv:2309.14322.",
        ),
    ),
    Remedy(
        name="attention_softcap",
        summary="soft-cap the attention logits, s → cap·tanh(s/cap) (cap 50, below the declared bound)",
        fixes=frozenset({"attention_logits", "early_warning", "attention_entropy"}),
        applies=lambda spec, data: is_transformer(spec) and spec.block.attn_softcap is None,
        edit=_softcap_edit,
        references=(
            "Gemma Team (2024). Gemma 2: Improving Open Language Models at a Practical Size. arXiv:2408.00118.",
        ),
    ),
    Remedy(
        name="z_loss",
        summary="add the z-loss 1e-4·log² Z to the training loss, which pins the output softmax's log-partition near 0",
        fixes=frozenset({"output_logits", "lr_sensitivity", "loss_spike"}),
        applies=_train_applies("z_loss", 0.0),
        edit=lambda spec, data: {"train.z_loss": 1e-4},
        references=("Chowdhery et al. (2022). PaLM: Scaling Language Modeling with Pathways. arXiv:2204.02311.",),
    ),
    Remedy(
        name="logit_softcap",
        summary="soft-cap the output logits, z → 30·tanh(z/30)",
        fixes=frozenset({"output_logits", "loss_spike"}),
        applies=_train_applies("logit_softcap", None),
        edit=lambda spec, data: {"train.logit_softcap": LOGIT_CAP},
        references=(
            "Gemma Team (2024). Gemma 2: Improving Open Language Models at a Practical Size. arXiv:2408.00118.",
        ),
    ),
    Remedy(
        name="tied_readout",
        summary="tie the readout to the token embedding (÷ √width), whose logits move √width times less per step",
        fixes=frozenset({"loss_spike"}),
        applies=_train_applies("tied", False),
        edit=lambda spec, data: {"train.tied": True},
        references=("Press, Wolf (2017). Using the Output Embedding to Improve Language Models. EACL 2017.",),
    ),
)

for _entry in _BUILT_IN:
    register_remedy(_entry)
