"""The shipped language-model specs (docs/lm_specs/*.toml, judged with the plugin
stability.judge.lm_catalog): every control is violated, measured, on every seed of an ensemble of 8,
every fix holds on the same seeds, a control flipped to `holds` is not met, and `stability check
--plugin` judges them in the ci profile and replays a case bit for bit. The learning-rate grid,
whose runs take minutes, is marked slow."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from lm_support import lm_registered  # noqa: F401  (the fixture)

from stability.judge.verdict import is_evidence
from stability.run.lm_training import evaluate_lm
from stability.spec.case import corner_case
from stability.spec.load import load_spec

pytestmark = pytest.mark.usefixtures("lm_registered")

LM_SPECS = Path(__file__).resolve().parent.parent / "docs" / "lm_specs"
SEEDS = range(8)
PAIRS = [
    ("control_attention_logit_growth", "attention_logits_qk_norm"),
    ("control_output_logit_drift", "output_logits_z_loss"),
    ("control_early_warning", "early_warning_qk_norm"),
]


def test_the_shipped_specs_load_and_the_controls_say_which_fact() -> None:
    paths = sorted(LM_SPECS.glob("*.toml"))
    assert len(paths) >= 7
    for path in paths:
        spec = load_spec(path)
        assert spec.invariants(), path
        if path.stem.startswith("control_"):
            assert path.read_text(encoding="utf-8").startswith("# Negative control, fact "), path
            assert all(e.expect == "violated" for _, e in spec.invariants()), path


def _verdicts(stem: str, seeds: range = SEEDS) -> list[tuple[bool, str, float]]:
    """(met, name, observed) of every invariant of the spec, on each seed's corner case."""
    spec = load_spec(LM_SPECS / f"{stem}.toml")
    out = []
    for name, expectation in spec.invariants():
        for seed in seeds:
            v, error = evaluate_lm(spec, name, corner_case(spec, seed=seed))
            assert v is not None and error is None and is_evidence(v), f"{stem}::{name} seed {seed}: {error or v.detail}"
            out.append((v.passed == (expectation.expect == "holds"), name, v.observed))
            print(f"{stem}::{name} seed {seed}: {v.observed:.4g} ({v.detail})")
    return out


@pytest.mark.parametrize(("control", "fix"), PAIRS, ids=[p[0] for p in PAIRS])
def test_the_control_fails_and_the_fix_holds_on_every_seed(control: str, fix: str) -> None:
    assert all(m for m, _, _ in _verdicts(control)), "a control was not violated on some seed"
    assert all(m for m, _, _ in _verdicts(fix)), "a fix did not hold on some seed"


@pytest.mark.parametrize("control", [p[0] for p in PAIRS])
def test_a_control_flipped_to_holds_is_not_met(control: str) -> None:
    spec = load_spec(LM_SPECS / f"{control}.toml")
    for name, expectation in spec.invariants():
        flipped = spec.model_copy(update={"expect": spec.expect.model_copy(update={name: expectation.model_copy(update={"expect": "holds"})})})
        v, error = evaluate_lm(flipped, name, corner_case(spec, seed=0))
        assert error is None and v is not None and is_evidence(v) and not v.passed


@pytest.mark.slow
def test_lr_sensitivity_is_lower_with_qk_norm_and_z_loss_on_the_same_grid_and_seeds() -> None:
    """One case each: the grid of 5 learning rates for an ensemble of 8 seeds (seed 0's)."""
    (control,) = _verdicts("control_lr_sensitivity", range(1))
    (fix,) = _verdicts("lr_sensitivity_qk_norm_z_loss", range(1))
    assert control[0] and fix[0] and fix[2] < control[2]


def test_stability_check_judges_them_with_the_plugin_and_replays_a_case(cli: Callable[..., tuple[int, str, str]], tmp_path: Path) -> None:
    fast = [LM_SPECS / f"{stem}.toml" for pair in PAIRS for stem in pair]
    code, out, _ = cli("check", "--plugin", "stability.judge.lm_plugin", *fast, "--profile", "ci")
    assert code == 0, out
    replays = []
    for i in range(2):
        report = tmp_path / f"replay{i}.json"
        code, out, _ = cli("check", "--plugin", "stability.judge.lm_plugin", LM_SPECS / "control_early_warning.toml", "--case", "seed=5", "--json", report)
        assert code == 0, out
        replays.append(json.loads(report.read_text()))
    first, second = ([{k: inv[k] for k in ("verdict", "observed", "detail", "extra", "case")} for inv in r["specs"][0]["invariants"]] for r in replays)
    assert first == second and first[0]["observed"] > 5.6 and first[0]["case"]["seed"] == 5


def test_without_the_plugin_a_language_model_spec_is_refused_naming_the_key(cli: Callable[..., tuple[int, str, str]]) -> None:
    from stability.judge import lm_catalog

    lm_catalog.unregister_lm()
    try:
        code, out, err = cli("check", LM_SPECS / "control_early_warning.toml", "--profile", "ci")
    finally:
        lm_catalog.register_lm()
    assert code == 2 and "expect.early_warning" in out + err
