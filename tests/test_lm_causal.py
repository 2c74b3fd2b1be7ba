"""Causality for the whole language-model run (stability/families/lm_causal.py): the built model in
eval and train mode, the trained model again, and the task itself (a held-out loss below what the
chain that drew the tokens scores on them). Hostile models that passed the one check at init: a
gate that starts at zero and opens in training, `is_causal = not self.training`, and a model that
reads the next token only in batches larger than the check's; honest ones (GPT-2 from transformers
with its dropout, the project's own transformer family, a factory attending causally) still pass."""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path

import pytest
import torch
from cli_support import Cli
from torch import nn

from stability.errors import SpecError
from stability.families.lm_causal import HELD_OUT_TOKENS, check_causal, check_held_out, splits_of
from stability.families.lm_models import TokenModel, library_parameter_group
from stability.measure.lm_task import markov_chain
from stability.spec.case import corner_case
from stability.spec.load import load_spec, parse_spec

FACTORY = '''
import torch
from torch import nn
from torch.nn import functional as F


class Peeker(nn.Module):
    """Causal attention, plus the next token's own embedding behind a gate (`when` it peeks)."""

    def __init__(self, vocab, width, gate, when):
        super().__init__()
        self.when = when
        self.embed = nn.Embedding(vocab, width)
        self.qkv = nn.Linear(width, 3 * width)
        self.peek = nn.Embedding(vocab, width)
        self.gate = nn.Parameter(torch.full((), gate))
        self.out = nn.Linear(width, vocab)

    def forward(self, ids):
        h = self.embed(ids)  # (B, T, C)
        q, k, v = self.qkv(h).unsqueeze(1).chunk(3, dim=-1)  # (B, 1, T, C) each
        causal = not self.training if self.when == "train-only" else True
        h = h + F.scaled_dot_product_attention(q, k, v, is_causal=causal).squeeze(1)
        if self.when == "always" or (self.when == "large-batches" and ids.shape[0] > 2):
            h = h + self.gate * self.peek(torch.roll(ids, -1, dims=1))  # the token after each one
        return self.out(h)


def gated(vocab, width):  # reads the next token behind a gate that starts at zero
    return Peeker(vocab, width, 0.0, "always")


def train_only(vocab, width):  # is_causal = not self.training
    return Peeker(vocab, width, 0.0, "train-only")


def large_batches(vocab, width):  # peeks only in batches of more than 2 sequences (the check uses 2)
    return Peeker(vocab, width, 1.0, "large-batches")


def honest(vocab, width):
    return Peeker(vocab, width, 0.0, "never")
'''

SPEC = """
name = "peeker-{factory}"
description = "a factory language model"
family = "custom"

[block]
layer = "tokens"
factory = "peekers:{factory}"

[space]
depth = 1
width = 16
tokens = 8
batch = 8

[train]
task = "markov"
vocab = 8
order = 1
concentration = 1.0
optimizer = "adamw"
lr = 0.05
steps = {steps}
record_every = 4
cases = 1

[expect.output_logits]
max_abs_logz = 1000.0
"""


def peeker(tmp_path: Path, factory: str, steps: int = 12) -> Path:
    (tmp_path / "peekers.py").write_text(FACTORY)
    path = tmp_path / f"{factory}.toml"
    path.write_text(SPEC.format(factory=factory, steps=steps))
    return path


def one_line(result: tuple[int, str, str], path: Path, *needles: str) -> str:
    code, _, err = result
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err)
    assert lines[0].startswith(f"stability: error: {path}: block.factory = ") and "is not causal: " in lines[0], err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# ----------------------------------------------------------------------------- hostile models, through the CLI


def test_a_gate_that_opens_in_training_is_caught_after_training(tmp_path: Path, cli: Cli) -> None:
    """At init the gate is zero and the model is causal; trained, it reads the next token. It passed
    (exit 0, met) when the check ran only at init."""
    path = peeker(tmp_path, "gated")
    line = one_line(
        cli("check", path, "--profile", "ci", "-q", "--in-process"),
        path,
        "after 12 training steps in eval mode its logits at positions 0-0 moved by up to",
        "when the tokens after them changed",
        "read no later token through any other path",
    )
    assert "\n" not in line


def test_a_model_causal_only_in_eval_mode_is_caught_in_train_mode(tmp_path: Path, cli: Cli) -> None:
    """`is_causal = not self.training`: the check ran in eval mode only, and the run trains in train mode."""
    path = peeker(tmp_path, "train_only")
    one_line(
        cli("check", path, "--profile", "ci", "-q", "--jobs", "1"),  # in a worker, as a user runs it
        path,
        "in train mode its logits at positions 0-0 moved",
    )
    assert "training steps" not in cli("check", path, "--profile", "ci", "-q", "--in-process")[2]  # before training


def test_a_model_that_peeks_where_the_check_cannot_see_is_caught_by_the_task(tmp_path: Path, cli: Cli) -> None:
    """It reads the next token only in batches larger than the perturbation check's: the held-out
    loss, below what the chain that drew the tokens scores on them, proves it reads the answer."""
    path = peeker(tmp_path, "large_batches", steps=40)
    line = one_line(
        cli("check", path, "--profile", "ci", "-q", "--in-process"),
        path,
        "after 40 training steps its held-out loss is",
        "below the task's entropy rate",
        "standard errors: no model that reads only earlier tokens beats that chain",
    )
    numbers = [
        float(x)
        for x in re.findall(r"is ([0-9.]+) nats per token \(below the task's entropy rate ([0-9.]+)\)", line)[0]
    ]
    assert numbers[0] < numbers[1] - 0.3, line  # the loss falls far below H: it reads the answer


def test_an_honest_factory_model_trains_and_is_judged(tmp_path: Path, cli: Cli) -> None:
    path = peeker(tmp_path, "honest", steps=40)
    code, out, err = cli("check", path, "--profile", "ci", "-q", "--in-process")
    assert code == 0 and "1 met" in out, (code, out, err)


# ----------------------------------------------------------------------------- honest library and family models


GPT2 = """
name = "gpt2-lm"
description = "GPT-2 with its dropout"
family = "library"

[block]
layer = "tokens"
model = "transformers:GPT2LMHeadModel"

[block.config]
n_embd = "width"
n_layer = "depth"
n_head = 2
n_positions = 16
resid_pdrop = 0.1
attn_pdrop = 0.1
embd_pdrop = 0.1

[space]
depth = 2
width = 16
tokens = 16
batch = 4

[train]
task = "markov"
vocab = 16
optimizer = "adamw"
lr = 0.01
steps = 12
record_every = 4
cases = 1

[expect.attention_logits]
max_logit = 100.0
"""


def test_gpt2_with_dropout_is_causal_in_both_modes_before_and_after_training(tmp_path: Path) -> None:
    """Dropout draws the same masks for both sequences of the check: train mode is no false alarm."""
    pytest.importorskip("transformers")
    from stability.run.lm_training import evaluate_lm

    path = tmp_path / "gpt2.toml"
    path.write_text(GPT2)
    spec = load_spec(path)
    verdict, error = evaluate_lm(spec, "attention_logits", corner_case(spec, seed=0))
    assert error is None and verdict is not None and verdict.measured and verdict.passed, (error, verdict)


def test_the_transformer_familys_language_model_passes_every_check() -> None:
    from stability.measure.lm_train import lm_run

    spec = parse_spec(
        textwrap.dedent("""\
        name = "lm"
        description = "the project's transformer"
        family = "transformer"
        [block]
        layer = "tokens"
        norm = "layer"
        causal = true
        head_dim = 8
        [space]
        depth = 2
        width = 16
        tokens = 8
        batch = 8
        [train]
        task = "markov"
        optimizer = "adamw"
        vocab = 8
        concentration = 1.0
        lr = 0.01
        steps = 20
        eval_sequences = 128
        [expect.output_logits]
        """)
    )
    run = lm_run(spec, corner_case(spec, seed=0))  # checked before and after training, in both modes, and by the task
    assert run.diverged_at is None and run.final_eval > run.oracle_eval


# ----------------------------------------------------------------------------- the checks themselves


def _token_model(module: nn.Module) -> TokenModel:
    return TokenModel(
        module=module, logits=module, attention="sdpa", group=library_parameter_group(None), kind="custom"
    )


class Norm(nn.Module):
    """A causal model with a BatchNorm over (B·T) features in train mode: its statistics read every position."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(8, 4)
        self.bn = nn.BatchNorm1d(4)
        self.out = nn.Linear(4, 8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)  # (B, T, C)
        return self.out(self.bn(h.transpose(1, 2)).transpose(1, 2))  # type: ignore[no-any-return]


def test_a_batch_norm_in_train_mode_reads_later_tokens_and_the_check_leaves_the_model_as_it_was() -> None:
    spec = parse_spec(SPEC.format(factory="x", steps=12), file="s.toml")
    model = Norm()
    model.eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.random.get_rng_state()
    with pytest.raises(SpecError, match=r"is not causal: in train mode its logits at positions 0-0 moved"):
        check_causal(spec, corner_case(spec), _token_model(model))
    assert not model.training  # its mode, buffers (running statistics) and the caller's RNG as they were
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(torch.random.get_rng_state(), rng)


def test_the_splits_cover_every_position_of_a_short_sequence_and_16_of_a_long_one() -> None:
    assert splits_of(1) == [] and splits_of(2) == [1] and splits_of(8) == list(range(1, 8))
    long = splits_of(1024)
    assert len(long) == 16 and long[0] == 1 and long[-1] == 1023


def test_the_held_out_test_never_fires_on_a_predictor_from_earlier_tokens_and_always_on_one_that_peeks() -> None:
    """200 seeded chains, each over 64 held-out sequences of 9 tokens as a run's: a predictor from the
    previous token that is almost the chain's own rows (1% noise mixed in: the closest a causal model
    comes, its statistic at least 1.8 standard errors from the bound over these seeds) is never
    refused, nor the chain itself; one that puts half its mass on the true next token always is."""
    spec = parse_spec(SPEC.format(factory="x", steps=12), file="s.toml")
    model = _token_model(nn.Linear(1, 1))
    for seed in range(200):
        chain = markov_chain(vocab=8, order=1, concentration=1.0, seed=seed)
        tokens = chain.sample(64, 9, torch.Generator().manual_seed(seed))  # (64, 9)
        chain_loss = -chain.log_likelihood(tokens)  # (64, 8)
        noise = torch.rand(chain.rows.shape, generator=torch.Generator().manual_seed(seed + 1000), dtype=torch.float64)
        rows = 0.99 * chain.rows + 0.01 * noise / noise.sum(1, keepdim=True)  # (V, V): a causal predictor's
        state, target = tokens[:, :-1], tokens[:, 1:]
        causal = -rows[state, target].log()  # (64, 8)
        check_held_out(spec, model, causal, chain_loss, entropy_rate=chain.entropy_rate(), steps=1)
        check_held_out(spec, model, chain_loss, chain_loss, entropy_rate=chain.entropy_rate(), steps=1)  # the chain
        peeking = -(0.5 * rows[state, target] + 0.5).log()  # half its mass on the answer
        with pytest.raises(SpecError, match="standard errors: no model that reads only earlier tokens beats"):
            check_held_out(spec, model, peeking, chain_loss, entropy_rate=chain.entropy_rate(), steps=1)


def test_the_held_out_test_decides_nothing_on_too_few_or_non_finite_tokens() -> None:
    spec = parse_spec(SPEC.format(factory="x", steps=12), file="s.toml")
    model = _token_model(nn.Linear(1, 1))
    chain = torch.full((HELD_OUT_TOKENS - 1,), 2.0, dtype=torch.float64)
    check_held_out(spec, model, chain - 1.5, chain, entropy_rate=2.0, steps=1)  # 99 tokens: no estimate
    more = torch.full((HELD_OUT_TOKENS,), 2.0, dtype=torch.float64)
    spread = more - 1.5 + 0.01 * torch.randn(HELD_OUT_TOKENS, generator=torch.Generator().manual_seed(0))
    with pytest.raises(
        SpecError, match=r"held-out loss is 0\.50\d* nats per token \(below the task's entropy rate 2\)"
    ):
        check_held_out(spec, model, spread, more, entropy_rate=2.0, steps=7)
    spread[3] = math.nan  # a non-finite loss: the run diverged, and the run says so
    check_held_out(spec, model, spread, more, entropy_rate=2.0, steps=7)
