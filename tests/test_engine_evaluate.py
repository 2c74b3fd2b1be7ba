"""`evaluate`, `judge`, `_apply` and `run_spec` in the engine (stability/run/engine.py): what each kind
of failure on a case becomes, the seconds it took, the random streams the probe and the theory
measurements use, and what a search reports. Written from the mutation check (docs/mutation.md)."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from hypothesis import settings
from spec_support import make_case, make_measurements

from stability import parse_spec
from stability.errors import BlockError, CaseError
from stability.families.build import build, derive_seed, make_input
from stability.measure.jacobian import jacobian_spectrum
from stability.measure.probe import Measurements, probe
from stability.run import engine, probing
from stability.run.engine import CaseRecord, RunOptions, evaluate, judge, run_spec
from stability.spec.case import Case
from stability.spec.registry import INVARIANTS
from stability.spec.schema import Spec

CASE = make_case(seed=11)


def _plain(
    expect: str = "[expect.gradient_arrival]\nlo = 1e-6\nhi = 1e6\n", block: str = 'activation = "tanh"'
) -> Spec:
    return parse_spec(
        f'name = "e"\ndescription = "d"\nfamily = "plain"\n[block]\n{block}\n[space]\ndepth = [1, 4]\nwidth = '
        f'4\nbatch = 2\ndtype = ["float64"]\n{expect}',
        file="specs/e.toml",
    )


def _raising(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    def boom(*_: Any, **__: Any) -> Measurements:
        raise exc

    monkeypatch.setattr(probing, "probe_network", boom)


@pytest.mark.parametrize(
    ("exc", "error"),
    [
        (
            BlockError("block 1 (Linear) failed on an input of shape (2, 4): ValueError: no"),
            "the case does not run: block 1 (Linear) failed on an input of shape (2, 4): ValueError: no",
        ),
        (CaseError("the case took longer than 5 s"), "the case took longer than 5 s"),
        (torch.OutOfMemoryError(), "out of memory on cpu: out of memory"),
        (
            torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB\nmore text"),
            "out of memory on cpu: CUDA out of memory. Tried to allocate 2 GiB",
        ),
        (
            ValueError("Expected more than 1 value\n   per channel"),
            "the case does not run: ValueError: Expected more than 1 value per channel",
        ),
    ],
)
def test_each_failure_on_a_case_becomes_its_error(
    monkeypatch: pytest.MonkeyPatch, exc: BaseException, error: str
) -> None:
    _raising(monkeypatch, exc)
    record = evaluate(_plain(), CASE)
    assert record.case == CASE and record.measurements is None and record.error == error
    assert 0.0 <= record.seconds < 60.0


def test_a_measured_case_uses_the_cases_streams_and_times_itself() -> None:
    spec = _plain()
    record = evaluate(spec, CASE)
    assert (
        record.case == CASE and record.error is None and record.measurements is not None and 0.0 < record.seconds < 60.0
    )
    net = build(spec, CASE)
    m = probe(net.blocks, make_input(spec, CASE), seed=derive_seed(CASE.seed, 2), rng_seed=derive_seed(CASE.seed, 3))
    assert record.measurements.grad_norm == m.grad_norm and record.measurements.act_var == m.act_var


def test_dropout_masks_come_from_the_cases_own_stream(tmp_path: Path) -> None:
    """With dropout on, the probe's global RNG is seeded from stream 3 of the case seed: the case
    replays its masks, and another stream would draw other masks."""
    (tmp_path / "stability_evaluate_dropout.py").write_text(
        "from torch import nn\n\n\ndef make(depth, width):\n    return "
        "nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Dropout(0.5)) for _ "
        "in range(depth)])\n",
        encoding="utf-8",
    )
    spec = parse_spec(
        'name = "d"\ndescription = "d"\nfamily = "custom"\n[block]\nfactory = "stability_evaluate_dropout:make"\n'
        '[space]\ndepth = 3\nwidth = 8\nbatch = 4\ndtype = ["float64"]\n[probe]\ndropout = "on"\n'
        "[expect.gradient_arrival]\nlo = 1e-9\nhi = 1e9\n",
        file=str(tmp_path / "d.toml"),
    )
    case = make_case(width=8, batch=4, seed=5)
    record = evaluate(spec, case)
    assert record.measurements is not None, record.error
    net = build(spec, case)
    x = make_input(spec, case)
    same = probe(net.blocks, x, seed=derive_seed(5, 2), rng_seed=derive_seed(5, 3))
    other = probe(net.blocks, x, seed=derive_seed(5, 2))
    assert record.measurements.act_var == same.act_var
    assert other.act_var != same.act_var  # the masks differ: the stream matters


def test_the_jacobian_estimate_uses_stream_three_of_the_case_seed() -> None:
    spec = _plain("[expect.jacobian_spectrum]\nmax_spread = 1000.0\nprobes = 4\niterations = 3\n")
    record = evaluate(spec, CASE)
    assert record.measurements is not None
    net = build(spec, CASE)
    want = jacobian_spectrum(net.blocks, make_input(spec, CASE), probes=4, iterations=3, seed=derive_seed(CASE.seed, 3))
    assert record.measurements.extra["jacobian_spectrum"] == want


def test_an_unmeasured_case_is_judged_failed_with_an_empty_bound() -> None:
    v = judge(_plain(), "gradient_arrival", CaseRecord(case=CASE, measurements=None, error="boom"))
    assert (v.invariant, v.passed, v.bound, v.block, v.detail) == (
        "gradient_arrival",
        False,
        "",
        None,
        "case not measured: boom",
    )
    assert math.isnan(v.observed)


def test_apply_passes_every_bound_of_the_jacobian_invariant() -> None:
    sp = SimpleNamespace(mean_sq=1.0, mean_sq_se=0.0, max_sq=2.0, spread=2.0, method="exact", n=4)
    m = make_measurements(
        grad_norm=[1.0, 1.0], act_var=[1.0, 1.0], act_sq_mean=[1.0, 1.0], extra={"jacobian_spectrum": sp}
    )
    low = INVARIANTS.get("jacobian_spectrum").judge(m, SimpleNamespace(max_spread=4.0, mean_lo=1.5, mean_hi=None))
    high = INVARIANTS.get("jacobian_spectrum").judge(m, SimpleNamespace(max_spread=4.0, mean_lo=None, mean_hi=0.5))
    ok = INVARIANTS.get("jacobian_spectrum").judge(m, SimpleNamespace(max_spread=4.0, mean_lo=0.5, mean_hi=1.5))
    assert (low.passed, high.passed, ok.passed) == (False, False, True)


def test_a_search_that_draws_no_applicable_case_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "_applies", lambda spec, name, case: False)
    (r,) = run_spec(_plain(), RunOptions(profile="ci")).results
    assert (r.name, r.met, r.examples, r.verdict, r.case) == ("gradient_arrival", False, 0, None, None)
    assert r.message == "no applicable case was drawn" and r.error == "no applicable case"


def test_a_search_that_holds_counts_its_cases_in_the_message() -> None:
    result = run_spec(_plain(), RunOptions(profile="ci"))
    (r,) = result.results
    assert r.met and r.examples == len(result.cases) and r.examples >= 2
    assert r.message.startswith(f"specs/e.toml::gradient_arrival: holds on {r.examples} cases; closest to its bound: ")


def test_the_thorough_profile_steers_the_search(monkeypatch: pytest.MonkeyPatch) -> None:
    small = settings(max_examples=3, database=None, deadline=None, derandomize=True)
    monkeypatch.setattr(engine, "get_profile", lambda name=None: (name or "dev", small))
    labels: list[str] = []
    monkeypatch.setattr(engine, "target", lambda value, *, label: labels.append(label))
    run_spec(_plain(), RunOptions(profile="thorough"))
    assert "vanishing gradient (log10)" in labels
    labels.clear()
    run_spec(_plain(), RunOptions(profile="dev"))
    assert labels == []


def test_a_cuda_case_without_cuda_says_so() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal is for machines without it")
    record = evaluate(
        _plain(),
        make_case(device="cuda"),
    )
    assert (record.measurements, record.error, record.seconds) == (
        None,
        "CUDA is not available on this machine; use --device cpu",
        0.0,
    )


def test_a_stacks_call_kwargs_reach_the_probe(tmp_path: Path) -> None:
    (tmp_path / "stability_evaluate_kwargs.py").write_text(
        "from torch import nn\nfrom stability import Stack\n\n\nclass Scaled(nn.Module):\n"
        "    def forward(self, x, *, scale=1.0):\n        return scale * x\n\n\n"
        "def make(depth, width):\n    return Stack(blocks=nn.Sequential(*[Scaled() for _ in range(depth)]), "
        "call_kwargs={'scale': 2.0})\n",
        encoding="utf-8",
    )
    spec = parse_spec(
        'name = "k"\ndescription = "d"\nfamily = "custom"\n[block]\nfactory = '
        '"stability_evaluate_kwargs:make"\n[space]\n'
        'depth = 3\nwidth = 4\nbatch = 2\ndtype = ["float64"]\n[probe]\nloss = '
        '"sum"\n[expect.gradient_arrival]\nlo = 1e-9\nhi = 1e9\n',
        file=str(tmp_path / "k.toml"),
    )
    record = evaluate(
        spec,
        make_case(),
    )
    assert record.measurements is not None and record.measurements.gradient_ratio == pytest.approx(
        8.0, rel=1e-15, abs=0.0
    )  # 2³


@pytest.mark.parametrize("expect", ["holds", "violated"])
def test_a_replayed_case_outside_the_invariant_is_not_applicable_and_keeps_its_expectation(expect: str) -> None:
    spec = parse_spec(
        'name = "p"\ndescription = "d"\nfamily = "preact"\n[space]\ndepth = 2\nwidth = 4\nbatch = '
        f'2\nbranch_init = ["default", "zero"]\n[expect.identity_at_init]\nexpect = "{expect}"\n',
        file="specs/p.toml",
    )
    (r,) = run_spec(spec, RunOptions(), case="branch_init=default").results
    assert (r.name, r.expect, r.met, r.verdict, r.examples, r.applicable, r.status) == (
        "identity_at_init",
        expect,
        True,
        None,
        0,
        False,
        "not_applicable",
    )
    assert r.message.startswith(f"specs/p.toml::identity_at_init: not applicable at {r.case}: ")


def test_the_depth_bisection_keeps_the_failing_depth_itself() -> None:
    spec = parse_spec(
        'name = "e"\ndescription = "d"\nfamily = "plain"\n[space]\ndepth = { range = [3, 15], multiple_of = '
        "3 }\nwidth = 4\nbatch = 2\n[expect.gradient_arrival]\nlo = 0.5\nhi = 10.0\n",
        file="specs/e.toml",
    )

    def measured(c: Case) -> CaseRecord:  # fails only at depth 15: ratio 0.4 there, 1 elsewhere
        grad = [0.4 if c.depth == 15 else 1.0] + [1.0] * c.depth
        return CaseRecord(
            case=c,
            measurements=make_measurements(
                grad_norm=grad, act_var=[1.0] * (c.depth + 1), act_sq_mean=[1.0] * (c.depth + 1)
            ),
        )

    assert (
        engine._smallest_depth(
            spec,
            "gradient_arrival",
            make_case(depth=15, dtype="float32"),
            measured,
        ).depth
        == 15
    )


def test_mean_shift_is_judged_at_the_specs_bound() -> None:
    from stability.measure.channels import ChannelProfile

    prof = ChannelProfile([1.0, 1.4], [1.0, 1.0], [0.0, 0.0], [2, 2])  # ρ = M/V − 1 = 0.4 at the output
    m = make_measurements(grad_norm=[1.0, 1.0], act_var=[1.0, 1.0], act_sq_mean=[1.0, 1.0], extra={"channels": prof})
    assert INVARIANTS.get("mean_shift").judge(m, SimpleNamespace(max_ratio=0.5)).passed
    assert not INVARIANTS.get("mean_shift").judge(m, SimpleNamespace(max_ratio=0.3)).passed


def test_a_replayed_probe_case_is_worded_as_a_replay_and_a_sum_loss_is_used() -> None:
    spec = _plain(block='activation = "tanh"\n[probe]\nloss = "sum"')
    (r,) = run_spec(spec, RunOptions(), case="depth=2,width=4,batch=2,seed=4").results
    assert (
        r.verdict is not None and r.message == f"specs/e.toml::gradient_arrival: holds at {r.case}: {r.verdict.detail}"
    )
    case = make_case(depth=2, seed=4)
    record = evaluate(spec, case)
    net = build(spec, case)
    want = probe(net.blocks, make_input(spec, case), loss="sum", seed=derive_seed(4, 2), rng_seed=derive_seed(4, 3))
    assert record.measurements is not None and record.measurements.grad_norm == want.grad_norm


def test_a_probe_search_hypothesis_refuses_is_an_error_result(monkeypatch: pytest.MonkeyPatch) -> None:
    from hypothesis import strategies as st

    monkeypatch.setattr(engine, "cases", lambda spec, **_: st.nothing())
    (r,) = run_spec(_plain(), RunOptions(profile="ci")).results
    assert (r.name, r.expect, r.met, r.verdict, r.case, r.examples, r.status) == (
        "gradient_arrival",
        "holds",
        False,
        None,
        None,
        0,
        "error",
    )
    assert r.error and r.message == f"the search failed: {r.error}"
