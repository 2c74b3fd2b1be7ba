"""NaN or inf in the forward or the backward pass is a failed verdict that names the first block it
came from, for every invariant; never a crash, never a pass."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from stability import probe
from stability.families.build import build, make_input
from stability.run.engine import RunOptions, evaluate, judge, run_spec
from stability.spec.case import corner_case, parse_case_string
from stability.spec.load import load_spec, parse_spec
from stability.spec.registry import INVARIANTS
from stability.spec.schema import Spec


def _judge_all(spec: Spec, case_text: str) -> dict[str, object]:
    record = evaluate(spec, parse_case_string(case_text, spec))
    assert record.error is None, record.error
    return {name: judge(spec, name, record) for name, _ in spec.invariants() if not INVARIANTS.get(name).training}


EXPECT_ALL = "\n[expect.gradient_arrival]\n\n[expect.variance_growth]\n\n[expect.identity_at_init]\natol = 1.0\n"


def test_nan_in_the_forward_pass_names_block_7(custom_spec: Callable[..., Path]) -> None:
    spec = load_spec(custom_spec("nan_at_block_7", depth="10", expect=EXPECT_ALL))
    verdicts = _judge_all(spec, "depth=10")
    for name, v in verdicts.items():
        assert not v.passed, name
        assert v.block == 7, (name, v)
        assert "block 7 produced a non-finite activation" in v.detail, v.detail
        assert math.isnan(v.observed)


def test_nan_in_the_forward_pass_through_the_search(custom_spec: Callable[..., Path]) -> None:
    spec = load_spec(custom_spec("nan_at_block_7", depth="[8, 12]"))
    result = run_spec(spec, RunOptions(profile="ci")).results[0]
    assert not result.met and result.error is None
    assert result.case is not None and result.case.depth == 8  # the smallest stack that has block 7
    assert result.verdict is not None and result.verdict.block == 7
    assert "block 7 produced a non-finite activation" in result.message


def test_nan_in_the_backward_pass_names_the_block(custom_spec: Callable[..., Path]) -> None:
    spec = load_spec(custom_spec("nan_gradient_at_block_3", depth="6", expect=EXPECT_ALL))
    record = evaluate(spec, corner_case(spec))
    assert record.measurements is not None
    assert all(math.isfinite(v) for v in record.measurements.act_var)  # the forward pass is finite
    v = judge(spec, "gradient_arrival", record)
    assert not v.passed and v.block == 3
    assert "the gradient became non-finite at the input of block 3" in v.detail
    for name in ("variance_growth", "identity_at_init"):
        assert not judge(spec, name, record).passed, name


def _overflowing(dtype: str, init_std: str) -> Spec:
    return parse_spec(
        f"""
        name = "overflow"
        description = "a plain stack with a huge init, in a narrow dtype"
        family = "plain"
        [block]
        activation = "identity"
        [space]
        depth = 8
        width = 8
        batch = 4
        weight_init = ["normal"]
        init_std = {init_std}
        dtype = ["{dtype}"]
        device = ["cpu"]
        [expect.gradient_arrival]
        [expect.variance_growth]
        """
    )


def _first_nonfinite_block(spec: Spec) -> int:
    """Independently of the probe: run the blocks one by one and find the first non-finite output."""
    case = corner_case(spec)
    net = build(spec, case)
    h = make_input(spec, case)
    with torch.no_grad():
        for i, block in enumerate(net.blocks):
            h = block(h)
            if not torch.isfinite(h).all():
                return i
    raise AssertionError("the stack did not overflow; raise init_std")


@pytest.mark.parametrize(
    ("dtype", "init_std"),
    [
        ("float16", "20.0"),
        ("float32", "1e12"),
        ("bfloat16", "1e12"),
    ],
)
def test_low_precision_overflow_is_a_failed_verdict_naming_the_first_block(dtype: str, init_std: str) -> None:
    spec = _overflowing(dtype, init_std)
    first = _first_nonfinite_block(spec)
    assert 0 < first < 7  # the test is about a block in the middle, not the input or the end
    record = evaluate(spec, corner_case(spec))
    assert record.error is None and record.measurements is not None
    assert record.measurements.nonfinite_at == first + 1 and record.measurements.nonfinite_kind == "activation"
    for name in ("gradient_arrival", "variance_growth"):
        v = judge(spec, name, record)
        assert not v.passed and v.block == first, (name, v)
        assert f"block {first} produced a non-finite activation" in v.detail


def test_overflow_through_check_is_exit_1_not_a_crash(
    cli: Callable[..., tuple[int, str, str]], write_spec: Callable[..., Path]
) -> None:
    path = write_spec(  # bounds so wide that only a non-finite value can fail the invariant
        'name = "overflow"\ndescription = "d"\nfamily = "plain"\n[block]\nactivation = "identity"\n'
        '[space]\ndepth = [1, 8]\nwidth = 8\nbatch = 4\nweight_init = ["normal"]\ninit_std = 20.0\n'
        'dtype = ["float16"]\ndevice = ["cpu"]\n[expect.gradient_arrival]\nlo = 1e-30\nhi = 1e30\n'
    )
    code, out, err = cli("check", path, "--profile", "ci")
    assert code == 1, err
    assert "non-finite" in out and "Traceback" not in out + err


def test_a_nan_gradient_first_seen_at_the_input_is_located_there() -> None:
    class NanGradIn(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.sqrt(0.0 * x)  # finite forward; ∂/∂x = inf · 0 = NaN at block 0's input

    m = probe(nn.Sequential(NanGradIn(), nn.Linear(3, 3).double()), torch.ones(2, 3, dtype=torch.float64))
    assert (m.nonfinite_at, m.nonfinite_kind) == (0, "gradient")
