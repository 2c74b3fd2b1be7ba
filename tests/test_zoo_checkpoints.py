"""Every zoo spec's config against the checkpoint it names, where the library ships that
checkpoint's values: a transformers config class's defaults are the checkpoint its docstring names
("Instantiating a configuration with the defaults will yield a similar configuration to that of
the [org/name] architecture"), a timm registered model's and a torchvision builder's keyword
arguments are their checkpoint's (read by stopping the builder at the model class's constructor,
nothing built or downloaded). Each spec key the checkpoint has, placeholders and the keys a reduced
probe changes on purpose (`REDUCED`) left out, must equal the checkpoint's value; a `shipped` list
(and a config list) may give the first stages only.

Where the library ships another checkpoint's values (LlamaConfig's defaults are Llama-2-7B's, the
spec names Llama-3.2-1B), the spec's values are that checkpoint's config.json's, and
`NOT_SHIPPED` says so; tests/test_zoo_specs.py checks zoo-llama's rope and norm settings."""

from __future__ import annotations

import re
import sys
import tomllib
import warnings
from typing import Any

import pytest
from shipped_support import require_shipped_libraries
from spec_support import ZOO

warnings.filterwarnings("ignore", message="Failed to load image Python extension")

#: Keys a reduced probe changes on purpose: a 64-token vocabulary and its special ids, 32×32 images
#: (their patch and window sizes), the stages after the probed one, 2 experts, the zero-init
#: variant under test, the attention kernel.
REDUCED = frozenset(
    {
        *(
            "vocab_size",
            "pad_token_id",
            "bos_token_id",
            "eos_token_id",
            "image_size",
            "img_size",
            "patch_size",
            "window_size",
        ),
        *(
            "depths",
            "layers",
            "num_stages",
            "num_local_experts",
            "num_experts_per_tok",
            "zero_init_last",
            "attn_implementation",
            "decoder_layers",
        ),
    }
)

#: The checkpoint each spec names, where the library ships its values.
SHIPPED = {
    "zoo-bert": "google-bert/bert-base-uncased",
    "zoo-gpt2": "openai-community/gpt2",
    "zoo-roberta": "FacebookAI/roberta-base",
    "zoo-resnet": "microsoft/resnet-50",
    "zoo-convnext": "facebook/convnext-tiny-224",
    "zoo-swin": "microsoft/swin-tiny-patch4-window7-224",
    "zoo-vit": "google/vit-base-patch16-224",
    "zoo-mistral": "mistralai/Mistral-7B-v0.1",
    "zoo-mixtral": "mistralai/Mixtral-8x7B-v0.1",
    "zoo-phi3": "microsoft/Phi-3-mini-4k-instruct",
    "zoo-timm-vit": "vit_small_patch16_224",
    "zoo-timm-deit3": "deit3_small_patch16_224",
    "zoo-timm-convnext": "convnext_atto",
    "zoo-timm-resnet": "resnet18",
    "zoo-timm-resnet-zero": "resnet18",
    "zoo-timm-resnetv2-zero": "resnetv2_18",
    "zoo-timm-mixer": "mixer_s16_224",
    "zoo-tv-vit": "vit_b_16",
    "zoo-tv-swin": "swin_t",
}
#: The specs whose named checkpoint the library does not ship (its config class documents another).
NOT_SHIPPED = {
    "zoo-bart",
    "zoo-deberta-v2",
    "zoo-falcon",
    "zoo-gemma",
    "zoo-gemma2",
    "zoo-gpt-neox",
    "zoo-llama",
    "zoo-mamba",
    "zoo-phi",
    "zoo-qwen2",
    "zoo-qwen3",
    "zoo-t5",
}


class _Stop(Exception):
    pass


def _captured_kwargs(module: Any, name: str, call: Any) -> dict[str, Any]:
    """The keyword arguments `call()` passes to `module.name` (a class or builder), stopped there."""
    seen: dict[str, Any] = {}

    def fake(*args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        raise _Stop

    original = getattr(module, name)
    setattr(module, name, fake)
    try:
        call()
    except _Stop:
        pass
    finally:
        setattr(module, name, original)
    return seen


def _checkpoint_values(library: str, model: str, checkpoint: str) -> dict[str, Any]:
    if library == "transformers":
        import transformers

        cls = getattr(transformers, model)
        config = cls if model.endswith("Config") else cls.config_class
        named = re.search(r"\[([\w\-./]+)\]\(https://huggingface.co/", config.__doc__ or "")
        assert named is not None and named.group(1) == checkpoint, (
            f"{config.__name__}'s defaults are {named and named.group(1)}'s, not {checkpoint}'s"
        )
        values = dict(config().to_dict())
        if values.get("head_dim") is None and "num_attention_heads" in values:  # the class derives it
            values["head_dim"] = values["hidden_size"] // values["num_attention_heads"]
        return values
    if library == "timm":
        import timm

        fn = timm.models.model_entrypoint(checkpoint)
        return _captured_kwargs(sys.modules[fn.__module__], "build_model_with_cfg", lambda: fn(pretrained=False))
    import torchvision

    builder = torchvision.models.get_model_builder(checkpoint)
    module = sys.modules[builder.__module__]
    cls = {"vit_b_16": "VisionTransformer", "swin_t": "SwinTransformer"}[checkpoint]
    return _captured_kwargs(module, cls, lambda: builder(weights=None))


def _placeholder(v: Any) -> bool:
    return isinstance(v, str) and re.fullmatch(r"(\d+\*)?(width|depth|batch|tokens|spatial)(/\d+)?", v) is not None


def _same(spec_value: Any, value: Any, *, prefix: bool) -> bool:
    if isinstance(spec_value, list) and isinstance(value, (list, tuple)):
        if len(spec_value) != len(value) and not (prefix and len(spec_value) < len(value)):
            return False
        return all(_placeholder(a) or _same(a, b, prefix=prefix) for a, b in zip(spec_value, value, strict=False))
    if isinstance(spec_value, dict) and isinstance(value, dict):
        return all(k in value and _same(v, value[k], prefix=prefix) for k, v in spec_value.items())
    return bool(spec_value == value)


def test_every_zoo_spec_is_in_one_list() -> None:
    names = {tomllib.loads(p.read_text())["name"] for p in ZOO.glob("*.toml")}
    assert names == set(SHIPPED) | NOT_SHIPPED and not set(SHIPPED) & NOT_SHIPPED


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_the_spec_config_is_the_named_checkpoints(name: str) -> None:
    require_shipped_libraries()
    path = next(p for p in ZOO.glob("*.toml") if tomllib.loads(p.read_text())["name"] == name)
    data = tomllib.loads(path.read_text())
    library, _, model = data["block"]["model"].partition(":")
    checkpoint = SHIPPED[name]
    assert (
        checkpoint.rsplit("/", 1)[-1].split("-224")[0].split("-4k")[0].lower()[:8]
        in (data["description"] + model).lower().replace("_", "-")
        or checkpoint in data["description"] + model
    )
    values = _checkpoint_values(library, model, checkpoint)
    compared = []
    for table, prefix in (("config", True), ("shipped", True)):
        for key, value in data["block"].get(table, {}).items():
            if key in REDUCED or _placeholder(value) or key not in values:
                continue
            assert _same(value, values[key], prefix=prefix), (
                f"{path.name}: block.{table}.{key} = {value!r}, {checkpoint} has {values[key]!r}"
            )
            compared.append(key)
    assert compared or not data["block"].get("shipped"), f"{path.name}: no key compared with {checkpoint}"
