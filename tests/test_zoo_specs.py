"""The zoo's specs probe the model they name: the transformers ResNet's shipped-scale init is applied
whatever was built before, its depth-1 case is one bottleneck block, zoo-llama's config is
Llama-3.2-1B's, a key that has no effect on a library model is refused, and every zoo spec's
config agrees with the checkpoint it names where the library ships that checkpoint's values."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from shipped_support import require_shipped_libraries
from spec_support import ZOO

from stability.families.library_family import library_model
from stability.spec.load import load_spec

warnings.filterwarnings("ignore", message="Failed to load image Python extension")


def _values(spec, depth: int) -> dict:
    from stability.spec.case import corner_case

    return {**corner_case(spec).as_dict(), "depth": depth}


def test_the_resnet_init_factors_do_not_depend_on_what_was_built_before() -> None:
    """The init-factor cache is keyed by the block class too: a depth-1 build (whose blocks may be
    of another class) then a depth-4 build gives the depth-4 build its own factors."""
    require_shipped_libraries()
    import torch

    from stability.families import library_build as lb

    spec = load_spec(ZOO / "resnet.toml")
    lib = library_model(spec)
    conv = lb.construct(lib.target, lb.fill(lib.config, _values(spec, 1)))
    conv_layer = next(type(m) for m in conv.modules() if type(m).__name__ == "ResNetConvLayer")
    lb._FACTORS.clear()
    first = lb.init_factors(lib, _values(spec, 1), conv_layer)  # what depth 1 once discovered
    torch.manual_seed(0)
    deep = lb.build_model(lib, _values(spec, 4), input_seed=1)
    lb._FACTORS.clear()
    torch.manual_seed(0)
    fresh = lb.build_model(lib, _values(spec, 4), input_seed=1)
    assert type(deep.blocks.modules[0]).__name__ == "ResNetBottleNeckLayer"
    assert fresh.factors and deep.factors == fresh.factors != first
    assert deep.scaled == fresh.scaled and len(deep.scaled) == 4 * len(fresh.factors)


def test_the_resnet_spec_probes_bottleneck_blocks_at_every_depth() -> None:
    require_shipped_libraries()
    import torch

    from stability.families import library_build as lb

    spec = load_spec(ZOO / "resnet.toml")
    lib = library_model(spec)
    for depth in (1, 2, 4):
        torch.manual_seed(0)
        built = lb.build_model(lib, _values(spec, depth), input_seed=1)
        assert [type(m).__name__ for m in built.blocks.modules] == ["ResNetBottleNeckLayer"] * depth
        assert built.factors, f"depth {depth}: the shipped-scale init was not applied"


def test_zoo_llama_builds_llama_3_2_1b_positions_and_norms() -> None:
    """Llama-3.2-1B's config.json: rope_theta 500,000 with the llama3 frequency scaling (factor 32,
    low/high frequency factors 1 and 4, original context 8192), rms_norm_eps 1e-5; the config
    class's defaults (θ = 10,000, eps 1e-6) are Llama-2-7B's."""
    require_shipped_libraries()
    import torch

    from stability.families import library_build as lb

    spec = load_spec(ZOO / "llama.toml")
    torch.manual_seed(0)
    built = lb.build_model(library_model(spec), _values(spec, 2), input_seed=1)
    cfg = built.model.config
    rope = cfg.rope_parameters
    keys = (
        "rope_type",
        "rope_theta",
        "factor",
        "low_freq_factor",
        "high_freq_factor",
        "original_max_position_embeddings",
    )
    assert tuple(rope[k] for k in keys) == ("llama3", 500000.0, 32.0, 1.0, 4.0, 8192)
    assert cfg.rms_norm_eps == 1e-5 and all(
        m.variance_epsilon == 1e-5 for m in built.model.modules() if type(m).__name__ == "LlamaRMSNorm"
    )
    # The rotary frequencies the blocks see: θ^(-2i/d), the low frequencies (wavelength above
    # 8192/1) divided by 32 (transformers' _compute_llama3_parameters).
    inv_freq = built.model.rotary_emb.inv_freq.double()
    base = 1.0 / 500000.0 ** (torch.arange(0, 64, 2, dtype=torch.float64) / 64)
    wavelength = 2 * torch.pi / base
    assert torch.allclose(inv_freq[wavelength < 8192 / 4], base[wavelength < 8192 / 4])
    assert torch.allclose(inv_freq[wavelength > 8192], base[wavelength > 8192] / 32)


@pytest.mark.parametrize(
    ("model", "config", "space", "key"),
    [
        (
            "timm:vit_small_patch16_224",
            '{ img_size = 32, patch_size = 8, embed_dim = "width", depth = "depth", num_heads = "width/64" }',
            "tokens = 8",
            "space.tokens",
        ),
        (
            "transformers:ViTModel",
            '{ hidden_size = "width", num_hidden_layers = "depth", num_attention_heads = 2, image_size = 32, '
            "patch_size = 8 }",
            "tokens = 8",
            "space.tokens",
        ),
        (
            "torchvision:VisionTransformer",
            '{ image_size = 32, patch_size = 8, num_layers = "depth", num_heads = 2, hidden_dim = "width", '
            "mlp_dim = 64 }",
            "tokens = 8",
            "space.tokens",
        ),
        (
            "transformers:ViTModel",
            '{ hidden_size = "width", num_hidden_layers = "depth", num_attention_heads = 2, image_size = 32, '
            "patch_size = 8 }",
            "spatial = 16",
            "space.spatial",
        ),
    ],
)
def test_a_space_key_the_model_does_not_read_is_refused_in_one_line(
    tmp_path: Path, model: str, config: str, space: str, key: str
) -> None:
    require_shipped_libraries()
    from stability.errors import SpecError

    path = tmp_path / "s.toml"
    block = f'[block]\nlayer = "tokens"\nmodel = "{model}"\nconfig = {config}\n'
    path.write_text(
        f'name = "s"\ndescription = "d"\nfamily = "library"\n\n{block}\n[space]\ndepth = [1, 2]\nwidth = '
        f"64\n{space}\n\n[expect.gradient_arrival]\n"
    )
    with pytest.raises(SpecError) as err:
        load_spec(path)
    text = str(err.value)
    assert key in text and "has no effect" in text and "\n" not in text


def test_a_language_models_tokens_are_read() -> None:
    """The refusal is for images only: a transformers language model reads `space.tokens`."""
    require_shipped_libraries()
    from stability.families.library import input_modality

    for name in ("llama", "gpt2", "bert", "t5", "mamba"):
        assert input_modality(library_model(load_spec(ZOO / f"{name}.toml"))) == "tokens"
    for name in ("vit", "swin", "timm_vit", "tv_vit", "resnet", "convnext"):
        assert input_modality(library_model(load_spec(ZOO / f"{name}.toml"))) == "images"
