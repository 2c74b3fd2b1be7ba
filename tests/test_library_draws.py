"""A streamed block's random init drawn a chunk at a time on the case's threads
(stability/families/library_draws.py): the same tensor at every thread count, the law the
library asked for, and nothing changed that the init did not draw."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch
from torch import nn

from stability.families import library_draws
from stability.families.library_draws import chunked_draws


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(library_draws, "CHUNK", 1000)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _drawn(threads: int, seed: int = 7) -> list[torch.Tensor]:
    torch.set_num_threads(threads)
    weight = nn.Parameter(torch.empty(47, 103))  # 4841 entries: five chunks, the last short
    bias = torch.empty(3)
    with torch.no_grad(), chunked_draws(seed):
        nn.init.normal_(weight, mean=0.5, std=0.02)  # a Parameter that needs grad, through torch.nn.init
        bias.uniform_(-0.1, 0.1)
        tail = torch.empty(2500).normal_()
    return [weight.detach().clone(), bias, tail]


def test_the_draws_are_the_same_at_every_thread_count_and_differ_between_seeds() -> None:
    """Structural: one thread draws the chunks in turn, two on a pool (the only two paths); what a
    chunk holds depends on the seed, the call and the chunk alone, so both give the same tensors.
    No more threads than the cores of a loaded machine: oversubscribed, the pool can take minutes."""
    one, two = _drawn(1), _drawn(2)
    assert all(torch.equal(a, b) for a, b in zip(one, two, strict=True))
    other = _drawn(1, seed=8)
    assert not any(torch.equal(a, b) for a, b in zip(one, other, strict=True))


def test_every_draw_of_an_init_has_generators_of_its_own() -> None:
    """Two draws of one size and law in one init are two draws, not one repeated: the generator of
    a chunk is seeded from the call's place in the init as well as the chunk's place in the tensor
    (a seed that ignored the call would make every layer of a block the same tensor)."""
    torch.set_num_threads(1)
    with torch.no_grad(), chunked_draws(7):
        a = torch.empty(2500).normal_()
        b = torch.empty(2500).normal_()
        c = torch.empty(2500).uniform_()
        d = torch.empty(2500).uniform_()
    for x, y in ((a, b), (c, d)):
        assert not any(torch.equal(p, q) for p in x.split(1000) for q in y.split(1000))
    with torch.no_grad(), chunked_draws(7):
        again = torch.empty(2500).normal_()
    assert torch.equal(again, a)  # the first call of an init: the same seeds, the same numbers


def test_every_chunk_has_a_generator_of_its_own() -> None:
    weight = _drawn(2)[0].reshape(-1)
    chunks = weight.split(library_draws.CHUNK)
    assert len(chunks) == 5
    firsts = {float(c[0]) for c in chunks}
    assert len(firsts) == 5  # (one seed repeated would start every chunk alike)


def test_the_draws_follow_the_law_asked_for() -> None:
    torch.set_num_threads(2)
    t = torch.empty(400_000)
    u = torch.empty(400_000)
    with torch.no_grad(), chunked_draws(3):
        t.normal_(mean=1.0, std=0.02)
        u.uniform_(-0.3, 0.5)
    n = t.numel()
    assert abs(float(t.double().mean()) - 1.0) < 5 * 0.02 / math.sqrt(n)
    # the sample variance of n normal draws: relative standard error sqrt(2 / (n - 1))
    assert abs(float(t.double().var()) / 0.02**2 - 1.0) < 5 * math.sqrt(2 / (n - 1))
    assert float(u.min()) >= -0.3 and float(u.max()) < 0.5
    assert abs(float(u.double().mean()) - 0.1) < 5 * (0.8 / math.sqrt(12)) / math.sqrt(n)


def test_what_the_mode_does_not_split_is_drawn_as_torch_draws_it() -> None:
    """A call that names its own generator, a non-contiguous tensor and every other operation go
    to torch unchanged: the same numbers as without the mode."""

    def draws() -> list[torch.Tensor]:
        torch.manual_seed(5)
        own = torch.empty(3000).normal_(generator=torch.Generator().manual_seed(1))
        strided = torch.empty(60, 50).t().normal_()
        other = torch.randn(2000)
        return [own, strided, other]

    plain = draws()
    with torch.no_grad(), chunked_draws(9):
        split = draws()
    assert all(torch.equal(a, b) for a, b in zip(plain, split, strict=True))


def test_the_inits_of_torch_nn_init_are_split_where_they_draw() -> None:
    """The split is at the draw itself: `trunc_normal_` (a uniform draw, then its own arithmetic)
    and `kaiming_uniform_` (its fans from the whole tensor) keep their laws and bounds, and are the
    same tensors at every thread count."""

    def inits(threads: int) -> list[torch.Tensor]:
        torch.set_num_threads(threads)
        a, b = torch.empty(300, 40), torch.empty(300, 40)
        with torch.no_grad(), chunked_draws(4):
            nn.init.trunc_normal_(a, std=0.02, a=-0.04, b=0.04)
            nn.init.kaiming_uniform_(b, a=math.sqrt(5))
        return [a, b]

    (a, b), (a2, b2) = inits(1), inits(2)  # the serial and the pool path
    assert torch.equal(a, a2) and torch.equal(b, b2)
    assert float(a.abs().max()) <= 0.04 and float(b.abs().max()) <= 1 / math.sqrt(40)
    assert len({float(c[0]) for c in a.reshape(-1).split(library_draws.CHUNK)}) == 12


def test_a_draw_into_a_tensor_that_is_not_real_floating_point_is_torch_s_own() -> None:
    """A complex tensor is not split (its `normal_` draws real and imaginary parts): the same
    numbers as torch draws it from the global generator, as every other call the mode leaves."""

    def draw() -> torch.Tensor:
        torch.manual_seed(5)
        return torch.empty(2500, dtype=torch.complex64).normal_()

    plain = draw()
    with torch.no_grad(), chunked_draws(9):
        assert torch.equal(draw(), plain)


def test_the_draws_of_a_long_init_are_all_different() -> None:
    """A block's init makes hundreds of draws (every layer's weights and biases): each chunk's seed
    is 63 bits of its digest, so 300 draws of one size and law are 300 different tensors (seeds of
    a byte would give at most 256)."""
    torch.set_num_threads(1)
    with torch.no_grad(), chunked_draws(7):
        firsts = {float(torch.empty(8).normal_()[0]) for _ in range(300)}
    assert len(firsts) == 300
