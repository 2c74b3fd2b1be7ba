"""stability/run/audit.py: the parent judges again every case a worker judged, and a reported outcome
that the measurements contradict becomes an error naming the case; a factory that rewrites its
worker's result messages to "met" cannot pass, in a worker or in this process."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import Cli

from stability import RunOptions, parse_spec, run_spec
from stability.run.audit import rejudge
from stability.run.engine import SpecResult

SPEC = """
name = "audited"
description = "a plain sigmoid stack: the gradient vanishes from depth 6 on"
family = "plain"
[block]
activation = "sigmoid"
[space]
depth = [1, 12]
width = 4
batch = 2
[expect.gradient_arrival]
expect = "{expect}"
lo = 0.001
hi = 1000.0
"""


def _run(expect: str) -> SpecResult:
    return run_spec(parse_spec(SPEC.format(expect=expect), file="specs/audited.toml"), RunOptions(profile="ci"))


def test_an_honest_result_is_left_as_it_is() -> None:
    for expect in ("holds", "violated"):
        result = _run(expect)
        before = [dataclasses.replace(r) for r in result.results]
        assert rejudge(result, replay=False) is None
        assert result.results == before


def test_a_failure_reported_as_met_is_caught_on_its_deciding_case() -> None:
    result = _run("holds")
    (r,) = result.results
    assert not r.met and r.verdict is not None and not r.verdict.passed
    forged = dataclasses.replace(r, met=True, verdict=dataclasses.replace(r.verdict, passed=True))
    result.results = [forged]
    line = rejudge(result, replay=False)
    assert line is not None and f"case {r.case} fails when judged again" in line
    (now,) = result.results
    assert (
        not now.met and now.error == line and now.case == r.case and now.verdict is not None and not now.verdict.passed
    )


def test_a_met_expectation_is_caught_on_any_case_it_judged() -> None:
    result = _run("holds")
    (r,) = result.results
    passing = next(c for c in r.judged if result.cases[c].measurements is not None and c != r.case and c.depth < 4)
    hidden = dataclasses.replace(
        r,
        met=True,
        case=passing,
        verdict=dataclasses.replace(r.verdict, passed=True) if r.verdict else None,
        message="holds",
        error=None,
        reproduce=None,
    )  # a forged result: deciding case a passing one, every judged case kept
    result.results = [hidden]
    line = rejudge(result, replay=False)
    assert line is not None and "fails it when judged again" in line


def test_a_violation_reported_for_a_case_that_holds_is_caught() -> None:
    result = _run("violated")
    (r,) = result.results
    assert r.met
    passing = next(c for c in r.judged if c.depth == 1)
    forged = dataclasses.replace(r, case=passing)  # claims the shallowest case breaks it: it does not
    result.results = [forged]
    line = rejudge(result, replay=False)
    assert line is not None and f"case {passing} passes when judged again" in line and not result.results[0].met


# ----------------------------------------------------------------------------- a worker that lies


#: Rewrites, inside its worker, every message the worker sends so that each result says "met".
LIAR = """
from torch import nn

import stability.run.worker as worker

_real = worker._json


def _met(obj):
    if isinstance(obj, dict):
        out = {k: _met(v) for k, v in obj.items()}
        if "met" in out:
            out.update(met=True, error=None, message="met")
        return out
    if isinstance(obj, list):
        return [_met(x) for x in obj]
    return obj


worker._json = lambda message: _real(_met(message))


class Shrink(nn.Module):
    def forward(self, x):
        return x * 1e-3


def make(depth, width):
    return nn.Sequential(*[Shrink() for _ in range(depth)])
"""


LIAR_SPEC = """\
name = "liar"
description = "a vanishing gradient whose worker says every result is met"
family = "custom"
[block]
factory = "stability_hardening_liar:make"
[space]
depth = [2, 4]
width = 4
batch = 2
[expect.gradient_arrival]
lo = 0.01
hi = 100.0
"""


@pytest.mark.parametrize(
    "in_process", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["worker", "in-process"]
)
def test_a_factory_that_rewrites_its_results_to_met_cannot_pass(
    tmp_path: Path, in_process: bool, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent judges the measurements itself. In a worker the rewritten messages contradict
    that judgement, which is an error naming the case (exit 2); in this process nothing is
    rewritten and the verdict stands (exit 1). Never exit 0. The worker run is this process's
    `stability check` (the liar is imported in the worker alone); the in-process run is a
    subprocess of its own, since the liar patches the module it is imported into."""
    import stability.run.worker as worker

    (tmp_path / "stability_hardening_liar.py").write_text(LIAR, encoding="utf-8")
    (tmp_path / "liar.toml").write_text(LIAR_SPEC, encoding="utf-8")
    if in_process:
        env = {k: v for k, v in os.environ.items() if k not in ("CI", "STABILITY_PROFILE")}
        cmd = [sys.executable, "-m", "stability", "check", "liar.toml", "--profile", "ci", "-q", "--in-process"]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    else:
        monkeypatch.chdir(tmp_path)
        for name in ("CI", "STABILITY_PROFILE"):
            monkeypatch.delenv(name, raising=False)
        honest = worker._json
        code, out, err = cli("check", "liar.toml", "--profile", "ci", "-q")
        assert worker._json is honest  # the liar ran in its worker only
    assert "Traceback" not in out + err
    (line,) = [ln for ln in out.splitlines() if ln.startswith("✗ ")]
    assert "0 met, 1 not met" in out
    if in_process:
        assert code == 1, out + err
        assert (
            "liar.toml::gradient_arrival: expected to hold, but it fails at smallest failing case depth=2," in line
            and err == ""
        )
    else:
        assert code == 2, out + err
        assert (
            "liar.toml::gradient_arrival: the worker reported it met, but case depth=2," in line
            and "fails it when judged again from its measurements" in line
        )
        (error,) = err.splitlines()
        assert (
            error.startswith("stability: error: liar.toml::gradient_arrival: the worker reported it met")
            and "may have replaced part of the harness" in error
        )
