"""probe() has no side effects and is a function of its seeds: BatchNorm statistics, training
flags, the caller's RNG and input are as they were; dropout masks are drawn from a seeded stream;
block 0 may modify its input in place; identity is judged against the input before any block ran."""

from __future__ import annotations

import copy

import pytest
import torch
from approx_support import approx
from torch import nn

from stability import probe


def bn_net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Sequential(nn.Linear(6, 6), nn.BatchNorm1d(6), nn.ReLU()),
        nn.Sequential(nn.Linear(6, 6), nn.BatchNorm1d(6, momentum=None), nn.Dropout(0.3)),
        nn.Linear(6, 6),
    )


def test_probe_leaves_a_batchnorm_models_state_dict_and_flags_unchanged() -> None:
    net = bn_net().train()
    net[1].eval()  # a mixed set of flags, each to be kept
    before = copy.deepcopy(net.state_dict())
    flags = [m.training for m in net.modules()]
    x = torch.randn(8, 6)
    # What the probe would leave behind without the restore: one forward changes the statistics.
    scratch = copy.deepcopy(net)
    scratch(x)
    assert not torch.equal(scratch.state_dict()["0.1.running_mean"], before["0.1.running_mean"])
    assert int(scratch.state_dict()["0.1.num_batches_tracked"]) == 1
    for checkpoint_every in (0, 1):
        probe(net, x, checkpoint_every=checkpoint_every)
    after = net.state_dict()
    assert before.keys() == after.keys()
    for k in before:
        assert torch.equal(before[k], after[k]), k
    assert [m.training for m in net.modules()] == flags


def test_a_block_that_replaces_its_buffer_gets_the_original_back() -> None:
    class Counter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("calls", torch.zeros((), dtype=torch.long))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls = self.calls + 1  # a new tensor object, not an in-place update
            self.training = False
            return x

    block = Counter().train()
    original = block.calls
    probe([block], torch.randn(2, 3))
    assert block.calls is original and int(block.calls) == 0 and block.training


def test_dropout_is_drawn_from_a_seeded_stream_and_the_callers_rng_is_untouched() -> None:
    net = nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.5), nn.Linear(16, 16), nn.Dropout(0.5)).train()
    x = torch.randn(4, 16)
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a = probe(net, x, rng_seed=7)
    assert torch.equal(torch.get_rng_state(), state)
    torch.rand(5)  # the caller's stream moves on: the probe's masks must not
    b = probe(net, x, rng_seed=7)
    assert a.grad_norm == b.grad_norm and a.act_var == b.act_var and a.param_grad_norm == b.param_grad_norm
    c = probe(net, x, rng_seed=8)
    assert c.act_var != a.act_var  # another mask: the seed really chooses it
    d = probe(net, x, rng_seed=7, checkpoint_every=1)  # a recomputed segment redraws the same masks
    assert d.grad_norm == a.grad_norm and d.act_var == a.act_var
    assert probe(net, x, seed=3).act_var == probe(net, x, seed=3).act_var  # no rng_seed: derived from seed


def test_an_in_place_block_works_at_position_0_and_leaves_x_alone() -> None:
    x = torch.randn(4, 5, dtype=torch.float64)
    kept = x.clone()
    lin = nn.Linear(5, 5).double()
    m = probe(nn.Sequential(nn.ReLU(inplace=True), lin), x, loss="sum")
    assert torch.equal(x, kept)
    # boundary 0 is the input as it was; boundary 1 is relu(x), measured before block 1
    assert m.act_var[0] == pytest.approx(float(kept.var(unbiased=False)), rel=1e-12, abs=0.0)
    assert m.act_var[1] == pytest.approx(float(kept.relu().var(unbiased=False)), rel=1e-12, abs=0.0)
    # L = Σ W·relu(x): ∂L/∂x = 1[x > 0] ⊙ (1ᵀW), row by row
    expected = (kept > 0).double() * lin.weight.detach().sum(0)  # (B, C)
    assert m.grad_norm[0] == approx(float(expected.norm()), rel=1e-12)


def test_identity_is_judged_against_the_input_before_the_block_ran() -> None:
    class MutatesThenCopies(nn.Module):
        """Doubles its input in place where autograd cannot see it, then returns a copy."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                x.mul_(2.0)
            return x.clone()

    x = torch.randn(3, 4, dtype=torch.float64)
    m = probe([MutatesThenCopies()], x)
    assert m.identity_error == approx(1.0, rel=1e-12)  # ‖2x − x‖ / ‖x‖
    assert probe([nn.Identity()], x).identity_error == 0.0
