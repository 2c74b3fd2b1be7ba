"""Tests for mutants that survived the last held-out sample of the mutation check (docs/mutation.md,
"Surviving mutants of held-out sample 3"): written after that sample was measured, so they do not
change its reported rate."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from stability import parse_spec, probe
from stability.judge.growth import classify_ensemble
from stability.measure.jacobian import jacobian_spectrum
from stability.measure.lesion import lesion_changes
from stability.measure.probe import Measurements
from stability.run import engine
from stability.run.engine import RunOptions, evaluate, run_spec
from stability.spec.case import Case
from stability.spec.registry import INVARIANTS


def test_lesioning_a_stack_whose_output_is_exactly_zero_changes_nothing() -> None:
    zero = nn.Linear(3, 3, bias=False).double()
    with torch.no_grad():
        zero.weight.zero_()
    assert lesion_changes(nn.Sequential(nn.Identity(), zero), torch.ones(2, 3, dtype=torch.float64)) == [
        0.0,
        math.inf,
    ]  # 0/0 is 0; x/0 is ∞


def test_lesion_is_judged_by_the_specs_statistic() -> None:
    m = Measurements(
        grad_norm=[1.0] * 4,
        act_var=[1.0] * 4,
        act_sq_mean=[1.0] * 4,
        param_grad_norm={},
        identity_error=None,
        input_grad_error=None,
        nonfinite_at=None,
        extra={"lesion": [0.1, 0.2, 0.9]},
    )
    assert INVARIANTS.get("lesion").judge(m, SimpleNamespace(max_change=0.5, statistic="median")).passed  # median 0.2
    assert not INVARIANTS.get("lesion").judge(m, SimpleNamespace(max_change=0.5, statistic="max")).passed


def test_a_nan_gradient_first_seen_at_the_input_is_located_there() -> None:
    class NanGradIn(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.sqrt(0.0 * x)  # finite forward; ∂/∂x = inf · 0 = NaN at block 0's input

    m = probe(nn.Sequential(NanGradIn(), nn.Linear(3, 3).double()), torch.ones(2, 3, dtype=torch.float64))
    assert (m.nonfinite_at, m.nonfinite_kind) == (0, "gradient")


def _plain(extra: str = "") -> object:
    return parse_spec(
        'name = "e"\ndescription = "d"\nfamily = "plain"\n[block]\nactivation = "tanh"\n[space]\ndepth = [1, '
        "3]\nwidth = 4\nbatch = 2\n"
        f'dtype = ["float64"]\n{extra}\n[expect.variance_growth]\nmax_growth = "exponential"\n',
        file="specs/e.toml",
    )


def test_an_ensemble_of_one_is_no_ensemble_and_on_start_gets_the_case() -> None:
    spec = _plain("[probe]\nensemble = 1")
    case = Case(
        depth=3,
        width=4,
        batch=2,
        spatial=None,
        input_width=None,
        weight_init="default",
        branch_init="default",
        dtype="float64",
        device="cpu",
        seed=0,
    )
    record = evaluate(spec, case)  # type: ignore[arg-type]
    assert record.measurements is not None and "ensemble" not in record.measurements.extra
    started: list[Case] = []
    run_spec(spec, RunOptions(), case=case, on_start=started.append)  # type: ignore[arg-type]
    assert started == [case]


def test_a_search_whose_deciding_case_fails_to_run_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from stability.run.engine import CaseRecord

    monkeypatch.setattr(
        engine,
        "evaluate",
        lambda spec, c, options=None: CaseRecord(case=c, measurements=None, error="the case does not run: boom"),
    )
    (r,) = run_spec(_plain(), RunOptions(profile="ci")).results  # type: ignore[arg-type]
    assert not r.met and r.case is not None and r.error == "the case does not run: boom"
    assert r.message == f"specs/e.toml::variance_growth: the case could not be measured at {r.case}"


def test_depth_zero_ensembles_and_the_jacobian_defaults() -> None:
    g = classify_ensemble([[1.0], [2.0]])
    assert (g.growth, g.slope, g.rate) == ("bounded", 0.0, 1.0)
    x = torch.ones(2, 2, dtype=torch.float64)
    assert jacobian_spectrum(nn.Identity(), x).probes == 16 and jacobian_spectrum(nn.Identity(), x).iterations <= 50
