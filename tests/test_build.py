"""Builder: shapes, parameter counts from closed forms, channel counts, seeds."""

from __future__ import annotations

import math

import pytest
import torch
from spec_support import spec_text
from torch import nn

from stability import parse_spec, probe
from stability.families.build import build, channel_counts, make_input
from stability.spec.case import corner_case


def _text(family: str, layer: str = "linear", block: str = "", space: str = "") -> str:
    return spec_text(
        family, block=f'layer = "{layer}"\n{block}', space=f"depth = [1, 40]\nwidth = [1, 64]\nbatch = [2, 8]\n{space}"
    )


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("layer", ["linear", "conv2d"])
@pytest.mark.parametrize("family", ["plain", "postnorm", "preact", "highway", "dense"])
def test_every_family_builds_and_keeps_its_shapes(family: str, layer: str) -> None:
    spec = parse_spec(_text(family, layer, space="spatial = 5" if layer == "conv2d" else ""))
    case = corner_case(spec, depth=5, width=8, batch=3)
    net = build(spec, case)
    x = make_input(spec, case)
    assert x.shape == ((3, 8, 5, 5) if layer == "conv2d" else (3, 8))
    assert len(net.blocks) == 5
    y = net.blocks(x)
    channels = channel_counts(spec, case)
    assert y.shape[0] == 3 and y.shape[1] == channels[-1]
    if layer == "conv2d":
        assert y.shape[2:] == (5, 5)


@pytest.mark.parametrize(
    ("family", "block", "per_block"),
    [
        # plain: W (w·w) + b (w), no norm
        ("plain", "", lambda w: w * w + w),
        # plain with layer norm: + γ, β
        ("plain", 'norm = "layer"', lambda w: w * w + w + 2 * w),
        # preact, two layers, no norm: 2(w·w + w)
        ("preact", "", lambda w: 2 * (w * w + w)),
        # preact with layer norm (two norms in the branch) and a projection skip (w·w, no bias)
        ("preact", 'norm = "layer"\nskip = "projection"', lambda w: 2 * (w * w + w) + 4 * w + w * w),
        # postnorm with batch norm: branch norm + post-addition norm, 2 each
        ("postnorm", 'norm = "batch"', lambda w: 2 * (w * w + w) + 4 * w),
        # highway: transform W_H (w·w + w) and gate W_T (w·w + w)
        ("highway", "", lambda w: 2 * (w * w + w)),
    ],
)
def test_parameter_counts(family: str, block: str, per_block: object) -> None:
    spec = parse_spec(_text(family, block=block))
    for depth, width in [(1, 4), (3, 7), (6, 16)]:
        net = build(spec, corner_case(spec, depth=depth, width=width))
        assert n_params(net.blocks) == depth * per_block(width)  # type: ignore[operator]


def test_rezero_and_skipinit_add_one_scalar_or_one_gain_per_channel() -> None:
    spec = parse_spec(_text("preact", space='branch_init = ["default", "rezero", "skipinit"]'))
    base = n_params(build(spec, corner_case(spec, depth=3, width=5)).blocks)
    assert n_params(build(spec, corner_case(spec, depth=3, width=5, branch_init="rezero")).blocks) == base + 3
    assert n_params(build(spec, corner_case(spec, depth=3, width=5, branch_init="skipinit")).blocks) == base + 3 * 5


@pytest.mark.parametrize("layer", ["linear", "conv2d"])
def test_dense_block_l_reads_k0_plus_k_times_l_channels(layer: str) -> None:
    spec = parse_spec(_text("dense", layer, block="growth = 6", space="spatial = 4" if layer == "conv2d" else ""))
    k0, k, depth = 10, 6, 12
    case = corner_case(spec, depth=depth, width=k0, batch=2)
    net = build(spec, case)
    for l, block in enumerate(net.blocks):
        layer_in = block.layer.in_features if layer == "linear" else block.layer.in_channels
        assert layer_in == k0 + k * l
    assert channel_counts(spec, case) == [k0 + k * l for l in range(depth + 1)]
    m = probe(net.blocks, make_input(spec, case))
    assert m.channels == [k0 + k * l for l in range(depth + 1)]
    assert m.identity_error is None  # shapes differ


def test_dense_transitions_compress() -> None:
    spec = parse_spec(_text("dense", block="growth = 4\ntransition_every = 2\ncompression = 0.5"))
    case = corner_case(spec, depth=5, width=8)
    # 8 → 12 → 16 ⇒ ⌊0.5·16⌋ = 8 → 12 → 16 ⇒ 8 → 12 (no transition after the last block)
    assert channel_counts(spec, case) == [8, 12, 8, 12, 8, 12]
    y = build(spec, case).blocks(make_input(spec, case))
    assert y.shape == (2, 12)


def test_the_same_case_builds_the_same_weights_and_input() -> None:
    spec = parse_spec(_text("preact", space='weight_init = ["kaiming_normal"]'))
    a, b = corner_case(spec, depth=4, width=6, seed=7), corner_case(spec, depth=4, width=6, seed=8)
    na, na2, nb = build(spec, a), build(spec, a), build(spec, b)
    for p, q in zip(na.blocks.parameters(), na2.blocks.parameters(), strict=True):
        assert torch.equal(p, q)
    assert not all(torch.equal(p, q) for p, q in zip(na.blocks.parameters(), nb.blocks.parameters(), strict=True))
    assert torch.equal(make_input(spec, a), make_input(spec, a))
    state = torch.random.get_rng_state()
    build(spec, a)
    assert torch.equal(state, torch.random.get_rng_state())  # the global generator is untouched


def test_identity_init_and_constant_bias() -> None:
    spec = parse_spec(
        _text(
            "plain",
            block='activation = "identity"',
            space='weight_init = ["identity"]\ninit_gain = 0.9\nbias_init = 0.0',
        )
    )
    net = build(spec, corner_case(spec, depth=2, width=3))
    assert torch.equal(net.blocks[0].layer.weight, 0.9 * torch.eye(3))
    assert torch.equal(net.blocks[0].layer.bias, torch.zeros(3))


def test_projection_spectrum_sets_the_singular_values() -> None:
    spec = parse_spec(
        _text("preact", block='skip = "projection"\nprojection_spectrum = [0.1, 2.0]', space='dtype = ["float64"]')
    )
    net = build(spec, corner_case(spec, depth=1, width=5, dtype="float64"))
    s = torch.linalg.svdvals(net.blocks[0].skip.weight)
    expected = torch.logspace(math.log10(2.0), math.log10(0.1), 5, dtype=torch.float64)
    assert torch.allclose(s, expected, rtol=1e-12)


def test_highway_zero_branch_gate_is_the_bias() -> None:
    spec = parse_spec(_text("highway", block="gate_bias = -1.5", space='branch_init = ["zero"]'))
    net = build(spec, corner_case(spec, depth=2, width=4, branch_init="zero"))
    gate = net.blocks[0].gate
    assert torch.equal(gate.weight, torch.zeros_like(gate.weight)) and torch.all(gate.bias == -1.5)


def test_custom_factory_receives_the_case_values(tmp_path, monkeypatch) -> None:
    (tmp_path / "my_arch.py").write_text(
        "from torch import nn\n"
        "seen = {}\n"
        "def make(depth, width, init, seed, hidden=3):\n"
        "    seen.update(depth=depth, width=width, init=init, seed=seed, hidden=hidden)\n"
        "    return nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])\n"
    )
    text = _text("custom", block='factory = "my_arch:make"\nfactory_args = { hidden = 9 }')
    spec = parse_spec(text, file=str(tmp_path / "s.toml"))
    net = build(spec, corner_case(spec, depth=4, width=5, seed=11))
    import my_arch  # type: ignore[import-not-found]

    assert my_arch.seen == {"depth": 4, "width": 5, "init": "default", "seed": 11, "hidden": 9}
    assert len(net.blocks) == 4
