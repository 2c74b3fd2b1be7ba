"""stability/spec/lm_keys.py and the language-model invariants' tables (stability/spec/lm_expect.py,
built in through stability.judge.lm_catalog): every check across the language-model keys is
one SpecError line naming the file, the key, the value and the fix; and the entries are complete."""

from __future__ import annotations

import pytest

from stability.errors import SpecError
from stability.spec.lm_expect import LM_EXPLANATIONS, LM_INVARIANTS, LM_REFERENCES, AttentionLogits
from stability.spec.load import parse_spec
from stability.spec.registry import INVARIANTS

LM = """
name = "lm"
description = "d"
family = "{family}"
[block]
layer = "tokens"
{block}
[space]
depth = 2
width = 16
tokens = {tokens}
batch = 4
[train]
task = "markov"
optimizer = "adamw"
lr = 0.01
steps = 20
{train}
{expect}
"""
BLOCK = 'norm = "layer"\ncausal = true\nhead_dim = 8'


def lm(
    *,
    family: str = "transformer",
    block: str = BLOCK,
    tokens: int = 8,
    train: str = "",
    expect: str = "[expect.attention_logits]",
) -> str:
    return LM.format(family=family, block=block, tokens=tokens, train=train, expect=expect)


def test_a_language_model_spec_loads_with_its_expectations() -> None:
    spec = parse_spec(
        lm(
            block=BLOCK + '\nqk_norm = "layer"',
            train="z_loss = 1e-4\nbetas = [0.9, 0.95]",
            expect="[expect.attention_logits]\nmax_logit = 50.0\n[expect.output_logits]",
        )
    )
    assert spec.train is not None and spec.train.betas == (0.9, 0.95)
    assert [n for n, _ in spec.invariants()] == ["attention_logits", "output_logits"]
    assert isinstance(spec.expect.attention_logits, AttentionLogits) and spec.expect.attention_logits.max_logit == 50.0
    # a language-model spec may also declare probe invariants of the same blocks
    both = parse_spec(lm(expect="[expect.attention_logits]\n[expect.attention_entropy]"))
    assert [n for n, _ in both.invariants()] == ["attention_entropy", "attention_logits"]


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        (lm(expect="[expect.atention_logits]"), "expect.atention_logits", 'did you mean "attention_logits"'),
        (lm(expect="[expect.attention_logits]\nmax_logits = 3.0"), "expect.attention_logits.max_logits", "unknown key"),
        (
            lm(expect="[expect.attention_logits]\nmax_logit = -1.0"),
            "expect.attention_logits.max_logit",
            "greater than 0",
        ),
        (
            lm(expect="[expect.lr_sensitivity]\nmax_lrs = 0.1\nlrs = [0.1, 0.01, 1.0]"),
            "expect.lr_sensitivity.lrs",
            "increasing",
        ),
        (
            lm(expect="[expect.lr_sensitivity]\nlrs = [0.01, 0.1, 1.0]"),
            "expect.lr_sensitivity.max_lrs",
            "required but missing",
        ),
        (
            lm(
                expect="[expect.attention_logits]\nmax_logit = 100.0\n[expect.early_warning]\nsteps = "
                "20\nthreshold = 3.0"
            ),
            "expect.early_warning.steps",
            "below train.steps = 20",
        ),
        (lm(expect="[expect.loss_spike]\nwindow = 50"), "expect.loss_spike.window", "below train.steps"),
        (
            lm(expect='[expect.attention_logits]\nmax_logit = "x"'),
            "expect.attention_logits.max_logit",
            "must be a number",
        ),
        (lm(train="bogus = 1"), "train.bogus", "unknown key"),
        (lm(train="betas = [0.9, 1.5]"), "train.betas", "lie in [0, 1)"),
        (lm(train="optimizer = 'adam'").replace('optimizer = "adamw"\n', ""), "train.optimizer", "AdamW"),
        (lm(train="samples = 16"), "train.samples", "sizes the regression and label tasks"),
        (lm(train='parametrization = "mup"'), "train.parametrization", "standard parametrisation"),
        (lm(train="vocab = 512\norder = 3"), "train.order", "more than 65536"),
        (lm(train="vocab = 8\norder = 3", tokens=2), "space.tokens", "at least 3"),
        (lm(train="min_lr_ratio = 0.1"), "train.min_lr_ratio", "cosine"),
        (lm(train="record_every = 50"), "train.record_every", "above train.steps"),
        (lm(train="warmup = 20"), "train.warmup", "below train.steps"),
        (lm(block='norm = "layer"\nhead_dim = 8'), "block.causal", "bidirectional attention sees the answer"),
        (
            lm(block=BLOCK + '\nqk_norm = "layer"\nhead_dim = 1').replace("head_dim = 8\n", ""),
            "block.qk_norm",
            "LayerNorm over a head of 1 channel",
        ),
        (
            lm(block=BLOCK + '\nsigma_reparam = true\nresidual = "gpt2"'),
            "block.sigma_reparam",
            "undoes residual = 'gpt2'",
        ),
        (lm(block=BLOCK + '\nqk_norm = "bogus"'), "block.qk_norm", "is not one of 'none', 'layer' or 'rms'"),
        (lm().replace('name = "lm"', 'name = "lm"\nbogus = 1'), "bogus", "unknown key"),
        (
            lm(family="preact", block='norm = "layer"').replace('layer = "tokens"\n', "").replace("tokens = 8\n", ""),
            "train.task",
            "family 'preact' has no attention, and the language-model run",
        ),
    ],
)
def test_a_bad_language_model_spec_is_one_line_naming_the_key(text: str, key: str, words: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(text, file="lm.toml")
    message = str(info.value)
    assert message.startswith(f"lm.toml: {key}") and words in message and "\n" not in message, message


def test_a_library_language_model_must_be_a_causal_lm_over_the_chains_vocabulary() -> None:
    pytest.importorskip("transformers", reason="Hugging Face transformers is not installed (pip install -e '.[hf]')")
    config = 'config = { n_embd = "width", n_layer = "depth", n_head = 2, bos_token_id = 1, eos_token_id = 2 }'
    spec = parse_spec(lm(family="library", block='model = "transformers:GPT2LMHeadModel"\n' + config), file="lm.toml")
    assert spec.family == "library"
    for block, key, words in [
        ('model = "transformers:GPT2Model"\n' + config, "block.model", "is not a transformers causal language model"),
        (
            'model = "transformers:LlamaModel"\nconfig = { hidden_size = "width" }',
            "block.model",
            "is not a transformers causal language model",
        ),
        (
            'model = "transformers:GPT2LMHeadModel"\n' + config.replace("n_head = 2", "n_head = 2, vocab_size = 50"),
            "block.config.vocab_size",
            "differs from train.vocab = 64",
        ),
        (
            'model = "transformers:GPT2LMHeadModel"\n' + config + "\nshipped = { n_embd = 768 }",
            "block.shipped",
            "as the library initialises it",
        ),
        (
            'model = "transformers:T5Config"\nconfig = { d_model = "width", num_layers = "depth", num_heads = 2 }',
            "block.model",
            "AutoModelForCausalLM builds none for model type 't5'",
        ),
    ]:
        with pytest.raises(SpecError) as info:
            parse_spec(lm(family="library", block=block), file="lm.toml")
        message = str(info.value)
        assert message.startswith(f"lm.toml: {key}") and words in message and "\n" not in message, message


def test_a_language_model_invariant_without_a_language_model_run_is_refused() -> None:
    no_train = lm().split("[train]")[0] + "[expect.attention_logits]\n"
    with pytest.raises(
        SpecError, match=r"train: is required by expect.attention_logits \(the language-model run it judges\)"
    ):
        parse_spec(no_train)
    with pytest.raises(
        SpecError,
        match=r"train.task = 'teacher': expect.attention_logits judges a language-model run; set train.task = "
        r"\"markov\"",
    ):
        parse_spec(lm().replace('task = "markov"\noptimizer = "adamw"\n', ""))


STANDARD = """
name = "t"
description = "d"
family = "{family}"
[block]
{block}
[space]
depth = 2
width = 16
{space}
{rest}
"""


MARKOV = '[train]\nsteps = 5\nlr = 0.1\ntask = "markov"\noptimizer = "adamw"\n'


@pytest.mark.parametrize(
    ("family", "block", "space", "rest", "key", "words"),
    [
        (
            "preact",
            'qk_norm = "layer"',
            "",
            "[expect.gradient_arrival]",
            "block.qk_norm",
            "makes no sense for family 'preact'",
        ),
        ("plain", "sigma_reparam = true", "", "[expect.gradient_arrival]", "block.sigma_reparam", "makes no sense"),
        (
            "transformer",
            'layer = "tokens"\nsigma_reparam = true',
            'branch_init = ["zero"]',
            "[expect.gradient_arrival]",
            "space.branch_init",
            "undefined at W = 0",
        ),
        (
            "plain",
            "",
            "",
            "[train]\nsteps = 5\nlr = 0.1\nz_loss = 1e-4\n[expect.trainability]",
            "train.z_loss",
            'train.task = "markov"',
        ),
        (
            "plain",
            "",
            "",
            '[train]\nsteps = 5\nlr = 0.1\noptimizer = "adamw"\n[expect.trainability]',
            "train.optimizer",
            "AdamW runs the language-model task",
        ),
        (
            "transformer",
            'layer = "tokens"\ncausal = true',
            "",
            MARKOV + "[expect.trainability]",
            "expect.trainability",
            "trains a language model",
        ),
    ],
)
def test_every_spec_gets_the_language_model_checks(
    family: str, block: str, space: str, rest: str, key: str, words: str
) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(STANDARD.format(family=family, block=block, space=space, rest=rest), file="t.toml")
    assert str(info.value).startswith(f"t.toml: {key}") and words in str(info.value), str(info.value)


def test_a_probe_spec_may_use_the_attention_options() -> None:
    spec = parse_spec(
        STANDARD.format(
            family="transformer",
            block='layer = "tokens"\nqk_norm = "rms"\nattn_softcap = 30.0',
            space="",
            rest="[expect.attention_entropy]",
        )
    )
    assert spec.block.qk_norm == "rms" and spec.block.attn_softcap == 30.0


def test_every_invariant_is_registered_with_its_explanation_and_references() -> None:
    assert set(LM_EXPLANATIONS) == set(LM_INVARIANTS) and all(n in INVARIANTS for n in LM_INVARIANTS)
    for name in LM_INVARIANTS:
        entry = INVARIANTS.get(name)
        assert entry.training and entry.sweep_refusal and entry.explanation is LM_EXPLANATIONS[name]
        assert entry.explanation.references and all(
            r in LM_REFERENCES.values() for r in entry.explanation.references
        ), name
        assert "[" not in entry.explanation.computes_text(), name  # rich would read [word] as a style tag


def test_explain_lists_the_families_the_language_model_run_refuses() -> None:
    from stability.report.explain import explain_text

    for name in LM_INVARIANTS:
        text = " ".join(explain_text(name).split())
        assert "Not measured on" in text and "family 'preact': has no attention" in text, name
        assert (
            "family 'library'" not in text and "family 'custom'" not in text and "family 'transformer'" not in text
        ), name
