"""Whether an expectation is met (stability/run/conclude.py) is decided by evidence only: a negative
control passes only on a measured violation and vacuous truth never meets `holds`, tried from outside
on invariants that measure nothing, each a real CLI call with its exit code and its one line; and no
probe invariant is evidence on a network with no block, whatever its judge says of one boundary."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from cli_support import PLAIN, Cli

from stability.spec.load import parse_spec

#: Blocks on which three probe invariants have nothing to measure.
NOTHING = """
from torch import nn


def linear(depth, width):
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])


class Scale(nn.Module):
    def forward(self, x):
        return x * 1.0


def no_parameters(depth, width):
    return nn.Sequential(*[Scale() for _ in range(depth)])


class Grow(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.lin = nn.Linear(width, width + 1)

    def forward(self, x):
        return self.lin(x)


def every_block_changes_shape(depth, width):
    return nn.Sequential(*[Grow(width + i) for i in range(depth)])
"""


def _custom(name: str, factory: str, expect: str, *, tokens: bool = False, depth: str = "[2, 4]") -> str:
    layer = 'layer = "tokens"\n' if tokens else ""
    return (
        textwrap.dedent(f"""\
        name = "{name}"
        description = "an invariant with nothing to measure"
        family = "custom"
        [block]
        {layer}factory = "stability_hardening_nothing:{factory}"
        [space]
        depth = {depth}
        width = 4
        batch = 2
        {"tokens = 3" if tokens else ""}
        """)
        + expect
    )


#: (spec text, the reason the invariant was not measured)
ATTACKS = {
    "attention_entropy": (
        lambda e: _custom(
            "attention-on-none",
            "linear",
            f'[expect.attention_entropy]\nmin_entropy = 0.5\nexpect = "{e}"\n',
            tokens=True,
        ),
        "no attention probabilities were seen",
    ),
    "gradient_balance": (
        lambda e: _custom(
            "balance-without-parameters",
            "no_parameters",
            f'[expect.gradient_balance]\nmax_spread = 10.0\nexpect = "{e}"\n',
        ),
        "no block has a trainable parameter",
    ),
    "lesion": (
        lambda e: _custom(
            "lesion-of-shape-changers", "every_block_changes_shape", f'[expect.lesion]\nexpect = "{e}"\n'
        ),
        "no block can be replaced by the identity (every block changes the shape)",
    ),
    "update_size": (
        lambda e: (
            (Path(__file__).resolve().parent.parent / "specs" / "control_sp_update_size.toml")
            .read_text(encoding="utf-8")
            .replace("lr = 0.001", "lr = 1e30")
            .replace('expect = "violated"', f'expect = "{e}"')
            .replace('name = "control-sp-update-size"', 'name = "diverges-at-step-1"')
        ),
        "the loss became non-finite at step 1",
    ),
}


@pytest.mark.parametrize("expect", ["violated", "holds"])
@pytest.mark.parametrize("invariant", sorted(ATTACKS))
def test_an_invariant_that_measured_nothing_is_never_met(cli: Cli, tmp_path: Path, invariant: str, expect: str) -> None:
    """A negative control passes only on a measured violation; vacuous truth never meets `holds`."""
    (tmp_path / "stability_hardening_nothing.py").write_text(NOTHING, encoding="utf-8")
    text, reason = ATTACKS[invariant]
    spec = tmp_path / "spec.toml"
    spec.write_text(text(expect), encoding="utf-8")
    code, out, err = cli("check", spec, "--profile", "ci", "-q")
    assert code == 1, out + err
    assert err == "" and "Traceback" not in out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("✗ ")]
    said = (
        "expected to be violated, but the violation was not measured at "
        if expect == "violated"
        else f"{spec}::{invariant}: not measured at "
    )
    assert said in line and reason in line, line
    assert "0 met, 1 not met" in out


def test_no_probe_invariant_is_evidence_on_a_network_with_no_block() -> None:
    """Every probe verdict passes through `conclude.judge`: a network with no block judged nothing,
    whatever its judge would say of one boundary (a gradient ratio of 1, an exact identity)."""
    from stability.judge.verdict import is_evidence
    from stability.measure.probe import Measurements
    from stability.run.conclude import judge
    from stability.run.results import CaseRecord
    from stability.spec.case import corner_case
    from stability.spec.registry import INVARIANTS

    spec = parse_spec(
        PLAIN.format(extra="", expect="[expect.variance_growth]\n[expect.lesion]\n").replace('"plain"', '"preact"', 1)
    )
    m = Measurements(
        grad_norm=[1.0],
        act_var=[1.0],
        act_sq_mean=[1.0],
        param_grad_norm={},
        identity_error=0.0,
        input_grad_error=0.0,
        nonfinite_at=None,
    )
    record = CaseRecord(case=corner_case(spec), measurements=m)
    names = [n for n, _ in spec.invariants() if not INVARIANTS.get(n).training]
    assert names == ["gradient_arrival", "variance_growth", "lesion"]
    m.extra["lesion"] = [0.0]
    for name in names:
        assert INVARIANTS.get(name).judge(m, getattr(spec.expect, name)).passed  # the judge alone: a pass
        v = judge(spec, name, record)
        assert not is_evidence(v) and "no block" in v.detail, v
