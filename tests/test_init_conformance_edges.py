"""init_conformance where a rule has nothing to judge or cannot be read (stability/judge/init_conformance.py,
stability/spec/init_expect.py), on a factory with no library installed: a model with no parameter is
never met, a rule whose `std` is negative is refused at load naming the fix, and one whose `std`
computes negative for the model is not measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import Cli, one_error

NO_PARAMETERS = """
import torch
from torch import nn


class Scale(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x


def scales(depth: int, width: int) -> nn.Sequential:
    return nn.Sequential(*[Scale() for _ in range(depth)])
"""


SCALES = """\
name = "scales"
description = "blocks without a parameter"
family = "custom"

[block]
factory = "scales_factory:scales"

[space]
depth = [1, 3]
width = 4
batch = 2

[expect.init_conformance]
rules = [{{ param = "weight", law = "normal", std = {std}, source = "the test" }}]
{extra}
"""


@pytest.mark.parametrize("extra", ["", 'uncovered = "allow"'])
def test_init_conformance_on_a_model_with_no_parameter_is_not_met(cli: Cli, tmp_path: Path, extra: str) -> None:
    """It was exit 0, "1 met": the rule held for each of no parameters."""
    (tmp_path / "scales_factory.py").write_text(NO_PARAMETERS)
    path = tmp_path / "scales.toml"
    path.write_text(SCALES.format(std="0.02", extra=extra))
    report = tmp_path / "r.json"
    code, out, _ = cli("check", path, "--profile", "ci", "--in-process", "-q", "--json", report)
    assert code == 1 and "0 met, 1 not met" in out, (code, out)
    (inv,) = json.loads(report.read_text())["specs"][0]["invariants"]
    assert inv["met"] is False and "nothing was judged: it has no parameters" in inv["message"], inv


def test_an_init_rule_with_a_negative_std_is_refused(cli: Cli, tmp_path: Path) -> None:
    """It was accepted and reported as "declared N(0, 1²)"."""
    path = tmp_path / "scales.toml"
    path.write_text(SCALES.format(std="-1", extra=""))
    one_error(cli("check", path, "-q"), "rules[0].std = -1", "is negative", "write 1.0")


def test_an_init_rule_whose_std_computes_negative_cannot_be_read() -> None:
    from types import SimpleNamespace

    from stability.judge.init_conformance import init_conformance
    from stability.measure.init_stats import InitRecord
    from stability.spec.init_expect import InitConformance

    e = InitConformance.model_validate(
        {"rules": [{"param": "weight", "law": "normal", "std": "0.02 - fan_in", "source": "t"}]}
    )
    p = SimpleNamespace(
        name="0.weight", module=["Linear"], within=[], fan_in=4, fan_out=4, n=16, mean=0.0, var=1e-4, min=-0.05
    )
    p.max, p.eps = 0.05, 0.0
    record = InitRecord(model=("Sequential",), variables={}, parameters=(p,))  # type: ignore[arg-type]
    v = init_conformance(SimpleNamespace(extra={"init_conformance": record}), e)
    assert not v.measured and "its std = '0.02 - fan_in' is -3.98 for this model" in v.detail, v
