"""`family = "library"` (stability/families/library_family.py): a library model from a spec with no
Python, refused at load with one line when it names what does not exist or keys it ignores;
every measurement honours the model's own forward (the probe, the seed ensembles, the lesion);
the same discovery for `probe(model, inputs)` and for a factory that returns a whole model; the
`[probe] profiles` key; the worker preload; and the memory model."""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from approx_support import approx
from cli_support import Cli
from shipped_support import require_shipped_libraries
from spec_support import factory_block, library_text, spec_text, write_spec
from torch import nn

from stability import parse_spec, probe
from stability.errors import SpecError
from stability.families.build import build
from stability.measure.ensemble import probe_ensemble
from stability.measure.forward import lesion_changes_in_model, probe_model
from stability.measure.lesion import lesion_changes
from stability.run.engine import RunOptions, run_spec
from stability.run.probing import measure_case
from stability.spec.case import corner_case

pytest.importorskip("transformers", reason="Hugging Face transformers is not installed (pip install -e '.[hf]')")
warnings.filterwarnings("ignore", message="Failed to load image Python extension")

GPT2 = {"n_embd": "width", "n_layer": "depth", "n_head": 2, "vocab_size": 64, "bos_token_id": 1, "eos_token_id": 2}


def gpt2_text(*, space: str = "", probe: str = "", expect: str = "[expect.gradient_arrival]\n") -> str:
    """transformers' GPT2Model at width 16, depth 1 to 3, 5 tokens (`space`: further keys)."""
    return library_text(
        "transformers:GPT2Model",
        GPT2,
        space=f"depth = [1, 3]\nwidth = 16\nbatch = 2\ntokens = 5\n{space}",
        probe=probe,
        expect=expect,
        name="lib",
        description="a library model",
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("GPT2Model", "GPT2Modle"),
            "block.model = 'transformers:GPT2Modle': is not a transformers model or config class; close "
            "names: GPT2Model",
        ),
        (
            ("n_embd", "n_embed"),
            "block.config.n_embed = 'width': is not a config key of transformers:GPT2Model; close names: n_embd",
        ),
        (
            ('"depth"', '"dpeth/1"'),
            "block.config.n_layer = 'dpeth/1': names 'dpeth', which is not a case key; close names: depth",
        ),
        (
            ('"depth"', '"dpeth"'),
            "space.depth = [1, 3]: varies, but no key of block.config is filled from the case's depth",
        ),
        (
            ("n_head = 2", "n_head = 2, pretrained = true"),
            "block.config.pretrained = True: would load pretrained weights or files",
        ),
        (
            ('n_embd = "width"', "n_embd = 16"),
            "space.width = [16, 32]: varies, but no key of block.config is filled from the case's width",
        ),
    ],
)
def test_a_spec_naming_what_does_not_exist_is_refused_in_one_line(change: tuple[str, str], message: str) -> None:
    text = gpt2_text(space="width = [16, 32]\n" if "width" in message else "").replace(*change)
    if "width" in message:
        text = text.replace("width = 16\n", "", 1)
    with pytest.raises(SpecError) as info:
        parse_spec(text, file="lib.toml")
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"space": 'weight_init = "kaiming_normal"\n'}, "space.weight_init: is not read by family 'library'"),
        (
            {"probe": "checkpoint_every = 2"},
            "probe.checkpoint_every = 2: is not supported by family 'library'",
        ),
        (
            {"expect": "[expect.attention_entropy]\n"},
            "expect.attention_entropy: is not measured on family 'library': computes its attention inside "
            "the library's modules",
        ),
        (
            {"expect": "[expect.jacobian_spectrum]\n"},
            "expect.jacobian_spectrum: is not measured on family 'library': runs its blocks only inside the "
            "model's own forward",
        ),
        (
            {"expect": "[expect.identity_at_init]\n[expect.gradient_arrival]\n", "space": 'branch_init = "zero"\n'},
            "space.branch_init = \\['zero'\\]: 'zero' zeroes a residual branch; family 'library' has none",
        ),
    ],
)
def test_keys_a_library_model_does_not_read_are_refused(extra: dict[str, str], key: str) -> None:
    with pytest.raises(SpecError, match=key.replace("(", r"\(").replace(")", r"\)")):
        parse_spec(gpt2_text(**extra), file="lib.toml")


@pytest.mark.slow  # subprocesses importing transformers
def test_loading_imports_no_model_module_and_an_unknown_class_exits_2(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text(gpt2_text(), encoding="utf-8")
    bad.write_text(gpt2_text().replace("GPT2Model", "GTP2Model"), encoding="utf-8")
    code = (
        "import re, sys\n"
        "from stability import load_spec\n"
        f"load_spec({str(good)!r})\n"
        "print(sorted(m for m in sys.modules if "
        "re.match(r'transformers[.]models[.](?!auto[.])[a-z0-9_]+[.]modeling_', m)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert out.stdout.strip() == "[]"
    run = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "stability", "check", str(bad), "--in-process"],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        f"stability: error: {bad}: block.model = 'transformers:GTP2Model': is not a transformers model or "
        "config class; close names: GPT2Model, GPTJModel, GLPNModel"
    ]


@pytest.mark.slow  # loads every shipped library spec in a fresh process each; nightly
@pytest.mark.parametrize(
    "pattern", ["specs/zoo/*.toml", "specs/zoo/timm_*.toml", "specs/zoo/tv_*.toml", "specs/controls/timm_*.toml"]
)
def test_loading_every_shipped_library_spec_prints_no_library_noise(pattern: str) -> None:
    """Validating a transformers spec imports its config class, and transformers imports torchvision
    with it, which warns that its image extension does not load; so does timm, which imports
    torchvision, and the release check's own import of the library: the loader keeps that quiet
    (an import's warnings go to stderr of `stability check` otherwise, once a run). Each pattern
    in a fresh interpreter, so the spec that first imports its library is the one loaded."""
    require_shipped_libraries()
    root = Path(__file__).resolve().parent.parent
    code = (
        f"import glob\nfrom stability import load_spec\npaths = sorted(glob.glob({pattern!r}))\nassert "
        "paths\nfor p in paths:\n    load_spec(p)\n"
    )
    run = subprocess.run(
        [sys.executable, "-W", "error::UserWarning", "-c", code],
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stderr == ""


def test_explain_lists_what_the_library_family_cannot_measure() -> None:
    from stability.report.explain import explain_text

    text = explain_text("jacobian_spectrum")
    assert "Not measured on" in text and "family 'library': runs its blocks only inside the model's own forward" in text
    assert "family 'library'" not in explain_text("gradient_arrival")


def _spec(**kw: str) -> Any:
    return parse_spec(gpt2_text(**kw), file="lib.toml")


def test_the_engine_probes_the_models_own_forward() -> None:
    spec = _spec()
    case = corner_case(spec, depth=3, seed=5)
    m = measure_case(spec, case)
    net = build(spec, case)
    assert net.model is not None and len(net.blocks) == 3
    again = probe_model(
        net.model.model,
        net.model.inputs,
        blocks=net.model.blocks,
        seed=_loss_seed(case.seed),
        rng_seed=_rng_seed(case.seed),
    )
    assert m.grad_norm == again.grad_norm and m.act_var == again.act_var
    assert m.channels == [16] * 4 and m.extra["tokens"] == [5] * 4  # (B, T, C): channels from the last axis


def _loss_seed(seed: int) -> int:
    from stability.families.build import derive_seed

    return derive_seed(seed, 2)


def _rng_seed(seed: int) -> int:
    from stability.families.build import derive_seed

    return derive_seed(seed, 3)


def test_the_seed_ensemble_builds_and_probes_every_member_through_its_forward() -> None:
    spec = _spec(expect="[expect.variance_growth]\n")
    case = corner_case(spec, depth=2, seed=3)
    first = measure_case(spec, case)
    ens = probe_ensemble(spec, case, first, size=3)
    assert not ens.vectorised and ens.size == 3
    for seed, profile in zip(ens.seeds[1:], ens.act_var[1:], strict=True):
        member = measure_case(spec, dataclasses.replace(case, seed=seed))
        assert profile == member.act_var  # each member is the case with its seed, probed alone
    assert ens.act_var[1] != ens.act_var[0]


def test_the_lesion_through_the_models_forward_is_the_blocks_lesion_where_they_see_the_same() -> None:
    spec = _spec(expect="[expect.lesion]\nmax_change = 10.0\n")
    net = build(spec, corner_case(spec, depth=3))
    assert net.model is not None
    keep: list[torch.Tensor] = []
    handle = net.blocks[0].register_forward_pre_hook(lambda m, a: keep.append(a[0]))
    with torch.no_grad():
        net.model.model(**net.model.inputs)
    handle.remove()
    # GPT-2's blocks need nothing but the hidden state (causal attention inside the block): called
    # alone on block 0's input they compute what the model's forward does.
    assert lesion_changes_in_model(net.model) == approx(lesion_changes(net.blocks, keep[0]), rel=1e-6)
    result = run_spec(spec, RunOptions(profile="ci"), case="depth=3")
    assert result.results[0].met


def test_probe_of_a_whole_model_runs_its_own_forward() -> None:
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(0)
    model = LlamaModel(
        LlamaConfig(
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=3,
            num_attention_heads=2,
            num_key_value_heads=1,
            vocab_size=32,
        )
    )
    ids = torch.randint(0, 32, (2, 5))
    m = probe(model, {"input_ids": ids, "use_cache": False}, seed=4)
    assert m.grad_norm == probe_model(model, {"input_ids": ids, "use_cache": False}, seed=4).grad_norm
    assert len(m.grad_norm) == 4 and all(math.isfinite(g) and g > 0 for g in m.grad_norm)
    with pytest.raises(ValueError, match="call_kwargs and checkpoint_every do not apply"):
        probe(model, {"input_ids": ids}, checkpoint_every=1)
    block = model.layers[0]
    assert probe(nn.Sequential(nn.Linear(4, 4)), torch.randn(2, 4)).grad_norm  # a bare block or a stack is as before
    assert block is model.layers[0]


FACTORIES = """
import torch
from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaModel
from transformers import WhisperConfig, WhisperModel


def llama(depth, width):
    config = LlamaConfig(
        hidden_size=width,
        intermediate_size=2 * width,
        num_hidden_layers=depth,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=32,
    )
    return LlamaModel(config)


def gpt2_head(depth, width):
    return GPT2LMHeadModel(GPT2Config(n_layer=depth, n_embd=width, n_head=2, vocab_size=32))


def bert(depth, width):
    config = BertConfig(
        num_hidden_layers=depth, hidden_size=width, num_attention_heads=2, intermediate_size=2 * width, vocab_size=32
    )
    return BertModel(config)


def whisper(depth, width):
    tokens = dict(vocab_size=32, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    config = WhisperConfig(
        encoder_layers=depth,
        decoder_layers=depth,
        d_model=width,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        **tokens,
    )
    return WhisperModel(config)
"""


@pytest.mark.parametrize("name", ["llama", "gpt2_head", "bert"])
def test_a_factory_returning_a_whole_model_is_probed_through_its_forward(tmp_path: Path, name: str, cli: Cli) -> None:
    text = spec_text(
        "custom",
        block=factory_block(f"whole:{name}", layer="tokens"),
        space="depth = [1, 3]\nwidth = 16\nbatch = 2\ntokens = 5",
        expect="[expect.gradient_arrival]\nlo = 0.001\nhi = 1000.0\n",
        name=name,
        description="d",
    )
    path = write_spec(tmp_path, name, text, modules={"whole": FACTORIES})
    code, out, err = cli("check", path, "--profile", "ci", "--in-process")
    assert code == 0, out + err
    assert "TypeError" not in out + err


def test_a_factory_returning_a_whole_model_whose_inputs_the_harness_cannot_make_exits_2(
    tmp_path: Path, cli: Cli
) -> None:
    text = spec_text(
        "custom",
        block=factory_block("whole:whisper", layer="tokens"),
        space="depth = 2\nwidth = 16",
        name="w",
        description="d",
    )
    path = write_spec(tmp_path, "whisper", text, modules={"whole": FACTORIES})
    code, out, err = cli("check", path, "--profile", "ci", "--in-process")
    assert code == 2
    assert (
        "returned the whole model WhisperModel, whose inputs the harness cannot make: "
        "transformers:WhisperModel takes input_features, not token ids or images" in err
    )
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow  # a worker pool importing the libraries; nightly
def test_the_worker_forkserver_preloads_the_libraries_of_the_run(tmp_path: Path) -> None:
    from stability.spec.load import preload_modules

    (tmp_path / "a.toml").write_text(gpt2_text(), encoding="utf-8")
    (tmp_path / "b.toml").write_text(gpt2_text().replace("transformers:GPT2Model", "timm:resnet18"), encoding="utf-8")
    (tmp_path / "c.toml").write_text("not toml [", encoding="utf-8")
    assert preload_modules([tmp_path]) == ["transformers", "transformers.modeling_utils", "timm", "timm.models"]
    assert preload_modules([tmp_path / "missing"]) == []
    # The forkserver's own module imports what $STABILITY_PRELOAD names, and skips what does not import.
    code = "import sys\nimport stability.run._forkserver\nprint('json.tool' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "STABILITY_PRELOAD": "json.tool,no_such_module_anywhere"},
    )
    assert out.stdout.strip() == "True"


def test_the_memory_model_grows_with_depth_and_refuses_a_case_far_too_large(monkeypatch: pytest.MonkeyPatch) -> None:
    from stability.errors import CaseError
    from stability.families import library_memory
    from stability.run.guard import check_budget, estimate_bytes

    monkeypatch.setattr(library_memory, "resident_bytes", lambda: 0)  # the case's own bytes alone

    spec = _spec()
    small, three, deep = (estimate_bytes(spec, corner_case(spec, depth=d)) for d in (2, 3, 2000))
    assert small is not None and three is not None and deep is not None and three > small
    assert deep - small == 1998 * (
        three - small
    )  # linear in the depth past 2 (each block adds its parameters and saved tensors)
    net = build(spec, corner_case(spec, depth=2))
    params = sum(p.numel() * 4 for p in net.model.model.parameters()) if net.model is not None else 0
    assert small > params  # parameters and saved activations, with margin
    with pytest.raises(CaseError, match="memory"):
        check_budget(spec, corner_case(spec, depth=2000), 100 * small)
