"""Behaviours each pinned by a test that fails when it breaks: the discovered chain of blocks, the
float64 chunked moments of the device design, the sweep `--resume` picks, a registration whose
spec-model rebuild fails, and the summary's code fence (tests/test_log_commands.py) and the
annotations from another folder (tests/test_sarif_uri.py)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from approx_support import approx
from torch import nn

from stability.errors import SpecError
from stability.families.discover import DiscoveryError, discover
from stability.measure import reductions
from stability.run.store import Store
from stability.spec import registry, schema
from stability.spec.load import parse_spec
from stability.spec.registry import FAMILIES, INVARIANTS, Explanation, Invariant, batch, register_invariant

# ----------------------------------------------------------------------------- discover: one chain


class Res(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.f = nn.Linear(c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = x + self.f(x)
        return out


class FedFromEarlier(nn.Module):
    """layers.2 takes what layers.0 returned, not layers.1's output: 0 → 1 is a chain, 2 is not on it."""

    def __init__(self, n: int = 4) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Res(4) for _ in range(n)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.layers[0](x)
        b = self.layers[1](a)
        c = self.layers[2](a)  # an earlier block's output
        out: torch.Tensor = self.layers[3](c) + b
        return out


def test_a_block_fed_an_earlier_blocks_output_is_not_in_the_chain() -> None:
    x = torch.randn(3, 4)
    with pytest.raises(DiscoveryError, match=r"layers.2 \(Res\) does not take the tensor layers.1 returned"):
        discover(FedFromEarlier(), x, blocks="layers")
    found = discover(FedFromEarlier(), x)
    assert found.blocks.names in (
        ("layers.0", "layers.1"),
        ("layers.2", "layers.3"),
    )  # a chain of two, never three or four
    assert len(found.blocks.modules) == 2
    assert sorted(s.names for s in found.stages) == [("layers.0", "layers.1"), ("layers.2", "layers.3")]


# ----------------------------------------------------------------------------- chunked float64 moments


@pytest.mark.parametrize("chunk", [3, 7, 64])
def test_chunked_variance_keeps_the_between_chunk_term(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Chunks with different means: the within-chunk variances alone miss most of the variance
    (Chan, Golub & LeVeque 1983: M2 = Σ M2_c + Σ n_c (mean_c − mean)²). The reference is float64
    over the whole tensor; `_CHUNK` is made small so the chunked path runs on a small tensor."""
    monkeypatch.setattr(reductions, "_CHUNK", chunk)
    h = torch.cat(
        [torch.full((chunk,), float(3 * i)) + torch.linspace(-0.5, 0.5, chunk) for i in range(5)]
        + [torch.tensor([7.0, -2.0])]
    )  # (5·chunk + 2,): a short last chunk
    var, mean = reductions.var_mean64(h)
    want_var, want_mean = torch.var_mean(h.double(), correction=0)
    assert var.dtype == torch.float64 and mean.dtype == torch.float64
    assert float(mean) == approx(float(want_mean), rel=1e-12)
    assert float(var) == approx(float(want_var), rel=1e-12)
    within = sum(float(torch.var(c.double(), correction=0)) * c.numel() for c in torch.split(h, chunk)) / h.numel()
    assert float(var) > 2 * within  # the between-chunk term is most of it here
    norm = reductions.norm64(h)
    assert float(norm) == approx(math.sqrt(float((h.double() ** 2).sum())), rel=1e-12)


@pytest.mark.slow
def test_chunked_variance_over_two_to_the_24_elements() -> None:
    """The real threshold: 2^24 + 5 elements, two halves with means 0 and 2 (variance 1 + within)."""
    n = (1 << 24) + 5
    h = torch.zeros(n)  # (N,) float32
    h[n // 2 :] = 2.0
    var, mean = reductions.var_mean64(h)
    m = (n - n // 2) * 2.0 / n
    assert float(mean) == approx(m, rel=1e-12)
    assert float(var) == approx((n // 2) / n * m**2 + (n - n // 2) / n * (2.0 - m) ** 2, rel=1e-9)


# ----------------------------------------------------------------------------- sweep --resume


def test_resume_picks_the_last_unfinished_sweep_not_the_oldest(tmp_path: Path) -> None:
    with Store(tmp_path / "s.sqlite") as store:
        args = ["sweep", "a.toml", "--over", "depth=1,2"]
        first = store.start_sweep("v", args)
        second = store.start_sweep("v", ["sweep", "b.toml", "--over", "depth=1"])
        third = store.start_sweep("v", args)
        fourth = store.start_sweep("v", ["sweep", "c.toml"])
        assert first < second < third < fourth
        store.finish_sweep(fourth)
        assert store.last_unfinished() == (third, args)
        assert store.last_unfinished(args) == (third, args)
        store.finish_sweep(third)
        assert store.last_unfinished() == (second, ["sweep", "b.toml", "--over", "depth=1"])
        assert store.last_unfinished(args) == (first, args)


# ----------------------------------------------------------------------------- registration


class Toy(schema.Expectation):
    limit: float = 1.0


def _toy(name: str) -> Invariant:
    return Invariant(
        name=name,
        expectation=Toy,
        summary="a toy",
        label="a number",
        explanation=Explanation(summary="s", computes="c", fails="f", fixes="x"),
        judge=lambda m, e: None,
    )


@pytest.fixture
def failing_rebuild(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """schema.rebuild fails while an invariant whose name starts with `toy_broken` is registered."""
    real = schema.rebuild

    def rebuild(invariants: Iterable[Any], families: Iterable[Any]) -> None:
        entries = list(invariants)
        if any(e.name.startswith("toy_broken") for e in entries):
            raise RuntimeError("the spec models cannot be rebuilt")
        real(entries, families)

    monkeypatch.setattr(schema, "rebuild", rebuild)
    yield
    for name in [n for n in INVARIANTS.names() if n.startswith("toy_")]:
        INVARIANTS.unregister(name)


SPEC = (
    'name = "t"\ndescription = "d"\nfamily = "plain"\n[space]\ndepth = [1, 4]\nwidth = '
    "4\n[expect.{name}]\nlimit = 2.0\n"
)


def _whole_or_absent(name: str) -> None:
    assert name not in INVARIANTS
    assert name not in schema.Spec.model_fields["expect"].annotation.model_fields  # type: ignore[union-attr]
    with pytest.raises(SpecError, match="unknown key"):
        parse_spec(SPEC.format(name=name))
    assert sorted(schema.Spec.model_fields["expect"].annotation.model_fields) == sorted(INVARIANTS.names())  # type: ignore[union-attr]


def test_a_registration_whose_rebuild_fails_is_not_left_half_registered(failing_rebuild: None) -> None:
    with pytest.raises(RuntimeError, match="cannot be rebuilt"):
        register_invariant(_toy("toy_broken"))
    _whole_or_absent("toy_broken")


def test_a_batch_whose_rebuild_fails_registers_none_of_its_entries(failing_rebuild: None) -> None:
    before = (INVARIANTS.names(), FAMILIES.names())
    with pytest.raises(RuntimeError, match="cannot be rebuilt"), batch():
        register_invariant(_toy("toy_fine"))
        register_invariant(_toy("toy_broken_too"))
    _whole_or_absent("toy_broken_too")
    _whole_or_absent("toy_fine")
    assert (INVARIANTS.names(), FAMILIES.names()) == before
    with batch():  # the registry still works
        register_invariant(_toy("toy_fine"))
    assert "toy_fine" in INVARIANTS and parse_spec(SPEC.format(name="toy_fine")).expect.toy_fine.limit == 2.0
    assert registry._deferred == [0]
