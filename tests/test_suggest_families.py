"""A held-out set for `stability suggest` (stability/run/suggest.py): for each of the seven built-in
families of stability/families/catalog.py, a failing spec written as a user would write it (the
family's usual block, a usual init, a one-decade or factor-two bound), and the fix suggest proves
for it over the spec's whole case set; the custom family gets none, and is told why. The default
tests use small depths; the slow one runs broader variants of every family through the command.

The plain family's spec is the one the literature's composition is for: a tanh stack at
σ_w² = 0.7 whose gradient must stay within a decade over depths 1-64. The critical init alone and
the route around alone both fail it; the route around with its branches at zero holds (He et al.
2016; De & Smith 2020; Bachlechner et al. 2020).
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import pytest

from stability.cli import main
from stability.judge.remedies import carry_gate_bias
from stability.run.engine import RunOptions, run_spec
from stability.run.executor import InProcessExecutor
from stability.run.suggest import suggest
from stability.run.suggestions import Suggestions
from stability.spec.case import parse_case_string
from stability.spec.load import load_spec

# σ_w² = init_std² · width = 0.2092² · 16 = 0.700.
TANH = """# a plain tanh stack below the edge of chaos
name = "tanh-stack"
description = "plain tanh MLP, N(0, 0.7/width) weights"
family = "plain"

[block]
activation = "tanh"

[space]
depth = [1, 64]
width = 16
weight_init = ["normal"]
init_std = 0.2092   # sigma_w^2 = init_std^2 * width = 0.7
bias_init = 0.0

[expect.gradient_arrival]
lo = 0.1
hi = 10.0
"""

POSTNORM = """# a ResNet MLP in the original ordering: batch norm and ReLU after the addition
name = "resnet-mlp"
description = "post-norm residual MLP, batch norm, He init"
family = "postnorm"

[block]
activation = "relu"
norm = "batch"

[space]
depth = [2, 12]
width = [8, 16]
weight_init = ["kaiming_normal"]

[expect.gradient_arrival]
lo = 0.1
hi = 10.0
"""

PREACT = """# a pre-activation residual MLP without normalisation
name = "preact-mlp"
description = "pre-activation residual MLP, no norm, He init"
family = "preact"

[block]
activation = "relu"

[space]
depth = [2, 10]
width = [8, 16]
weight_init = ["kaiming_normal"]

[expect.gradient_arrival]
lo = 0.1
hi = 10.0
"""

HIGHWAY = """# a highway MLP with the usual gate bias
name = "highway-mlp"
description = "highway MLP, ReLU transform, He init, gate bias -2"
family = "highway"

[block]
activation = "relu"

[space]
depth = [2, 32]
width = [8, 16]
weight_init = ["kaiming_normal"]

[expect.gradient_arrival]
lo = 0.1
hi = 10.0
"""

DENSE = """# a DenseNet-style MLP: growth 8, halved every 4 layers
name = "dense-mlp"
description = "dense MLP with transitions, PyTorch's default init"
family = "dense"

[block]
activation = "relu"
growth = 8
transition_every = 4
compression = 0.5

[space]
depth = [2, 16]
width = [8, 16]

[expect.gradient_arrival]
lo = 0.1
hi = 10.0
"""

TRANSFORMER = """# the original transformer encoder: layer norm after each addition
name = "postln-encoder"
description = "post-LN transformer encoder (Vaswani et al. 2017)"
family = "transformer"

[block]
layer = "tokens"
norm = "layer"
norm_position = "post"
heads = 2

[space]
depth = [2, 12]
width = 16
tokens = 4
batch = 2
weight_init = ["xavier_normal"]

[expect.gradient_balance]   # no block's parameters get more than twice another's gradient
max_spread = 2.0
"""

FACTORY = '''"""My tanh MLP."""

from torch import nn


def make_blocks(depth: int, width: int) -> nn.Sequential:
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth)])
'''

CUSTOM = """# my own tanh MLP, built by my factory
name = "my-tanh"
description = "a tanh MLP from a factory, PyTorch's default init"
family = "custom"

[block]
factory = "my_tanh:make_blocks"

[space]
depth = [2, 24]
width = [8, 16]

[expect.gradient_arrival]
lo = 0.1
hi = 10.0
"""


def _suggest(tmp_path: Path, text: str) -> Suggestions:
    path = tmp_path / "spec.toml"
    path.write_text(text, encoding="utf-8")
    return suggest(str(path), options=RunOptions(profile="ci"), executor=InProcessExecutor())


def _proven(s: Suggestions, invariant: str) -> None:
    """One expectation failed, and the best remedy holds over the whole case set with its numbers."""
    assert [r.name for r in s.failing] == [invariant] and not s.failing[0].met
    best = s.best
    assert best is not None and best.held and best.margin, [(a.remedy, a.status, a.detail) for a in s.attempts]
    (n,) = best.numbers
    assert n.before == s.failing[0].verdict.observed  # type: ignore[union-attr]
    assert n.after is not None and n.closest is not None and n.examples >= 1


def _arrives(n: object, lo: float = 0.1, hi: float = 10.0) -> bool:
    return all(lo <= x <= hi for x in (n.after, n.closest))  # type: ignore[attr-defined]


def test_plain_tanh_below_the_edge_of_chaos_gets_the_route_around_with_zero_branches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the command, as a user runs it: exit 0, the winning remedy, the numbers before and
    after, the fixed spec written and passing `stability check`. Each block of the winner is the
    identity at initialisation, so the gradient arrives exactly unchanged: ratio 1 at every case."""
    spec, fixed, report = tmp_path / "tanh.toml", tmp_path / "tanh_fixed.toml", tmp_path / "s.json"
    spec.write_text(TANH, encoding="utf-8")
    argv = ["suggest", str(spec), "--in-process", "--no-diff", "--out", str(fixed), "--json", str(report)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert (
        '1. residual_route+zero_branch: family = "preact", block.branch_layers = 1, space.branch_init = ["zero"]' in out
    )
    data = json.loads(report.read_text(encoding="utf-8"))
    attempts = {a["remedy"]: a for a in data["attempts"]}
    assert data["ranked"][:3] == ["residual_route+zero_branch", "residual_route+rezero", "residual_route+skipinit"]
    winner = attempts["residual_route+zero_branch"]["numbers"][0]
    assert winner["before"] < 0.1  # the failing case: the gradient vanishes
    assert winner["after"] == 1.0 and winner["closest"] == 1.0  # the identity, forwards and backwards
    # Neither half alone: the critical init still loses more than a decade at depth, the route
    # around with full-size branches gains more than one.
    assert attempts["critical_init"]["status"] == "fails" and attempts["critical_init"]["numbers"][0]["closest"] < 0.1
    assert attempts["residual_route"]["status"] == "fails" and attempts["residual_route"]["numbers"][0]["closest"] > 10
    assert f"{winner['before']:.3g} → 1 at the failing case, closest 1 over" in out
    written = tomllib.loads(fixed.read_text(encoding="utf-8"))
    assert written["family"] == "preact" and written["space"]["branch_init"] == ["zero"]
    assert written["expect"] == tomllib.loads(TANH)["expect"]
    capsys.readouterr()
    assert main(["check", str(fixed), "--profile", "ci", "--in-process", "-q"]) == 0


def test_postnorm_gets_the_norm_off_the_route_with_its_branches_at_zero(tmp_path: Path) -> None:
    """With batch norm and ReLU on the route around, zero branches alone still leave
    x → relu(BN(x)) per block; moving the norm into the branch (pre-activation) alone leaves
    full-size branches; together every block is the identity."""
    s = _suggest(tmp_path, POSTNORM)
    _proven(s, "gradient_arrival")
    assert [a.remedy for a in s.ranked][0] == "prenorm+zero_branch"
    tried = {a.remedy: a for a in s.attempts}
    assert not tried["zero_branch"].held and not tried["prenorm"].held
    (n,) = tried["prenorm+zero_branch"].numbers
    assert n.after == 1.0 and n.closest == 1.0


def test_preact_gets_its_branches_at_zero_ranked_by_changes_then_margin(tmp_path: Path) -> None:
    """Every branch remedy holds. Ranked: the one-key remedies first (zero, ReZero and SkipInit
    make the identity, ratio 1, and tie, so they keep the order tried; the 1/√depth branch scale
    keeps the ratio near 1 but not at it, so it follows), then Fixup, whose two keys put it last
    although its margin equals the identity's."""
    s = _suggest(tmp_path, PREACT)
    _proven(s, "gradient_arrival")
    assert [a.remedy for a in s.ranked] == ["zero_branch", "rezero", "skipinit", "shrink_branch", "fixup"]
    margins = {a.remedy: a.margin for a in s.ranked}
    assert margins["zero_branch"] == margins["fixup"] < margins["shrink_branch"]
    for a in s.ranked:
        assert _arrives(a.numbers[0]), a.remedy


def test_highway_gets_its_carry_gate_opened_by_depth(tmp_path: Path) -> None:
    """The gradient of a highway stack rides the carry (1 - σ(b_T)) per block: 0.88 at the
    default b_T = -2, below a tenth from depth 19. carry_gate sets b_T = -ln(L - 1) for the
    deepest L drawn."""
    s = _suggest(tmp_path, HIGHWAY)
    _proven(s, "gradient_arrival")
    best = s.best
    assert best is not None and best.remedy == "carry_gate" and best.changed() == "block.gate_bias = -3.43"
    assert _arrives(best.numbers[0])


@pytest.mark.parametrize("depth", [3, 19, 32])
def test_the_carry_gate_is_measured_as_its_closed_form(tmp_path: Path, depth: int) -> None:
    """With its transform and gate weights at zero a highway block is x → (1 - σ(b_T))·x, so the
    gradient ratio over L blocks is (1 - σ(b_T))^L exactly: at the default b_T = -2 and at the
    carry gate's b_T = -ln(L - 1), where it is (1 - 1/L)^L up to the bias's three digits."""
    for bias in (-2.0, carry_gate_bias(depth)):
        path = tmp_path / "h.toml"
        text = HIGHWAY.replace("[block]\n", f"[block]\ngate_bias = {bias}\n").replace(
            'weight_init = ["kaiming_normal"]',
            'weight_init = ["kaiming_normal"]\nbranch_init = ["zero"]\ndtype = "float64"',
        )
        path.write_text(text, encoding="utf-8")
        spec = load_spec(path)
        case = parse_case_string(f"depth={depth},width=8,seed=3", spec)
        (r,) = run_spec(spec, RunOptions(profile="ci"), case=case).results
        carry = 1 - 1 / (1 + math.exp(-bias))
        assert r.verdict is not None and r.verdict.observed == pytest.approx(carry**depth, rel=1e-12, abs=0.0)


def test_dense_gets_he_init_on_its_layers_and_transitions(tmp_path: Path) -> None:
    """PyTorch's default init (σ_w² = 1/3) loses 5/6 of the second moment at each ReLU transition;
    He's init (σ_w² = 2), which DenseNet uses, keeps it."""
    s = _suggest(tmp_path, DENSE)
    _proven(s, "gradient_arrival")
    best = s.best
    assert best is not None and best.remedy == "critical_init"
    assert best.changed() == 'space.weight_init = ["kaiming_normal"]' and _arrives(best.numbers[0])


def test_a_postln_transformer_gets_deepnorm(tmp_path: Path) -> None:
    """Post-LN starves the blocks near the input (Xiong et al. 2020): DeepNorm's up-weighted skip
    holds the spread under 2 with one key; LayerScale and pre-LN with GPT-2's scaled branches hold
    too, with two."""
    s = _suggest(tmp_path, TRANSFORMER)
    _proven(s, "gradient_balance")
    ranked = [a.remedy for a in s.ranked]
    assert ranked[0] == "deepnorm" and "prenorm+shrink_branch" in ranked
    assert not next(a for a in s.attempts if a.remedy == "prenorm").held  # the norm moved, the branches full size


def test_a_custom_factory_gets_no_remedy_and_is_told_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A custom family's network is its factory's code, which suggest does not edit: no registered
    remedy applies, exit 1, and the line names the remedies meant for what failed."""
    (tmp_path / "my_tanh.py").write_text(FACTORY, encoding="utf-8")
    spec = tmp_path / "my_tanh.toml"
    spec.write_text(CUSTOM, encoding="utf-8")
    assert main(["suggest", str(spec), "--in-process", "--out", str(tmp_path / "fixed.toml")]) == 1
    out = capsys.readouterr().out
    assert "no remedy applies to a custom spec: its network is its factory's code, which suggest does not edit" in out
    assert "residual_route" in out and "zero_branch" in out  # what to write in the factory
    assert not (tmp_path / "fixed.toml").exists()


# ----------------------------------------------------------------------------- slow: broader variants


def _variant(text: str, *pairs: tuple[str, str]) -> str:
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new)
    return text


_CONV = ("width = [8, 16]", "width = 8\nspatial = 4")
_ARRIVAL = "[expect.gradient_arrival]\nlo = 0.1\nhi = 10.0"
#: (name, spec, the best remedy suggest proves): other activations, layers, norms, depths, widths
#: and invariants than the default tests', every one failing as written.
VARIANTS = [
    (
        "plain-tanh-width-64",
        _variant(TANH, ("width = 16", "width = 64"), ("init_std = 0.2092", "init_std = 0.1046")),
        "residual_route+zero_branch",
    ),
    (
        "plain-tanh-width-32",
        _variant(TANH, ("width = 16", "width = 32"), ("init_std = 0.2092", "init_std = 0.1479")),
        "residual_route+zero_branch",
    ),
    (
        "plain-sigmoid",
        _variant(
            TANH,
            ('activation = "tanh"', 'activation = "sigmoid"'),
            ('weight_init = ["normal"]', 'weight_init = ["xavier_normal"]'),
            ("depth = [1, 64]", "depth = [2, 32]"),
        ),
        "residual_route",
    ),
    (
        "plain-relu-default-init",
        _variant(
            TANH,
            ('activation = "tanh"', 'activation = "relu"'),
            ('weight_init = ["normal"]', 'weight_init = ["default"]'),
            ("depth = [1, 64]", "depth = [2, 24]"),
        ),
        "critical_init",
    ),
    (
        "plain-relu-conv",
        _variant(
            TANH,
            ('activation = "tanh"', 'activation = "relu"\nlayer = "conv2d"'),
            ('weight_init = ["normal"]', 'weight_init = ["default"]'),
            ("depth = [1, 64]", "depth = [2, 16]"),
            ("width = 16", "width = 8\nspatial = 4"),
        ),
        "residual_route",
    ),
    (
        "postnorm-identity",
        _variant(
            POSTNORM,
            ('norm = "batch"', 'norm = "layer"'),
            ('weight_init = ["kaiming_normal"]', 'weight_init = ["kaiming_normal"]\nbranch_init = ["zero"]'),
            (_ARRIVAL, "[expect.identity_at_init]\natol = 1e-6"),
        ),
        "prenorm",
    ),
    (
        "postnorm-conv",
        _variant(
            POSTNORM, ('activation = "relu"', 'activation = "relu"\nlayer = "conv2d"'), _CONV, ("[2, 12]", "[2, 32]")
        ),
        "zero_branch",
    ),
    (
        "postnorm-tanh",
        _variant(
            POSTNORM,
            ('activation = "relu"', 'activation = "tanh"'),
            ('norm = "batch"', 'norm = "layer"'),
            ('weight_init = ["kaiming_normal"]', 'weight_init = ["xavier_normal"]'),
            ("depth = [2, 12]", "depth = [2, 32]"),
        ),
        "prenorm+zero_branch",
    ),
    (
        "preact-conv",
        _variant(PREACT, ('activation = "relu"', 'activation = "relu"\nlayer = "conv2d"'), _CONV),
        "zero_branch",
    ),
    (
        "preact-variance",
        _variant(
            PREACT, (_ARRIVAL, "[expect.variance_growth]\nmax_ratio = 10.0"), ("depth = [2, 10]", "depth = [2, 24]")
        ),
        "zero_branch",
    ),
    (
        "preact-tanh-one-layer",
        _variant(
            PREACT,
            ('activation = "relu"', 'activation = "tanh"\nbranch_layers = 1'),
            ('weight_init = ["kaiming_normal"]', 'weight_init = ["xavier_normal"]'),
            ("depth = [2, 10]", "depth = [2, 48]"),
        ),
        "zero_branch",
    ),
    (
        "highway-tanh",
        _variant(
            HIGHWAY,
            ('activation = "relu"', 'activation = "tanh"'),
            ('weight_init = ["kaiming_normal"]', 'weight_init = ["xavier_normal"]'),
            ("depth = [2, 32]", "depth = [2, 48]"),
        ),
        "carry_gate",
    ),
    (
        "highway-conv",
        _variant(HIGHWAY, ('activation = "relu"', 'activation = "relu"\nlayer = "conv2d"'), _CONV),
        "carry_gate",
    ),
    (
        "highway-layer-norm",
        _variant(HIGHWAY, ('activation = "relu"', 'activation = "relu"\nnorm = "layer"'), ("[2, 32]", "[2, 64]")),
        "carry_gate",
    ),
    (
        "dense-conv",
        _variant(DENSE, ('activation = "relu"', 'activation = "relu"\nlayer = "conv2d"'), _CONV),
        "critical_init",
    ),
    (
        "dense-tanh",
        _variant(DENSE, ('activation = "relu"', 'activation = "tanh"'), ("depth = [2, 16]", "depth = [2, 32]")),
        "critical_init",
    ),
    ("dense-every-two", _variant(DENSE, ("transition_every = 4", "transition_every = 2")), "critical_init"),
    (
        "transformer-gelu-width-32",
        _variant(
            TRANSFORMER,
            ("heads = 2", 'heads = 4\nactivation = "gelu"'),
            ("width = 16", "width = 32"),
            ("tokens = 4", "tokens = 8"),
        ),
        "deepnorm",
    ),
    ("transformer-rms", _variant(TRANSFORMER, ('norm = "layer"', 'norm = "rms"')), "deepnorm"),
    ("transformer-deep", _variant(TRANSFORMER, ("depth = [2, 12]", "depth = [2, 48]")), "deepnorm"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "text", "best"), VARIANTS, ids=[v[0] for v in VARIANTS])
def test_every_variant_gets_a_proven_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, best: str
) -> None:
    """Each variant fails `stability check` as written, and `stability suggest` (in worker
    processes, as a user runs it) writes a fixed spec that `stability check` passes."""
    spec, fixed = tmp_path / f"{name}.toml", tmp_path / "fixed.toml"
    spec.write_text(text, encoding="utf-8")
    assert main(["check", str(spec), "--profile", "ci", "-q"]) == 1
    report = tmp_path / "s.json"
    assert main(["suggest", str(spec), "--no-diff", "--jobs", "2", "--out", str(fixed), "--json", str(report)]) == 0
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["ranked"][0] == best, data["ranked"]
    if name == "plain-tanh-width-64":  # the issue's own numbers: neither half alone, both together
        attempts = {a["remedy"]: a["numbers"][0] for a in data["attempts"]}
        assert attempts["critical_init"]["closest"] < 0.1 and attempts["residual_route"]["closest"] > 10
        assert attempts["residual_route+zero_branch"]["closest"] == 1.0
        # Branches scaled by 1/√L: each of the L blocks multiplies the squared gradient by at most
        # 1 + σ_w²/L (|tanh'| ≤ 1), so the ratio stays below e^(σ_w²/2) = e^0.35 = 1.42.
        assert 1.0 < attempts["residual_route+shrink_branch"]["closest"] < math.exp(0.35)
    capsys.readouterr()
    assert main(["check", str(fixed), "--profile", "ci", "-q"]) == 0
