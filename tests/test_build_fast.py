"""The builder's shortcuts build the same networks bit for bit: torch's default draws skipped only
where every one of them is overwritten (`init.overwritten`, `init.blank_layer`), `.to()` skipped
only where it changes nothing (`build._moves`), the direct module walk in `init_all`, and the
garbage collector paused during a build and restored after it."""

from __future__ import annotations

import gc

import pytest
import torch
from spec_support import spec_text
from torch import nn

from stability import parse_spec
from stability.families import build as build_module
from stability.families import init as init_module
from stability.families.build import build
from stability.families.init import modules_in_order, overwritten
from stability.spec.case import corner_case


def _text(family: str, layer: str, *, init: str, bias: str, block: str = "") -> str:
    spatial = "spatial = 4" if layer == "conv2d" else ""
    bias_line = "" if bias == "default" else f"bias_init = {bias}"
    space = f'depth = [1, 12]\nwidth = [1, 16]\nbatch = [2, 4]\nweight_init = ["{init}"]\n{bias_line}\n{spatial}'
    return spec_text(family, block=f'layer = "{layer}"\n{block}', space=space)


def _bits(net: build_module.Network) -> list[tuple[str, torch.Tensor]]:
    out = []
    for name, module in (("stem", net.stem), ("blocks", net.blocks), ("head", net.head)):
        if module is not None:
            out += [(f"{name}.{k}", v) for k, v in module.state_dict().items()]
    return out


def _same_bits(a: build_module.Network, b: build_module.Network) -> None:
    ba, bb = _bits(a), _bits(b)
    assert [k for k, _ in ba] == [k for k, _ in bb]
    for (k, x), (_, y) in zip(ba, bb, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape, k
        assert torch.equal(
            x.view(-1).view(torch.uint8) if x.is_floating_point() else x,
            y.view(-1).view(torch.uint8) if y.is_floating_point() else y,
        ), k


CASES = [
    ("plain", "linear", ""),
    ("plain", "conv2d", ""),
    ("postnorm", "linear", 'norm = "layer"'),
    ("preact", "linear", 'skip = "projection"\nprojection_spectrum = [0.5, 2.0]'),
    ("preact", "conv2d", "branch_layers = 1"),
    ("highway", "linear", ""),
    ("dense", "linear", "growth = 4\ncompression = 0.5"),
    ("dense", "conv2d", "growth = 4"),
]


@pytest.mark.parametrize("bias", ["0.0", "0.25", "default"])
@pytest.mark.parametrize("init", ["kaiming_normal", "orthogonal", "identity", "default"])
@pytest.mark.parametrize(("family", "layer", "block"), CASES)
def test_skipping_the_discarded_default_draws_builds_the_same_bits(
    family: str, layer: str, block: str, init: str, bias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = parse_spec(_text(family, layer, init=init, bias=bias, block=block))
    case = corner_case(spec, depth=3, width=6, batch=2)
    assert overwritten(spec, case) == (init != "default" and bias != "default")
    before = torch.random.get_rng_state()
    fast = build(spec, case)
    assert torch.equal(torch.random.get_rng_state(), before)  # the build draws in a fork of the global stream
    monkeypatch.setattr(init_module, "SKIP_DISCARDED_DRAWS", False)
    _same_bits(fast, build(spec, case))


def test_a_blank_layer_is_a_plain_layer_that_keeps_torch_s_reset_parameters() -> None:
    layer = init_module.blank_layer(nn.Linear, True, 3, 2)
    assert type(layer) is nn.Linear and "reset_parameters" not in layer.__dict__
    layer.reset_parameters()  # the class's method again: draws
    assert layer.weight.abs().sum() > 0
    assert init_module.blank_layer(nn.Conv2d, True, 2, 3, 3, padding=1).padding == (1, 1)


class _Moved(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
        return super()._apply(fn, recurse)


@pytest.mark.parametrize(
    ("make", "dtype", "moves"),
    [
        (
            lambda: nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)),
            torch.float32,
            False,
        ),  # the long counter is not converted by .to(dtype)
        (lambda: nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)), torch.float64, True),
        (lambda: nn.Sequential(nn.Sequential(nn.Linear(2, 2).double())), torch.float32, True),
        (lambda: nn.Sequential(nn.Linear(2, 2, device="meta")), torch.float32, True),
        (lambda: nn.Sequential(_Moved()), torch.float32, True),
        (lambda: nn.Sequential(nn.ReLU()), torch.float64, False),
    ],
)
def test_moves_is_whether_to_changes_anything(make, dtype: torch.dtype, moves: bool) -> None:  # type: ignore[no-untyped-def]
    assert build_module._moves(make(), torch.device("cpu"), dtype) is moves


def test_the_module_walk_is_modules_order_with_shared_modules_once() -> None:
    shared = nn.Linear(2, 2)
    root = nn.Sequential(
        nn.Sequential(shared, nn.ReLU()), nn.Linear(2, 2), nn.Sequential(shared, nn.Sequential(nn.Linear(2, 2)))
    )
    assert [id(m) for m in modules_in_order(root)] == [id(m) for m in root.modules()]


@pytest.mark.parametrize("enabled", [True, False])
def test_a_build_leaves_the_garbage_collector_as_it_found_it(enabled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = parse_spec(_text("plain", "linear", init="kaiming_normal", bias="0.0"))
    case = corner_case(spec, depth=2, width=4, batch=2)
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        build(spec, case)
        assert gc.isenabled() is enabled

        def fail(*_: object) -> None:
            assert not gc.isenabled()
            raise RuntimeError("boom")

        monkeypatch.setattr(build_module, "init_all", fail)
        with pytest.raises(RuntimeError, match="boom"):
            build(spec, case)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
