"""Effect sizes (stability/judge/laws.py): the laws' closed forms, their agreement with measured
ensembles, and failing verdicts that print the prediction next to the measurement."""

from __future__ import annotations

import math

import numpy as np
import pytest
from approx_support import approx
from spec_support import SPECS, make_case, make_spec

from stability import Case, load_spec
from stability.families.build import build, derive_seed, make_input
from stability.judge import laws
from stability.measure.ensemble import ensemble_seeds
from stability.measure.probe import probe
from stability.run.engine import evaluate, judge, run_spec
from stability.spec.schema import Spec


def _spec(family: str, block: str, space: str = "", expect: str = "[expect.variance_growth]\n") -> Spec:
    return make_spec(
        family, block=block, space=f"depth = [1, 64]\nwidth = [8, 1024]\nbatch = [2, 64]\n{space}", expect=expect
    )


def _case(depth: int, width: int, batch: int, init: str, seed: int = 0) -> Case:
    return make_case(depth=depth, width=width, batch=batch, weight_init=init, seed=seed)


def test_he_residual_doubles_exactly() -> None:
    spec = load_spec(SPECS / "control_unnormalised_residual.toml")
    for depth in (1, 7, 30):
        law = laws.variance_law(spec, _case(depth, 16, 4, "kaiming_normal"), 1.0)
        assert law is not None and law.predicted == 2.0**depth  # (1 + α²(gφ)²)^L, α = 1, gφ = 1: exact in floats


def test_normalised_branch_is_one_plus_l_alpha_squared_and_the_gradient_telescopes() -> None:
    spec = _spec("preact", 'activation = "relu"\nnorm = "layer"\nbranch_scale = 0.5', "bias_init = 0.0")
    case = _case(16, 64, 8, "kaiming_normal")
    v, g = laws.variance_law(spec, case, 1.0), laws.gradient_law(spec, case, 1.0)
    assert v is not None and g is not None
    assert v.predicted == pytest.approx(1 + 16 * 0.25, rel=1e-14, abs=0.0)  # 1 + Lα²
    assert g.predicted**2 == approx(v.predicted, rel=1e-12)  # Π(1 + α²/q_l) = q_L/q_0


def test_plain_chain_is_a_power_of_the_gain() -> None:
    spec = _spec("plain", 'activation = "identity"', 'weight_init = "normal"\ninit_std = 0.05\nbias_init = 0.0')
    case = _case(10, 360, 8, "normal")
    law = laws.variance_law(spec, case, 1.0)
    assert law is not None and law.predicted == pytest.approx((360 * 0.05**2) ** 10, rel=1e-12, abs=0.0)  # 0.9^10


def test_no_law_where_the_spec_does_not_fix_one() -> None:
    tanh = _spec("plain", 'activation = "tanh"', "bias_init = 0.0")
    assert laws.variance_law(tanh, _case(8, 16, 4, "kaiming_normal"), 1.0) is None
    conv = load_spec(SPECS / "preact_conv.toml")
    assert (
        laws.variance_law(
            conv,
            make_case(depth=8, width=8, batch=4, spatial=4, weight_init="kaiming_normal", dtype="float32"),
            1.0,
        )
        is None
    )


def test_meanfield_hook_supplies_chi(monkeypatch: pytest.MonkeyPatch) -> None:
    tanh = _spec("plain", 'activation = "tanh"', "bias_init = 0.0")
    assert laws.gradient_law(tanh, _case(8, 16, 4, "xavier_normal"), 1.0) is None
    monkeypatch.setattr(laws, "MEANFIELD_HOOK", lambda spec, case: 0.81)
    law = laws.gradient_law(tanh, _case(8, 16, 4, "xavier_normal"), 1.0)
    assert law is not None and law.predicted == pytest.approx(0.9**8, rel=1e-12, abs=0.0)  # χ₁^(L/2)


def _ensemble_mean_ratios(spec: Spec, case: Case, seeds: int) -> tuple[float, float]:
    """Arithmetic means over seeds of q_L/q_0 and of (g_0/g_L)²: the laws are expectations."""
    q, g2 = [], []
    for s in ensemble_seeds(case.seed, seeds):
        c = make_case(
            depth=case.depth, width=case.width, batch=case.batch, weight_init=case.weight_init, dtype=case.dtype, seed=s
        )
        m = probe(build(spec, c).blocks, make_input(spec, c), seed=derive_seed(s, 2))
        q.append(m.act_sq_mean[-1] / m.act_sq_mean[0])
        g2.append(m.gradient_ratio**2)
    return float(np.mean(q)), float(np.mean(g2))


def test_measured_ensembles_agree_with_the_laws() -> None:
    """Each law is an expectation over the weights. At width n each linear layer scatters ‖Wx‖²/‖x‖²
    by a relative standard deviation √(2/n) (a χ²_n/n variable), so over L layers one seed's ratio
    scatters by about √(2L/n) and the mean of S seeds by √(2L/(nS)); the tolerances below are four
    of those."""
    plain = _spec("plain", 'activation = "identity"', 'weight_init = "normal"\ninit_std = 0.05\nbias_init = 0.0')
    case = _case(10, 360, 8, "normal")
    q, g2 = _ensemble_mean_ratios(plain, case, 8)
    tol = 4 * math.sqrt(2 * 10 / (360 * 8))  # 0.33
    assert q == approx(0.9**10, rel=tol)
    assert g2 == approx(0.9**10, rel=tol)
    preact = _spec("preact", 'activation = "relu"\nnorm = "layer"\nbranch_scale = 0.5', "bias_init = 0.0")
    case = _case(16, 256, 8, "kaiming_normal")
    q, g2 = _ensemble_mean_ratios(preact, case, 8)
    tol = 4 * math.sqrt(2 * 2 / (256 * 8))  # each block's branch: two layers, added to a growing sum
    assert q == approx(5.0, rel=tol)
    assert g2 == approx(5.0, rel=2 * tol)  # the norm's Jacobian adds its own spread


def test_failing_verdict_prints_the_law_next_to_the_measurement() -> None:
    spec = load_spec(SPECS / "control_unnormalised_residual.toml")
    case = make_case(depth=12, width=16, batch=8, weight_init="kaiming_normal", dtype="float32", seed=3)
    v = judge(spec, "variance_growth", evaluate(spec, case))
    assert not v.passed
    law = v.extra["law"]
    assert law["predicted"] == 2.0**12
    assert law["measured"] == approx(
        evaluate(spec, case).measurements.act_sq_mean[-1] / evaluate(spec, case).measurements.act_sq_mean[0], rel=1e-12
    )  # type: ignore[union-attr]
    assert "the law predicts E[x_L²]/E[x_0²] = 4096" in v.detail


def test_passing_verdict_is_left_alone() -> None:
    spec = load_spec(SPECS / "preact_mlp.toml")
    result = run_spec(
        spec,
        case="depth=4,width=16,batch=4,init=kaiming_normal,branch_init=default,dtype=float64,seed=0",
        only="variance_growth",
    )
    (r,) = result.results
    assert r.verdict is not None and r.verdict.passed and "law" not in r.verdict.extra
