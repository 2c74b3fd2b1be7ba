"""The language-model specs of the zoo's decoder families (specs/lm_zoo/): transformers causal LMs
named as data, trained by the same run as the project's own transformer. Each spec meets its
expectation on its corner case (all seeds under `-m slow`), Llama at the specs' config is Qwen3
without its q/k norms, and a GPT-2 LM from its config, trained with the attention-logit control's
optimizer, fails `attention_logits` at lr 0.3 and holds at 0.01."""

from __future__ import annotations

import re

import pytest
import torch
from spec_support import ROOT
from torch import nn

from stability.judge.verdict import is_evidence
from stability.run.lm_training import evaluate_lm
from stability.spec.case import corner_case
from stability.spec.lm_keys import CAUSAL_LM_SUFFIXES
from stability.spec.load import load_spec, parse_spec

pytest.importorskip("transformers", reason="Hugging Face transformers is not installed (pip install -e '.[hf]')")

ZOO = ROOT / "specs" / "lm_zoo"
FAMILIES = ("gpt2", "llama", "mistral", "qwen3", "gemma2")
#: What each attention-logit spec expects at lr 0.3: the families without an attention stabiliser
#: grow their logits past 100, Qwen3 (q/k norms) and Gemma 2 (soft-cap) keep them below.
EXPECT = {"gpt2": "violated", "llama": "violated", "mistral": "violated", "qwen3": "holds", "gemma2": "holds"}


def test_every_zoo_decoder_family_has_its_two_language_model_specs() -> None:
    assert sorted(p.stem for p in ZOO.glob("*.toml")) == sorted(
        f"{f}_{k}" for f in FAMILIES for k in ("attention_logits", "lr_sensitivity")
    )
    for path in ZOO.glob("*.toml"):
        spec = load_spec(path)
        assert spec.family == "library" and spec.train is not None and spec.train.task == "markov", path
        assert spec.options.model.endswith(CAUSAL_LM_SUFFIXES), path  # type: ignore[union-attr]
        (name,) = [n for n, _ in spec.invariants()]
        assert name == path.stem.split("_", 1)[1], path
        assert spec.train.profiles == (["thorough"] if name == "lr_sensitivity" else ["ci", "dev", "thorough"]), path
        if path.stem.endswith("attention_logits"):
            assert (
                spec.expect.attention_logits is not None
                and spec.expect.attention_logits.expect == EXPECT[path.stem.split("_")[0]]
            ), path


def _met(stem: str, seed: int) -> tuple[bool, str]:
    spec = load_spec(ZOO / f"{stem}.toml")
    ((name, expectation),) = spec.invariants()
    v, error = evaluate_lm(spec, name, corner_case(spec, seed=seed), case_timeout=600)
    assert v is not None and error is None and is_evidence(v), f"{stem} seed {seed}: {error or v.detail}"
    return v.passed == (expectation.expect == "holds"), v.detail


@pytest.mark.parametrize(
    "stem", ["llama_attention_logits", pytest.param("qwen3_attention_logits", marks=pytest.mark.slow)]
)  # one default
def test_qk_norm_keeps_the_attention_logits_of_the_same_model_bounded(stem: str) -> None:
    met, detail = _met(stem, 0)
    assert met, detail


@pytest.mark.slow
@pytest.mark.parametrize("stem", [f"{f}_attention_logits" for f in FAMILIES])
def test_every_attention_logit_spec_meets_its_expectation_on_seeds_0_to_7(stem: str) -> None:
    for seed in range(8):
        met, detail = _met(stem, seed)
        assert met, f"seed {seed}: {detail}"


@pytest.mark.slow
@pytest.mark.parametrize("stem", [f"{f}_lr_sensitivity" for f in FAMILIES])
def test_every_lr_sensitivity_spec_meets_its_expectation(stem: str) -> None:
    met, detail = _met(stem, 0)
    assert met, detail


def test_llama_at_the_specs_config_is_qwen3_without_its_qk_norms() -> None:
    """So the pair llama/qwen3 measures exactly what Qwen3's q/k norms do."""
    import transformers

    from stability.families.library_values import fill

    models = []
    for name in ("llama", "qwen3"):
        spec = load_spec(ZOO / f"{name}_attention_logits.toml")
        cls = getattr(transformers, spec.options.model.split(":")[1])  # type: ignore[union-attr]
        config = {"vocab_size": 64, **fill(spec.options.config, corner_case(spec).as_dict())}  # type: ignore[union-attr]
        torch.manual_seed(3)
        models.append(cls(cls.config_class(**config)))
    llama, qwen3 = models
    for layer in qwen3.model.layers:
        layer.self_attn.q_norm, layer.self_attn.k_norm = nn.Identity(), nn.Identity()
    tokens = torch.randint(3, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    assert torch.equal(llama(input_ids=tokens).logits, qwen3(input_ids=tokens).logits)


def _gpt2(lr: float) -> str:
    """The attention-logit control (specs/control_lm_attention_logit_growth.toml) with a
    transformers GPT-2 LM from its config in place of the project's transformer, at `lr`."""
    text = (ROOT / "specs" / "control_lm_attention_logit_growth.toml").read_text(encoding="utf-8")
    train = text[text.index("[train]") : text.index("[expect.attention_logits]")]
    train = re.sub(r"(?m)^lr = .*$", f"lr = {lr}", train)
    return (
        'name = "held-out-gpt2"\ndescription = "GPT-2"\nfamily = "library"\n\n[block]\nlayer = '
        '"tokens"\nmodel = "transformers:GPT2LMHeadModel"\n'
        'config = { n_embd = "width", n_layer = "depth", n_head = 4, n_positions = 16, bos_token_id = 1, '
        "eos_token_id = 2 }\n\n"
        "[space]\ndepth = 2\nwidth = 32\ntokens = 16\nbatch = 16\n\n"
        + train
        + "[expect.attention_logits]\nmax_logit = 100.0\n"
    )


@pytest.mark.slow
def test_a_gpt2_lm_from_its_config_fails_attention_logits_at_lr_0_3_and_holds_at_0_01() -> None:
    for lr, passed in ((0.3, False), (0.01, True)):
        spec = parse_spec(_gpt2(lr), file=str(ROOT / "specs" / "held_out_gpt2.toml"))
        assert (
            spec.train is not None
            and spec.train.betas == (0.9, 0.95)
            and spec.train.decay == "independent"
            and spec.train.steps == 60
        )
        v, error = evaluate_lm(spec, "attention_logits", corner_case(spec, seed=0), case_timeout=600)
        assert v is not None and error is None and v.measured and v.passed is passed, (lr, error, v and v.detail)
        print(f"lr {lr}: {v.detail}")
