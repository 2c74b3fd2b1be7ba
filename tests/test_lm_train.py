"""stability/measure/lm_train.py against closed forms: the schedule, AdamW's coupled and independent
weight decay, the first AdamW step's update size (lr per coordinate), the z-loss and its gradient,
the scored positions, the tied readout and the logit soft-cap, the attention recorder on
hand-set logits; a run that can represent its chain reaches its entropy rate within 2%; bit-exact
replay, and a stopped run is the prefix of the whole one."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from stability.families.transformer import AttentionProbs
from stability.measure.lm_capture import ProbsCapture as AttentionRecorder
from stability.measure.lm_records import LMRun
from stability.measure.lm_train import (
    LanguageModel,
    adamw,
    language_model,
    lm_chain,
    lm_loss,
    lm_run,
    lr_factor,
    parameter_group,
)
from stability.spec.case import corner_case
from stability.spec.load import parse_spec
from stability.spec.schema import Spec, Train

LM = """
name = "lm"
description = "d"
family = "transformer"
[block]
layer = "tokens"
norm = "layer"
causal = true
activation = "gelu"
head_dim = 8
{block}
[space]
depth = {depth}
width = {width}
tokens = {tokens}
batch = {batch}
weight_init = ["xavier_normal"]
dtype = ["{dtype}"]
[train]
task = "markov"
optimizer = "adamw"
vocab = {vocab}
order = {order}
concentration = {concentration}
lr = {lr}
steps = {steps}
warmup = {warmup}
{train}
[expect.attention_logits]
"""


def lm_spec(**values: Any) -> Spec:
    """The LM spec above with these values (block and train: extra lines of those tables)."""
    defaults: dict[str, Any] = {
        "block": "",
        "train": "",
        "depth": 1,
        "width": 16,
        "tokens": 8,
        "batch": 4,
        "dtype": "float32",
        "vocab": 8,
        "order": 1,
        "concentration": 1.0,
    }
    defaults.update(lr=0.01, steps=5, warmup=0)
    return parse_spec(LM.format(**{**defaults, **values}))


# ----------------------------------------------------------------------------- schedule and optimizer


def test_the_schedule_warms_up_linearly_then_decays_by_a_cosine() -> None:
    t = Train(steps=22, lr=1.0, warmup=5, schedule="cosine", min_lr_ratio=0.1)  # p = (t − 5)/16
    assert [lr_factor(s, t) for s in range(5)] == [0.2, 0.4, 0.6, 0.8, 1.0]
    assert lr_factor(5, t) == 1.0  # p = 0: the cosine starts at the peak
    assert lr_factor(21, t) == pytest.approx(0.1, abs=1e-15)  # the last step: min_lr_ratio
    assert lr_factor(13, t) == pytest.approx(0.1 + 0.9 * 0.5, abs=1e-15)  # p = 1/2: halfway
    assert lr_factor(9, t) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4)), abs=1e-15)
    constant = Train(steps=21, lr=1.0, warmup=4)
    assert [lr_factor(s, constant) for s in (0, 3, 4, 20)] == [0.25, 1.0, 1.0, 1.0]


class _Two(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.full((2, 2), 3.0, dtype=torch.float64))
        self.b = nn.Parameter(torch.full((2,), 3.0, dtype=torch.float64))


@pytest.mark.parametrize(
    ("decay", "expected"), [("coupled", 3.0 * (1 - 0.5 * 0.2 * 0.1)), ("independent", 3.0 * (1 - 0.5 * 0.1))]
)
def test_weight_decay_is_coupled_to_the_learning_rate_or_independent_of_it(decay: str, expected: float) -> None:
    """With a zero gradient AdamW only decays: θ ← θ(1 − η_t λ) coupled, θ(1 − s_t λ) independent
    (η = 0.2, s_t = 0.5, λ = 0.1); biases and gains (one dimension) are not decayed."""
    t = Train(steps=10, lr=0.2, optimizer="adamw", task="markov", weight_decay=0.1, decay=decay)  # type: ignore[arg-type]
    m = _Two()
    opt = adamw(m, t, 0.2)  # type: ignore[arg-type]
    for g in opt.param_groups:
        g["lr"] = 0.2 * 0.5
    m.w.grad, m.b.grad = torch.zeros_like(m.w), torch.zeros_like(m.b)
    opt.step()
    assert m.w.detach().tolist() == [[expected] * 2] * 2
    assert m.b.detach().tolist() == [3.0, 3.0]
    assert opt.defaults["betas"] == t.betas and opt.defaults["eps"] == t.eps


def test_the_first_adamw_step_moves_every_coordinate_by_the_learning_rate() -> None:
    """Step 0 of AdamW: m̂ = g, v̂ = g², so Δθ = −η_0 g/(|g| + ε) and, for a group whose gradient
    has no zero entry, RMS(Δθ) = η_0 = lr·1/warmup (no clipping, no decay; float64). ε = 1e-14 lies
    between the rounding left in the key bias's zero gradient (< 1e-16) and every other entry."""
    spec = lm_spec(train="eps = 1e-14\nrecord_every = 1", dtype="float64", lr=0.03, warmup=4, steps=5)
    run = lm_run(spec, corner_case(spec, seed=0))
    for group in ("mlp", "norm", "readout"):
        assert run.update_rms[group][0] == pytest.approx(0.03 / 4, rel=1e-9, abs=0.0), group
    # The key bias b_k adds q·b_k to every logit of a query, which the softmax ignores: its gradient
    # is zero, so its 16 entries do not move, of the 4·16² + 4·16 attention parameters.
    assert run.update_rms["attention"][0] == pytest.approx(0.03 / 4 * math.sqrt(1 - 16 / 1088), rel=1e-9, abs=0.0)
    assert 0 < run.update_rms["embedding"][0] < 0.03 / 4  # rows of tokens absent from the batch do not move
    assert run.step_lr == pytest.approx([0.03 / 4, 0.03 / 2, 0.03 * 3 / 4, 0.03, 0.03], abs=1e-18)


def test_the_gradient_rms_is_that_of_the_first_batch() -> None:
    spec = lm_spec(train="record_every = 1", dtype="float64", steps=1)
    case = corner_case(spec, seed=3)
    run = lm_run(spec, case)
    from stability.families.build import derive_seed

    model = language_model(spec, case)
    chain = lm_chain(spec, case)
    chain.sample(
        64, 9, torch.Generator().manual_seed(derive_seed(3, 7))
    )  # the held-out set is drawn first, from its own stream
    batch = chain.sample(4, 9, torch.Generator().manual_seed(derive_seed(3, 3)))
    objective, _, _ = lm_loss(model(batch[:, :-1]), batch[:, 1:], order=1, z_loss=0.0)
    objective.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    rms = math.sqrt(sum(float(g.square().sum()) for g in grads) / sum(p.numel() for p in model.parameters()))
    assert run.grad_rms[0] == pytest.approx(rms, rel=1e-12, abs=0.0)
    assert run.losses[0] == pytest.approx(float(objective.detach()), rel=1e-12, abs=0.0)


# ----------------------------------------------------------------------------- the loss and the readout


def test_the_z_loss_and_its_gradient_by_hand() -> None:
    """logits (0, log 3), target 1: Z = 4, CE = log 4 − log 3, objective = CE + z·log² 4, and
    ∂/∂z_v = softmax_v − 1[v = target] + 2z·log Z·softmax_v."""
    z = 1e-2
    logits = torch.tensor([[[0.0, math.log(3.0)]]], dtype=torch.float64, requires_grad=True)  # (B=1, T=1, V=2)
    objective, ce, logz = lm_loss(logits, torch.tensor([[1]]), order=1, z_loss=z)
    assert float(ce.detach()) == pytest.approx(math.log(4) - math.log(3), abs=1e-15)
    assert float(logz[0].detach()) == pytest.approx(math.log(4), abs=1e-15)
    assert float(objective.detach()) == pytest.approx(math.log(4) - math.log(3) + z * math.log(4) ** 2, abs=1e-15)
    objective.backward()
    p = [0.25, 0.75]
    assert logits.grad is not None
    assert logits.grad[0, 0].tolist() == pytest.approx(
        [p[0] + 2 * z * math.log(4) * p[0], p[1] - 1 + 2 * z * math.log(4) * p[1]], abs=1e-15
    )


def test_only_targets_with_a_full_context_are_scored() -> None:
    """Order 2: target t (the token after input t) is scored when t + 1 ≥ 2, so target 0 is not."""
    logits = torch.zeros(1, 3, 4, dtype=torch.float64)
    logits[0, 0, 0] = 100.0  # a huge loss at target 0, if it were scored
    _, ce, logz = lm_loss(logits, torch.tensor([[1, 2, 3]]), order=2, z_loss=0.0)
    assert float(ce) == pytest.approx(math.log(4), abs=1e-15) and logz.shape == (2,)


def test_the_tied_readout_and_the_logit_softcap() -> None:
    torch.manual_seed(0)
    model = LanguageModel(
        nn.Sequential(), vocab=5, width=4, tokens=3, final_norm=nn.Identity(), tied=True, softcap=None
    ).double()
    with torch.no_grad():
        model.pos.normal_()
    x = torch.tensor([[0, 3, 4]])
    h = model.embed.weight[x] + model.pos  # (1, 3, 4)
    torch.testing.assert_close(model(x), h @ model.embed.weight.t() / 2.0, rtol=0, atol=1e-15)
    capped = LanguageModel(
        nn.Sequential(), vocab=5, width=4, tokens=3, final_norm=nn.Identity(), tied=True, softcap=0.5
    ).double()
    capped.load_state_dict(model.state_dict())
    torch.testing.assert_close(capped(x), 0.5 * torch.tanh(model(x) / 0.5), rtol=0, atol=1e-15)
    assert float(capped(x).detach().abs().max()) < 0.5


def test_parameters_are_grouped_by_what_they_are() -> None:
    spec = lm_spec(block='qk_norm = "layer"\nresidual = "layerscale"')
    model = language_model(spec, corner_case(spec))
    groups = {
        name: parameter_group(name, module)
        for mod, module in model.named_modules()
        for name in (f"{mod}.{p}" if mod else p for p, _ in module.named_parameters(recurse=False))
    }
    assert groups["embed.weight"] == groups["pos"] == "embedding"
    assert groups["readout.weight"] == "readout"
    assert groups["blocks.0.attn.fn.q.weight"] == groups["blocks.0.attn.fn.out.bias"] == "attention"
    assert groups["blocks.0.mlp.fn.fc1.weight"] == "mlp"
    assert (
        groups["blocks.0.attn.fn.q_norm.weight"]
        == groups["blocks.0.attn.norm_in.weight"]
        == groups["final_norm.weight"]
        == "norm"
    )
    assert groups["blocks.0.attn.gain.scale"] == "norm"  # a LayerScale gain


# ----------------------------------------------------------------------------- the attention recorder


class _Probe(nn.Module):
    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.probs = AttentionProbs(causal=causal)

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.probs(scores)
        return out


def test_the_recorder_reads_the_visible_logits_and_the_entropy() -> None:
    """Uniform logits: causal row i sees i + 1 keys, entropy log(i + 1); rows 1 … T − 1 averaged.
    A future logit of 1000 is masked, so it is not the largest."""
    blocks = nn.Sequential(_Probe(causal=True), _Probe(causal=False))
    rec = AttentionRecorder(blocks)
    t = 4
    scores = torch.zeros(2, 3, t, t, dtype=torch.float64)  # (B, H, T, T)
    scores[0, 1, 0, 3] = 1000.0  # key 3 is in query 0's future
    scores[1, 2, 2, 1] = 3.0
    rec.active = True
    blocks[0](scores)
    blocks[1](torch.zeros(2, 3, t, t, dtype=torch.float64))
    logits, entropy = rec.take(2)
    assert logits == [3.0, 0.0]
    uniform_causal = sum(math.log(i + 1) for i in range(1, t)) / (t - 1)
    assert entropy[1] == pytest.approx(math.log(t), abs=1e-15)
    assert entropy[0] < uniform_causal  # the head with the 3.0 logit is the smallest
    rec.active = False  # an inactive recorder measures nothing
    blocks[0](scores * 2)
    assert all(math.isnan(v) for v in rec.take(2)[0])
    rec.remove()
    rec.active = True  # a removed recorder no longer hooks the modules
    blocks[0](scores)
    assert all(math.isnan(v) for v in rec.take(2)[0])


def test_the_recorder_on_uniform_causal_attention() -> None:
    probe = _Probe(causal=True)
    rec = AttentionRecorder(nn.Sequential(probe))
    rec.active = True
    probe(torch.zeros(1, 1, 5, 5, dtype=torch.float64))
    _, entropy = rec.take(1)
    assert entropy[0] == pytest.approx(sum(math.log(i + 1) for i in range(1, 5)) / 4, abs=1e-15)
    rec.remove()


# ----------------------------------------------------------------------------- whole runs


def test_a_run_that_can_represent_the_chain_reaches_its_entropy_rate_within_2_percent() -> None:
    """An order-1 chain over 8 tokens: the embedding and readout alone can hold its rows. After
    300 AdamW steps the held-out loss is within 2% of H (and the chain's own loss on the same
    held-out tokens, its sampling error, within 2% of H too)."""
    spec = lm_spec(
        width=16,
        tokens=16,
        batch=32,
        vocab=8,
        concentration=1.0,
        lr=0.01,
        steps=300,
        warmup=10,
        train='schedule = "cosine"\neval_sequences = 512\nrecord_every = 50',
    )
    run = lm_run(spec, corner_case(spec, seed=0))
    print(
        f"H = {run.entropy_rate:.4f}, held-out loss {run.final_eval:.4f} (the chain's own "
        f"{run.oracle_eval:.4f}), from {run.initial_eval:.4f}"
    )
    assert run.diverged_at is None
    assert abs(run.oracle_eval - run.entropy_rate) < 0.02 * run.entropy_rate
    assert run.final_eval < 1.02 * run.entropy_rate


def test_a_run_replays_bit_for_bit_and_leaves_the_global_rng_alone() -> None:
    spec = lm_spec(steps=8, train="record_every = 3")
    case = corner_case(spec, seed=11)
    state = torch.random.get_rng_state()
    first = lm_run(spec, case).to_dict()
    assert torch.equal(torch.random.get_rng_state(), state)
    second = lm_run(spec, case).to_dict()
    first.pop("seconds"), second.pop("seconds")
    assert first == second
    assert first["recorded"] == [0, 3, 6, 7]
    other = lm_run(spec, corner_case(spec, seed=12)).to_dict()
    assert other["losses"] != first["losses"]


def test_a_stopped_run_is_the_prefix_of_the_whole_run() -> None:
    spec = lm_spec(steps=12, warmup=3, train='schedule = "cosine"\nrecord_every = 2')
    case = corner_case(spec, seed=2)
    whole, part = lm_run(spec, case), lm_run(spec, case, stop_at=5)
    assert part.losses == whole.losses[:5]
    assert (
        part.recorded == [0, 2, 4]
        and part.max_logit == whole.max_logit[:3]
        and part.update_rms["mlp"] == whole.update_rms["mlp"][:3]
    )
    assert math.isnan(part.final_eval) and part.diverged_at is None and math.isfinite(whole.final_eval)


def test_a_diverging_run_stops_and_records_the_step_that_diverged() -> None:
    spec = lm_spec(lr=1e6, steps=30, train="record_every = 7")
    run = lm_run(spec, corner_case(spec, seed=0))
    assert run.diverged_at is not None and run.diverged_at < 30
    assert run.recorded[-1] == run.diverged_at and len(run.losses) == run.diverged_at + 1
    assert not math.isfinite(run.losses[-1]) and math.isnan(run.grad_rms[-1]) and math.isnan(run.final_eval)


def test_records_round_trip_through_their_serialisation() -> None:
    spec = lm_spec(lr=1e6, steps=30)
    run = lm_run(spec, corner_case(spec, seed=0))
    data = run.to_dict()
    import json

    back = LMRun.from_dict(json.loads(json.dumps(data)))
    assert back.to_dict() == data
    with pytest.raises(ValueError, match="no field 'bogus'"):
        LMRun.from_dict({**data, "bogus": 1})
