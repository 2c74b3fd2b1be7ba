"""stability/families/library.py and library_build.py: a library model named as data is refused
before anything is built when its name or a config key does not exist (with the close names);
placeholders are filled from the case; inputs follow the modality; and the init rule for reduced
widths is exact where it has a closed form and carries the shipped model's verdict down to a
reduced width where the library's plain init does not."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings

import pytest
import torch

from stability.errors import CaseError, SpecError
from stability.families.adapters import set_modes
from stability.families.library import check_config, parse_library, resolve
from stability.families.library_build import build_model
from stability.families.library_values import fill, placeholders
from stability.judge.invariants import gradient_arrival
from stability.measure.forward import probe_model

pytest.importorskip("transformers", reason="Hugging Face transformers is not installed (pip install -e '.[hf]')")
warnings.filterwarnings("ignore", message="Failed to load image Python extension")

GPT2 = {
    "n_embd": "width",
    "n_layer": "depth",
    "n_head": "width/64",
    "vocab_size": 64,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
CASE = {"depth": 2, "width": 64, "batch": 2, "tokens": 8, "seed": 0}


def test_a_name_that_is_no_model_or_config_of_an_allowed_library_is_refused_with_the_close_names() -> None:
    assert resolve("transformers:LlamaModel", file="s.toml").kind == "model"
    assert resolve("transformers:LlamaConfig", file="s.toml").kind == "config"
    with pytest.raises(
        SpecError,
        match=r"^s.toml: model = 'transformers:LlamaModle': is not a transformers model or config class; "
        r"close names: LlamaModel",
    ):
        resolve("transformers:LlamaModle", file="s.toml")
    for name in (
        "transformers:AutoTokenizer",
        "transformers:pipeline",
        "transformers:Trainer",
        "transformers:LlamaPreTrainedModel",
    ):
        with pytest.raises(SpecError, match="is not a transformers model or config class"):
            resolve(name, file="s.toml")
    for name in ("os:system", "builtins:exec", "transformers", "torch:nn.Linear"):
        with pytest.raises(SpecError, match=r'names no model of transformers, timm, torchvision; write "LIBRARY:NAME"'):
            resolve(name, file="s.toml")


def test_timm_and_torchvision_names_are_their_registries_and_the_classes_those_return() -> None:
    try:
        assert resolve("timm:resnet18", file="s.toml").kind == "registered"
        assert resolve("timm:VisionTransformer", file="s.toml").kind == "model"
        assert resolve("torchvision:regnet_y_400mf", file="s.toml").kind == "registered"
    except SpecError as exc:
        pytest.skip(f"timm/torchvision do not import here: {exc}")
    with pytest.raises(SpecError, match="is not a timm registered model or model class; close names: resnet18"):
        resolve("timm:resnet1B", file="s.toml")
    with pytest.raises(SpecError, match="is not a timm registered model or model class"):
        resolve("timm:BasicBlock", file="s.toml")  # a block class no registered model returns


def test_an_unknown_config_key_or_case_key_or_a_loading_key_is_refused() -> None:
    target = resolve("transformers:GPT2Model", file="s.toml")
    check_config(
        target, {**GPT2, "hidden_size": 64, "attn_implementation": "eager"}, file="s.toml"
    )  # an alias and the attention choice
    with pytest.raises(
        SpecError,
        match=r"^s.toml: config.n_embed = 'width': is not a config key of transformers:GPT2Model; close names: n_embd",
    ):
        check_config(target, {"n_embed": "width"}, file="s.toml")
    with pytest.raises(
        SpecError, match=r"config.n_inner = '4\*widht': names 'widht', which is not a case key; close names: width"
    ):
        check_config(target, {"n_inner": "4*widht"}, file="s.toml")
    # under a divisor alone (no factor), as in GPT-2's n_head: refused too, never a literal every case fails on
    with pytest.raises(
        SpecError, match=r"config.n_head = 'widht/64': names 'widht', which is not a case key; close names: width"
    ):
        check_config(target, {"n_head": "widht/64"}, file="s.toml")
    with pytest.raises(SpecError, match="config.pretrained = True: would load pretrained weights or files"):
        check_config(target, {"pretrained": True}, file="s.toml")
    check_config(
        target, {"activation_function": "gelu_new"}, file="s.toml"
    )  # a string that names no case key is a literal


@pytest.mark.slow  # a subprocess importing transformers
def test_the_check_imports_no_model_module() -> None:
    code = (
        "import sys\n"
        "from stability.errors import SpecError\n"
        "from stability.families.library import resolve, check_config\n"
        "t = resolve('transformers:LlamaModel', file='s')\n"
        "check_config(t, {'hidden_size': 'width', 'num_hidden_layers': 'depth'}, file='s')\n"
        "try:\n    check_config(t, {'hidden_sise': 8}, file='s')\nexcept SpecError:\n    pass\n"
        "import re\n"
        "def modeling():\n    return sorted(m for m in sys.modules if "
        "re.match(r'transformers[.]models[.](?!auto[.])[a-z0-9_]+[.]modeling_', m))\n"
        "print(modeling())\n"
        "import transformers\n"
        "transformers.LlamaModel\n"
        "print(modeling())\n"  # what the check would have seen had it imported the model
    )
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines() == ["[]", "['transformers.models.llama.modeling_llama']"]


def test_placeholders_are_filled_from_the_case() -> None:
    config = {
        "n": "width",
        "m": "4*width",
        "k": "width/8",
        "list": [2, "depth", "0.5*width"],
        "sub": {"t": "tokens"},
        "act": "gelu",
    }
    assert fill(config, {"width": 64, "depth": 3, "tokens": 9}) == {
        "n": 64,
        "m": 256,
        "k": 8,
        "list": [2, 3, 32.0],
        "sub": {"t": 9},
        "act": "gelu",
    }
    assert placeholders(config) == {"width", "depth", "tokens"}
    with pytest.raises(CaseError, match=r"'width/8' is 36/8, not an integer"):
        fill("width/8", {"width": 36})
    with pytest.raises(CaseError, match="names the case's spatial, which this case does not set"):
        fill("spatial", {"spatial": None})


def test_inputs_follow_the_modality_and_never_hold_the_padding_token() -> None:
    spec = parse_library(
        "transformers:BertModel",
        config={
            "hidden_size": "width",
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "vocab_size": 5,
            "pad_token_id": 2,
        },
        file="s",
    )
    torch.manual_seed(0)
    b = build_model(spec, {**CASE, "batch": 3, "tokens": 400}, input_seed=1)
    ids = b.inputs["input_ids"]
    assert ids.shape == (3, 400) and set(ids.unique().tolist()) == {0, 1, 3, 4}
    assert b.inputs["use_cache"] is False if "use_cache" in b.inputs else True
    spec = parse_library(
        "transformers:BertModel",
        config={"hidden_size": "width", "num_hidden_layers": 1, "num_attention_heads": 2},
        inputs="embeddings",
        file="s",
    )
    b = build_model(spec, CASE, input_seed=1)
    x = b.inputs["inputs_embeds"]
    assert x.shape == (2, 8, 64)
    # drawn at the scale of the model's own token embedding: N(0, 1) times its rows' rms (BERT's
    # N(0, 0.02²), padding row 0 left out), from the same draw as before the scale
    w = b.model.get_input_embeddings().weight.detach()[1:].double()
    unit = torch.randn(2, 8, 64, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert torch.allclose(x.double(), unit * float(w.square().mean().sqrt()), rtol=1e-6)
    spec = parse_library(
        "transformers:ViTModel",
        config={
            "hidden_size": "width",
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 16,
            "num_channels": 2,
        },
        file="s",
    )
    assert build_model(spec, CASE, input_seed=1).inputs["pixel_values"].shape == (2, 2, 16, 16)
    with pytest.raises(
        SpecError, match="inputs = 'audio': is not a modality; choose one of tokens, images, embeddings"
    ):
        parse_library("transformers:BertModel", config={}, inputs="audio", file="s")


def _gpt2(width: int, depth: int, *, shipped: dict[str, int] | None) -> list[torch.Tensor]:
    spec = parse_library("transformers:GPT2Model", config=GPT2, shipped=shipped, file="s")
    torch.manual_seed(0)
    b = build_model(spec, {**CASE, "width": width, "depth": depth}, input_seed=1)
    return [p.detach().clone() for p in b.model.parameters()], b  # type: ignore[return-value]


def test_the_init_rule_keeps_sigma_squared_times_width_for_transformers_n0_sigma_init() -> None:
    plain, _ = _gpt2(64, 2, shipped=None)
    rescaled, b = _gpt2(64, 2, shipped={"n_embd": 768, "n_head": 12})
    k = math.sqrt(768 / 64)
    assert set(b.factors) == {"attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"}
    assert all(f == pytest.approx(k, rel=1e-12, abs=0.0) for f in b.factors.values())
    names = [n for n, _ in b.model.named_parameters()]
    for name, p, q in zip(names, plain, rescaled, strict=True):
        expected = p * k if name in b.scaled else p  # embeddings, norms and biases keep the library's init
        assert torch.equal(q, expected), name
    assert len(b.scaled) == 8  # 4 matrices x 2 blocks
    with pytest.raises(
        SpecError,
        match=r"shipped = \{'n_head': 12\}: needs the shipped value of every config key the case's width "
        r"fills \(missing: n_embd",
    ):
        parse_library("transformers:GPT2Model", config=GPT2, shipped={"n_head": 12}, file="s")


def _factors(model: str, config: dict[str, object], shipped: dict[str, object], width: int) -> dict[str, float]:
    spec = parse_library(model, config=config, shipped=shipped, file="s")
    torch.manual_seed(0)
    return {k: round(v, 9) for k, v in build_model(spec, {**CASE, "width": width}, input_seed=1).factors.items()}


def test_a_fan_in_aware_init_keeps_its_gains_and_gets_k_1() -> None:
    # T5 draws each matrix with σ ∝ fan-in^(-1/2): already width-aware. Mamba's A_log is a table
    # and its depthwise conv's fan-in is the kernel size; its dt_proj and out_proj are fan-in scaled.
    t5 = {
        "d_model": "width",
        "d_ff": "4*width",
        "d_kv": 64,
        "num_layers": "depth",
        "num_heads": "width/64",
        "vocab_size": 64,
        "pad_token_id": 0,
        "eos_token_id": 1,
    }
    assert set(
        _factors("transformers:T5EncoderModel", t5, {"d_model": 512, "d_ff": 2048, "num_heads": 8}, 64).values()
    ) == {1.0}
    mamba = {
        "hidden_size": "width",
        "num_hidden_layers": "depth",
        "vocab_size": 64,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    k = round(math.sqrt(768 / 64), 9)
    factors = _factors("transformers:MambaModel", mamba, {"hidden_size": 768}, 64)
    assert factors == {
        "mixer.A_log": 1.0,
        "mixer.conv1d.weight": 1.0,
        "mixer.in_proj.weight": k,
        "mixer.x_proj.weight": k,
        "mixer.dt_proj.weight": 1.0,
        "mixer.out_proj.weight": 1.0,
    }


def _probed(
    model: str, config: dict[str, object], width: int, shipped: dict[str, object] | None
) -> tuple[float, list[bool]]:
    """At depth 4 and two seeds: the geometric mean of the gradient ratio, and each seed's
    gradient_arrival verdict in [1/4, 4]."""
    spec = parse_library(model, config=config, shipped=shipped, file="s")
    ratios, verdicts = [], []
    for seed in (0, 1):
        torch.manual_seed(seed)
        b = build_model(spec, {**CASE, "width": width, "depth": 4, "seed": seed}, input_seed=seed + 100)
        set_modes(b.model, norm_train=False, dropout_train=False)
        m = probe_model(b.model, b.inputs, blocks=b.blocks, seed=seed)
        ratios.append(m.gradient_ratio)
        verdicts.append(gradient_arrival(m, lo=0.25, hi=4.0).passed)
    return math.exp(sum(map(math.log, ratios)) / len(ratios)), verdicts


DECODER = {
    "hidden_size": "width",
    "intermediate_size": "4*width",
    "num_hidden_layers": "depth",
    "num_attention_heads": "width/64",
    "num_key_value_heads": "width/64",
}
SHIPPED = {"hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12, "num_key_value_heads": 12}
ENCODER = {k: v for k, v in DECODER.items() if k != "num_key_value_heads"}
TOKENS = {"vocab_size": 64, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}


@pytest.mark.parametrize(
    ("model", "config", "shipped"),
    [
        pytest.param("transformers:GPT2Model", GPT2, {"n_embd": 768, "n_head": 12}, id="gpt2"),
        pytest.param("transformers:LlamaModel", {**DECODER, **TOKENS}, SHIPPED, id="llama", marks=pytest.mark.slow),
        pytest.param(
            "transformers:Qwen3Model",
            {**DECODER, **TOKENS, "head_dim": 64},
            SHIPPED,
            id="qwen3",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "transformers:BertModel",
            {**ENCODER, "vocab_size": 64, "pad_token_id": 0},
            {k: v for k, v in SHIPPED.items() if k != "num_key_value_heads"},
            id="bert",
            marks=pytest.mark.slow,  # post-LN holds at every width, so its verdicts cannot tell; gpt2's do
        ),
    ],
)
def test_the_verdict_at_a_reduced_width_with_the_rule_is_the_one_at_the_shipped_width(
    model: str, config: dict[str, object], shipped: dict[str, object]
) -> None:
    (at_768, shipped_verdicts), (with_rule, rule_verdicts), (plain, plain_verdicts) = (
        _probed(model, config, w, s) for w, s in ((768, None), (64, shipped), (64, None))
    )
    assert abs(math.log(with_rule / at_768)) < math.log(1.5), (at_768, with_rule)
    assert rule_verdicts == shipped_verdicts, (at_768, with_rule)
    # pre-LN: at 768 the branches are large next to the small embedding; at width 64 with the plain init they are not
    if model != "transformers:BertModel":
        assert shipped_verdicts == [False, False] and plain_verdicts == [True, True], (at_768, plain)
    else:  # post-LN at depth 4: bounded at every width
        assert shipped_verdicts == plain_verdicts == [True, True]
