"""Strategies draw inside the space, build lazily, and replay from the seed."""

from __future__ import annotations

import torch
from hypothesis import given, settings

from stability import parse_spec, probe
from stability.run import strategies
from stability.spec.case import Case

SPEC = parse_spec("""
name = "s"
description = "s"
family = "preact"
[block]
layer = "conv2d"
norm = "batch"
[space]
depth = [2, 9]
width = [3, 6]
batch = [2, 4]
spatial = [3, 5]
weight_init = ["xavier_uniform", "orthogonal"]
branch_init = ["default", "zero", "rezero"]
dtype = ["float32", "float64"]
seed = [10, 20]
[expect.gradient_arrival]
[expect.identity_at_init]
""")


@settings(max_examples=40, deadline=None)
@given(strategies.cases(SPEC))
def test_cases_stay_inside_the_space(case: Case) -> None:
    assert 2 <= case.depth <= 9 and 3 <= case.width <= 6 and 2 <= case.batch <= 4
    assert case.spatial is not None and 3 <= case.spatial <= 5
    assert case.weight_init in ("xavier_uniform", "orthogonal") and case.dtype in ("float32", "float64")
    assert 10 <= case.seed <= 20 and case.device == "cpu"


@settings(max_examples=20, deadline=None)
@given(strategies.cases(SPEC, invariant="identity_at_init"))
def test_identity_cases_are_zero_branch_cases(case: Case) -> None:
    assert case.branch_init in ("zero", "rezero")


@settings(max_examples=10, deadline=None)
@given(strategies.networks(SPEC))
def test_networks_build_in_the_test_body_and_replay(net: strategies.DrawnNetwork) -> None:
    assert not net._built  # nothing built during generation
    m1 = probe(net.blocks, net.x, seed=net.loss_seed)
    again = strategies.DrawnNetwork(SPEC, net.case)
    m2 = probe(again.blocks, again.x, seed=again.loss_seed)
    assert m1.grad_norm == m2.grad_norm and m1.act_var == m2.act_var
    assert net.x.dtype == {"float32": torch.float32, "float64": torch.float64}[net.case.dtype]
    assert len(m1.grad_norm) == net.case.depth + 1
