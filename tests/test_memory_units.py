"""The memory model's parts that need no library model (stability/families/library_memory.py):
the resident set, registering on the meta device, counting bytes, and building a model whose
constructor reads numbers back. tests/test_library_memory.py has the estimate on real models."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from stability.families import library_build
from stability.families.library_memory import count_bytes, meta_model, registered_on_meta, resident_bytes


def _vm_rss() -> int:
    with open("/proc/self/status") as fh:
        (kib,) = [int(line.split()[1]) for line in fh if line.startswith("VmRSS:")]
    return kib * 1024


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="Linux /proc only")
def test_the_resident_set_is_the_kernel_s_in_bytes() -> None:
    before = _vm_rss()
    got = resident_bytes()
    after = _vm_rss()
    page = os.sysconf("SC_PAGE_SIZE")
    assert min(before, after) - 64 * page <= got <= max(before, after) + 64 * page


def test_registered_on_meta_moves_parameters_and_buffers_as_asked_and_restores_torch() -> None:
    original = nn.Module.register_parameter, nn.Module.register_buffer
    with registered_on_meta(buffers=False):
        norm = nn.BatchNorm1d(4)
    assert norm.weight.device.type == "meta" and norm.running_mean.device.type == "cpu"
    with registered_on_meta():
        norm = nn.BatchNorm1d(4)
    assert norm.running_mean.device.type == "meta"
    assert (nn.Module.register_parameter, nn.Module.register_buffer) == original
    assert nn.Linear(2, 2).weight.device.type == "cpu"


def test_count_bytes_counts_each_tensor_once_in_the_dtype_and_integers_at_their_size() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.big = nn.Linear(10, 10, bias=False)  # 100 elements, the largest
            self.small = nn.Linear(10, 2, bias=False)  # 20
            self.tied = nn.Linear(10, 2, bias=False)
            self.tied.weight = self.small.weight  # the same tensor: once
            self.register_buffer("steps", torch.zeros(3, dtype=torch.int64))  # 3 × 8 bytes whatever the dtype

    total, largest, count = count_bytes(Net(), torch.bfloat16)
    assert (total, largest, count) == (120 * 2 + 3 * 8, 100 * 2, 120)


class ReadsBack(nn.Module):
    """A constructor that reads numbers back (timm's drop-path rates), and one tensor put in place
    without registering it."""

    def __init__(self) -> None:
        super().__init__()
        self.rates = torch.linspace(0, 0.1, 3).tolist()
        self.layer = nn.Linear(4, 4)
        self._buffers["table"] = torch.ones(2)  # not through register_buffer


def test_a_constructor_that_reads_numbers_back_is_built_on_meta_all_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(library_build, "construct", lambda target, config: ReadsBack())
    model: Any = meta_model(SimpleNamespace(target="x:ReadsBack"), {})
    assert model.rates == pytest.approx([0.0, 0.05, 0.1])
    assert {t.device.type for t in [*model.parameters(), *model.buffers()]} == {"meta"}


def test_the_largest_gradient_is_a_probed_block_s_largest_parameter_not_the_embedding_s() -> None:
    """The backward stops at the first block's input: the embedding before it gets no gradient. A
    GPT-2 of width 32 and a 5000-token vocabulary: its embedding holds 160,000 numbers, its blocks'
    largest matrix (the MLP's 32 x 128) 4,096."""
    pytest.importorskip("transformers")
    from stability.families.library_family import library_model
    from stability.families.library_memory import footprint
    from stability.spec.case import parse_case_string
    from stability.spec.load import parse_spec

    spec = parse_spec(
        'name = "g"\ndescription = "g"\nfamily = "library"\n[block]\nlayer = "tokens"\n'
        'model = "transformers:GPT2Model"\n'
        'config = { n_embd = "width", n_layer = "depth", n_head = 2, vocab_size = 5000, n_positions = 16 }\n'
        "[space]\ndepth = 2\nwidth = 32\nbatch = 2\ntokens = 8\n[expect.gradient_arrival]\n",
        file="g.toml",
    )
    case = parse_case_string("depth=2", spec, device="cpu")
    found = footprint(library_model(spec), case.as_dict(), torch.float32)
    assert found.saved > 0 and found.largest_param == 32 * 128 * 4
    with torch.no_grad():  # (a caller without gradients: the probe's forward still saves what it saves)
        assert footprint(library_model(spec), case.as_dict(), torch.float32) == found


class _Wide(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 100, bias=False)  # 400 numbers


class _Narrow(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8, bias=False)  # 64 numbers


class _TwoRuns(nn.Module):
    """A run of two wide blocks (a stem), then the longest run: three narrow blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.ModuleList([_Wide(), _Wide()])
        self.body = nn.ModuleList([_Narrow() for _ in range(3)])


def test_without_a_fake_forward_the_largest_gradient_is_the_longest_run_s_in_the_case_s_dtype(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from stability.families import library_memory

    def cannot(*args: Any) -> Any:
        raise RuntimeError("no fake rule")

    monkeypatch.setattr(library_build, "construct", lambda target, config: _TwoRuns())
    monkeypatch.setattr(library_memory, "_saved", cannot)
    found = library_memory.footprint(SimpleNamespace(target="x:TwoRuns", config={}), {}, torch.bfloat16)
    assert (found.saved, found.largest_saved) == (0, 0)
    assert found.largest_param == 64 * 2  # the body's matrix in bfloat16, not the stem's 400 numbers
    assert (found.params, found.params_float32) == ((2 * 400 + 3 * 64) * 2, (2 * 400 + 3 * 64) * 4)
