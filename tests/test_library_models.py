"""Library blocks as they are, probed from small configs with random init (nothing downloaded):
GPT-2 and Llama blocks from Hugging Face `transformers` through the factories and specs of
docs/library-models.md, run exactly as written there; timm and torchvision where they import.
The bands the verdicts are checked against are derived in docs/library-models.md ("Why these
bounds"); each test also shows that its check can fail."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from approx_support import approx
from cli_support import Cli

from stability import Stack, probe
from stability.families.adapters import set_modes

DOC = Path(__file__).resolve().parent.parent / "docs" / "library-models.md"


def _snippets(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


@pytest.fixture(scope="module")
def hf_blocks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """docs/library-models.md's `hf_blocks.py` and its three specs, written to a folder as a user would."""
    pytest.importorskip("transformers", reason="Hugging Face transformers is not installed (pip install -e '.[hf]')")
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_OFFLINE", "1")  # random init from configs: nothing may be downloaded
    folder = tmp_path_factory.mktemp("hf")
    (folder / "hf_blocks.py").write_text(next(b for b in _snippets("python") if "def gpt2(" in b), encoding="utf-8")
    for name, text in zip(
        ["gpt2", "llama", "gpt2_zero"], [b for b in _snippets("toml") if 'family = "custom"' in b], strict=True
    ):
        (folder / f"{name}.toml").write_text(text, encoding="utf-8")
    mp.syspath_prepend(str(folder))
    import hf_blocks as module

    yield folder, module
    sys.modules.pop("hf_blocks", None)
    mp.undo()


def _factory_lines(module: Any, name: str) -> int:
    import inspect

    source = inspect.getsource(getattr(module, name)).splitlines()
    return len([line for line in source[1:] if line.strip()])  # the body, without the def line


def test_the_factories_are_at_most_five_lines(hf_blocks: Any) -> None:
    _, module = hf_blocks
    assert _factory_lines(module, "gpt2") <= 5 and _factory_lines(module, "llama") <= 5


@pytest.mark.slow  # three library-block specs searched through workers
def test_the_documented_specs_meet_their_derived_bands(hf_blocks: Any, cli: Cli) -> None:
    folder, _ = hf_blocks
    report = folder / "report.json"
    specs = [folder / f"{n}.toml" for n in ("gpt2", "llama", "gpt2_zero")]
    code, out, err = cli("check", *specs, "--profile", "ci", "--json", report)
    assert code == 0, out + err
    data = json.loads(report.read_text())
    assert [s["name"] for s in data["specs"]] == ["gpt2-blocks", "llama-blocks", "gpt2-zero-init"]
    for spec in data["specs"]:
        assert all(c["error"] is None for c in spec["cases"]), spec["name"]
        assert {c["case"]["depth"] for c in spec["cases"]} >= {1, 8}, spec["name"]  # the corners were probed
    identity = data["specs"][2]["invariants"][0]
    assert identity["observed"] == 0.0  # every zero-weight block is h + 0 + 0 = h, bit for bit


def _modes(stack: Stack, *, dropout: bool) -> Stack:
    for block in stack.blocks:  # type: ignore[union-attr]
        set_modes(block, norm_train=True, dropout_train=dropout)
    return stack


def _x(seed: int, width: int = 32) -> torch.Tensor:
    return torch.randn(16, width, generator=torch.Generator().manual_seed(seed))  # 16 tokens of width 32


@pytest.mark.parametrize(("name", "grad_band", "var_band"), [("gpt2", 0.12, 0.12), ("llama", 0.17, 0.22)])
def test_probed_values_lie_in_the_derived_bands_and_a_large_init_leaves_them(
    hf_blocks: Any, name: str, grad_band: float, var_band: float
) -> None:
    _, module = hf_blocks
    factory = getattr(module, name)
    for seed in range(3):
        torch.manual_seed(seed)
        m = probe(_modes(factory(8, 32), dropout=False), _x(seed), seed=seed)
        assert abs(m.gradient_ratio - 1) <= grad_band
        assert all(abs(v / m.act_var[0] - 1) <= var_band for v in m.act_var)
        assert m.channels[0] == 16  # (1, T, C): one sequence of 16 tokens reached block 0
    # The bands are narrow only because c = Cσ² is small: at σ = 1 the branches dominate.
    torch.manual_seed(0)
    m = probe(_modes(factory(8, 32, init_std=1.0), dropout=False), _x(0), seed=0)
    assert abs(m.gradient_ratio - 1) > grad_band or abs(m.act_var[-1] / m.act_var[0] - 1) > var_band


def test_a_nonzero_init_is_not_the_identity(hf_blocks: Any) -> None:
    _, module = hf_blocks
    torch.manual_seed(0)
    m = probe(_modes(module.gpt2(2, 32), dropout=False), _x(0))
    assert (
        m.identity_error is not None and m.identity_error > 0
    )  # the bit-exact 0 of the zero-init spec is not automatic


def test_gpt2_dropout_is_seeded_and_off_by_default(hf_blocks: Any) -> None:
    _, module = hf_blocks
    torch.manual_seed(0)
    stack = module.gpt2(4, 32)  # GPT2Config's dropouts: 0.1 on attention, residual and embedding
    on = [probe(_modes(stack, dropout=True), _x(0), rng_seed=5).grad_norm for _ in range(2)]
    off = probe(_modes(stack, dropout=False), _x(0), rng_seed=5).grad_norm
    assert on[0] == on[1] and on[0] != off


# ----------------------------------------------------------------------------- timm and torchvision


def _vision_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """docs/library-models.md's timm/torchvision factories, where both libraries import."""
    try:
        import timm  # noqa: F401
        import torchvision  # noqa: F401
    except Exception as exc:  # the PyPI torchvision for torch 2.13.0 is a CUDA build: RuntimeError on a CPU torch
        pytest.skip(
            f"timm/torchvision do not import here ({type(exc).__name__}: {exc}); see docs/library-models.md, section 7"
        )
    (tmp_path / "vision_blocks.py").write_text(
        next(b for b in _snippets("python") if "def resnet_layer(" in b), encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "vision_blocks", raising=False)
    import vision_blocks

    return vision_blocks


def test_torchvision_resnet_layer_with_zero_init_residual_is_relu_then_the_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _vision_blocks(tmp_path, monkeypatch)
    torch.manual_seed(0)
    layer = module.resnet_layer().train()  # BasicBlock: relu(x + bn2(conv(...))), bn2's weight 0 and bias 0
    x = torch.randn(2, 64, 8, 8)
    m = probe(layer, x)
    # Each block is relu(x + 0): block 0 (a ReLU in place on its input, here the probe's copy)
    # maps x to relu(x), block 1 leaves it as it is.
    assert m.act_var[1] == approx(float(x.relu().var(unbiased=False)), rel=1e-5)
    assert m.act_var[2] == approx(m.act_var[1], rel=1e-6)
    assert m.identity_error == approx(float((x.relu() - x).norm() / x.norm()), rel=1e-5)


def test_timm_vit_blocks_with_layerscale_are_the_identity_to_first_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _vision_blocks(tmp_path, monkeypatch)
    torch.manual_seed(0)
    m = probe(module.vit(4, 32), _x(0))
    # LayerScale multiplies each of the 8 branches by γ = 1e-5, and each branch's output is O(1)
    # per element: the stack moves the input by at most ~8e-5 relative.
    assert m.identity_error is not None and 0 < m.identity_error < 8e-5
    assert abs(m.gradient_ratio - 1) < 8e-5


def test_the_documented_library_spec_loads_and_names_no_python() -> None:
    pytest.importorskip("transformers", reason="Hugging Face transformers is not installed (pip install -e '.[hf]')")
    from stability import parse_spec

    (text,) = [b for b in _snippets("toml") if 'family = "library"' in b]
    spec = parse_spec(text, file="docs/library-models.md")
    assert spec.family == "library" and spec.options.model == "transformers:LlamaModel"


def test_a_module_of_ones_own_that_keeps_its_blocks_deeper_is_refused_with_the_path_to_return() -> None:
    from torch import nn

    from stability import parse_spec
    from stability.errors import SpecError
    from stability.families.custom import _network_from

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = Encoder()

    spec = parse_spec(
        'name = "m"\ndescription = "m"\nfamily = "custom"\n[block]\nfactory = "m:make"\n[space]\ndepth = '
        "2\nwidth = 4\n[expect.gradient_arrival]\n",
        file="specs/m.toml",
    )
    model = Outer()
    with pytest.raises(SpecError) as info:
        _network_from(spec, model)
    assert "it holds blocks deeper, at .encoder: return that module" in str(info.value)
    assert len(_network_from(spec, model.encoder).blocks) == 2
    # (a whole transformers, timm or torchvision model is probed through its own forward instead:
    # tests/test_library_family.py)
