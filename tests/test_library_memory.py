"""The memory model of library models (stability/families/library_memory.py, its use in
stability/families/library_family.py and stability/run/guard.py): parameters counted exactly on
the meta device, the saved tensors counted on fake tensors, nothing the model's size allocated, a
refusal in one line, the ensemble's members one at a time, and the estimate against a measured
peak (slow)."""

from __future__ import annotations

import gc
import re
import subprocess
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch
from spec_support import library_text, write_spec
from torch import nn

from stability.families import library_memory
from stability.families.library_family import library_model
from stability.families.library_memory import count_bytes, footprint, meta_model
from stability.spec.case import parse_case_string
from stability.spec.load import parse_spec

# Every library model here but two is a transformers one (the two others ask for their own library below).
pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[hf]')")

GPT2 = {"n_embd": "width", "n_layer": "depth", "n_head": "width/16", "vocab_size": 97, "n_positions": 64}
LLAMA = {
    "hidden_size": "width",
    "intermediate_size": "3*width",
    "num_hidden_layers": "depth",
    "num_attention_heads": "width/16",
    "num_key_value_heads": "width/32",
    "vocab_size": 97,
    "tie_word_embeddings": False,
}


def _text(
    model: str = "transformers:GPT2Model",
    config: dict[str, object] = GPT2,
    *,
    depth: int | str = 2,
    width: int = 32,
    batch: int = 2,
    tokens: int = 8,
    space: str = "",
    probe: str = "",
    expect: str = "",
    name: str = "lib",
) -> str:
    """A library model's spec with the wide gradient band (`expect`: further expectations)."""
    # an image model's tokens are its patches (space.tokens is refused for it)
    image = model.startswith(("timm:", "torchvision:"))
    return library_text(
        model,
        config,
        space=f"depth = {depth}\nwidth = {width}\nbatch = {batch}\n"
        + ("" if image else f"tokens = {tokens}\n")
        + space,
        probe=probe,
        expect="[expect.gradient_arrival]\nlo = 1e-30\nhi = 1e30\n" + expect,
        name=name,
        description="a library model",
    )


def _spec(model: str = "transformers:GPT2Model", config: dict[str, object] = GPT2, **kw: Any) -> Any:
    return parse_spec(_text(model, config, **kw), file="lib.toml")


def _real(spec: Any, values: dict[str, Any]) -> nn.Module:
    from stability.families.library_build import construct
    from stability.families.library_values import fill

    torch.manual_seed(0)
    return construct(library_model(spec).target, fill(library_model(spec).config, values))


@pytest.mark.parametrize(
    "model, config",
    [
        ("transformers:GPT2Model", GPT2),
        ("transformers:LlamaModel", LLAMA),
        (
            "transformers:BertModel",
            {
                "hidden_size": "width",
                "intermediate_size": "4*width",
                "num_hidden_layers": "depth",
                "num_attention_heads": 2,
                "vocab_size": 97,
            },
        ),
        (
            "timm:vit_tiny_patch16_224",
            {"img_size": 32, "patch_size": 8, "embed_dim": "width", "depth": "depth", "num_heads": 2},
        ),
        ("torchvision:resnet18", {}),
    ],
    ids=["gpt2", "llama", "bert", "timm-vit", "torchvision-resnet"],
)
def test_the_meta_model_has_the_real_models_exact_parameter_count(model: str, config: dict[str, object]) -> None:
    pytest.importorskip(model.split(":")[0], reason=f"{model.split(':')[0]} is not installed (docs/library-models.md)")
    spec = _spec(model, config)
    values = parse_case_string("depth=2", spec, device="cpu").as_dict()
    from stability.families.library_values import fill

    meta = meta_model(library_model(spec), fill(library_model(spec).config, values))
    real = _real(spec, values)
    assert all(t.device.type == "meta" for t in [*meta.parameters(), *meta.buffers()])
    count = sum(p.numel() for p in real.parameters())  # (parameters() yields a tied weight once)
    assert count_bytes(meta, torch.float32)[2] == count
    floating = sum(t.numel() for t in [*real.parameters(), *real.buffers()] if t.is_floating_point())
    other = sum(t.numel() * t.element_size() for t in real.buffers() if not t.is_floating_point())
    assert count_bytes(meta, torch.float64)[0] == 8 * floating + other
    assert count_bytes(meta, torch.float32)[0] == 4 * floating + other


def _saved_for_real(model: nn.Module, inputs: Any, last: nn.Module) -> int:
    """The bytes of the distinct storages autograd keeps in a real forward up to `last`, parameters excluded."""
    from stability.families.discover import run_model

    owned = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in owned:
            storages[s.data_ptr()] = s.nbytes()
        return t

    class Stop(BaseException):
        pass

    def stop(*_: Any) -> None:
        raise Stop

    handle = last.register_forward_hook(stop)
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            run_model(model, inputs)
    except Stop:
        pass
    finally:
        handle.remove()
    return sum(storages.values())


@pytest.mark.parametrize("config", [GPT2, LLAMA], ids=["gpt2", "llama"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_saved_tensors_on_fake_tensors_are_the_real_forwards(config: dict[str, object], dtype: str) -> None:
    from stability.families.build import torch_dtype
    from stability.families.library_build import build_model

    model = "transformers:GPT2Model" if config is GPT2 else "transformers:LlamaModel"
    spec = _spec(model, config, width=64, tokens=16, depth="[1, 4]", space='dtype = ["float32", "float64"]')
    values = parse_case_string(f"depth=3,dtype={dtype}", spec, device="cpu").as_dict()
    torch.manual_seed(0)
    built = build_model(library_model(spec), values, input_seed=0, dtype=torch_dtype(dtype))
    real = _saved_for_real(built.model, built.inputs, built.blocks.modules[-1])
    found = footprint(library_model(spec), values, torch_dtype(dtype))
    if config is GPT2:
        assert found.saved == real > 0
    else:  # on fake tensors transformers takes its tracing path for Llama's attention (an explicit causal mask,
        # not sdpa's is_causal): at most two attention-map-sized tensors per layer differ
        attention_map = (
            values["batch"] * 4 * values["tokens"] ** 2 * torch_dtype(dtype).itemsize
        )  # (B, H, T, T), 4 heads
        assert real > 0 and abs(found.saved - real) <= 2 * 3 * attention_map, (found.saved, real)
    assert found.params == sum(
        t.numel() * t.element_size()
        for t in {id(t): t for t in [*built.model.parameters(), *built.model.buffers()]}.values()
    )
    assert found.largest_param == max(
        p.numel() * p.element_size() for b in built.blocks.modules for p in b.parameters()
    )


def test_the_estimate_is_linear_in_depth_and_counts_a_second_model_for_the_ensemble(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from stability.families.library_family import _estimate

    monkeypatch.setattr(library_memory, "resident_bytes", lambda: 0)
    alone = _spec(depth="[1, 8]")
    ensemble = _spec(
        depth="[1, 8]", probe="ensemble = 3", expect='[expect.variance_growth]\nmax_growth = "exponential"\n'
    )
    case = parse_case_string("depth=6", alone, device="cpu")
    values = case.as_dict()
    exact = footprint(library_model(alone), values, torch.float32)  # built at depth 6 itself
    work = 2 * exact.largest_param + 2 * exact.largest_saved
    assert _estimate(alone, case) == exact.params + exact.saved + work
    assert _estimate(ensemble, case) == 2 * exact.params + exact.saved + work


def test_the_ensembles_members_are_built_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """While a member is built, no earlier member is alive (only the case's own network): the
    estimate's two models."""
    from stability.measure import ensemble as ens

    spec = _spec(depth=2, probe="ensemble = 4", expect='[expect.variance_growth]\nmax_growth = "exponential"\n')
    case = parse_case_string("depth=2", spec, device="cpu")
    alive: list[weakref.ref[nn.Module]] = []
    seen: list[int] = []
    build = ens.build

    def counting(spec: Any, member: Any) -> Any:
        gc.collect()
        seen.append(sum(r() is not None for r in alive))
        net = build(spec, member)
        alive.append(weakref.ref(net.model.model))
        return net

    monkeypatch.setattr(ens, "build", counting)
    from stability.run.probing import measure_case

    m = measure_case(spec, case)
    assert m.extra["ensemble"].size >= 4
    assert seen == [0] * len(seen) and len(seen) == m.extra["ensemble"].size - 1


#: `stability ARGS` in a process that reports, as it exits, the peak resident set of its own image
#: (VmHWM, which starts afresh at exec), on the last line of its stderr.
_PEAK = """
import atexit, sys

def _peak() -> None:
    with open("/proc/self/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    print(f"peak-rss-kib {kib}", file=sys.stderr)

atexit.register(_peak)
from stability.cli import main
sys.exit(main(sys.argv[1:]))
"""


def run_with_peak(args: list[str], *, cwd: Path, timeout: float = 600) -> tuple[subprocess.CompletedProcess[str], int]:
    """`stability ARGS` in a subprocess: its result and the peak resident set of that process, in
    bytes, as the process itself saw it. Not `RUSAGE_CHILDREN` (the largest of every child this test
    process ever reaped, so what an earlier test ran decided this one) nor a child's own rusage
    (which counts the resident set of the process it was forked from, whatever that has loaded)."""
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )
    kib = int(proc.stderr.strip().splitlines()[-1].removeprefix("peak-rss-kib "))
    return proc, kib * 1024


@pytest.mark.slow  # builds a huge model on the meta device; nightly
def test_a_model_far_over_the_budget_is_refused_in_one_line_without_allocating_it(tmp_path: Path) -> None:
    """A 53 GB GPT-2 config (12 layers of width 9600): refused before anything its size exists,
    the process's peak resident set staying that of the interpreter and the libraries."""
    config = {"n_embd": "width", "n_layer": "depth", "n_head": "width/128", "vocab_size": 50257}
    text = _text(config=config, depth=12, width=9600, batch=1, tokens=16, name="huge")
    spec = write_spec(tmp_path, "huge", text)
    proc, peak = run_with_peak(
        [
            "check",
            str(spec),
            "--in-process",
            "--profile",
            "ci",
            "--memory-budget",
            "8GiB",
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if "refused" in x]
    m = re.search(
        r"refused: this case needs about ([\d.]+) GiB \(parameters, saved activations and overhead\) and the "
        r"memory budget is 8\.0 GiB \(spec (\S+), case (\S+)\); .* raise --memory-budget",
        line,
    )
    assert m is not None, line
    assert (
        49 < float(m.group(1)) < 60
        and m.group(2) == str(spec)
        and m.group(3).startswith("depth=12,width=9600,batch=1,")
    ), line
    assert peak < 2 * 2**30, peak  # its own peak under 2 GiB: nothing of the 53 GB built


@pytest.mark.slow  # two runs of `stability check` on a 4-layer GPT-2-small-sized config (~1 GB each)
def test_the_estimate_is_within_25_percent_of_the_measured_peak(tmp_path: Path) -> None:
    config = {"n_embd": "width", "n_layer": "depth", "n_head": "width/64", "vocab_size": 50257}
    text = _text(config=config, depth=4, width=768, batch=1, tokens=128, name="gpt2")
    spec = write_spec(tmp_path, "gpt2", text)
    case = "depth=4,width=768,batch=1,tokens=128,seed=0"
    argv = [sys.executable, "-m", "stability", "check", str(spec), "--in-process", "--profile", "ci", "--case", case]
    refused = subprocess.run(
        [*argv, "--memory-budget", "1MiB"], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    m = re.search(r"needs about ([\d.]+) (MiB|GiB)", refused.stdout)
    assert m is not None, refused.stdout + refused.stderr
    estimate = float(m.group(1)) * {"MiB": 2**20, "GiB": 2**30}[m.group(2)]
    ran, peak = run_with_peak([*argv[3:], "--memory-budget", "16GiB"], cwd=tmp_path, timeout=900)
    assert ran.returncode == 0, ran.stderr
    assert 0.75 < estimate / peak < 1.25, (estimate, peak)


def test_a_forward_fake_tensors_cannot_run_still_gets_the_parameters_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    """DeBERTa's relative positions branch on values: no saved-tensor count, but the parameters
    (a lower bound) still refuse what cannot fit."""
    from stability.families.library_family import _estimate, _shipped_params
    from stability.spec.load import load_spec

    monkeypatch.setattr(library_memory, "resident_bytes", lambda: 0)
    spec = load_spec(str(Path(__file__).resolve().parent.parent / "specs" / "zoo" / "deberta_v2.toml"))
    case = parse_case_string("depth=2", spec, device="cpu")
    found = footprint(library_model(spec), case.as_dict(), torch.float32)
    assert found.saved == 0 and found.params > 0
    shipped = _shipped_params(spec, case, 1)  # the init rule's depth-1 models at width 128 and at the shipped 768
    assert shipped > found.params
    assert _estimate(spec, case) == max(
        found.params + 2 * found.largest_param, found.params_float32 + found.largest_param + shipped
    )


def test_without_a_fake_forward_the_largest_gradient_is_a_blocks_parameter() -> None:
    """Where the fake forward cannot run, the backward's largest gradient is still the largest
    parameter of the blocks, not the embedding before them (which gets none): DeBERTa at its
    base widths, the word embedding 128100 x 768 and the blocks' largest matrix 768 x 3072."""
    config = {
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_hidden_layers": "depth",
        "num_attention_heads": 12,
        "relative_attention": True,
        "pos_att_type": ["p2c", "c2p"],
        "position_biased_input": False,
        "max_relative_positions": -1,
        "vocab_size": 128100,
    }
    text = library_text(
        "transformers:DebertaV2Model",
        config,
        space="depth = 2\nwidth = 8\ntokens = 16",
        expect="[expect.rank_collapse]\n",
        name="d",
        description="d",
    )
    spec = parse_spec(text, file="d.toml")
    case = parse_case_string("depth=2", spec, device="cpu")
    found = footprint(library_model(spec), case.as_dict(), torch.float32)
    assert found.saved == 0
    assert found.largest_param == 768 * 3072 * 4
    assert (
        count_bytes(
            meta_model(library_model(spec), {**library_model(spec).config, "num_hidden_layers": 2}), torch.float32
        )[1]
        == 128100 * 768 * 4
    )


def test_the_constructed_parameters_are_counted_in_float32_whatever_the_cases_dtype() -> None:
    """A library model is constructed in float32 and cast after: `params_float32` is the float32
    size of its parameters and buffers for a float64 or bfloat16 case as for a float32 one."""
    spec = _spec("transformers:GPT2Model", GPT2)
    values = parse_case_string("depth=2", spec, device="cpu").as_dict()
    real = _real(spec, values)
    floating = sum(t.numel() for t in [*real.parameters(), *real.buffers()] if t.is_floating_point())
    other = sum(t.numel() * t.element_size() for t in real.buffers() if not t.is_floating_point())
    for dtype, size in ((torch.float32, 4), (torch.float64, 8), (torch.bfloat16, 2)):
        found = footprint(library_model(spec), values, dtype)
        assert found.params == size * floating + other
        assert found.params_float32 == 4 * floating + other, dtype


class _Tied(nn.Module):
    """A token embedding and an output head that share one 11 x 4 weight (tied, as GPT-2's lm_head)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(11, 4)
        self.head = nn.Linear(4, 11, bias=False)
        self.head.weight = self.emb.weight
        self.register_buffer("steps", torch.zeros(3, dtype=torch.int64))


def test_a_tied_weight_is_counted_once_and_stays_tied_on_the_meta_device() -> None:
    """44 shared entries: 44 · 4 bytes in float32, 44 · 8 in float64, plus the 3 · 8 bytes of the
    int64 buffer in any dtype; built under `registered_on_meta` the head's weight is still the
    embedding's (a copy per module would count it twice)."""
    with library_memory.registered_on_meta():
        model = _Tied()
    assert model.head.weight is model.emb.weight and model.emb.weight.device.type == "meta"
    assert model.steps.device.type == "meta"
    assert count_bytes(model, torch.float32) == (44 * 4 + 24, 44 * 4, 44)
    assert count_bytes(model, torch.float64) == (44 * 8 + 24, 44 * 8, 44)
    with library_memory.registered_on_meta(buffers=False):
        kept = _Tied()
    assert kept.head.weight is kept.emb.weight and kept.steps.device.type == "cpu"


def test_a_language_models_tied_head_is_counted_once() -> None:
    """GPT-2 with its head (`tie_word_embeddings`, the default): the meta model's parameters and the
    footprint's bytes are the real model's, each tensor once (the head is the embedding)."""
    spec = _spec("transformers:GPT2LMHeadModel", GPT2)
    values = parse_case_string("depth=2", spec, device="cpu").as_dict()
    real = _real(spec, values)
    assert real.lm_head.weight is real.transformer.wte.weight
    from stability.families.library_values import fill

    meta = meta_model(library_model(spec), fill(library_model(spec).config, values))
    assert meta.lm_head.weight is meta.transformer.wte.weight
    unique = {id(t): t for t in [*real.parameters(), *real.buffers()]}.values()
    count = sum(p.numel() for p in real.parameters())
    assert count_bytes(meta, torch.float32)[2] == count
    found = footprint(library_model(spec), values, torch.float32)
    assert found.count == count and found.params == sum(t.numel() * t.element_size() for t in unique)
