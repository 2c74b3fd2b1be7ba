"""stability/measure/train_memory.py: every training invariant's registry entry declares what one
case's runs hold (`Invariant.memory`), the guard refuses a case over the budget before anything is
built (a readout over 5,000,000 outputs under 200 MiB, through `stability check`), the estimates
count what the runs really allocate, and each term is its closed form."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from spec_support import SPECS, spec_text, write_spec

from stability.measure.lm_train import language_model
from stability.measure.train import TEACHER_HIDDEN, make_task, trainable
from stability.measure.train_memory import ADAM_STATE, lm_bytes, train_bytes
from stability.run.lm_training import evaluate_lm
from stability.run.training import evaluate
from stability.spec.case import corner_case
from stability.spec.load import load_spec, parse_spec
from stability.spec.registry import INVARIANTS

EXPECTS = {
    "update_size": "[expect.update_size]\nwidths = [16, 32]",
    "trainability": "[expect.trainability]\ncompare_depths = [1, 3]\nmax_depth_ratio = 2.0",
    "residual_size": "[expect.residual_size]\nmax_mean = 1.0",
}


def _text(name: str, *, outputs: int = 4, optimizer: str = "adam", task: str = "teacher") -> str:
    """A plain stack trained on `task` with `outputs` outputs, expecting EXPECTS[name]."""
    train = f'optimizer = "{optimizer}"\nlr = 0.01\nsteps = 2\nsamples = 8\noutputs = {outputs}\ntask = "{task}"'
    return spec_text("plain", space="depth = 2\nwidth = 16", train=train, expect=EXPECTS[name], description="d")


def _spec(name: str, *, outputs: int = 4, optimizer: str = "adam", task: str = "teacher") -> object:
    return parse_spec(_text(name, outputs=outputs, optimizer=optimizer, task=task), file="t.toml")


def test_every_built_in_training_invariant_declares_its_memory() -> None:
    training = [e for e in INVARIANTS if e.training]
    assert {e.name for e in training} >= {
        "update_size",
        "trainability",
        "residual_size",
        "attention_logits",
        "lr_sensitivity",
    }
    assert all(e.memory is not None for e in training)


@pytest.mark.parametrize("name", list(EXPECTS))
def test_a_readout_over_five_million_outputs_is_refused_under_200_mib_before_anything_is_built(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stability.measure import train, train_update

    def must_not_build(*args: object, **kwargs: object) -> None:  # a 5e6-output teacher alone is 2.4 GiB of float64
        raise AssertionError("the case's network or task was built although the case is over the budget")

    for module in (train, train_update):  # structural: refused before anything is built, however long that takes
        monkeypatch.setattr(module, "trainable", must_not_build)
        monkeypatch.setattr(module, "make_task", must_not_build)
    path = write_spec(tmp_path, "big", _text(name, outputs=5_000_000))
    code, out, _ = cli("check", path, "--profile", "ci", "--memory-budget", "200MiB", "--in-process")
    assert (
        code == 1
        and "refused: this case needs about" in out
        and "for its training runs" in out
        and "memory budget is 200.0 MiB" in out
    ), out
    assert "built although" not in out
    monkeypatch.undo()
    small = write_spec(tmp_path, "small", _text(name))
    code, out, _ = cli("check", small, "--profile", "ci", "--memory-budget", "200MiB", "--in-process")
    assert "refused" not in out, out


def test_the_readout_term_is_its_closed_form() -> None:
    """Each more output adds its readout column (weights, gradient, a copy, Adam's two moments: 5
    copies of width + 1 numbers), 6 copies of the samples' outputs, and the teacher's column, hidden
    row and 3 copies of its targets in float64; SGD keeps 3 copies of the parameters."""
    for optimizer in ("adam", "sgd"):
        a, b = (
            train_bytes(s, corner_case(s))
            for s in (_spec("residual_size", outputs=n, optimizer=optimizer) for n in (4, 104))
        )  # type: ignore[arg-type]
        assert a is not None and b is not None
        copies = 3 + ADAM_STATE[optimizer]
        assert b - a == 100 * ((16 + 1) * copies * 4 + 6 * 8 * 4 + (TEACHER_HIDDEN + 3 * 8) * 8)
    labels = _spec("residual_size", outputs=104, task="labels")
    teacher = _spec("residual_size", outputs=104)
    case = corner_case(labels)  # type: ignore[arg-type]
    t = teacher.train  # type: ignore[attr-defined]
    d_in = t.input_dim
    gap = train_bytes(teacher, case) - train_bytes(labels, case)  # type: ignore[arg-type,operator]
    assert gap == 8 * (
        d_in * TEACHER_HIDDEN + TEACHER_HIDDEN * 104 + t.samples * TEACHER_HIDDEN + 3 * t.samples * 104 - t.samples
    )


def _bytes(tensors: object) -> int:
    return sum(p.numel() * p.element_size() for p in tensors)  # type: ignore[attr-defined]


def test_the_estimates_cover_what_the_runs_allocate() -> None:
    """At least the parameters with their gradients, a copy and Adam's moments, and the training set
    (or, for the language model, its logits of a batch and of the held-out set)."""
    for name in EXPECTS:
        spec = _spec(name, outputs=1000)
        case = corner_case(spec)  # type: ignore[arg-type]
        model = trainable(spec, case)  # type: ignore[arg-type]
        task = make_task(spec, case)  # type: ignore[arg-type]
        held = _bytes(model.modules().parameters()) * 5 + _bytes([task.x, task.y])
        assert train_bytes(spec, case) >= held, name  # type: ignore[arg-type,operator]
    spec = load_spec(SPECS / "control_lm_early_warning.toml")
    case = corner_case(spec)
    assert spec.train is not None
    logits = (case.batch + spec.train.eval_sequences) * (case.tokens or 8) * spec.train.vocab * 4
    need = lm_bytes(spec, case)
    assert need is not None and need >= _bytes(language_model(spec, case).parameters()) * 5 + logits
    assert lm_bytes(spec, dataclasses.replace(case, batch=2 * case.batch)) > need  # type: ignore[operator]


def test_stability_check_and_evaluate_lm_apply_the_same_language_model_guard(
    cli: Callable[..., tuple[int, str, str]],
) -> None:
    path = SPECS / "control_lm_early_warning.toml"
    spec = load_spec(path)
    case = corner_case(spec)
    need = lm_bytes(spec, case)
    assert need is not None
    for budget in (need - 1, need):
        direct = evaluate_lm(spec, "early_warning", case, memory_budget=budget)
        through = evaluate(spec, "early_warning", case, memory_budget=budget)
        assert (direct[0] is None) == (through[0] is None) == (budget < need) and direct[1] == through[1]
    code, out, _ = cli("check", path, "--case", str(case), "--memory-budget", str(need - 1), "--in-process")
    assert code == 1 and "refused: this case needs about" in out, out
