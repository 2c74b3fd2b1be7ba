"""The shipped language-model specs (specs/*lm_*.toml, built in, no plugin): every control is
violated, measured, on every seed of an ensemble of 8, and every fix holds on the same seeds, in
the profile each is shipped for (the pairs outside ci under the `slow` marker); `stability check`
judges the ci pairs, names the others as skipped in ci, and the reproduce command it prints
replays the case bit for bit. Flipping a control's `expect` is tests/test_controls.py's."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
from spec_support import SPECS

from stability.judge.verdict import is_evidence
from stability.run.lm_training import evaluate_lm
from stability.spec.case import corner_case
from stability.spec.lm_expect import LM_INVARIANTS
from stability.spec.load import load_spec

SEEDS = range(8)
#: (control, fix) of each fact; the first ones run in ci, the rest in thorough only.
CI_PAIRS = [
    ("control_lm_attention_logit_growth", "lm_attention_logits_qk_norm"),
    ("control_lm_early_warning", "lm_early_warning_qk_norm"),
]
THOROUGH_PAIRS = [
    ("control_lm_output_logit_drift", "lm_output_logits_z_loss"),
    ("control_lm_loss_spike", "lm_loss_spike_tied_readout"),
]
#: Fixes whose control is another pair's: attn_softcap against control_lm_attention_logit_growth.
THOROUGH_FIXES = ["lm_attention_logits_softcap"]
LRS_PAIR = ("control_lm_lr_sensitivity", "lm_lr_sensitivity_qk_norm_z_loss")


def _lm_specs() -> list[Path]:
    return sorted(p for p in SPECS.glob("*.toml") if any(n for n, _ in load_spec(p).invariants() if n in LM_INVARIANTS))


def test_every_shipped_language_model_spec_is_paired_and_says_where_it_runs() -> None:
    named = {stem for pair in [*CI_PAIRS, *THOROUGH_PAIRS, LRS_PAIR] for stem in pair} | set(THOROUGH_FIXES)
    assert {p.stem for p in _lm_specs()} == named
    ci = {stem for pair in CI_PAIRS for stem in pair}
    for path in _lm_specs():
        spec = load_spec(path)
        assert spec.train is not None
        assert spec.train.profiles == (["ci", "dev", "thorough"] if path.stem in ci else ["thorough"]), path
        if path.stem.startswith("control_"):
            assert path.read_text(encoding="utf-8").startswith("# Negative control, fact "), path
            assert all(e.expect == "violated" for _, e in spec.invariants()), path


def _verdicts(stem: str, seeds: range = SEEDS) -> list[tuple[bool, str, float]]:
    """(met, name, observed) of every invariant of the spec, on each seed's corner case."""
    spec = load_spec(SPECS / f"{stem}.toml")
    out = []
    for name, expectation in spec.invariants():
        for seed in seeds:
            v, error = evaluate_lm(spec, name, corner_case(spec, seed=seed))
            assert v is not None and error is None and is_evidence(v), (
                f"{stem}::{name} seed {seed}: {error or v.detail}"
            )
            out.append((v.passed == (expectation.expect == "holds"), name, v.observed))
            print(f"{stem}::{name} seed {seed}: {v.observed:.4g} ({v.detail})")
    return out


@pytest.mark.slow  # trains each LM control on every seed; .ci/run's gate judges the ci controls
@pytest.mark.parametrize(("control", "fix"), CI_PAIRS, ids=[p[0] for p in CI_PAIRS])
def test_a_ci_control_fails_and_its_fix_holds_on_every_seed(control: str, fix: str) -> None:
    assert all(m for m, _, _ in _verdicts(control)), "a control was not violated on some seed"
    assert all(m for m, _, _ in _verdicts(fix)), "a fix did not hold on some seed"


@pytest.mark.slow
@pytest.mark.parametrize("stem", [s for pair in THOROUGH_PAIRS for s in pair] + THOROUGH_FIXES)
def test_a_thorough_control_fails_and_its_fix_holds_on_every_seed(stem: str) -> None:
    assert all(m for m, _, _ in _verdicts(stem)), f"{stem} did not meet its expectation on some seed"


@pytest.mark.slow
def test_lr_sensitivity_is_lower_with_qk_norm_and_z_loss_on_the_same_grid_and_seeds() -> None:
    """One case each: the grid of 5 learning rates for an ensemble of 8 seeds (seed 0's)."""
    (control,) = _verdicts(LRS_PAIR[0], range(1))
    (fix,) = _verdicts(LRS_PAIR[1], range(1))
    assert control[0] and fix[0] and fix[2] < control[2]


@pytest.mark.slow  # every language-model spec through stability check
def test_stability_check_judges_the_ci_pairs_and_names_the_others_as_skipped(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    fast = [SPECS / f"{stem}.toml" for pair in CI_PAIRS for stem in pair]
    code, out, _ = cli("check", *fast, "--profile", "ci")
    assert code == 0, out
    report = tmp_path / "ci.json"
    code, out, _ = cli(
        "check",
        SPECS / f"{LRS_PAIR[0]}.toml",
        SPECS / f"{THOROUGH_PAIRS[0][1]}.toml",
        SPECS / f"{CI_PAIRS[1][0]}.toml",
        "--profile",
        "ci",
        "--json",
        report,
    )
    assert code == 0 and "2 skipped in this profile" in out, out
    skipped = [
        inv
        for spec in json.loads(report.read_text())["specs"]
        for inv in spec["invariants"]
        if inv["status"] == "skipped"
    ]
    assert len(skipped) == 2 and all(
        inv["message"].endswith("skipped in profile ci (train.profiles = thorough); run it with --profile thorough")
        for inv in skipped
    )


@pytest.mark.slow  # trains twice through a subprocess; nightly
def test_the_printed_reproduce_command_replays_the_case_bit_for_bit(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    flipped = tmp_path / "flipped.toml"
    flipped.write_text(
        (SPECS / "control_lm_early_warning.toml")
        .read_text(encoding="utf-8")
        .replace('expect = "violated"', 'expect = "holds"'),
        encoding="utf-8",
    )
    code, out, _ = cli("check", flipped, "--profile", "ci", "--json", tmp_path / "search.json")
    assert code == 1, out
    (line,) = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("reproduce: ")]
    argv = shlex.split(line.removeprefix("reproduce: "))
    assert argv[:3] == ["stability", "check", str(flipped)] and "--plugin" not in argv, line
    code, out, _ = cli(*argv[1:], "--json", tmp_path / "replay.json")
    assert code == 1, out
    search, replay = (
        [
            {k: inv[k] for k in ("verdict", "observed", "detail", "extra", "case")}
            for inv in json.loads((tmp_path / f"{n}.json").read_text())["specs"][0]["invariants"]
        ]
        for n in ("search", "replay")
    )
    assert search == replay and search[0]["observed"] > 5.6
