"""The engine's small decisions, one at a time (stability/run/engine.py): how close a passing verdict
came to its bound (which case is reported), what the search steers towards in `thorough`, the
exact messages, and a replayed case that could not be measured; and, on a real search of a stack whose
numbers are powers of 1/2, the shrunk failing case, the passing case closest to its bound, and no
expectation met where every case errored. Written from the mutation check (docs/mutation.md) and
issue 12's review: each assertion pins a value a plausible slip changes."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from spec_support import make_case, make_measurements

from stability import load_spec, parse_spec
from stability.judge.invariants import Verdict
from stability.run import conclude, engine
from stability.run.engine import CaseRecord, RunOptions, run_spec
from stability.spec.case import Case
from stability.spec.registry import INVARIANTS

SPEC = parse_spec(
    'name = "e"\ndescription = "d"\nfamily = "plain"\n[space]\ndepth = [1, 8]\nwidth = 4\nbatch = '
    "2\n[expect.gradient_arrival]\nlo = 0.1\nhi = 10.0\n[expect.variance_growth]\n",
    file="specs/e.toml",
)
CASE = make_case(dtype="float32")


def _severity(name: str, v: Verdict, expectation: Any) -> float:
    return INVARIANTS.get(name).severity_of(v, expectation)


def _v(observed: float, **extra: Any) -> Verdict:
    return Verdict(
        invariant="x", passed=True, observed=observed, bound="b", block=None, detail="the detail", extra=dict(extra)
    )


def test_severity_of_a_gradient_ratio_is_its_log_distance_to_the_nearer_bound() -> None:
    arrival = SimpleNamespace(lo=0.1, hi=10.0)
    assert _severity("gradient_arrival", _v(1.0), arrival) == pytest.approx(-math.log(10.0), rel=1e-15, abs=0)
    assert _severity("gradient_arrival", _v(0.2), arrival) == pytest.approx(
        -math.log(2.0), rel=1e-15, abs=0
    )  # nearer lo
    assert _severity("gradient_arrival", _v(5.0), arrival) == pytest.approx(
        -math.log(2.0), rel=1e-15, abs=0
    )  # nearer hi
    assert _severity("gradient_arrival", _v(0.0), arrival) == math.inf
    assert _severity("gradient_arrival", _v(math.nan), arrival) == math.inf


def test_severity_of_the_other_invariants() -> None:
    none = SimpleNamespace()
    assert _severity("attention_entropy", _v(2.5), none) == -2.5  # lower entropy is closer to collapse
    assert _severity("attention_entropy", _v(math.nan), none) == math.inf
    assert _severity("mean_field", _v(0.5, predicted=2.0), none) == pytest.approx(math.log(4.0), rel=1e-15, abs=0)
    assert _severity("mean_field", _v(2.0, predicted=0.5), none) == pytest.approx(math.log(4.0), rel=1e-15, abs=0)
    assert _severity("mean_field", _v(0.5), none) == 0.5  # no prediction: the observed value
    assert _severity("mean_field", _v(0.5, predicted=0.0), none) == 0.5
    assert _severity("mean_field", _v(0.0, predicted=2.0), none) == 0.0
    for name in ("variance_growth", "identity_at_init", "lesion", "mean_shift", "jacobian_spectrum"):
        assert _severity(name, _v(3.0), none) == 3.0
        assert _severity(name, _v(math.inf), none) == math.inf
        assert _severity(name, _v(math.nan), none) == math.inf


@pytest.mark.parametrize(
    ("name", "verdict", "targets"),
    [
        ("gradient_arrival", _v(100.0), [(-2.0, "vanishing gradient (log10)"), (2.0, "exploding gradient (log10)")]),
        ("variance_growth", _v(1000.0), [(3.0, "variance growth (log10 ratio)")]),
        ("attention_entropy", _v(0.5), [(-0.5, "attention_entropy")]),
        ("rank_collapse", _v(0.5), [(0.5, "rank_collapse")]),
        ("jacobian_spectrum", _v(0.01), [(-2.0, "Jacobian spread (log10)")]),
        ("lesion", _v(0.25), [(0.25, "lesion change")]),
        ("mean_field", _v(0.5, predicted=2.0), [(math.log(4.0), "mean-field mismatch (log)")]),
        ("mean_shift", _v(0.75), [(0.75, "mean shift (squared channel mean / channel variance)")]),
        ("identity_at_init", _v(1e-3), [(1e-3, "identity error")]),
        (
            "identity_at_init",
            _v(0.5, predicted=2.0),
            [(0.5, "identity error")],
        ),  # a prediction alone is not the mean-field score
        ("mean_field", _v(0.5), []),  # no prediction: nothing to steer by
        ("mean_field", _v(0.5, predicted=0.0), []),
        (
            "mean_field",
            _v(2.0, predicted=0.5),
            [(math.log(4.0), "mean-field mismatch (log)")],
        ),  # a prediction below 1 counts
        ("variance_growth", _v(0.0), []),
        ("variance_growth", _v(-1.0), []),
        ("variance_growth", _v(math.inf), []),
    ],
)
def test_thorough_search_steers_by_the_right_score(
    monkeypatch: pytest.MonkeyPatch, name: str, verdict: Verdict, targets: list[tuple[float, str]]
) -> None:
    got: list[tuple[float, str]] = []
    monkeypatch.setattr(engine, "target", lambda value, *, label: got.append((value, label)))
    engine._target(name, verdict)
    assert [label for _, label in got] == [label for _, label in targets]
    for (value, _), (want, _) in zip(got, targets, strict=True):
        assert value == pytest.approx(want, rel=1e-12, abs=0)


def test_messages_say_what_was_expected_where_and_at_which_case() -> None:
    v = _v(1.0)
    w = "specs/e.toml::gradient_arrival"
    msg = conclude.message
    assert (
        msg(SPEC, "gradient_arrival", "holds", True, v, CASE, False, 12)
        == f"{w}: holds on 12 cases; closest to its bound: the detail at {CASE}"
    )
    assert msg(SPEC, "gradient_arrival", "holds", True, v, CASE, True) == f"{w}: holds at {CASE}: the detail"
    assert (
        msg(SPEC, "gradient_arrival", "holds", False, v, CASE, False)
        == f"{w}: expected to hold, but it fails at smallest failing case {CASE}: the detail"
    )
    assert (
        msg(SPEC, "gradient_arrival", "holds", False, v, CASE, True)
        == f"{w}: expected to hold, but it fails at {CASE}: the detail"
    )
    assert (
        msg(SPEC, "gradient_arrival", "violated", True, v, CASE, False)
        == f"{w}: violated as expected at smallest violating case {CASE}: the detail"
    )
    assert (
        msg(SPEC, "gradient_arrival", "violated", True, v, CASE, True)
        == f"{w}: violated as expected at {CASE}: the detail"
    )
    assert (
        msg(SPEC, "gradient_arrival", "violated", False, v, CASE, True)
        == f"{w}: expected to be violated, but it holds at {CASE}: the detail"
    )
    assert (
        msg(SPEC, "gradient_arrival", "violated", False, v, CASE, False, 7)
        == f"{w}: expected to be violated, but no case among 7 broke it; closest: the detail at {CASE}"
    )


def test_a_replayed_case_that_cannot_be_measured_fails_and_keeps_its_error() -> None:
    expectation = SimpleNamespace(expect="violated", lo=0.1, hi=10.0)
    calls: list[Case] = []

    def measured(c: Case) -> CaseRecord:
        calls.append(c)
        return CaseRecord(case=c, measurements=None, error="the case does not run: ValueError: no")

    r = engine._replay(SPEC, "gradient_arrival", expectation, CASE, measured)
    assert calls == [CASE]
    assert r.met is False and r.error == "the case does not run: ValueError: no" and r.status == "error"
    assert r.message == f"specs/e.toml::gradient_arrival: the case could not be measured at {CASE}"
    assert (r.name, r.expect, r.case, r.examples) == ("gradient_arrival", "violated", CASE, 1)
    assert r.reproduce is not None and str(CASE) in r.reproduce
    assert (
        r.verdict is not None
        and not r.verdict.passed
        and r.verdict.detail == "case not measured: the case does not run: ValueError: no"
    )
    assert (
        conclude._unmeasured(SPEC, "gradient_arrival", CASE, CaseRecord(case=CASE, measurements=None, error=None))
        is None
    )


def _halving(c: Case) -> CaseRecord:
    """Gradient ratio 0.5^depth: below lo = 0.05 from depth 5 on."""
    grad = [0.5 ** (c.depth - i) for i in range(c.depth + 1)]
    return CaseRecord(
        case=c,
        measurements=make_measurements(
            grad_norm=grad, act_var=[1.0] * (c.depth + 1), act_sq_mean=[1.0] * (c.depth + 1)
        ),
    )


@pytest.mark.parametrize(
    ("depth", "start", "smallest"),
    [("{ range = [2, 16], multiple_of = 3 }", 15, 6), ("{ values = [2, 4, 9, 12] }", 12, 9), ("[1, 16]", 16, 5)],
)
def test_the_depth_bisection_stays_inside_the_space(depth: str, start: int, smallest: int) -> None:
    spec = parse_spec(
        f'name = "e"\ndescription = "d"\nfamily = "plain"\n[space]\ndepth = {depth}\nwidth = 4\nbatch = '
        "2\n[expect.gradient_arrival]\nlo = 0.05\nhi = 10.0\n",
        file="specs/e.toml",
    )
    probed: list[int] = []

    def measured(c: Case) -> CaseRecord:
        probed.append(c.depth)
        return _halving(c)

    found = engine._smallest_depth(
        spec,
        "gradient_arrival",
        make_case(depth=start, dtype="float32"),
        measured,
    )
    assert found.depth == smallest and found.width == 4
    assert all(spec.space.depth.admits(d) for d in probed)  # type: ignore[union-attr]


# ----------------------------------------------------------------------------- which case a real search reports


HALVING = '''
import torch
from torch import nn


def halving(depth, width):
    """x ↦ x/2 per block: gradient ratio exactly 2^-depth, activation variance 4^-depth."""
    layers = [nn.Linear(width, width, bias=False) for _ in range(depth)]
    for layer in layers:
        with torch.no_grad():
            layer.weight.copy_(0.5 * torch.eye(width))
    return nn.Sequential(*layers)
'''


def _halving_spec(tmp_path: Path, expect: str) -> Path:
    (tmp_path / "halving_blocks.py").write_text(HALVING, encoding="utf-8")
    path = tmp_path / "halving.toml"
    path.write_text(
        textwrap.dedent("""\
        name = "halving"
        description = "x/2 per block"
        family = "custom"
        [block]
        factory = "halving_blocks:halving"
        [space]
        depth = [1, 30]
        width = 4
        batch = 2
        """)
        + expect,
        encoding="utf-8",
    )
    return path


def test_reports_the_shrunk_case_not_the_first_failing(tmp_path: Path) -> None:
    """0.5^L < 0.05 from L = 5 on: whatever depth the search first fails at, the report is depth 5."""
    spec = load_spec(_halving_spec(tmp_path, "[expect.gradient_arrival]\nlo = 0.05\nhi = 10.0\n"))
    (r,) = run_spec(spec, RunOptions(profile="ci")).results
    assert not r.met and r.case is not None
    assert r.case.depth == 5
    assert r.verdict is not None and r.verdict.observed == 0.5**5


def test_reports_the_passing_case_closest_to_the_bound(tmp_path: Path) -> None:
    """lo = 1e-12, hi = 1e12: every depth passes, and the deepest (0.5^L smallest) is nearest a bound
    in log distance, whichever depths the search drew."""
    spec = load_spec(_halving_spec(tmp_path, "[expect.gradient_arrival]\nlo = 1e-12\nhi = 1e12\n"))
    result = run_spec(spec, RunOptions(profile="ci"))
    (r,) = result.results
    deepest = max(c.depth for c in result.cases)
    assert r.met and r.case is not None and r.case.depth == deepest  # the smallest ratio, nearest lo
    assert r.verdict is not None and r.verdict.observed == 0.5**deepest


@pytest.mark.parametrize("expect", ["holds", "violated"])
def test_an_expectation_is_never_met_when_every_case_errored(tmp_path: Path, expect: str) -> None:
    """A 1-byte memory budget refuses every case: nothing was measured, so neither "holds" nor
    "violated" can be met (a violation found only as errors is no violation)."""
    spec = load_spec(_halving_spec(tmp_path, f'[expect.gradient_arrival]\nexpect = "{expect}"\nlo = 0.05\nhi = 10.0\n'))
    (r,) = run_spec(spec, RunOptions(profile="ci", memory_budget=1)).results
    assert not r.met
    assert r.error
