"""stability/spec/remedy.py and stability/spec/edit.py: the remedy registry (duplicates refused, a
did-you-mean on a miss, an incomplete entry refused when it is registered), the one edit and its two
appliers (the parsed document, the file's text with the user's comments and order kept), and
stability/judge/remedies.py's rule of which remedy applies to which spec."""

from __future__ import annotations

import math
import tomllib

import pytest
from approx_support import approx
from spec_support import ROOT, shipped_text, spec_text

from stability.judge.remedies import carry_gate_bias, layerscale_init
from stability.spec.edit import edited_text
from stability.spec.load import parse_spec
from stability.spec.registry import RegistryError
from stability.spec.remedy import (
    MISSING,
    REMEDIES,
    REMOVE,
    Change,
    Remedy,
    apply_edit,
    changes_of,
    lookup,
    register_remedy,
    remedy,
)

BUILT_IN = {
    "zero_branch",
    "shrink_branch",
    "fixup",
    "carry_gate",
    "rezero",
    "skipinit",
    "layerscale",
    "deepnorm",
    "critical_init",
    "residual_route",
    "prenorm",
    "qk_norm",
    "attention_softcap",
    "z_loss",
    "logit_softcap",
    "tied_readout",
    "init_range",
}


def _toy(**changes: object) -> Remedy:
    fields: dict[str, object] = {
        "name": "toy_remedy",
        "summary": "a toy",
        "fixes": frozenset({"gradient_arrival"}),
        "applies": lambda spec, data: True,
        "edit": lambda spec, data: {"block.norm": "layer"},
        "references": ("A. Author (2000). A paper.",),
    }
    fields.update(changes)
    return Remedy(**fields)  # type: ignore[arg-type]


def test_the_built_in_remedies_are_registered_each_with_a_reference() -> None:
    assert BUILT_IN <= set(REMEDIES.names())
    for entry in REMEDIES:
        assert entry.references and entry.summary and entry.fixes


def test_a_duplicate_is_refused_and_a_miss_names_the_closest() -> None:
    with pytest.raises(RegistryError, match="already registered"):
        register_remedy(_toy(name="rezero"))
    with pytest.raises(RegistryError, match='did you mean "rezero"'):
        remedy("rezer")


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"name": "not a name"}, "not an identifier"),
        ({"summary": " "}, "summary is empty"),
        ({"fixes": frozenset()}, "fixes must name"),
        ({"edit": None}, "edit must be callable"),
        ({"applies": 3}, "applies must be callable"),
        ({"references": ()}, "references must cite"),
        ({"kind": "shape"}, "kind 'shape' is not one of structure, init, other"),
    ],
)
def test_an_incomplete_entry_fails_when_it_is_made(changes: dict[str, object], why: str) -> None:
    with pytest.raises(RegistryError, match=why):
        _toy(**changes)


TEXT = """# my spec: a comment the user wrote
name = "mine"
description = "a residual stack"
family = "postnorm"

[block]
activation = "relu"  # the activation
norm = "layer"

[space]
depth = [1, 8]   # shallow
width = [8, 16]
branch_init = ["default"]  # full-size branches

[expect.gradient_arrival]
lo = 0.5   # my bound
hi = 2.0
"""


def test_the_text_edit_keeps_comments_order_and_the_expectations() -> None:
    edit = {
        "family": "preact",
        "space.branch_init": ["zero"],
        "block.branch_scale": "1/sqrt(depth)",
        "block.activation": REMOVE,
    }
    out = edited_text(TEXT, edit)
    assert tomllib.loads(out) == apply_edit(tomllib.loads(TEXT), edit)
    for kept in (
        "# my spec: a comment the user wrote",
        "depth = [1, 8]   # shallow",
        "lo = 0.5   # my bound",
        'norm = "layer"',
    ):
        assert kept in out
    assert 'branch_init = ["zero"]  # full-size branches' in out  # a changed key keeps its place and comment
    assert "activation" not in out.split("[space]")[0]
    assert out.index("[block]") < out.index("[space]") < out.index("[expect.gradient_arrival]")
    assert out.split("[expect.gradient_arrival]")[1] == TEXT.split("[expect.gradient_arrival]")[1]
    parse_spec(out)  # still a spec


def test_a_new_key_goes_after_its_tables_last_key_not_under_the_next_tables_comment() -> None:
    """A comment above a table header is the user's note on that table: a key added to the table
    before it goes after that table's last key, and the comment stays on the header it describes."""
    text = (
        'name = "x"\nfamily = "plain"\n\n[block]\nactivation = "tanh"  # act\nlayer = "linear"\n# norm = '
        '"layer"  (tried)\n\n# the claim: a decade either '
        "way\n[expect.gradient_arrival]\nlo = 0.1\n"
    )
    out = edited_text(text, {"family": "preact", "block.branch_layers": 1, "block.skip": "projection"})
    assert tomllib.loads(out) == apply_edit(
        tomllib.loads(text), {"family": "preact", "block.branch_layers": 1, "block.skip": "projection"}
    )
    assert (
        'layer = "linear"\nbranch_layers = 1\nskip = "projection"\n# norm = "layer"  (tried)\n\n# the claim: '
        "a decade either way\n[expect.gradient_arrival]\n" in out
    ), out
    sub = 'name = "x"\n[block]\nactivation = "relu"\n# the library config\n[block.config]\nx = 1\n'
    out = edited_text(sub, {"block.branch_layers": 1})
    assert 'activation = "relu"\nbranch_layers = 1\n# the library config\n[block.config]\nx = 1\n' in out, out


def test_changes_are_only_the_keys_that_change() -> None:
    data = tomllib.loads(TEXT)
    assert lookup(data, "block.norm") == "layer" and lookup(data, "block.skip") is MISSING
    changes = changes_of(data, {"block.norm": "layer", "block.skip": REMOVE, "family": "preact", "train.z_loss": 1e-4})
    assert changes == [Change("family", "postnorm", "preact"), Change("train.z_loss", MISSING, 1e-4)]
    assert apply_edit(data, {"train.z_loss": 1e-4})["train"] == {"z_loss": 1e-4}
    assert "train" not in data  # the original is not touched


def test_a_new_table_and_an_inline_table_key() -> None:
    text = 'name = "x"\n[block]\nconfig = { depth = "depth", width = "width" }  # the config\n'
    out = edited_text(text, {"block.config.init_values": 1e-05, "train.z_loss": 1e-4})
    assert tomllib.loads(out) == {
        "name": "x",
        "block": {"config": {"depth": "depth", "width": "width", "init_values": 1e-05}},
        "train": {"z_loss": 1e-4},
    }
    assert "# the config" in out


def test_layerscale_follows_touvron_by_depth() -> None:
    assert [layerscale_init(d) for d in (1, 18, 19, 24, 25, 200)] == [0.1, 0.1, 1e-5, 1e-5, 1e-6, 1e-6]


# ----------------------------------------------------------------------------- which remedy applies


def _applicable(text: str) -> set[str]:
    spec = parse_spec(text)
    data = tomllib.loads(text)
    return {r.name for r in REMEDIES if r.applies(spec, data)}


def _spec(family: str, block: str = "", space: str = "", *, depth: str = "[1, 4]") -> str:
    width = "{ range = [8, 16], multiple_of = 8 }" if family == "transformer" else "[8, 16]"
    return spec_text(family, block=block, space=f"depth = {depth}\nwidth = {width}\n{space}")


def test_a_plain_stack_gets_no_branch_remedy() -> None:
    got = _applicable(_spec("plain", 'activation = "relu"', 'weight_init = ["xavier_normal"]'))
    assert got == {"critical_init", "residual_route"}
    assert _applicable(_spec("plain", 'activation = "relu"', 'weight_init = ["kaiming_normal"]')) == {
        "residual_route"
    }  # already critical
    assert _applicable(_spec("plain", 'activation = "sigmoid"')) == {"residual_route"}  # no critical point to move to


def test_a_residual_stack_gets_the_branch_remedies_it_does_not_have() -> None:
    assert _applicable(_spec("preact", 'norm = "none"')) == {
        "zero_branch",
        "shrink_branch",
        "rezero",
        "skipinit",
        "fixup",  # two-layer ReLU branches without a norm: Fixup's L^(-1/(2m-2)) with m = 2
        "critical_init",
    }
    got = _applicable(
        _spec(
            "preact",
            'norm = "none"\nbranch_scale = "1/depth"',
            'weight_init = ["kaiming_normal"]\nbranch_init = ["zero"]',
        )
    )
    assert got == {"rezero", "skipinit"}
    assert "prenorm" in _applicable(_spec("postnorm", 'norm = "layer"')) and "prenorm" not in _applicable(
        _spec("preact", 'norm = "layer"')
    )


def test_the_structural_remedies_and_the_initialisations_they_compose_with() -> None:
    """The kinds `suggest` composes by: the route around and the norm's place change the network's
    structure; every remedy that changes what the network starts from is an initialisation; the
    training remedies are neither (a plugin's remedy is "other" unless it says)."""
    kinds = {r.name: r.kind for r in REMEDIES if r.name in BUILT_IN}
    assert {n for n, k in kinds.items() if k == "structure"} == {"residual_route", "prenorm"}
    assert {n for n, k in kinds.items() if k == "init"} == {
        "zero_branch",
        "shrink_branch",
        "rezero",
        "skipinit",
        "fixup",
        "carry_gate",
        "layerscale",
        "deepnorm",
        "critical_init",
        "init_range",
    }
    assert {n for n, k in kinds.items() if k == "other"} == {
        "qk_norm",
        "attention_softcap",
        "z_loss",
        "logit_softcap",
        "tied_readout",
    }
    assert _toy().kind == "other"


def test_fixup_only_where_the_branch_multiplier_is_fixups_scaling() -> None:
    """Fixup scales the first of m = 2 layers by L^(-1/(2m-2)) = L^(-1/2) and zeroes the last: the
    family's branch multiplier is that scaling only for a positively homogeneous activation (ReLU:
    act(c·z) = c·act(z)) and no norm between the layers (a norm undoes any scale of the first)."""
    two_relu = _spec("preact", 'norm = "none"\nactivation = "relu"')
    assert "fixup" in _applicable(two_relu) and "fixup" in _applicable(_spec("postnorm", 'activation = "relu"'))
    for block in (
        'norm = "layer"',  # a norm between the layers
        'activation = "tanh"',  # not positively homogeneous
        "branch_layers = 1",  # m = 1: L^(-1/0)
        'branch_scale = "1/depth"',  # already scaled
        'skip = "none"',  # no route around
    ):
        assert "fixup" not in _applicable(_spec("preact", block)), block
    assert "fixup" not in _applicable(_spec("highway", 'activation = "relu"'))
    spec = parse_spec(two_relu)
    assert REMEDIES.get("fixup").edit(spec, {}) == {
        "space.branch_init": ["zero"],
        "block.branch_scale": "1/sqrt(depth)",
    }


def test_the_carry_gate_starts_each_of_l_transform_gates_at_1_over_l() -> None:
    """b_T = -ln(L - 1): σ(b_T) = 1/(1 + (L - 1)) = 1/L, so the carry keeps (1 - 1/L)^L of the
    signal, from 1/4 at L = 2 up to e^(-1) (Srivastava et al. 2015's negative bias, by depth)."""
    for depth in (2, 3, 8, 48, 200):
        b = carry_gate_bias(depth)
        # b is written with 3 significant digits: |Δb| ≤ 0.005 moves σ(b) by at most (1 - σ)·0.005 < 0.5%
        assert 1 / (1 + math.exp(-b)) == approx(1 / depth, rel=5e-3)
        assert 0.25 - 1e-9 <= (1 - 1 / depth) ** depth <= math.exp(-1)
    assert carry_gate_bias(48) == -3.85 and carry_gate_bias(1) == 0.0 and str(carry_gate_bias(2)) == "0.0"
    deep = _spec("highway", depth="[2, 32]")
    assert "carry_gate" in _applicable(deep)
    assert REMEDIES.get("carry_gate").edit(parse_spec(deep), {}) == {"block.gate_bias": -3.43}
    assert "carry_gate" not in _applicable(_spec("highway"))  # depth ≤ 4: the default -2 is already below
    assert "carry_gate" not in _applicable(_spec("highway", "gate_bias = -4.0", depth="[2, 32]"))
    assert "carry_gate" not in _applicable(_spec("preact"))


def test_the_critical_init_for_every_stack_of_layers() -> None:
    """He et al. 2015's init for ReLU (Glorot's for tanh) wherever a harness family stacks layers
    (DenseNet is He-initialised: Huang et al. 2017); never a transformer (GELU has no such rule
    here) nor where it is already drawn."""
    for family in ("plain", "postnorm", "preact", "highway", "dense"):
        assert "critical_init" in _applicable(_spec(family, 'activation = "relu"')), family
    assert "critical_init" not in _applicable(_spec("dense", 'activation = "relu"', 'weight_init = ["kaiming_normal"]'))
    assert "critical_init" not in _applicable(_spec("transformer", TRANSFORMER))


def test_a_custom_factory_gets_no_remedy() -> None:
    assert _applicable(_spec("custom", 'factory = "blocks:make"', 'branch_init = ["default"]')) == set()


TRANSFORMER = 'layer = "tokens"\nnorm = "layer"\nhead_dim = 8\n'


def test_a_transformer_by_its_placement_residual_and_attention() -> None:
    pre = _applicable(_spec("transformer", TRANSFORMER))
    assert pre == {"zero_branch", "shrink_branch", "rezero", "skipinit", "layerscale", "qk_norm", "attention_softcap"}
    post = _applicable(_spec("transformer", TRANSFORMER + 'norm_position = "post"'))
    assert {"deepnorm", "prenorm"} <= post and "shrink_branch" not in post
    deepnorm = _applicable(_spec("transformer", TRANSFORMER + 'norm_position = "post"\nresidual = "deepnorm"'))
    assert "deepnorm" not in deepnorm and "prenorm" in deepnorm and "rezero" not in deepnorm
    done = _applicable(
        _spec("transformer", TRANSFORMER + 'qk_norm = "layer"\nattn_softcap = 30.0\nresidual = "layerscale"')
    )
    assert not {"qk_norm", "attention_softcap", "layerscale", "rezero", "skipinit", "zero_branch"} & done


def test_the_training_remedies_only_for_a_language_model_run() -> None:
    got = _applicable(shipped_text("control_lm_attention_logit_growth", {}))
    assert {"z_loss", "logit_softcap", "tied_readout", "qk_norm", "attention_softcap"} <= got
    with_them = shipped_text(
        "control_lm_attention_logit_growth", {"train.z_loss": 1e-4, "train.logit_softcap": 30.0, "train.tied": True}
    )
    assert not {"z_loss", "logit_softcap", "tied_readout"} & _applicable(with_them)
    teacher = (ROOT / "specs" / "control_sp_update_size.toml").read_text(
        encoding="utf-8"
    )  # a [train] run, not a language model
    assert not {"z_loss", "logit_softcap", "tied_readout", "qk_norm"} & _applicable(teacher)


@pytest.mark.parametrize(
    ("spec", "expected", "absent"),
    [
        ("timm_vit.toml", {"layerscale", "qk_norm"}, {"init_range"}),
        ("gpt2.toml", {"init_range"}, {"layerscale", "qk_norm", "zero_branch", "rezero"}),
        ("convnext.toml", {"layerscale", "init_range"}, {"qk_norm"}),
    ],
)
def test_a_library_model_gets_what_its_config_exposes(spec: str, expected: set[str], absent: set[str]) -> None:
    pytest.importorskip("timm" if spec.startswith("timm") else "transformers")
    got = _applicable((ROOT / "specs" / "zoo" / spec).read_text(encoding="utf-8"))
    assert expected <= got and not absent & got


def test_init_range_starts_from_the_librarys_default_not_a_broken_value() -> None:
    """init_range is the library's default initializer_range ÷ √(2·depth) (Radford et al. 2019): a
    spec that broke the range (1.0 where GPT-2's default is 0.02) gets 0.02/√16 = 0.005 at depth 8,
    not its own 1.0/√16 = 0.25, under which GPT-2's gradient still grows 40-fold over two blocks."""
    pytest.importorskip("transformers")
    from stability.judge.remedies import _init_range_edit

    text = shipped_text("zoo/gpt2", {})
    broken = parse_spec(shipped_text("zoo/gpt2", {"block.config.initializer_range": 1.0}))
    assert _init_range_edit(broken, {}) == {"block.config.initializer_range": 0.005}
    assert _init_range_edit(parse_spec(text), {}) == {"block.config.initializer_range": 0.005}  # unset: the default
    assert "init_range" not in _applicable(
        shipped_text("zoo/gpt2", {"block.config.initializer_range": 0.004})
    )  # already at or below it
