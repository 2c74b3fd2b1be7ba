"""No false green from `stability check`, tried from outside: negative controls on invariants
that measure nothing, `applies_when` outside the space, and a factory that rewrites its worker's
result messages. Each attack is a real CLI call with its exit code and its one line asserted."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

Cli = Callable[..., tuple[int, str, str]]

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


APPLIES_WHEN = """\
name = "applies-when-{name}"
description = "applies_when outside the space"
family = "plain"
[space]
depth = [1, 4]
width = {width}
batch = 2
[expect.gradient_arrival]
lo = 0.1
hi = 10.0
applies_when = {{ width = [{value}] }}
"""


@pytest.mark.parametrize(
    ("width", "value", "space"),
    [
        ("{ values = [4, 64] }", 16, "space.width { values = [4, 64] }"),
        ("{ range = [8, 64], multiple_of = 8 }", 9, "space.width { range = [8, 64], multiple_of = 8 }"),
    ],
)
@pytest.mark.parametrize("command", ["check", "sweep"])
def test_applies_when_outside_the_space_is_refused_naming_the_key_and_the_space(
    cli: Cli, tmp_path: Path, width: str, value: int, space: str, command: str
) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text(APPLIES_WHEN.format(name=value, width=width, value=value), encoding="utf-8")
    db = tmp_path / "r.sqlite"
    args = ("--profile", "ci") if command == "check" else ("--over", "depth=1,2", "--serial", "--db", db)
    code, out, err = cli(command, spec, *args)
    assert code == 2
    assert (
        err == f"stability: error: {spec}: expect.gradient_arrival.applies_when.width = [{value}]: {value} is not "
        f"a value {space} can draw; list values space.width draws, or widen space.width\n"
    )
    assert "Traceback" not in out + err and not db.exists()


#: Rewrites, inside its worker, every message the worker sends so that each result says "met".
LIAR = """
from torch import nn

import stability.run.worker as worker

_real = worker._json


def _met(obj):
    if isinstance(obj, dict):
        out = {k: _met(v) for k, v in obj.items()}
        if "met" in out:
            out.update(met=True, error=None, message="met")
        return out
    if isinstance(obj, list):
        return [_met(x) for x in obj]
    return obj


worker._json = lambda message: _real(_met(message))


class Shrink(nn.Module):
    def forward(self, x):
        return x * 1e-3


def make(depth, width):
    return nn.Sequential(*[Shrink() for _ in range(depth)])
"""

LIAR_SPEC = """\
name = "liar"
description = "a vanishing gradient whose worker says every result is met"
family = "custom"
[block]
factory = "stability_hardening_liar:make"
[space]
depth = [2, 4]
width = 4
batch = 2
[expect.gradient_arrival]
lo = 0.01
hi = 100.0
"""


@pytest.mark.parametrize(
    "in_process", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["worker", "in-process"]
)
def test_a_factory_that_rewrites_its_results_to_met_cannot_pass(tmp_path: Path, in_process: bool) -> None:
    """The parent judges the measurements itself. In a worker the rewritten messages contradict
    that judgement, which is an error naming the case (exit 2); in this process nothing is
    rewritten and the verdict stands (exit 1). Never exit 0."""
    (tmp_path / "stability_hardening_liar.py").write_text(LIAR, encoding="utf-8")
    (tmp_path / "liar.toml").write_text(LIAR_SPEC, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "STABILITY_PROFILE")}
    cmd = [
        sys.executable,
        "-m",
        "stability",
        "check",
        "liar.toml",
        "--profile",
        "ci",
        "-q",
        *(["--in-process"] if in_process else []),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert "Traceback" not in proc.stdout + proc.stderr
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("✗ ")]
    assert "0 met, 1 not met" in proc.stdout
    if in_process:
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert (
            "liar.toml::gradient_arrival: expected to hold, but it fails at smallest failing case depth=2," in line
            and proc.stderr == ""
        )
    else:
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert (
            "liar.toml::gradient_arrival: the worker reported it met, but case depth=2," in line
            and "fails it when judged again from its measurements" in line
        )
        (error,) = proc.stderr.splitlines()
        assert (
            error.startswith("stability: error: liar.toml::gradient_arrival: the worker reported it met")
            and "may have replaced part of the harness" in error
        )
