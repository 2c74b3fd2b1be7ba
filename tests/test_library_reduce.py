"""The generic reducer of `stability scan` (stability/families/library_reduce.py) and the builds it
plans (stability/families/library_scan.py): the rule on plain argument trees, exactly, then real
library configs — nested ones included — reduced to small models on the meta device."""

from __future__ import annotations

from typing import Any

import pytest

from stability.families.library_reduce import LADDER, at_depth, cut, head_factor, plan, role


def test_the_roles_are_read_from_the_arguments_names() -> None:
    assert role("num_hidden_layers", 32) == "layers"
    assert role("depths", [2, 2, 6, 2]) == "layers"
    assert role("num_attention_heads", 32) == "heads"
    assert role("num_key_value_heads", 8) == "kv_heads"
    assert role("head_dim", 128) is None  # a head keeps its dimension
    assert role("d_head", 64) is None
    assert role("hidden_size", 4096) == "width"
    assert role("hidden_sizes", [96, 192]) == "width"
    assert role("vocab_size", 32000) == "vocab"
    assert role("pad_token_id", 32000) == "token"
    assert role("num_channels", 3) is None  # the input's channels
    assert role("in_channels", 3) is None
    assert role("in_channels", [32, 16]) == "width"  # a list of stage widths
    assert role("hidden_act", "gelu") is None
    assert role(0, "LABEL_0") is None  # id2label's keys


def test_a_decoder_keeps_its_head_dimension_with_two_heads_and_a_divisor_of_them_for_key_values() -> None:
    tree = {
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 32,
        "vocab_size": 32000,
        "pad_token_id": 31999,
        "bos_token_id": 1,
        "layer_types": ["sliding"] * 31 + ["full"],
    }
    assert head_factor(tree) == 1 / 16  # gcd 32 leaves one head: two
    p = plan(tree, LADDER[0])
    out = at_depth(tree, p, 2)
    assert out["num_attention_heads"] == 2
    assert out["hidden_size"] // out["num_attention_heads"] == 4096 // 32  # head dimension 128 kept
    assert out["num_key_value_heads"] == 1  # 8/16 rounds to 1, a divisor of 2
    assert out["intermediate_size"] == 688  # 11008/16
    assert out["num_hidden_layers"] == 2
    assert out["vocab_size"] == 512
    assert out["pad_token_id"] == 511 and out["bos_token_id"] == 1  # an id past the vocabulary moves to its top
    assert out["layer_types"] == ["sliding", "full"]  # one entry of each kind kept
    assert at_depth(tree, p, 4)["layer_types"] == ["sliding", "sliding", "sliding", "full"]
    assert at_depth(tree, p, 4)["num_hidden_layers"] == 4
    assert tree["hidden_size"] == 4096  # the shipped tree is not changed


def test_nested_configs_share_one_factor_so_widths_that_must_agree_still_agree() -> None:
    tree: dict[str, Any] = {
        "text_config": {"hidden_size": 3584, "num_attention_heads": 28, "num_hidden_layers": 28},
        "vision_config": {"hidden_size": 1280, "num_heads": 16, "depth": 32, "out_hidden_size": 3584},
    }
    p = plan(tree, LADDER[0])
    out = at_depth(tree, p, 2)
    assert p.factor == 1 / 4  # gcd(28, 16) = 4
    assert out["vision_config"]["out_hidden_size"] == out["text_config"]["hidden_size"] == 896
    assert out["text_config"]["num_attention_heads"] == 7 and out["vision_config"]["num_heads"] == 4
    assert out["text_config"]["num_hidden_layers"] == out["vision_config"]["depth"] == 2


def test_stage_lists_count_stages_and_per_stage_heads_scale_with_the_widths() -> None:
    tree = {"embed_dim": 96, "depths": [2, 2, 6, 2], "num_heads": [3, 6, 12, 24], "num_layers": 4}
    p = plan(tree, LADDER[0])
    out = at_depth(tree, p, 2)
    assert out["depths"] == [2, 2, 2, 2] and out["num_layers"] == 4  # four stages stay four
    assert out["num_heads"] == [1, 2, 4, 8] and out["embed_dim"] == 32  # head dimension 32 kept


def test_a_tree_without_heads_scales_its_widest_width_to_256_in_multiples_of_8() -> None:
    tree = {"hidden_sizes": [256, 512, 1024, 2048], "depths": [3, 4, 6, 3]}
    out = at_depth(tree, plan(tree, LADDER[0]), 2)
    assert out["hidden_sizes"] == [32, 64, 128, 256]
    assert out["depths"] == [2, 2, 2, 2]


def test_the_last_rung_is_the_default() -> None:
    tree = {"hidden_size": 768, "num_hidden_layers": 12}
    assert at_depth(tree, plan(tree, LADDER[-1]), 2) == tree


def test_cut_keeps_one_entry_of_each_kind_and_repeats_a_short_list() -> None:
    assert cut(["s", "s", "s", "s", "s", "f"], 2) == ["s", "f"]
    assert cut(["a", "b"], 5) == ["a", "b", "a", "b", "a"]
    assert cut([1, 1, 1], 2) == [1, 1]


@pytest.mark.parametrize(
    ("library", "name", "limit"),
    [
        ("transformers", "LlamaModel", 5_000_000),  # its default config is Llama-2-7B
        ("transformers", "CLIPModel", 5_000_000),  # nested text_config and vision_config
        ("transformers", "Qwen2VLModel", 20_000_000),  # nested, a vision tower tied to the text width
        ("transformers", "SwinModel", 5_000_000),  # stage lists
        ("transformers", "T5Model", 5_000_000),
    ],
)
def test_library_configs_reduce_to_small_models_that_build(library: str, name: str, limit: int) -> None:
    pytest.importorskip(library)
    from stability.families.library_scan import ScanTarget, plan_build
    from stability.families.library_values import fill  # noqa: F401 -- the family's own module loads

    build = plan_build(ScanTarget(library=library, name=name))
    assert build.plan.rung == "reduced"
    assert build.parameters < limit
    assert build.model == f"{library}:{name}"
    assert build.config(4) != build.config(2)


def test_a_timm_and_a_torchvision_model_are_built_from_their_builders_own_arguments_reduced() -> None:
    pytest.importorskip("timm")
    from stability.families.library_scan import ScanTarget, constructor_arguments, plan_build

    cls, args = constructor_arguments("timm", "vit_base_patch16_224")
    assert cls.__name__ == "VisionTransformer"
    assert (args["embed_dim"], args["depth"], args["num_heads"]) == (768, 12, 12)
    build = plan_build(ScanTarget(library="timm", name="vit_base_patch16_224"))
    assert build.model == "timm:VisionTransformer"
    assert build.changed(2) == {"embed_dim": 128, "num_heads": 2, "depth": 2}  # 64-wide heads, as shipped
    tv = plan_build(ScanTarget(library="torchvision", name="vit_h_14"))
    assert tv.model == "torchvision:VisionTransformer" and tv.parameters < 2_000_000


def test_a_model_past_the_parameter_limit_is_not_built_and_says_why() -> None:
    pytest.importorskip("transformers")
    from stability.errors import CaseError
    from stability.families.library_scan import ScanTarget, plan_build

    with pytest.raises(CaseError, match="more than the scan's limit of 1,000"):
        plan_build(ScanTarget(library="transformers", name="GPT2Model"), max_parameters=1000)
