"""Stage 4 (training): the attention logits and entropies of a language model, captured while it
trains, through the extension point each kind of model has (`stability.families.lm_models`).

**What is recorded**, per attention layer and recorded step, the same for every kind of model:
the largest attention logit s_ij = scaling·q_i·k_j (scaling the model's own, 1/√d by default),
after the model's soft-cap cap·tanh(s/cap) where it has one (the logits that enter the softmax,
before the mask is added), over the keys j each query i sees (the mask's visible entries), the
maximum over the batch, the heads, the queries and those keys; and the attention entropy
−Σ_j p_ij log p_ij in nats of the softmax's output, its mean over the batch and the queries that see
two or more keys, the smallest head's. q and k are the ones the attention uses: after the model's
own q/k norms and rotary positions (Qwen3 normalises q and k per head before it calls the
attention function; Gemma 2 passes `softcap` to it).

**Where it is read:**

- the project's transformer (and any module that computes its attention probabilities with
  `stability.families.transformer.AttentionProbs`): a forward pre-hook reads the logits that enter
  `AttentionProbs`, a forward hook its output; layer l is block l (`LanguageModel`) or the l-th
  `AttentionProbs` in `model.modules()` order (a factory's model);
- a transformers model: an attention function registered in transformers' own registry under
  `RECORDING` (`transformers.AttentionInterface.register`, with the eager mask registered for it in
  `transformers.AttentionMaskInterface`) and chosen with `model.set_attn_implementation(RECORDING)`.
  It computes exactly the eager attention (`eager_attention_forward` of the model files: grouped
  key/value heads repeated, q·kᵀ·scaling, the soft-cap, the additive mask, a float32 softmax,
  dropout as the module asks, ·v), so the model's outputs are bit for bit those of
  `attn_implementation = "eager"` (`tests/test_lm_capture.py`), and records the logits as it goes.
  The model runs it at every step; `remove()` puts the model's own implementation back. A model
  whose attention does not go through the registry (`set_attn_implementation` leaves it as it was)
  is captured nowhere, and says so (`Capture.missing`);
- any other `nn.Module` (a factory's language model): every call of
  `torch.nn.functional.scaled_dot_product_attention` in its forward, seen by a
  `torch.overrides.TorchFunctionMode` entered only around a recorded step's forward. The call runs
  unchanged (the model's own output); the recorder computes scale·q·kᵀ from the same q and k
  (`enable_gqa` repeats k's heads), the visible keys from `is_causal` (the lower triangle, aligned
  at the top left, as torch's) and `attn_mask` (a boolean mask: True is visible; a float mask:
  entries above the dtype's lowest half are visible, and it is added before the entropy's softmax,
  not to the recorded logits), and the entropy from a float64 softmax of its own. Layer l is the
  l-th call in the forward. A model that computes attention otherwise (its own softmax, a soft-cap,
  a fused kernel) is captured nowhere, and says so.

Nothing is kept but two floats per layer: no attention matrix outlives its forward.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from stability.families.lm_models import LanguageModel, TokenModel
from stability.families.transformer import AttentionProbs

__all__ = ["RECORDING", "Capture", "ProbsCapture", "capture", "recording_attention", "register_recording"]

#: The name of the recording attention function in transformers' registry.
RECORDING = "stability_recording"


class Capture:
    """Per layer, the largest attention logit and the smallest head's entropy of the recorded
    forward passes since the last `take` (the module docstring), while `active`. `missing` says
    why nothing was captured, where the model offers no extension point the recorder knows."""

    def __init__(self) -> None:
        self._active = False
        self.calls = 0
        self.layers = 0
        self.max_logit: dict[int, float] = {}
        self.entropy: dict[int, float] = {}
        self.missing = ""

    @property
    def active(self) -> bool:
        return self._active

    @active.setter
    def active(self, value: bool) -> None:
        self._active = value
        self.calls = 0  # a layer is the order of its call within one forward

    def next_layer(self) -> int:
        index = self.calls
        self.calls += 1
        return index

    def record(
        self, layer: int, logits: torch.Tensor, visible: torch.Tensor | None, probs: torch.Tensor | None
    ) -> None:
        """logits (B, H, T, S) as the softmax takes them (before the mask), `visible` a boolean mask
        broadcasting to them (None: every key), `probs` the softmax's output (B, H, T, S)."""
        self.layers = max(self.layers, layer + 1)
        s = logits.detach()
        m = float(s.amax() if visible is None else s.masked_fill(~visible, -math.inf).amax())
        self.max_logit[layer] = max(self.max_logit.get(layer, -math.inf), m)
        if probs is None:
            return
        p = probs.detach().double()  # (B, H, T, S)
        ent = torch.special.entr(p).sum(dim=-1)  # (B, H, T)
        if visible is None:
            vis2 = torch.ones(p.shape[-2:], dtype=torch.bool, device=p.device)
        else:
            vis = visible.expand(p.shape) if visible.dim() == 4 else visible
            vis2 = (
                vis.reshape(-1, *vis.shape[-2:])[0]
                if vis.dim() > 2 and bool((vis == vis.reshape(-1, *vis.shape[-2:])[0]).all())
                else vis
            )
        if vis2.dim() == 2:  # one mask for every sequence and head: the rows that see two or more keys
            rows = vis2.sum(dim=1) > 1  # (T,)
            value = float(ent[..., rows].mean(dim=(0, 2)).amin()) if bool(rows.any()) else math.nan
        else:  # a mask of its own per sequence or head
            rows4 = vis2.sum(dim=-1) > 1  # (B, H, T)
            count = rows4.double().sum(dim=(0, 2))  # (H,)
            value = float(((ent * rows4).sum(dim=(0, 2)) / count).amin()) if bool((count > 0).all()) else math.nan
        self.entropy[layer] = min(self.entropy.get(layer, math.inf), value)

    def take(self, layers: int | None = None) -> tuple[list[float], list[float]]:
        n = self.layers if layers is None else layers
        out = [self.max_logit.get(i, math.nan) for i in range(n)], [self.entropy.get(i, math.nan) for i in range(n)]
        self.max_logit, self.entropy = {}, {}
        return out

    def forward(self) -> contextlib.AbstractContextManager[Any]:
        """What a recorded forward runs inside (the sdpa capture's TorchFunctionMode; else nothing)."""
        return contextlib.nullcontext()

    def remove(self) -> None:
        """Undo what the capture installed."""


# ----------------------------------------------------------------------------- AttentionProbs


class ProbsCapture(Capture):
    """Forward (pre-)hooks on every `AttentionProbs`; layer = its block (LanguageModel) or its order."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self._handles: list[Any] = []
        if isinstance(model, LanguageModel):
            found = [
                (i, m) for i, block in enumerate(model.blocks) for m in block.modules() if isinstance(m, AttentionProbs)
            ]
            self.layers = len(model.blocks)
        else:
            found = list(enumerate(m for m in model.modules() if isinstance(m, AttentionProbs)))
            self.layers = len(found)
        self._scores: dict[int, torch.Tensor] = {}
        for i, module in found:
            self._handles.append(module.register_forward_pre_hook(self._pre(i)))
            self._handles.append(module.register_forward_hook(self._post(i)))
        if not found:
            self.missing = "the model computes no stability AttentionProbs"

    @staticmethod
    def _visible(module: nn.Module, t: int, device: torch.device) -> torch.Tensor:
        if getattr(module, "causal", False):
            return torch.ones(t, t, dtype=torch.bool, device=device).tril()  # (T, T): key j ≤ query i
        return torch.ones(t, t, dtype=torch.bool, device=device)

    def _pre(self, index: int) -> Any:
        def hook(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            if self.active:
                s = args[0].detach()  # (B, H, T, T): the logits entering the softmax
                self.record(index, s, self._visible(module, s.shape[-1], s.device), None)

        return hook

    def _post(self, index: int) -> Any:
        def hook(module: nn.Module, args: Any, out: torch.Tensor) -> None:
            if self.active:
                visible = self._visible(module, out.shape[-1], out.device)
                p = out.detach().double()  # (B, H, T, T)
                rows = visible.sum(dim=1) > 1  # (T,)
                ent = torch.special.entr(p).sum(dim=-1)[..., rows]  # (B, H, T')
                value = float(ent.mean(dim=(0, 2)).amin()) if bool(rows.any()) else math.nan
                self.entropy[index] = min(self.entropy.get(index, math.inf), value)

        return hook

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


# ----------------------------------------------------------------------------- transformers


#: The capture the recording attention function reports to (one run at a time in a process).
_CURRENT: list[Capture] = []


def _repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(B, H_kv, S, d) → (B, H_kv·n_rep, S, d), each key/value head repeated n_rep times in place
    (transformers' `repeat_kv`)."""
    if n_rep == 1:
        return x
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


def recording_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    softcap: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' eager attention, op for op (q (B, H, T, d), k and v (B, H_kv, S, d), an additive
    float mask (B, 1, T, S) or None), recording the logits and entropy into the active capture."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    n_rep = query.shape[1] // key.shape[1]
    key_states = _repeat_kv(key, n_rep)
    value_states = _repeat_kv(value, n_rep)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling  # (B, H, T, S)
    if softcap is not None:
        attn_weights = attn_weights / softcap
        attn_weights = torch.tanh(attn_weights)
        attn_weights = attn_weights * softcap
    logits = attn_weights
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    cap = _CURRENT[-1] if _CURRENT else None
    if cap is not None and cap.active:
        visible = (
            None
            if attention_mask is None
            else attention_mask > torch.finfo(attention_mask.dtype).min / 2
            if attention_mask.is_floating_point()
            else attention_mask
        )
        cap.record(cap.next_layer(), logits, visible, attn_weights)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)  # (B, H, T, d)
    attn_output = attn_output.transpose(1, 2).contiguous()  # (B, T, H, d)
    return attn_output, attn_weights


def register_recording() -> None:
    """Register `recording_attention` as `RECORDING` in transformers' attention registry, and the
    eager attention's additive mask for it in the mask registry (without one, transformers builds
    no mask for an implementation it does not know, and the attention would not be causal)."""
    import transformers
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    transformers.AttentionInterface.register(RECORDING, recording_attention)
    transformers.AttentionMaskInterface.register(RECORDING, ALL_MASK_ATTENTION_FUNCTIONS["eager"])


def _implementation(model: nn.Module) -> Any:
    return getattr(getattr(model, "config", None), "_attn_implementation", None)


class _TransformersCapture(Capture):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        register_recording()
        self._model = model
        self._before = _implementation(model)
        try:
            model.set_attn_implementation(RECORDING)  # type: ignore[operator]
        except Exception as exc:  # a model that refuses the name
            self.missing = f"{type(model).__name__} refused the recording attention ({type(exc).__name__}: {exc})"
        else:
            if _implementation(model) != RECORDING:
                self.missing = (
                    f"{type(model).__name__} does not take its attention function from "
                    f"transformers' registry (set_attn_implementation left it at {self._before!r})"
                )
        _CURRENT.append(self)

    def remove(self) -> None:
        if self in _CURRENT:
            _CURRENT.remove(self)
        if not self.missing and self._before is not None:
            self._model.set_attn_implementation(self._before)  # type: ignore[operator]


# ----------------------------------------------------------------------------- F.scaled_dot_product_attention


class _SdpaMode(TorchFunctionMode):
    def __init__(self, capture: _SdpaCapture) -> None:
        super().__init__()
        self.capture = capture

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        if func is nn.functional.scaled_dot_product_attention:
            self.capture.seen(*args, **kwargs)
        return func(*args, **kwargs)


class _SdpaCapture(Capture):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.missing = (
            "its forward calls neither torch.nn.functional.scaled_dot_product_attention nor "
            "stability's AttentionProbs (docs/training.md, 'Your own language model')"
        )

    @contextlib.contextmanager
    def _mode(self) -> Iterator[None]:
        with _SdpaMode(self):
            yield

    def forward(self) -> contextlib.AbstractContextManager[Any]:
        return self._mode() if self.active else contextlib.nullcontext()

    def seen(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> None:
        """One call's logits scale·q·kᵀ (…, L, S), visible keys and a float64 softmax for the entropy."""
        with torch.no_grad():
            q, k = query.detach(), key.detach()
            if enable_gqa and k.shape[-3] != q.shape[-3]:
                k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)  # (B, H, L, S)
            if s.dim() == 3:
                s = s.unsqueeze(1)
            lq, sk = s.shape[-2:]
            visible = torch.ones(lq, sk, dtype=torch.bool, device=s.device).tril() if is_causal else None
            bias = None
            if attn_mask is not None:
                if attn_mask.dtype == torch.bool:
                    m = attn_mask
                else:
                    m = attn_mask > torch.finfo(attn_mask.dtype).min / 2
                    bias = attn_mask.double()
                visible = m if visible is None else visible & m
            z = s.double() if bias is None else s.double() + bias
            if visible is not None:
                z = z.masked_fill(~visible, -math.inf)
            self.record(self.next_layer(), s, visible, torch.softmax(z, dim=-1))
        self.missing = ""


def capture(model: TokenModel) -> Capture:
    """The capture for a model's kind (`TokenModel.attention`), installed; `remove()` it after."""
    if model.attention == "probs":
        return ProbsCapture(model.module)
    if model.attention == "transformers":
        return _TransformersCapture(model.module)
    return _SdpaCapture(model.module)
