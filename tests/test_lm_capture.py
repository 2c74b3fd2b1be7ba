"""stability/measure/lm_capture.py: the attention logits each kind of language model records,
against a hand computation from the model's own modules at one step, and the model's outputs
with the recording attention against the library's eager attention."""

from __future__ import annotations

import importlib
import math
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from approx_support import approx
from torch import nn

from stability.families.lm_models import TokenModel, library_parameter_group
from stability.measure.lm_capture import RECORDING, capture

transformers = pytest.importorskip(
    "transformers", reason="Hugging Face transformers is not installed (pip install -e '.[hf]')"
)

_SMALL = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 64,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
#: The zoo's decoder families, tiny, each with what makes its attention its own: GQA, a sliding
#: window shorter than the sequence, Qwen3's q/k norms, Gemma 2's soft-cap and query scalar.
MODELS: dict[str, dict[str, Any]] = {
    "GPT2LMHeadModel": {
        "n_embd": 32,
        "n_layer": 2,
        "n_head": 4,
        "vocab_size": 64,
        "n_positions": 16,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
    "LlamaForCausalLM": _SMALL,
    "MistralForCausalLM": {**_SMALL, "sliding_window": 3},
    "Qwen3ForCausalLM": {**_SMALL, "head_dim": 8},
    "Gemma2ForCausalLM": {
        **_SMALL,
        "head_dim": 8,
        "sliding_window": 3,
        "query_pre_attn_scalar": 12,
        "attn_logit_softcapping": 2.0,
        "attn_implementation": "eager",
    },
}


def _model(name: str) -> nn.Module:
    cls = getattr(transformers, name)
    torch.manual_seed(0)
    model: nn.Module = cls(cls.config_class(**MODELS[name]))
    with torch.no_grad():  # larger q/k weights than the init's, so that the soft-cap bends the logits
        for n, p in model.named_parameters():
            if any(k in n for k in ("q_proj", "k_proj", "c_attn")):
                p.mul_(8.0)
    return model


def _tokens() -> torch.Tensor:
    return torch.randint(3, 64, (2, 8), generator=torch.Generator().manual_seed(1))


def _by_hand(s: torch.Tensor, visible: torch.Tensor) -> tuple[float, float]:
    """(the largest visible logit, the smallest head's entropy over the rows with two or more keys)."""
    z = s.masked_fill(~visible, -math.inf)
    ent = torch.special.entr(torch.softmax(z, dim=-1)).sum(dim=-1)  # (B, H, T)
    rows = visible.sum(dim=1) > 1
    return float(z.amax()), float(ent[..., rows].mean(dim=(0, 2)).amin())


def _hand_gpt2(model: nn.Module, tokens: torch.Tensor) -> list[tuple[float, float]]:
    """max over visible keys of q·kᵀ/√d per layer, from the blocks' own ln_1 and c_attn, and the entropy."""
    hidden = model(input_ids=tokens, output_hidden_states=True, use_cache=False).hidden_states
    out = []
    for layer, block in enumerate(model.transformer.h):
        x = block.ln_1(hidden[layer])  # (B, T, C)
        q, k, _ = block.attn.c_attn(x).split(32, dim=2)
        b, t, _ = x.shape
        q, k = (y.view(b, t, 4, 8).transpose(1, 2).double() for y in (q, k))  # (B, H, T, d)
        s = q @ k.transpose(-1, -2) / math.sqrt(8)  # (B, H, T, T)
        visible = torch.ones(t, t, dtype=torch.bool).tril()
        out.append(_by_hand(s, visible))
    return out


def _hand_rotary(model: nn.Module, tokens: torch.Tensor) -> list[tuple[float, float]]:
    """The same for Llama, Mistral, Qwen3 and Gemma 2: the layer's input norm, q/k projections, the
    q/k norms where the model has them, rotary positions, GQA, its scaling, soft-cap and window."""
    module = importlib.import_module(type(model).__module__)
    hidden = model(input_ids=tokens, output_hidden_states=True, use_cache=False).hidden_states
    cfg = model.config
    b, t = tokens.shape
    positions = torch.arange(t)[None]
    out = []
    for layer, block in enumerate(model.model.layers):
        attn = block.self_attn
        x = block.input_layernorm(hidden[layer])  # (B, T, C)
        q = attn.q_proj(x).view(b, t, -1, attn.head_dim)
        k = attn.k_proj(x).view(b, t, -1, attn.head_dim)
        if hasattr(attn, "q_norm"):
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # (B, H, T, d)
        cos, sin = model.model.rotary_emb(x, positions)
        q, k = module.apply_rotary_pos_emb(q, k, cos, sin)
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        s = (q.double() @ k.double().transpose(-1, -2)) * attn.scaling  # (B, H, T, T)
        cap = getattr(cfg, "attn_logit_softcapping", None)
        if cap is not None:
            s = cap * torch.tanh(s / cap)
        i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
        visible = j <= i
        window = (
            getattr(attn, "sliding_window", None)
            if hasattr(attn, "sliding_window")
            else getattr(cfg, "sliding_window", None)
        )
        if window is not None:
            visible &= j > i - window
        out.append(_by_hand(s, visible))
    return out


def _recorded(model: nn.Module, tokens: torch.Tensor) -> tuple[list[float], list[float], torch.Tensor]:
    tm = TokenModel(
        module=model,
        logits=lambda x: model(input_ids=x, use_cache=False).logits,
        attention="transformers",
        group=library_parameter_group(None),
        kind="library",
    )
    cap = capture(tm)
    try:
        assert not cap.missing and model.config._attn_implementation == RECORDING
        cap.active = True
        logits = tm.logits(tokens)
        cap.active = False
        recorded, entropy = cap.take()
    finally:
        cap.remove()
    return recorded, entropy, logits


@pytest.mark.parametrize("name", list(MODELS))
def test_the_recorded_logits_are_the_hand_computed_ones_and_the_outputs_the_eager_ones(name: str) -> None:
    model = _model(name).eval()
    tokens = _tokens()
    before = model.config._attn_implementation
    model.set_attn_implementation("eager")
    with torch.no_grad():
        eager = model(input_ids=tokens, use_cache=False).logits
        hand = _hand_gpt2(model, tokens) if name.startswith("GPT2") else _hand_rotary(model, tokens)
    model.set_attn_implementation(before)
    with torch.no_grad():
        recorded, entropy, logits = _recorded(model, tokens)
    assert model.config._attn_implementation == before  # remove() put the model's own attention back
    assert torch.equal(logits, eager), (logits - eager).abs().max()  # the same attention, bit for bit
    assert len(recorded) == 2 and recorded == pytest.approx([h[0] for h in hand], rel=1e-6, abs=1e-6), (recorded, hand)
    assert entropy == pytest.approx([h[1] for h in hand], rel=1e-6, abs=1e-6), (entropy, hand)
    if name.startswith("Gemma2"):
        assert max(recorded) < 2.0  # the soft-capped logits, which the softmax takes


def test_the_recording_attention_trains_as_eager_does() -> None:
    """One AdamW step of a training-mode GPT-2 with dropout: the same loss and gradients."""
    losses, grads = [], []
    for impl in ("eager", RECORDING):
        cls = transformers.GPT2LMHeadModel
        torch.manual_seed(0)
        model = cls(cls.config_class(**MODELS["GPT2LMHeadModel"]))
        tm = TokenModel(
            module=model,
            logits=lambda x, m=model: m(input_ids=x, use_cache=False).logits,
            attention="transformers",
            group=library_parameter_group(None),
            kind="library",
        )
        cap = capture(tm) if impl == RECORDING else None
        model.set_attn_implementation("eager") if cap is None else None
        model.train()
        torch.manual_seed(5)  # dropout's draws
        z = tm.logits(_tokens())
        loss = nn.functional.cross_entropy(z[:, :-1].flatten(0, 1), _tokens()[:, 1:].flatten())
        loss.backward()
        losses.append(float(loss))
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        if cap is not None:
            cap.remove()
    assert losses[0] == losses[1] and torch.equal(grads[0], grads[1])


# ----------------------------------------------------------------------------- a factory's model


class SdpaLM(nn.Module):
    """A small causal LM that calls F.scaled_dot_product_attention (grouped keys, a boolean mask
    on the second layer, a custom scale on the first)."""

    def __init__(self, vocab: int = 64, width: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.width = heads, width
        self.embed = nn.Embedding(vocab, width)
        self.q = nn.ModuleList(nn.Linear(width, width) for _ in range(2))
        self.k = nn.ModuleList(nn.Linear(width, width // 2) for _ in range(2))
        self.v = nn.ModuleList(nn.Linear(width, width // 2) for _ in range(2))
        self.head = nn.Linear(width, vocab)

    def qk(self, layer: int, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, _ = h.shape
        q = self.q[layer](h).view(b, t, self.heads, -1).transpose(1, 2)  # (B, H, T, d)
        k = self.k[layer](h).view(b, t, self.heads // 2, -1).transpose(1, 2)  # (B, H/2, T, d)
        v = self.v[layer](h).view(b, t, self.heads // 2, -1).transpose(1, 2)
        return q, k, v

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)  # (B, T, C)
        t = tokens.shape[1]
        self.inputs = []
        for layer in range(2):
            self.inputs.append(h)
            q, k, v = self.qk(layer, h)
            if layer == 0:
                a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.7, enable_gqa=True)
            else:
                mask = torch.ones(t, t, dtype=torch.bool).tril() & (
                    torch.arange(t)[None, :] > torch.arange(t)[:, None] - 3
                )
                a = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
            h = h + a.transpose(1, 2).reshape(h.shape)
        out: torch.Tensor = self.head(h)
        return out


def test_a_factory_model_s_sdpa_calls_are_recorded_as_computed_by_hand() -> None:
    torch.manual_seed(0)
    model = SdpaLM()
    tokens = _tokens()
    with torch.no_grad():
        plain = model(tokens)
    tm = TokenModel(module=model, logits=model, attention="sdpa", group=library_parameter_group(None), kind="custom")
    cap = capture(tm)
    assert cap.missing  # nothing seen yet
    cap.active = True
    with torch.no_grad(), cap.forward():
        out = tm.logits(tokens)
    cap.active = False
    recorded, entropy = cap.take()
    assert not cap.missing and torch.equal(out, plain)  # the model's own output
    t = tokens.shape[1]
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    hand = []
    for layer, (scale, visible) in enumerate([(0.7, j <= i), (1 / math.sqrt(4), (j <= i) & (j > i - 3))]):
        with torch.no_grad():
            q, k, _ = model.qk(layer, model.inputs[layer])
        k = k.repeat_interleave(2, dim=1)
        s = (q.double() @ k.double().transpose(-1, -2)) * scale
        hand.append(float(s.masked_fill(~visible, -math.inf).amax()))
    assert recorded == approx(hand, rel=1e-6), (recorded, hand)
    assert len(entropy) == 2 and all(0 < e < math.log(3) + 1e-12 for e in entropy[1:])
    with torch.no_grad(), cap.forward():  # inactive: no mode, nothing recorded
        tm.logits(tokens)
    assert cap.take() == ([math.nan, math.nan], [math.nan, math.nan]) or all(math.isnan(v) for v in cap.take()[0])
    cap.remove()


def test_uniform_sdpa_attention_has_the_entropy_of_the_visible_keys() -> None:
    cap = capture(
        TokenModel(
            module=nn.Identity(),
            logits=lambda x: x,
            attention="sdpa",
            group=library_parameter_group(None),
            kind="custom",
        )
    )
    q = torch.zeros(1, 2, 5, 4)
    cap.active = True
    with cap.forward():
        nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    logits, entropy = cap.take()
    assert logits == [0.0] and entropy[0] == pytest.approx(sum(math.log(i + 1) for i in range(1, 5)) / 4, abs=1e-15)


# ----------------------------------------------------------------------------- through the run


FACTORY = """
import torch
from torch import nn


class TinyLM(nn.Module):
    def __init__(self, vocab, width, depth, tokens, attention, returns):
        super().__init__()
        self.attention, self.returns = attention, returns
        self.embed = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.randn(tokens, width))
        self.qkv = nn.ModuleList(nn.Linear(width, 3 * width) for _ in range(depth))
        self.out = nn.Linear(width, vocab)

    def forward(self, ids):
        h = self.embed(ids) + self.pos[: ids.shape[1]]
        for qkv in self.qkv:
            q, k, v = qkv(h).view(*h.shape[:2], 3, 2, -1).permute(2, 0, 3, 1, 4)
            if self.attention == "sdpa":
                a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            elif self.attention == "bidirectional":  # every token sees the later ones: the answer
                a = nn.functional.scaled_dot_product_attention(q, k, v)
            else:  # its own softmax: nothing the harness can read
                s = (q @ k.transpose(-1, -2)) / k.shape[-1] ** 0.5
                s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
                a = s.softmax(-1) @ v
            h = h + a.transpose(1, 2).reshape(h.shape)
        z = self.out(h)
        return {"tensor": z, "tuple": (z, h), "dict": {"logits": z, "hidden": h}, "hidden": h[..., :3]}[self.returns]


def make(vocab, width, depth, tokens, attention="sdpa", returns="tensor"):
    if returns == "no module":
        return [TinyLM(vocab, width, depth, tokens, attention, "tensor")]
    return TinyLM(vocab, width, depth, tokens, attention, returns)
"""

SPEC = """
name = "custom-lm"
description = "a factory's language model"
family = "custom"

[block]
layer = "tokens"
factory = "tiny_lm:make"
factory_args = {{ attention = "{attention}", returns = "{returns}" }}

[space]
depth = 2
width = 16
tokens = 8
batch = 8

[train]
task = "markov"
vocab = 16
order = 1
concentration = 2.0
optimizer = "adamw"
lr = 0.01
warmup = 2
steps = 12
record_every = 4
cases = 1

[expect.attention_logits]
max_logit = 100.0

[expect.early_warning]
steps = 6
threshold = 50.0
"""


def _custom(tmp_path: Path, attention: str, returns: str = "tensor") -> Any:
    from stability.spec.load import load_spec

    (tmp_path / "tiny_lm.py").write_text(textwrap.dedent(FACTORY))
    (tmp_path / "lm.toml").write_text(SPEC.format(attention=attention, returns=returns))
    return load_spec(str(tmp_path / "lm.toml"))


def test_a_factory_language_model_trains_and_is_judged_through_sdpa(tmp_path: Path) -> None:
    from stability.run.lm_training import evaluate_lm
    from stability.spec.case import corner_case

    spec = _custom(tmp_path, "sdpa")
    verdict, error = evaluate_lm(spec, "attention_logits", corner_case(spec, seed=0))
    assert error is None and verdict is not None and verdict.measured and verdict.passed, (error, verdict)
    assert verdict.extra["steps"] == [0, 4, 8, 11] and all(v is not None and v > 0 for v in verdict.extra["max_logit"])


def test_a_factory_model_returning_a_tuple_or_a_dict_trains_on_its_logits_as_a_tensor_does(tmp_path: Path) -> None:
    from stability.run.lm_training import evaluate_lm
    from stability.spec.case import corner_case

    def peaks(returns: str) -> list[float]:
        spec = _custom(tmp_path, "sdpa", returns)
        verdict, error = evaluate_lm(spec, "attention_logits", corner_case(spec, seed=0))
        assert error is None and verdict is not None and verdict.measured, (returns, error, verdict)
        return list(verdict.extra["max_logit"])

    tensor = peaks("tensor")
    assert peaks("tuple") == tensor and peaks("dict") == tensor  # the same run, bit for bit


def test_a_factory_model_returning_no_logits_fails_the_case_saying_what_it_may_return(tmp_path: Path) -> None:
    from stability.run.lm_training import evaluate_lm
    from stability.spec.case import corner_case

    spec = _custom(tmp_path, "sdpa", "hidden")
    verdict, error = evaluate_lm(spec, "attention_logits", corner_case(spec, seed=0))
    assert verdict is None and error is not None, verdict
    assert (
        "returned (2, 8, 3) for token ids (2, 8); it must return logits of shape (2, 8, 16)" in error
        and "a dict with 'logits'" in error
    ), error


def test_a_factory_returning_no_module_is_refused_as_bad_input(tmp_path: Path) -> None:
    from stability.errors import SpecError
    from stability.run.lm_training import evaluate_lm
    from stability.spec.case import corner_case

    spec = _custom(tmp_path, "sdpa", "no module")
    with pytest.raises(SpecError, match=r"block.factory = 'tiny_lm:make': returned list, not an nn.Module"):
        evaluate_lm(spec, "attention_logits", corner_case(spec, seed=0))


def test_a_factory_model_whose_attention_is_not_captured_says_so_in_one_line(tmp_path: Path) -> None:
    from stability.run.lm_training import evaluate_lm
    from stability.spec.case import corner_case

    spec = _custom(tmp_path, "own")
    for name in ("attention_logits", "early_warning"):
        verdict, error = evaluate_lm(spec, name, corner_case(spec, seed=0))
        assert error is None and verdict is not None and not verdict.measured, (error, verdict)
        line = (
            "no attention logits were captured: its forward calls neither "
            "torch.nn.functional.scaled_dot_product_attention nor stability's AttentionProbs"
        )
        assert (
            f"{line} (docs/training.md, 'Your own language model')" in verdict.detail and "\n" not in verdict.detail
        ), verdict.detail


def test_a_factory_model_that_sees_later_tokens_is_refused_in_one_line(tmp_path: Path) -> None:
    from stability.errors import SpecError
    from stability.run.lm_training import evaluate_lm
    from stability.spec.case import corner_case

    spec = _custom(tmp_path, "bidirectional")
    with pytest.raises(SpecError) as info:
        evaluate_lm(spec, "attention_logits", corner_case(spec, seed=0))
    message = str(info.value)
    assert (
        message.startswith(f"{spec.path}: block.factory = 'tiny_lm:make': is not causal")
        and "is_causal=True" in message
        and "\n" not in message
    ), message


BERT_SPEC = """
name = "bert-lm"
description = "BERT's LM head as a language model"
family = "library"

[block]
layer = "tokens"
model = "transformers:{model}"

[block.config]
hidden_size = "width"
intermediate_size = "2*width"
num_hidden_layers = "depth"
num_attention_heads = 2
max_position_embeddings = 8{extra}

[space]
depth = 1
width = 16
tokens = 8
batch = 4

[train]
task = "markov"
vocab = 16
optimizer = "adamw"
lr = 0.01
steps = 6
record_every = 2
cases = 1

[expect.attention_logits]
max_logit = 100.0
"""


@pytest.mark.parametrize("model", ["BertLMHeadModel", "BertConfig"])
def test_an_encoder_named_as_a_causal_lm_is_refused_in_one_line_with_exit_2(
    model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """BERT's LM head without is_decoder attends both ways: trained on the next token, it would read it."""
    from stability.cli import main

    path = tmp_path / "bert.toml"
    path.write_text(BERT_SPEC.format(model=model, extra=""))
    code = main(["check", str(path), "--profile", "ci", "--in-process", "-q"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "Traceback" not in err and err.count("\n") == 0, (code, err)
    assert (
        err.startswith(f"stability: error: {path}: block.model = 'transformers:{model}': is not causal")
        and "set is_decoder = true in block.config" in err
    ), err


def test_the_same_encoder_as_a_decoder_is_trained_and_its_attention_captured(tmp_path: Path) -> None:
    from stability.run.lm_training import evaluate_lm
    from stability.spec.case import corner_case
    from stability.spec.load import load_spec

    path = tmp_path / "bert.toml"
    path.write_text(BERT_SPEC.format(model="BertLMHeadModel", extra="\nis_decoder = true"))
    spec = load_spec(str(path))
    verdict, error = evaluate_lm(spec, "attention_logits", corner_case(spec, seed=0))
    assert error is None and verdict is not None and verdict.measured and verdict.passed, (error, verdict)
