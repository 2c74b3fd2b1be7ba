"""init_conformance on every path: `stability check` (in this process and in workers), its JSON and
HTML reports, a one-point `stability sweep` and the pytest plugin judge a library spec alike, and a
spec whose declared rule the model breaks exits 1 naming the parameters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stability.cli import main
from stability.run.engine import RunOptions
from stability.run.executor import Task
from stability.run.executors import executor_for
from stability.run.store import Store
from stability.run.sweep import run_sweep
from stability.spec.case import parse_case_string
from stability.spec.load import load_spec

pytest.importorskip("transformers")

SPEC = """
name = "{name}"
description = "GPT-2 at a small width: its declared init, c_proj at initializer_range/sqrt(2 n_layer)"
family = "library"

[block]
layer = "tokens"
model = "transformers:GPT2Model"
config = {{ n_embd = "width", n_layer = "depth", n_head = 2, vocab_size = 64, n_positions = 16 }}

[space]
depth = [1, 3]
width = 64
batch = 2
tokens = 4

[expect.init_conformance]
{expect}
"""

#: A rule the model does not follow: its c_attn drawn at initializer_range, declared at a tenth of it.
WRONG = (
    'rules = [{ name = "*.c_attn.weight", law = "normal", std = "initializer_range / 10", source = "a '
    'rule the model does not follow" }]'
)


def _write(tmp_path: Path, name: str, expect: str = "") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(textwrap.dedent(SPEC.format(name=name, expect=expect)), encoding="utf-8")
    return path


def _verdicts(report: Path) -> dict[str, dict[str, object]]:
    data = json.loads(report.read_text(encoding="utf-8"))
    return {s["name"]: r for s in data["specs"] for r in s["invariants"] if r["name"] == "init_conformance"}


def test_check_holds_on_the_declared_init_and_fails_naming_the_parameters_in_json_and_html(tmp_path: Path) -> None:
    good, bad = _write(tmp_path, "good"), _write(tmp_path, "bad", WRONG)
    assert (
        main(
            [
                "check",
                str(good),
                "--profile",
                "ci",
                "--in-process",
                "-q",
                "--json",
                str(tmp_path / "good.json"),
                "--case",
                "depth=2",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "check",
                str(bad),
                "--profile",
                "ci",
                "--in-process",
                "-q",
                "--json",
                str(tmp_path / "bad.json"),
                "--html",
                str(tmp_path / "html"),
                "--case",
                "depth=2",
            ]
        )
        == 1
    )
    ok, broken = _verdicts(tmp_path / "good.json")["good"], _verdicts(tmp_path / "bad.json")["bad"]
    assert ok["met"] is True and ok["observed"] == 0
    text = json.dumps(broken)
    assert broken["met"] is False and broken["observed"] == 2
    assert (
        "h.*.attn.c_attn.weight: std 0.0" in text
        and "a rule the model does not follow" in text
        and "2 of 2 parameters" in text
    )
    page = next((tmp_path / "html").glob("*.html")).read_text(encoding="utf-8")
    assert "init_conformance" in page and "h.*.attn.c_attn.weight" in page


@pytest.mark.slow  # workers, a sweep and a pytest run in a subprocess
def test_workers_sweep_and_the_pytest_plugin_judge_alike(tmp_path: Path) -> None:
    paths = [_write(tmp_path, "good"), _write(tmp_path, "bad", WRONG)]
    specs = [load_spec(p) for p in paths]
    tasks = [Task(s, RunOptions(profile="ci"), case="") for s in specs]  # the corner, which a one-point sweep probes

    def key(outcomes: list[object]) -> list[tuple[str, bool, float]]:
        return [(r.name, r.met, r.verdict.observed) for o in outcomes for r in o.result.results]  # type: ignore[attr-defined]

    here = key(executor_for("in-process").map(tasks))
    assert key(executor_for("workers", jobs=2).map(tasks)) == here
    assert [(m, o) for _, m, o in here] == [(True, 0.0), (False, 1.0)]  # depth 1: one c_attn
    for spec, (_, _, observed) in zip(specs, here, strict=True):
        case = parse_case_string("", spec)
        with Store(tmp_path / f"{spec.name}.sqlite") as store:
            result = run_sweep(
                spec,
                [],
                store,
                executor_for("workers", jobs=2),
                seeds=[case.seed],
                budgets=False,
                invariants=["init_conformance"],
                version="t",
            )
        (point,) = result.points
        assert point.verdicts["init_conformance"][3] == observed
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--stability-profile",
            "ci",
            "--stability-case=",
            "--rootdir",
            str(tmp_path),
            *map(str, paths),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ),
    )
    assert "1 failed, 1 passed" in run.stdout, run.stdout + run.stderr
    assert "h.*.attn.c_attn.weight" in run.stdout


FACTORY = """
import torch
from torch import nn


class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5, bug=False):
        super().__init__()
        self.init_values, self.bug = init_values, bug
        self.gamma = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.ones_(self.gamma) if self.bug else nn.init.constant_(self.gamma, self.init_values)

    def forward(self, x):
        return x * self.gamma


class Block(nn.Module):
    def __init__(self, width, bug):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.ls = LayerScale(width, init_values=1e-4, bug=bug)

    def forward(self, x):
        return x + self.ls(torch.tanh(self.fc(x)))


def make(width, depth, bug=False):
    return nn.Sequential(*[Block(width, bug) for _ in range(depth)])
"""

CUSTOM = """
name = "{name}"
description = "a user's factory with layer scale; its own intent declares the init"
family = "custom"

[block]
layer = "linear"
factory = "blocks:make"
factory_args = {{ bug = {bug} }}

[space]
depth = [2, 3]
width = 16
batch = 4

[expect.init_conformance]
"""


def test_a_factorys_own_intent_is_judged_and_a_planted_layer_scale_bug_fails(tmp_path: Path) -> None:
    (tmp_path / "blocks.py").write_text(FACTORY, encoding="utf-8")
    for name, bug in (("healthy", "false"), ("planted", "true")):
        (tmp_path / f"{name}.toml").write_text(textwrap.dedent(CUSTOM.format(name=name, bug=bug)), encoding="utf-8")
    run = ["--profile", "ci", "--in-process", "-q", "--case", "depth=2"]
    assert main(["check", str(tmp_path / "healthy.toml"), *run, "--json", str(tmp_path / "h.json")]) == 0
    assert main(["check", str(tmp_path / "planted.toml"), *run, "--json", str(tmp_path / "p.json")]) == 1
    ok, broken = _verdicts(tmp_path / "h.json")["healthy"], _verdicts(tmp_path / "p.json")["planted"]
    assert ok["met"] is True and "4 by the model's own init, as recorded" not in str(ok)  # (every parameter: 6)
    assert broken["observed"] == 2
    assert (
        "*.ls.gamma: recorded = 1 by LayerScale.reset_parameters, declared = 0.0001 [layer scale from "
        "LayerScale(init_values=0.0001) (Touvron et al. 2021, CaiT)] — 2 parameters"
    ) in json.dumps(broken, ensure_ascii=False)
