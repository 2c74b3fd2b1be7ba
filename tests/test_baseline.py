"""stability/report/baseline.py and `stability check --baseline`: numbers compared with a base
branch's JSON report on the same cases, keyed, fingerprinted and judged by the drift rule.

The architecture under test is y = g·x in one block, so the gradient ratio ‖∂L/∂x₀‖/‖∂L/∂x₁‖
is g exactly, whatever the case: a "change" is a new gain in the factory module. Each run lives
in its own checkout folder (base/, pr/), as a base branch and a pull request do."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from approx_support import approx

from stability.cli import main
from stability.judge.verdict import Verdict
from stability.report.baseline import Baseline, compare, relative_change, toward_bound
from stability.report.baseline_load import load_baseline
from stability.report.formats import to_json
from stability.run.engine import RunOptions, SpecResult, run_spec
from stability.run.executor import Outcome, Task
from stability.run.report_model import SCHEMA_VERSION
from stability.run.store_keys import code_version, spec_hash
from stability.spec.load import load_spec, parse_spec
from stability.spec.schema import AttentionEntropy, GradientArrival, IdentityAtInit, Spec, UpdateSize

MODULE = "stability_baseline_gain"
FACTORY = """\
from torch import nn

GAIN = {gain}


class Scale(nn.Module):
    def forward(self, x):
        return GAIN * x


def make(depth, width):
    return nn.Sequential(*[Scale() for _ in range(depth)])
"""
SPEC = f"""\
name = "gain"
description = "y = g x: the gradient ratio is g"
family = "custom"

[block]
factory = "{MODULE}:make"

[space]
depth = 1
width = {{width}}
batch = 2

[expect.gradient_arrival]
lo = 0.5
hi = 2.0
drift = 0.1
"""


def checkout(root: Path, name: str, gain: float, *, width: str = "4") -> Path:
    """A folder holding specs/gain.toml and its factory module with this gain."""
    folder = root / name
    (folder / "specs").mkdir(parents=True)
    (folder / "specs" / f"{MODULE}.py").write_text(FACTORY.format(gain=gain))
    (folder / "specs" / "gain.toml").write_text(SPEC.format(width=width))
    return folder


Check = Callable[..., tuple[int, str, str]]


@pytest.fixture
def check(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Check:
    """check(folder, *args) → (exit code, stdout, stderr) of
    `stability check specs/gain.toml --profile ci --in-process ARGS` run in `folder`."""
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)

    def run(folder: Path, *args: str | Path) -> tuple[int, str, str]:
        monkeypatch.chdir(folder)
        capsys.readouterr()
        code = main(["check", "specs/gain.toml", "--profile", "ci", "--in-process", *map(str, args)])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_a_gradient_ratio_moved_from_1_to_1_31_fails_and_an_unchanged_run_passes(tmp_path: Path, check: Check) -> None:
    base, pr = checkout(tmp_path, "base", 1.0), checkout(tmp_path, "pr", 1.31)
    assert check(base, "--json", "base.json")[0] == 0
    code, out, _ = check(pr, "--baseline", base / "base.json")
    assert code == 1  # 1.31 is still inside [0.5, 2]: only the comparison fails it
    assert (
        "✗ specs/gain.toml::gradient_arrival: 1.00 → 1.31 (+31.0%, drift limit 10%): rose, toward its bound, "
        "by more than the drift limit" in out
    )
    assert f"changed since the baseline in specs/gain.toml: the factory module specs/{MODULE}.py" in out
    assert "reproduce: stability check specs/gain.toml --case depth=1,width=4,batch=2," in out
    code, out, _ = check(base, "--baseline", "base.json")
    assert code == 0
    assert "1.00 → 1.00" in out and "0%" in out and "changed since the baseline" not in out
    assert "1 expectation(s) compared on the same cases, 0 moved past the drift limit" in out


@pytest.mark.parametrize(
    "before, after, code, says",
    [
        (1.0, 1.05, 0, "rose, toward its bound, within"),
        (1.0, 0.95, 0, "fell, toward its bound, within"),
        (1.0, 0.85, 1, "fell, toward its bound, by more than"),
        (1.31, 1.0, 1, "fell, away from its bound, by more than"),
        (0.6, 1.0, 1, "rose, away from its bound, by more than"),
        (1.31, 1.2, 0, "fell, away from its bound, within"),
        (1.0, 1.0999, 0, "rose, toward its bound, within"),
        (1.0, 1.1001, 1, "rose, toward its bound, by more than"),
    ],
    ids=[
        "up-5%",
        "down-5%",
        "down-15%",
        "back-to-the-middle",
        "away-from-lo",
        "away-within",
        "just-inside",
        "just-past",
    ],
)
def test_the_limit_is_a_relative_change_either_way_named_by_direction(
    tmp_path: Path, check: Check, before: float, after: float, code: int, says: str
) -> None:
    base, pr = checkout(tmp_path, "base", before), checkout(tmp_path, "pr", after)
    assert check(base, "--json", "base.json")[0] == 0
    got, out, _ = check(pr, "--baseline", base / "base.json", "--json", "r.json")
    assert got == code, out
    assert f"{before:#.3g} → {after:#.3g}" in out
    (delta,) = json.loads((pr / "r.json").read_text())["baseline"]["deltas"]
    assert delta["status"] == ("drift" if code else "within") and delta["why"].startswith(says), delta


def test_relative_change_closed_forms() -> None:
    assert relative_change(1.0, 1.31) == pytest.approx(0.31, rel=1e-12, abs=0.0)
    assert relative_change(2.0, 1.0) == -0.5 and relative_change(-2.0, -1.0) == 0.5
    assert relative_change(0.0, 0.0) == 0.0 and relative_change(3.0, 3.0) == 0.0
    assert relative_change(0.0, 1e-9) == math.inf and relative_change(0.0, -1e-9) == -math.inf


def _v(name: str, observed: float, passed: bool = True) -> Verdict:
    return Verdict(invariant=name, passed=passed, observed=observed, bound="", block=None, detail="")


def _expecting(name: str, expectation: Any) -> Spec:
    """The gain spec with `[expect.NAME]` replaced by `expectation` (no other check applies)."""
    spec = parse_spec(SPEC.format(width="4"))
    return spec.model_copy(
        update={"expect": spec.expect.model_copy(update={"gradient_arrival": None, name: expectation})}
    )


def test_toward_the_bound_for_two_sided_one_sided_and_negative_controls() -> None:
    ratio = _expecting("gradient_arrival", GradientArrival(lo=0.5, hi=2.0))
    assert toward_bound(
        ratio, "gradient_arrival", _v("gradient_arrival", 1.0), _v("gradient_arrival", 1.31)
    )  # toward hi
    assert toward_bound(
        ratio, "gradient_arrival", _v("gradient_arrival", 1.0), _v("gradient_arrival", 0.8)
    )  # toward lo
    assert not toward_bound(
        ratio, "gradient_arrival", _v("gradient_arrival", 0.6), _v("gradient_arrival", 1.0)
    )  # the nearer bound is farther now
    control = _expecting(
        "gradient_arrival", GradientArrival(lo=0.01, hi=100.0, expect="violated")
    )  # the gradient is meant to vanish
    assert toward_bound(
        control, "gradient_arrival", _v("gradient_arrival", 1e-3, False), _v("gradient_arrival", 5e-3, False)
    )  # closer to passing
    assert not toward_bound(
        control, "gradient_arrival", _v("gradient_arrival", 5e-3, False), _v("gradient_arrival", 1e-3, False)
    )
    upper = _expecting("identity_at_init", IdentityAtInit(atol=1e-6))
    assert toward_bound(upper, "identity_at_init", _v("identity_at_init", 1e-8), _v("identity_at_init", 2e-8))
    assert not toward_bound(upper, "identity_at_init", _v("identity_at_init", 2e-8), _v("identity_at_init", 1e-8))
    lower = _expecting("attention_entropy", AttentionEntropy(min_entropy=0.5))
    assert toward_bound(lower, "attention_entropy", _v("attention_entropy", 0.8), _v("attention_entropy", 0.7))
    assert not toward_bound(lower, "attention_entropy", _v("attention_entropy", 0.7), _v("attention_entropy", 0.8))
    slope = _expecting(
        "update_size", UpdateSize(widths=[8, 16])
    )  # |slope| <= max_abs_slope: a negative slope grows toward it too
    assert toward_bound(slope, "update_size", _v("update_size", -0.1), _v("update_size", -0.2))
    assert not toward_bound(slope, "update_size", _v("update_size", -0.2), _v("update_size", 0.1))


def test_the_json_report_records_each_specs_provenance(tmp_path: Path, check: Check) -> None:
    base = checkout(tmp_path, "base", 1.0)
    assert check(base, "--json", "r.json")[0] == 0  # (run in base/)
    (spec,) = json.loads((base / "r.json").read_text())["specs"]
    module = base / "specs" / f"{MODULE}.py"
    assert spec["provenance"] == {
        "spec": spec_hash(load_spec("specs/gain.toml")),
        "factory": {"module": f"specs/{MODULE}.py", "sha256": hashlib.sha256(module.read_bytes()).hexdigest()[:16]},
        "harness": code_version(),
    }


def test_a_case_outside_a_changed_space_is_not_comparable_and_says_what_changed(tmp_path: Path, check: Check) -> None:
    base, pr = checkout(tmp_path, "base", 1.0), checkout(tmp_path, "pr", 1.0, width="8")
    assert check(base, "--json", "base.json")[0] == 0
    code, out, _ = check(pr, "--baseline", base / "base.json", "--json", "r.json")
    assert code == 5  # its one entry not comparable: the comparison compared nothing, which is no pass
    assert "not comparable: " in out and "width=4 is outside the spec's space [8, 8]" in out
    assert "changed since the baseline in specs/gain.toml: the spec's content (hash " in out
    delta = json.loads((pr / "r.json").read_text())["baseline"]["deltas"][0]
    assert delta["status"] == "not_comparable" and delta["before"] == 1.0 and delta["after"] is None


def test_update_baseline_writes_the_report_and_shows_the_drift_without_failing(tmp_path: Path, check: Check) -> None:
    base, pr = checkout(tmp_path, "base", 1.0), checkout(tmp_path, "pr", 1.31)
    assert check(base, "--baseline", "b.json", "--update-baseline")[0] == 0  # no file yet: it is created
    assert json.loads((base / "b.json").read_text())["specs"][0]["invariants"][0]["observed"] == 1.0
    (pr / "b.json").write_text((base / "b.json").read_text())
    code, out, _ = check(pr, "--baseline", "b.json", "--update-baseline", "--html", "html")
    assert code == 0 and "1.00 → 1.31" in out and "--update-baseline: not failing" in out
    assert json.loads((pr / "b.json").read_text())["specs"][0]["invariants"][0]["observed"] == approx(1.31, rel=1e-6)
    page = (pr / "html" / "index.html").read_text()
    assert "Against the baseline" in page and "1.00 → 1.31" in page and "+31.0%" in page
    assert check(pr, "--baseline", "b.json")[0] == 0  # the new numbers are the baseline now


@pytest.mark.parametrize(
    "content, says",
    [
        (None, "no such file; write one with `stability check --json FILE` on the base branch"),
        ("not json", "is not a stability JSON report"),
        (
            '{"schema_version": 1, "specs": []}',
            "is not a stability JSON report (not a stability JSON report of schema_version 2)",
        ),
        (
            '{"schema_version": 2, "specs": [{"file": "x"}]}',
            "is not a stability JSON report (specs[0].name: Field required)",
        ),
        ("fifo", "is not a regular file"),
    ],
    ids=["missing", "not-json", "schema-1", "no-name", "fifo"],
)
def test_a_bad_baseline_is_one_line_and_exit_2_before_anything_runs(
    tmp_path: Path, check: Check, content: str | None, says: str
) -> None:
    base = checkout(tmp_path, "base", 1.0)
    if content == "fifo":
        os.mkfifo(base / "b.json")
    elif content is not None:
        (base / "b.json").write_text(content)
    code, out, err = check(base, "--baseline", "b.json")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("stability: error: --baseline b.json: ") and says in err, err


def test_update_baseline_needs_baseline(tmp_path: Path, check: Check) -> None:
    code, _, err = check(checkout(tmp_path, "base", 1.0), "--update-baseline")
    assert code == 2 and "--update-baseline writes the --baseline FILE; give --baseline FILE too" in err


def test_only_cases_that_differ_are_replayed_on_the_run_executor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A baseline entry whose case is this run's deciding case is read from the run; another is
    replayed as Task(case=…, only=…) with the run's options."""
    base = checkout(tmp_path, "base", 1.0)
    monkeypatch.chdir(base)
    spec = load_spec("specs/gain.toml")
    options = RunOptions(profile="ci")
    result = run_spec(spec, options, case="seed=3")
    outcome = Outcome(task=Task(spec, options, "seed=3"), result=result)
    (base / "b.json").write_text(
        json.dumps(
            {
                "schema_version": SCHEMA_VERSION,
                "specs": [
                    _report_spec(result, "seed=3"),
                    _report_spec(run_spec(spec, options, case="seed=7"), "seed=7"),
                ],
            }
        )
    )
    seen: list[Task] = []

    def replay(tasks: list[Task]) -> list[Outcome]:
        seen.extend(tasks)
        return [Outcome(task=t, result=run_spec(t.spec, t.options, case=t.case, only=t.only)) for t in tasks]

    baseline = load_baseline("b.json")
    assert [e.key.case.rsplit(",", 1)[-1] for e in baseline.entries] == ["seed=3", "seed=7"]
    comparison = compare(baseline, [outcome], replay=replay)
    assert [(t.case, t.only, t.options) for t in seen] == [(baseline.entries[1].key.case, "gradient_arrival", options)]
    assert [(d.status, d.before, d.after) for d in comparison.deltas] == [("within", 1.0, 1.0), ("within", 1.0, 1.0)]
    assert compare(Baseline(path="empty", entries=[]), [outcome], replay=replay).new == [
        "specs/gain.toml::gradient_arrival"
    ]


def _report_spec(result: SpecResult, case: str) -> dict[str, Any]:
    """The JSON report's entry of `result` (a replay of `case`)."""
    (spec,) = to_json([result])["specs"]
    assert spec["invariants"][0]["case"]["seed"] == int(case.split("=")[1])
    return dict(spec)


@pytest.mark.slow  # the baseline comparison through worker processes; in-process in the default run
def test_the_comparison_runs_in_workers_too(tmp_path: Path) -> None:
    """Without --in-process each replay is a worker task like the run's own (the gate's default)."""
    import subprocess
    import sys

    base, pr = checkout(tmp_path, "base", 1.0), checkout(tmp_path, "pr", 1.31)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "STABILITY_PROFILE", "GITHUB_ACTIONS")}

    def run(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "stability", "check", "specs/gain.toml", "--profile", "ci", *args],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    assert (
        run(base, "--case", "seed=11", "--json", "base.json").returncode == 0
    )  # the baseline's case is seed=11, this run's is another
    proc = run(pr, "--baseline", str(base / "base.json"), "--json", "r.json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1.00 → 1.31 (+31.0%, drift limit 10%)" in proc.stdout
    (delta,) = json.loads((pr / "r.json").read_text())["baseline"]["deltas"]
    assert delta["case"].endswith("seed=11") and delta["status"] == "drift" and delta["after"] == approx(1.31, rel=1e-6)


def test_a_move_of_exactly_the_drift_limit_is_within_it(tmp_path: Path, check: Check) -> None:
    # the rule fails a change *larger* than the drift: a gain of 1 → 0.5 (exact in binary, so the
    # ratio halves exactly) is a change of exactly 50%, within a drift of 0.5 and past one of 0.4999
    for drift, code, status in ((0.5, 0, "within"), (0.4999, 1, "drift")):
        base, pr = checkout(tmp_path / str(drift), "base", 1.0), checkout(tmp_path / str(drift), "pr", 0.5)
        for folder in (base, pr):
            spec = folder / "specs" / "gain.toml"
            spec.write_text(
                spec.read_text().replace("lo = 0.5\nhi = 2.0\ndrift = 0.1", f"lo = 0.1\nhi = 10.0\ndrift = {drift}")
            )
        assert check(base, "--json", "base.json")[0] == 0
        got, out, _ = check(pr, "--baseline", base / "base.json", "--json", "r.json")
        (delta,) = json.loads((pr / "r.json").read_text())["baseline"]["deltas"]
        assert (delta["before"], delta["after"], delta["change"]) == (1.0, 0.5, -0.5), delta
        assert got == code and delta["status"] == status, out
