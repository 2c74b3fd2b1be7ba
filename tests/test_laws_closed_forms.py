"""Every branch of stability/judge/laws.py against its closed form: each weight init's gain, the bias's
second moment, the residual recursions with and without a norm, the scaled skip, the branch scales,
the cases that have no law, and the exact text and numbers `annotate` adds to a failing verdict.
(Written from the mutation check, docs/mutation.md: each test pins a value a plausible slip changes.)"""

from __future__ import annotations

import math

import pytest
from spec_support import make_case, make_spec

from stability import Case
from stability.judge import laws
from stability.judge.invariants import Verdict
from stability.measure.probe import Measurements
from stability.spec.schema import Spec

EXACT = {"rel": 1e-12, "abs": 0.0}


def _spec(family: str, block: str, space: str = "") -> Spec:
    ranges = "depth = [1, 64]\nwidth = [4, 1024]\nbatch = 2\n"
    return make_spec(family, block=block, space=ranges + space, expect="[expect.variance_growth]\n")


def _case(depth: int, width: int, init: str, branch_init: str = "default", input_width: int | None = None) -> Case:
    return make_case(depth=depth, width=width, input_width=input_width, weight_init=init, branch_init=branch_init)


def _both(spec: Spec, case: Case, q0: float = 1.0) -> tuple[laws.Law, laws.Law]:
    v, g = laws.variance_law(spec, case, q0), laws.gradient_law(spec, case, q0)
    assert v is not None and g is not None
    return v, g


@pytest.mark.parametrize(
    ("init", "space", "gain"),
    [
        ("normal", "init_std = 0.05", 40 * 0.05**2),  # fan_in·std² = 0.1
        ("identity", "init_gain = 1.5", 2.25),  # c²
        ("default", "", 1.0 / 3.0),  # kaiming_uniform with a = √5
        ("xavier_normal", "", 1.0),  # 2·fan_in/(fan_in + fan_out) with fan_in = fan_out
        ("xavier_uniform", "", 1.0),
        ("orthogonal", "", 1.0),
        ("kaiming_normal", "", 1.0),  # identity activation: gain 1
        ("kaiming_uniform", "", 1.0),
    ],
)
def test_plain_identity_chain_is_the_gain_to_the_depth(init: str, space: str, gain: float) -> None:
    spec = _spec("plain", 'activation = "identity"', f'weight_init = ["{init}"]\nbias_init = 0.0\n{space}')
    v, g = _both(spec, _case(7, 40, init))
    assert v.predicted == pytest.approx(gain**7, **EXACT)
    assert g.predicted == pytest.approx(gain**3.5, **EXACT)  # √((g·φ)^L)
    assert v.quantity == "E[x_L²]/E[x_0²]" and g.quantity == "g_0/g_L"
    assert v.formula == g.formula == f"(g·φ)^L = ({gain:.4g}·1)^7"
    assert v.source == g.source == "He et al. 2015, eq. 10"


def test_plain_relu_he_keeps_the_second_moment_and_a_bias_adds_a_geometric_sum() -> None:
    he = _spec("plain", 'activation = "relu"', 'weight_init = ["kaiming_normal"]\nbias_init = 0.0')
    v, g = _both(he, _case(9, 16, "kaiming_normal"))
    assert v.predicted == 1.0 and g.predicted == 1.0  # g·φ = 2·½
    assert v.formula == "(g·φ)^L = (2·0.5)^9"
    # q_{l+1} = φ(g q_l + b²) with g = w·std², φ = ½ → q_L = a^L q_0 + φb²(1 − a^L)/(1 − a), a = gφ
    spec = _spec("plain", 'activation = "relu"', 'weight_init = ["normal"]\ninit_std = 0.25\nbias_init = 0.5')
    g_, phi, b2, depth = 40 * 0.0625, 0.5, 0.25, 6
    a = g_ * phi
    v, g = _both(spec, _case(depth, 40, "normal"), q0=2.0)
    assert v.predicted == pytest.approx((a**depth * 2.0 + phi * b2 * (1 - a**depth) / (1 - a)) / 2.0, **EXACT)
    assert g.predicted == pytest.approx(a ** (depth / 2), **EXACT)  # the bias does not enter the gradient


def test_default_bias_adds_one_third_over_fan_in() -> None:
    spec = _spec("plain", 'activation = "identity"', 'weight_init = ["identity"]\nbias_init = "default"')
    v, _ = _both(spec, _case(5, 12, "identity"))
    assert v.predicted == pytest.approx(1 + 5 / (3 * 12), **EXACT)  # q_L = q_0 + L·b², b² = 1/(3·fan_in)


@pytest.mark.parametrize("k", [1, 2])
def test_residual_without_norm_scaled_skip(k: int) -> None:
    """q_{l+1} = λ²q_l + α²·branch(q_l); ReLU branch of k layers with bias second moment b²:
    k = 1: branch = g·φ·q + b²; k = 2: branch = g·φ·(g·φ·q + b²) + b². The squared gradient gains
    λ² + α²(gφ)^k per block."""
    spec = _spec(
        "preact",
        f'activation = "relu"\nskip = "scaled"\nskip_scale = 0.5\nbranch_scale = 0.75\nbranch_layers = {k}',
        'weight_init = ["normal"]\ninit_std = 0.25\nbias_init = 0.5',
    )
    g_, phi, b2, lam2, a2, depth = 24 * 0.0625, 0.5, 0.25, 0.25, 0.5625, 5
    gp = g_ * phi
    per = lam2 + a2 * gp**k  # the factor on q
    add = a2 * (b2 if k == 1 else gp * b2 + b2)  # the constant each block adds
    q = 3.0
    for _ in range(depth):
        q = per * q + add
    v, g = _both(spec, _case(depth, 24, "normal"), q0=3.0)
    assert v.predicted == pytest.approx(q / 3.0, **EXACT)
    assert g.predicted == pytest.approx(per ** (depth / 2), **EXACT)
    assert v.formula == f"(λ² + α²(g·φ)^k)^L with λ² = 0.25, α = 0.75, g·φ = {gp:.4g}, k = {k}, L = 5"
    assert v.source == "He et al. 2016; Balduzzi et al. 2017"


def test_identity_skip_residual_with_branch_scale_depth_rules() -> None:
    for rule, a2 in (("1/sqrt(depth)", 1 / 8), ("1/depth", 1 / 64)):
        spec = _spec(
            "preact",
            f'activation = "identity"\nbranch_scale = "{rule}"\nbranch_layers = 1',
            'weight_init = ["normal"]\ninit_std = 0.5\nbias_init = 0.0',
        )
        v, g = _both(spec, _case(8, 8, "normal"))  # g = 8·0.25 = 2
        assert v.predicted == pytest.approx((1 + 2 * a2) ** 8, **EXACT)
        assert g.predicted == pytest.approx((1 + 2 * a2) ** 4, **EXACT)


@pytest.mark.parametrize("branch_init", ["zero", "rezero", "skipinit"])
def test_zero_branches_keep_everything_exactly(branch_init: str) -> None:
    spec = _spec(
        "preact",
        'activation = "relu"\nbranch_scale = 3.0',
        f'weight_init = ["kaiming_normal"]\nbias_init = 0.5\nbranch_init = ["{branch_init}"]',
    )
    v, g = _both(spec, _case(6, 16, "kaiming_normal", branch_init))
    assert v.predicted == 1.0 and g.predicted == 1.0


def test_normalised_branch_with_bias_and_scaled_skip() -> None:
    """With a norm before each layer the branch's second moment is g·φ + b² whatever q is:
    q_{l+1} = λ²q_l + α²(gφ + b²), and the squared gradient gains λ² + α²gφ/q_l (De & Smith 2020)."""
    spec = _spec(
        "preact",
        'activation = "relu"\nnorm = "layer"\nskip = "scaled"\nskip_scale = 0.8\nbranch_scale = 0.5',
        'weight_init = ["kaiming_normal"]\nbias_init = 0.5',
    )
    lam2, a2, c, depth, q0 = 0.64, 0.25, 1.0 + 0.25, 7, 2.0
    qs = [lam2**j * q0 + a2 * c * (1 - lam2**j) / (1 - lam2) for j in range(depth + 1)]  # closed form of the recursion
    v, g = _both(spec, _case(depth, 16, "kaiming_normal"), q0=q0)
    assert v.predicted == pytest.approx(qs[-1] / q0, **EXACT)
    assert g.predicted == pytest.approx(math.sqrt(math.prod(lam2 + a2 * 1.0 / q for q in qs[:-1])), **EXACT)
    assert v.formula == "q_L = λ²q + α²(g·φ + b²) per block from q_0 = 2: λ² = 0.64, α = 0.5, g·φ = 1, L = 7"
    assert v.source == "De & Smith 2020; Brock et al. 2021"


def test_no_law_outside_the_scale_free_linear_cases() -> None:
    relu = 'weight_init = ["kaiming_normal"]\nbias_init = 0.0'
    none = [
        (
            _spec("plain", 'activation = "relu"\nnorm = "layer"', relu),
            _case(4, 8, "kaiming_normal"),
        ),  # a norm in a plain stack
        (_spec("preact", 'activation = "relu"\nnorm = "group"', relu), _case(4, 8, "kaiming_normal")),
        (_spec("preact", 'activation = "relu"\nskip = "projection"', relu), _case(4, 8, "kaiming_normal")),
        (_spec("highway", 'activation = "relu"', relu), _case(4, 8, "kaiming_normal")),
        (_spec("plain", 'activation = "gelu"', relu), _case(4, 8, "kaiming_normal")),
        (
            _spec("plain", 'activation = "relu"', relu + "\ninput_width = [4, 16]"),
            _case(4, 8, "kaiming_normal", input_width=16),
        ),
    ]
    for spec, case in none:
        assert laws.variance_law(spec, case, 1.0) is None, spec.block
        assert laws.gradient_law(spec, case, 1.0) is None, spec.block
    plain = _spec("plain", 'activation = "relu"', relu + "\ninput_width = [4, 16]")
    assert (
        laws.variance_law(plain, _case(4, 8, "kaiming_normal", input_width=8), 1.0) is not None
    )  # input width = width
    assert laws.variance_law(plain, _case(4, 8, "kaiming_normal"), 0.0) is None  # no second moment to scale
    assert laws.variance_law(plain, _case(4, 8, "kaiming_normal"), -1.0) is None


def test_meanfield_hook_gets_the_spec_and_case_and_a_non_positive_chi_is_no_law(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tanh = _spec("plain", 'activation = "tanh"', "bias_init = 0.0")
    case = _case(6, 16, "xavier_normal")
    seen: list[tuple[Spec, Case]] = []

    def hook(spec: Spec, c: Case) -> float | None:
        seen.append((spec, c))
        return 0.64

    monkeypatch.setattr(laws, "MEANFIELD_HOOK", hook)
    law = laws.gradient_law(tanh, case, 1.0)
    assert seen == [(tanh, case)]
    assert law == laws.Law("g_0/g_L", pytest.approx(0.8**6, **EXACT), "χ₁^(L/2) = 0.64^(6/2)", "Schoenholz et al. 2017")  # type: ignore[arg-type]
    for chi in (0.0, -0.5, None):
        monkeypatch.setattr(laws, "MEANFIELD_HOOK", lambda spec, c, chi=chi: chi)
        assert laws.gradient_law(tanh, case, 1.0) is None


def _m(act_sq_mean: list[float], grad_norm: list[float], nonfinite_at: int | None = None) -> Measurements:
    return Measurements(
        grad_norm=grad_norm,
        act_var=act_sq_mean,
        act_sq_mean=act_sq_mean,
        param_grad_norm={},
        identity_error=None,
        input_grad_error=None,
        nonfinite_at=nonfinite_at,
    )


def _failing(name: str) -> Verdict:
    return Verdict(invariant=name, passed=False, observed=0.0, bound="b", block=None, detail="d", extra={"k": 1})


HE_RESIDUAL = (
    'activation = "relu"\nbranch_scale = 1.0\nbranch_layers = 2',
    'weight_init = ["kaiming_normal"]\nbias_init = 0.0',
)


def test_annotate_appends_the_law_and_the_ratio_to_a_failing_verdict() -> None:
    spec = _spec("preact", *HE_RESIDUAL)
    case = _case(3, 8, "kaiming_normal")  # (1 + 1)^3 = 8 for both the second moment and the squared gradient
    out = laws.annotate(spec, case, _failing("variance_growth"), _m([2.0, 5.0, 9.0, 4.0], [1.0, 1.0, 1.0, 1.0]))
    formula = "(λ² + α²(g·φ)^k)^L with λ² = 1, α = 1, g·φ = 1, k = 2, L = 3"
    source = "He et al. 2016; Balduzzi et al. 2017"
    assert (
        out.detail == f"d; the law predicts E[x_L²]/E[x_0²] = 8 [{formula}; {source}], measured 2 (0.25× the law)"
    )  # measured 4/2: the last boundary over the first
    assert out.extra == {
        "k": 1,
        "law": {"quantity": "E[x_L²]/E[x_0²]", "predicted": 8.0, "measured": 2.0, "formula": formula, "source": source},
    }
    assert (out.invariant, out.passed, out.observed, out.bound, out.block) == ("variance_growth", False, 0.0, "b", None)
    out = laws.annotate(spec, case, _failing("gradient_arrival"), _m([2.0, 5.0, 9.0, 4.0], [6.0, 1.0, 1.0, 2.0]))
    assert out.detail == f"d; the law predicts g_0/g_L = 2.828 [{formula}; {source}], measured 3 (1.06× the law)"
    assert out.extra["law"]["measured"] == 3.0 and out.extra["law"]["predicted"] == pytest.approx(
        math.sqrt(8.0), **EXACT
    )


def test_annotate_leaves_other_verdicts_alone() -> None:
    spec = _spec("preact", *HE_RESIDUAL)
    case = _case(3, 8, "kaiming_normal")
    good = _m([2.0, 5.0, 9.0, 4.0], [6.0, 1.0, 1.0, 2.0])
    passing = Verdict(invariant="variance_growth", passed=True, observed=0.0, bound="b", block=None, detail="d")
    assert laws.annotate(spec, case, passing, good) is passing
    for verdict, m in [
        (_failing("variance_growth"), None),
        (_failing("variance_growth"), _m([2.0, 5.0, 9.0, 4.0], [6.0, 1.0, 1.0, 2.0], nonfinite_at=2)),
        (_failing("variance_growth"), _m([0.0, 5.0, 9.0, 4.0], [6.0, 1.0, 1.0, 2.0])),  # q_0 = 0: no ratio
        (_failing("variance_growth"), _m([2.0, 5.0, 9.0, math.inf], [6.0, 1.0, 1.0, 2.0])),
        (_failing("gradient_arrival"), _m([2.0, 5.0, 9.0, 4.0], [6.0, 1.0, 1.0, 0.0])),  # no gradient at the top: nan
        (_failing("identity_at_init"), good),
    ]:
        assert laws.annotate(spec, case, verdict, m) is verdict
    tanh = _spec("plain", 'activation = "tanh"', "bias_init = 0.0")
    v = _failing("variance_growth")
    assert laws.annotate(tanh, case, v, good) is v  # no law for tanh


def test_annotate_with_a_zero_prediction_says_infinitely_off() -> None:
    spec = _spec("plain", 'activation = "identity"', 'weight_init = ["identity"]\ninit_gain = 0.0\nbias_init = 0.0')
    out = laws.annotate(
        spec, _case(2, 8, "identity"), _failing("variance_growth"), _m([1.0, 0.0, 0.5], [1.0, 1.0, 1.0])
    )
    assert out.detail.endswith("measured 0.5 (inf× the law)") and out.extra["law"]["predicted"] == 0.0


def test_a_normalised_stack_whose_skip_and_branch_both_vanish_has_no_law() -> None:
    """skip_scale = 0 and branch_scale = 0 (a spec the fuzzer drew): q_1 = 0, and λ² + α²gφ/q_1
    would divide by zero; the law does not apply rather than crash the verdict."""
    spec = _spec(
        "preact",
        'activation = "relu"\nnorm = "batch"\nskip = "scaled"\nskip_scale = 0.0\nbranch_scale = 0.0\nbranch_layers = 1',
        'weight_init = ["default"]\nbias_init = "default"',
    )
    assert laws.variance_law(spec, _case(2, 4, "default"), 1.0) is None
    assert laws.gradient_law(spec, _case(2, 4, "default"), 1.0) is None
    v, _ = _both(spec, _case(1, 4, "default"))  # one block: q_0 > 0, the law still applies
    assert v.predicted == 0.0
