"""The builder's custom-factory path and the dense family's corners, in process
(stability/families/custom.py, stability/families/build.py): what each kind of factory return
becomes, the exact error for each bad one, and a dense stack of token inputs or with zero branches.
Written from the mutation check (docs/mutation.md)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from approx_support import approx
from spec_support import factory_block, make_case, make_spec

from stability import Case
from stability.errors import CaseError, SpecError
from stability.families.build import build, make_input
from stability.spec.schema import Spec

MODULE = "stability_build_custom_factories"
FACTORIES = """
import sys
import torch
from torch import nn
from stability import Stack


def exits(depth, width):
    sys.exit(3)


def raises(depth, width):
    raise ValueError("heads  do not\\n divide the width")


def empty(depth, width):
    return nn.Sequential()


def number(depth, width):
    return 42


class WithParts(nn.Module):
    def __init__(self, depth, width):
        super().__init__()
        self.stem = nn.Linear(width, width)
        self.blocks = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.head = nn.Linear(width, 2)


def with_parts(depth, width):
    return WithParts(depth, width)


class Layers(nn.Module):
    def __init__(self, depth, width):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.stem = nn.Linear(width, width)  # only a module with .blocks carries a stem


def layers(depth, width):
    return Layers(depth, width)


def stack(depth, width):
    return Stack(
        blocks=[nn.Linear(width, width) for _ in range(depth)],
        stem=nn.Identity(),
        head=nn.Linear(width, 1),
        call_kwargs={"k": 1},
    )


def sees(**values):
    out = nn.Sequential(nn.Linear(values["width"], values["width"]))
    out.seen = values
    return out


def asks_for_spec(spec, case, depth, width):
    return nn.Sequential(nn.Linear(width, width))


def positional_only(depth, /, width):
    return nn.Sequential(nn.Linear(width, width))


def defaults_are_fine(depth, width, scale=2.0, *, gain=1.0):
    return nn.Sequential(nn.Linear(width, width))


def picks(depth, width, init, layer, torch_dtype, extra):
    out = nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])
    out.seen = dict(depth=depth, width=width, init=init, layer=layer, torch_dtype=torch_dtype, extra=extra)
    return out
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("custom")
    (d / f"{MODULE}.py").write_text(FACTORIES, encoding="utf-8")
    return d


def _spec(folder: Path, fn: str, args: dict[str, object] | None = None) -> Spec:
    return make_spec(
        "custom",
        block=factory_block(f"{MODULE}:{fn}", args),
        space="depth = [1, 4]\nwidth = 4\nbatch = 2",
        file=str(folder / f"{fn}.toml"),
        name="c",
        description="d",
    )


CASE = make_case(seed=5)


def test_a_factory_that_exits_is_a_spec_error_naming_the_key(folder: Path) -> None:
    spec = _spec(folder, "exits")
    with pytest.raises(SpecError) as info:
        build(spec, CASE)
    e = info.value
    assert (e.file, e.key, e.value) == (spec.path, "block.factory", f"{MODULE}:exits")
    assert e.problem == f"called sys.exit(3) (case {CASE})" and e.fix == "a factory must return blocks, not exit"


def test_a_factory_that_raises_fails_the_case_with_its_message_on_one_line(folder: Path) -> None:
    with pytest.raises(CaseError) as info:
        build(_spec(folder, "raises"), CASE)
    assert str(info.value) == f"the factory {MODULE}:raises raised ValueError: heads do not divide the width"


def test_an_empty_stack_and_a_non_module_are_spec_errors(folder: Path) -> None:
    spec = _spec(folder, "empty")
    with pytest.raises(SpecError) as info:
        build(spec, CASE)
    assert (info.value.file, info.value.key, info.value.value) == (spec.path, "block.factory", f"{MODULE}:empty")
    assert info.value.problem == f"returned an empty stack (no blocks) for case {CASE}"
    assert info.value.fix == "return one module per block, e.g. nn.Sequential(*[Block(width) for _ in range(depth)])"
    spec = _spec(folder, "number")
    with pytest.raises(SpecError) as info:
        build(spec, CASE)
    assert (info.value.file, info.value.key, info.value.value) == (spec.path, "block.factory", f"{MODULE}:number")
    assert info.value.problem == (
        "returned int, not an nn.Sequential, an nn.ModuleList, a stability.Stack or a module with one of "
        ".blocks/.layers/.layer/.h/.block"
    )
    assert info.value.fix == "return nn.Sequential(*blocks), the library's ModuleList, or stability.Stack(blocks=...)"


def test_a_module_with_blocks_keeps_its_stem_and_head_and_other_containers_do_not(folder: Path) -> None:
    net = build(_spec(folder, "with_parts"), CASE)
    assert len(net.blocks) == 3 and isinstance(net.stem, torch.nn.Linear) and isinstance(net.head, torch.nn.Linear)
    assert (
        net.head.out_features == 2
        and net.blocks[0].weight.dtype == torch.float64
        and net.stem.weight.dtype == torch.float64
    )
    net = build(_spec(folder, "layers"), CASE)
    assert len(net.blocks) == 3 and net.stem is None and net.head is None
    net = build(_spec(folder, "stack"), CASE)
    assert (
        len(net.blocks) == 3
        and isinstance(net.stem, torch.nn.Identity)
        and net.head is not None
        and net.call_kwargs == {"k": 1}
    )


def test_a_factory_gets_the_case_values_it_asks_for(folder: Path) -> None:
    seen = build(_spec(folder, "sees", {"extra": 7}), CASE).blocks.seen
    assert {
        k: seen[k] for k in ("depth", "width", "batch", "seed", "init", "layer", "torch_dtype", "extra", "branch_init")
    } == {
        "depth": 3,
        "width": 4,
        "batch": 2,
        "seed": 5,
        "init": "default",
        "layer": "linear",
        "torch_dtype": torch.float64,
        "extra": 7,
        "branch_init": "default",
    }
    assert build(_spec(folder, "picks", {"extra": 7}), CASE).blocks.seen == {
        "depth": 3,
        "width": 4,
        "init": "default",
        "layer": "linear",
        "torch_dtype": torch.float64,
        "extra": 7,
    }


def _dense(layer: str, extra: str = "") -> Spec:
    return make_spec(
        "dense",
        block=f'layer = "{layer}"\ngrowth = 3\nactivation = "relu"',
        space=f"depth = [1, 8]\nwidth = 4\nbatch = 2\n{extra}",
        name="d",
        description="d",
    )


def test_dense_token_layers_concatenate_along_the_channels() -> None:
    spec = _dense("tokens", "tokens = 5")
    case = make_case(tokens=5)
    net = build(spec, case)
    x = make_input(spec, case)  # (B, T, C)
    assert x.shape == (2, 5, 4)
    for i, block in enumerate(net.blocks):
        y = block(x)
        assert y.shape == (2, 5, 4 + 3 * (i + 1))
        assert torch.equal(y[..., : x.shape[-1]], x)  # the input passes through unchanged
        x = y


def test_dense_zero_branches_add_zero_channels() -> None:
    spec = _dense("linear", 'branch_init = ["zero"]')
    case = make_case(depth=4, branch_init="zero")
    x = make_input(spec, case)
    y = build(spec, case).blocks(x)
    assert y.shape == (2, 16) and torch.equal(y[:, :4], x) and torch.count_nonzero(y[:, 4:]) == 0
    default = build(
        spec,
        make_case(depth=4),
    ).blocks(x)
    assert torch.count_nonzero(default[:, 4:]) > 0


def _family(family: str, block: str, space: str = "", width: int = 4) -> Spec:
    return make_spec(
        family, block=block, space=f"depth = [1, 8]\nwidth = {width}\nbatch = 2\n{space}", name="b", description="d"
    )


def _case(depth: int, width: int = 4, **kw: object) -> Case:
    base = dict(
        batch=2,
        spatial=None,
        input_width=None,
        weight_init="default",
        branch_init="default",
        dtype="float64",
        device="cpu",
        seed=0,
    )
    base.update(kw)
    return Case(depth=depth, width=width, **base)  # type: ignore[arg-type]


def test_plain_first_layer_reads_the_input_width() -> None:
    spec = _family("plain", 'activation = "relu"', "input_width = [6, 6]")
    net = build(spec, _case(3, input_width=6))
    assert [b.layer.in_features for b in net.blocks] == [6, 4, 4]
    assert net.blocks(make_input(spec, _case(3, input_width=6))).shape == (2, 4)


@pytest.mark.parametrize("family", ["preact", "postnorm"])
def test_a_residual_stacks_first_block_reads_the_input_width(family: str) -> None:
    spec = _family(family, 'activation = "relu"\nskip = "projection"', "input_width = [6, 6]")
    case = _case(3, input_width=6)
    assert build(spec, case).blocks(make_input(spec, case)).shape == (2, 4)  # block 0 maps 6 → 4, the others 4 → 4


def test_a_branch_scale_and_a_rezero_gain_are_both_applied() -> None:
    spec = _family("preact", 'activation = "relu"\nbranch_scale = 0.5', 'branch_init = ["rezero"]')
    case = _case(3, branch_init="rezero")
    net = build(spec, case)
    x = make_input(spec, case)
    assert torch.equal(net.blocks(x), x)  # ReZero's α = 0 after the 0.5: the identity, bit for bit
    with torch.no_grad():
        for b in net.blocks:
            for p in b.gain.parameters():
                p.fill_(1.0)
    y = net.blocks[0](x)
    branch = net.blocks[0].branch(x)
    torch.testing.assert_close(y, x + 0.5 * branch, rtol=1e-15, atol=0)


def test_kaiming_uniform_weights_have_he_bounds() -> None:
    spec = _family("plain", 'activation = "relu"', 'weight_init = ["kaiming_uniform"]', width=400)
    net = build(spec, _case(2, 400, weight_init="kaiming_uniform"))
    w = net.blocks[0].layer.weight.detach()
    bound = math.sqrt(6.0 / 400)  # gain √2 · √(3/fan_in)
    assert float(w.abs().max()) <= bound and float(w.abs().max()) > 0.99 * bound
    assert float(w.var()) == approx(2.0 / 400, rel=0.02)  # 160,000 draws: sd of the estimate ≈ 0.3%


def test_conv_layers_keep_the_spatial_size_and_projections_are_one_by_one() -> None:
    spec = _family("plain", 'layer = "conv2d"\nkernel_size = 5\nactivation = "relu"', "spatial = 6")
    case = _case(2, spatial=6)
    assert build(spec, case).blocks(make_input(spec, case)).shape == (2, 4, 6, 6)
    pre = _family(
        "preact", 'layer = "conv2d"\nkernel_size = 3\nactivation = "relu"\nskip = "projection"', "spatial = 6"
    )
    net = build(pre, _case(2, spatial=6))
    assert net.blocks[0].skip.kernel_size == (1, 1) and net.blocks[0].skip.bias is None


def test_linear_rms_norm_uses_eps_one_millionth() -> None:
    net = build(_family("plain", 'activation = "relu"\nnorm = "rms"'), _case(2))
    assert isinstance(net.blocks[0].norm, torch.nn.RMSNorm) and net.blocks[0].norm.eps == 1e-6


def test_dense_transitions_are_one_by_one_and_never_after_the_last_layer() -> None:
    spec = _family(
        "dense",
        'layer = "conv2d"\nactivation = "relu"\ngrowth = 2\ntransition_every = 2\ncompression = 0.5',
        "spatial = 4",
    )
    from stability.families.build import channel_counts

    case = _case(4, spatial=4)
    assert channel_counts(spec, case) == [4, 6, 4, 6, 8]  # 4+2=6 → 8 → ⌊0.5·8⌋ = 4 → 6 → 8: no transition after layer 4
    net = build(spec, case)
    transitions = [b[1] for b in net.blocks if isinstance(b, torch.nn.Sequential)]
    assert len(transitions) == 1 and transitions[0].layer.kernel_size == (1, 1)
    assert net.blocks(make_input(spec, case)).shape == (2, 8, 4, 4)


def test_branch_scale_one_over_depth_and_group_norm_groups() -> None:
    net = build(_family("preact", 'activation = "relu"\nbranch_scale = "1/depth"'), _case(4))
    assert float(net.blocks[0].gain.scale) == 0.25
    grouped = build(_family("plain", 'activation = "relu"\nnorm = "group"\nnorm_groups = 4', width=8), _case(2, 8))
    assert grouped.blocks[0].norm.num_groups == 4  # the most groups ≤ 4 that divide 8 and keep ≥ 2 channels each


def test_highway_transform_ends_in_its_activation_and_xavier_uniform_has_glorot_bounds() -> None:
    net = build(_family("highway", 'activation = "relu"'), _case(2))
    assert isinstance(net.blocks[0].transform[-1], torch.nn.ReLU)
    spec = _family("plain", 'activation = "relu"', 'weight_init = ["xavier_uniform"]', width=300)
    w = build(spec, _case(2, 300, weight_init="xavier_uniform")).blocks[0].layer.weight.detach()
    bound = math.sqrt(6.0 / 600)
    assert float(w.abs().max()) <= bound and float(w.abs().max()) > 0.99 * bound


def test_skipinit_gain_on_tokens_is_per_channel_on_the_last_axis() -> None:
    spec = _family("preact", 'layer = "tokens"\nactivation = "relu"', 'branch_init = ["skipinit"]\ntokens = 3')
    case = _case(2, branch_init="skipinit", tokens=3)  # T = 3 ≠ C = 4: a gain on the wrong axis cannot broadcast
    net = build(spec, case)
    x = make_input(spec, case)
    assert torch.equal(net.blocks(x), x)


def test_a_group_norm_over_one_channel_has_one_group() -> None:
    # no group count leaves two channels per group: one group of
    # the single channel (GroupNorm(1, 1)), over its 4×4 values
    spec = _family(
        "plain", 'layer = "conv2d"\nactivation = "relu"\nnorm = "group"\nnorm_groups = 4', "spatial = 4", width=1
    )
    net = build(spec, _case(2, width=1, spatial=4))
    groups = [m for m in net.blocks.modules() if isinstance(m, torch.nn.GroupNorm)]
    assert [(g.num_groups, g.num_channels) for g in groups] == [(1, 1), (1, 1)]


@pytest.mark.parametrize(("fn", "names"), [("asks_for_spec", "'spec', 'case'"), ("positional_only", "'depth'")])
def test_a_factory_asking_for_what_nothing_fills_is_a_spec_error_naming_it(folder: Path, fn: str, names: str) -> None:
    with pytest.raises(SpecError) as info:
        build(_spec(folder, fn), CASE)
    msg = str(info.value)
    assert f"asks for {names}, which nothing fills" in msg and "block.factory_args" in msg and "\n" not in msg
    assert len(build(_spec(folder, "defaults_are_fine"), CASE).blocks) == 1
    assert len(build(_spec(folder, "asks_for_spec", {"spec": 1, "case": 2}), CASE).blocks) == 1
