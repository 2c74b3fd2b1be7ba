"""stability/families/transformer.py and token inputs: the builder's formulas, the attention against an
independent computation, the shipped transformer specs and their negative controls, and the
constrained integer keys of [space] the family relies on (heads always divide the width)."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from spec_support import SPECS, spec_text, write_spec
from torch import nn

from stability import RunOptions, load_spec, run_spec
from stability.errors import SpecError, UsageError
from stability.families.build import build, make_input
from stability.families.transformer import SelfAttention, TransformerBlock
from stability.run.engine import evaluate
from stability.run.probing import probe_observers as observers_for
from stability.run.strategies import cases
from stability.spec.case import corner_case, parse_case_string
from stability.spec.load import parse_spec, validate_spec

CONTROLS = sorted(SPECS.glob("transformer_control_*.toml"))


#: The space of `_spec`'s token stacks, each key's default.
SPACE = {"depth": "[1, 6]", "width": "{ range = [16, 32], multiple_of = 8 }", "tokens": "[3, 6]", "batch": "2"}


def _spec(
    block: str = "", space: str = "", expect: str = "[expect.gradient_arrival]", family: str = "transformer"
) -> str:
    """A token stack's spec: a key written in `space` replaces its default in SPACE."""
    given = tomllib.loads(space)
    defaults = "".join(f"{key} = {value}\n" for key, value in SPACE.items() if key not in given)
    return spec_text(
        family, block=f'layer = "tokens"\n{block}', space=defaults + space, expect=expect, name="t", description="d"
    )


# ----------------------------------------------------------------------------- builder formulas


def test_attention_matches_torch_sdpa() -> None:
    torch.manual_seed(0)
    for causal in (False, True):
        attn = SelfAttention(12, 3, causal=causal).double()
        x = torch.randn(2, 5, 12, dtype=torch.float64)
        q, k, v = (lin(x).view(2, 5, 3, 4).transpose(1, 2) for lin in (attn.q, attn.k, attn.v))
        ref = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal).transpose(1, 2).reshape(2, 5, 12)
        torch.testing.assert_close(attn(x), attn.out(ref), rtol=1e-12, atol=1e-12)


def test_heads_follow_head_dim_and_always_divide_the_width() -> None:
    spec = parse_spec(_spec('norm = "layer"\nhead_dim = 8'))
    for width in (16, 24, 32):
        net = build(spec, corner_case(spec, width=width))
        assert all(b.attn.fn.heads == width // 8 for b in net.blocks)


@pytest.mark.parametrize("residual", ["deepnorm", "gpt2"])
def test_residual_schemes_scale_exactly_the_documented_weights(residual: str) -> None:
    pos = 'norm_position = "post"\n' if residual == "deepnorm" else ""
    base = parse_spec(
        _spec(f'norm = "layer"\n{pos}head_dim = 8', 'weight_init = ["xavier_normal"]\ndtype = ["float64"]')
    )
    scaled = parse_spec(
        _spec(
            f'norm = "layer"\n{pos}head_dim = 8\nresidual = "{residual}"',
            'weight_init = ["xavier_normal"]\ndtype = ["float64"]',
        )
    )
    n = 6
    case = corner_case(base, depth=n, dtype="float64")
    a, b = build(base, case).blocks, build(scaled, case).blocks
    beta, gpt2 = (8 * n) ** -0.25, 1 / math.sqrt(2 * n)
    for blk_a, blk_b in zip(a, b, strict=True):
        assert isinstance(blk_a, TransformerBlock) and isinstance(blk_b, TransformerBlock)
        factors = {
            "q": 1.0,
            "k": 1.0,
            "v": beta if residual == "deepnorm" else 1.0,
            "out": beta if residual == "deepnorm" else gpt2,
        }
        for name, f in factors.items():
            torch.testing.assert_close(
                getattr(blk_b.attn.fn, name).weight, f * getattr(blk_a.attn.fn, name).weight, rtol=1e-15, atol=0
            )
        torch.testing.assert_close(
            blk_b.mlp.fn.fc1.weight,
            (beta if residual == "deepnorm" else 1.0) * blk_a.mlp.fn.fc1.weight,
            rtol=1e-15,
            atol=0,
        )
        torch.testing.assert_close(
            blk_b.mlp.fn.fc2.weight,
            (beta if residual == "deepnorm" else gpt2) * blk_a.mlp.fn.fc2.weight,
            rtol=1e-15,
            atol=0,
        )
        assert blk_b.attn.alpha == ((2 * n) ** 0.25 if residual == "deepnorm" else 1.0)


def test_deepnorm_post_block_is_norm_of_alpha_x_plus_branch() -> None:
    spec = parse_spec(
        _spec(
            'norm = "layer"\nnorm_position = "post"\nresidual = "deepnorm"\nhead_dim = 8\nmlp = false',
            'dtype = ["float64"]',
        )
    )
    case = corner_case(spec, depth=4, dtype="float64")
    blk = build(spec, case).blocks[0]
    x = make_input(spec, case)
    alpha = 8**0.25
    ref = nn.functional.layer_norm(alpha * x + blk.attn.fn(x), (16,), blk.attn.norm_out.weight, blk.attn.norm_out.bias)
    torch.testing.assert_close(blk(x), ref, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("position", ["pre", "sandwich"])
@pytest.mark.parametrize("residual", ["none", "rezero", "skipinit"])
def test_zero_branches_give_the_identity_bit_exactly(position: str, residual: str) -> None:
    spec = parse_spec(
        _spec(
            f'norm = "rms"\nnorm_position = "{position}"\nhead_dim = 8\nresidual = "{residual}"',
            'branch_init = ["zero"]',
            "[expect.identity_at_init]",
        )
    )
    record = evaluate(spec, corner_case(spec, depth=3))
    assert record.measurements is not None
    assert record.measurements.identity_error == 0.0 and record.measurements.input_grad_error == 0.0


def test_without_skip_and_mlp_the_stack_is_pure_attention() -> None:
    spec = parse_spec(_spec('norm = "none"\nskip = "none"\nmlp = false\nhead_dim = 8', 'dtype = ["float64"]'))
    case = corner_case(spec, depth=2, dtype="float64")
    blocks = build(spec, case).blocks
    x = make_input(spec, case)
    torch.testing.assert_close(blocks(x), blocks[1].attn.fn(blocks[0].attn.fn(x)), rtol=0, atol=0)


# ----------------------------------------------------------------------------- token inputs


@pytest.mark.parametrize("family", ["plain", "postnorm", "preact", "highway", "dense"])
@pytest.mark.parametrize("norm", ["batch", "layer", "group"])
def test_builtin_families_act_per_token_and_report_channels_and_tokens(family: str, norm: str) -> None:
    spec = parse_spec(_spec(f'norm = "{norm}"', 'width = 8\nbranch_init = ["default"]', family=family))
    case = corner_case(spec, depth=3, tokens=5)
    x = make_input(spec, case)
    assert x.shape == (2, 5, 8)
    record = evaluate(spec, case)
    m = record.measurements
    assert m is not None and record.error is None
    assert m.channels[0] == 8 and m.extra["tokens"] == [5, 5, 5, 5]
    if family == "dense":  # each layer appends `growth` channels on the last axis
        assert m.channels == [8, 16, 24, 32]
    else:
        assert m.channels == [8, 8, 8, 8]


def test_batch_norm_on_tokens_normalises_each_channel_over_batch_and_tokens() -> None:
    spec = parse_spec(_spec('norm = "batch"\nactivation = "identity"', "width = 8", family="plain"))
    case = corner_case(spec, depth=1, tokens=5)
    out = build(spec, case).blocks(make_input(spec, case))  # (B, T, C)
    flat = out.reshape(-1, 8)
    torch.testing.assert_close(flat.mean(0), torch.zeros(8), rtol=0, atol=1e-6)
    torch.testing.assert_close(flat.var(0, unbiased=False), torch.ones(8), rtol=1e-4, atol=0)


def test_custom_factories_receive_tokens(tmp_path: Path) -> None:
    # The factory builds one block per token, so the number of blocks measured shows what it got.
    factory = (
        "from torch import nn\n\n\ndef make(depth, width, tokens):\n    return "
        "nn.Sequential(*[nn.Linear(width, width) for _ in range(tokens)])\n"
    )
    text = _spec('factory = "tok_factory_mod:make"', "width = 4", family="custom")
    path = write_spec(tmp_path, "spec", text, modules={"tok_factory_mod": factory})
    spec = load_spec(path)
    record = evaluate(spec, corner_case(spec, tokens=6))
    assert record.measurements is not None, record.error
    assert record.measurements.n_blocks == 6 and record.measurements.channels[0] == 4


def test_observers_only_for_what_the_spec_declares() -> None:
    assert observers_for(load_spec(SPECS / "preact_mlp.toml")) == []
    names = [o.name for o in observers_for(parse_spec(_spec('norm = "layer"\nhead_dim = 8')))]
    assert names == ["tokens"]
    names = [
        o.name
        for o in observers_for(
            parse_spec(_spec('norm = "layer"\nhead_dim = 8', "", "[expect.rank_collapse]\n[expect.attention_entropy]"))
        )
    ]
    assert names == ["tokens", "rank_collapse", "attention_entropy"]


# ----------------------------------------------------------------------------- space constraints


@settings(max_examples=60, deadline=None, database=None)
@given(st.data())
def test_strategies_draw_only_admitted_values(data: st.DataObject) -> None:
    spec = parse_spec(
        _spec(
            'norm = "layer"\nhead_dim = 8',
            "depth = { values = [2, 5, 9] }\nbatch = { range = [3, 20], multiple_of = 4 }",
        )
    )
    case = data.draw(cases(spec))
    assert (
        case.depth in (2, 5, 9)
        and case.width in (16, 24, 32)
        and case.batch in (4, 8, 12, 16, 20)
        and 3 <= (case.tokens or 0) <= 6
    )


def test_constrained_keys_shrink_to_their_smallest_value_and_replay_checks_membership() -> None:
    spec = parse_spec(_spec('norm = "layer"\nhead_dim = 8', "depth = { values = [2, 5, 9] }"))
    assert corner_case(spec).depth == 2 and corner_case(spec).width == 16
    assert parse_case_string("depth=9,width=24,tokens=4", spec).width == 24
    with pytest.raises(
        UsageError, match=r"width=20 is not in the spec's space \{ range = \[16, 32\], multiple_of = 8 \}"
    ):
        parse_case_string("width=20", spec)
    with pytest.raises(UsageError, match=r"depth=3 is not in the spec's space \{ values = \[2, 5, 9\] \}"):
        parse_case_string("depth=3", spec)


@pytest.mark.parametrize(
    ("block", "space", "message"),
    [
        (
            'norm = "layer"\nhead_dim = 6',
            "",
            "space.width = '{ range = [16, 32], multiple_of = 8 }': must be a multiple of block.head_dim = 6",
        ),
        ('norm = "layer"\nheads = 3', "width = [16, 32]", "write width = { range = [18, 30], multiple_of = 3 }"),
        ('norm = "layer"', "width = { range = [17, 23], multiple_of = 8 }", "no multiple of 8 lies in [17, 23]"),
        ('norm = "layer"', "width = { values = [] }", "values must be a non-empty list of integers"),
        ('norm = "layer"', "width = { range = [8, 16], step = 8 }", "unknown key 'step' in the table"),
        (
            'norm = "layer"\nresidual = "deepnorm"',
            "",
            "block.residual = 'deepnorm': DeepNorm (Wang et al. 2022) up-weights the skip of a post-norm block",
        ),
        ('norm = "batch"', "", "block.norm = 'batch': family 'transformer' normalises each token"),
        ('norm = "layer"\nskip = "none"\nresidual = "rezero"', "", "'rezero' scales a residual connection"),
        ('norm = "layer"\nlayerscale_init = 0.01', "", 'only applies to residual = "layerscale"'),
        ('norm = "layer"', "tokens = [1, 4]", "space.tokens = [1, 4]: rank_collapse compares tokens"),
    ],
)
def test_bad_combinations_are_one_line_errors_with_the_fix(block: str, space: str, message: str) -> None:
    text = _spec(block, space, "[expect.rank_collapse]")
    with pytest.raises(SpecError) as exc:
        parse_spec(text, file="t.toml")
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_token_invariants_need_token_inputs() -> None:
    space = f"depth = {SPACE['depth']}\nwidth = {SPACE['width']}\nbatch = 2"  # no tokens: a stack of vectors
    text = spec_text(
        "preact", block='norm = "layer"', space=space, expect="[expect.attention_entropy]", description="d"
    )
    with pytest.raises(SpecError, match="expect.attention_entropy: is measured over tokens"):
        parse_spec(text)


# ----------------------------------------------------------------------------- shipped specs


def test_the_transformer_specs_are_shipped() -> None:
    names = {p.stem for p in SPECS.glob("transformer_*.toml")}
    for kind in ("preln", "postln", "deepnorm", "rezero", "layerscale", "gpt2"):
        assert f"transformer_{kind}" in names
    assert len(CONTROLS) == 2


@pytest.mark.parametrize("path", CONTROLS, ids=[p.stem for p in CONTROLS])
def test_transformer_control_is_caught_and_fails_when_flipped(path: Path) -> None:
    assert path.read_text(encoding="utf-8").startswith("# Negative control (")
    spec = load_spec(path)
    result = run_spec(spec, RunOptions(profile="ci"))
    assert result.met and all(r.verdict is not None and not r.verdict.passed for r in result.results), [
        r.message for r in result.results
    ]
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    for table in data["expect"].values():
        table["expect"] = "holds"
    flipped = run_spec(validate_spec(data, file=str(path)), RunOptions(profile="ci"))
    assert not any(r.met for r in flipped.results) and all(r.error is None for r in flipped.results)


def test_smallest_violating_depth_stays_inside_a_constrained_depth() -> None:
    path = SPECS / "transformer_control_attention_no_skip.toml"
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    data["space"]["depth"] = {"values": [2, 4, 8]}
    spec = validate_spec(data, file=str(path))
    (r,) = run_spec(spec, RunOptions(profile="ci")).results
    assert r.met and r.case is not None and r.case.depth in (2, 4, 8)


def test_identity_on_a_transformer_asks_for_zero_branches() -> None:
    with pytest.raises(
        SpecError,
        match="space.branch_init = \\['default'\\]: identity_at_init is checked on zero-branch cases.*add \"zero\"",
    ):
        parse_spec(_spec('norm = "layer"\nhead_dim = 8\nresidual = "rezero"', "", "[expect.identity_at_init]"))
