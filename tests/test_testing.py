"""`stability.given_spec` (stability/testing.py): the README's API snippet on a failing spec fails
within a minute with a message ending in the `stability check … --case …` command, which replays
the failure; shrinking stops at its budget; the depth is bisected as the CLI bisects it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from spec_support import ROOT

from stability import given_spec
from stability.cli import main
from stability.spec.case import Case, reproduce_command
from stability.spec.load import parse_spec

CLAIM = "docs/examples/highway_claim.toml"  # the README's failing example: depth=3 fails


def _readme_snippet() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    body = next(m.group(1) for m in re.finditer(r"```python\n(.*?)```", text, re.S) if "given_spec" in m.group(1))
    assert 'load_spec("specs/preact_mlp.toml")' in body
    return body.replace('load_spec("specs/preact_mlp.toml")', f'load_spec("{CLAIM}")')


@pytest.mark.slow  # a failing search shrunk, then its replay
def test_the_readme_snippet_on_a_failing_spec_fails_with_the_smallest_case_and_the_command_that_replays_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    test_file = tmp_path / "test_readme_snippet.py"
    test_file.write_text(_readme_snippet(), encoding="utf-8")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", str(test_file), "-q", "-p", "no:cacheprovider", f"--rootdir={tmp_path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    message = [line.removeprefix("E").strip() for line in run.stdout.splitlines() if line.startswith("E ")]
    assert message[0].startswith(
        "stability.assertions.StabilityAssertionError: gradient_arrival violated: gradient ratio 0.00169 < 0.01"
    )
    assert message[-1].startswith(f"reproduce: stability check {CLAIM} --case depth=3,"), message
    assert "PLEASE REPORT" not in run.stdout + run.stderr
    command = message[-1].removeprefix("reproduce: ").split()
    assert command[:2] == ["stability", "check"]
    capsys.readouterr()
    monkeypatch.chdir(ROOT)
    assert (
        main([*command[1:], "--profile", "ci"]) == 1
    )  # the spec's own check on that case fails too, with the same number
    assert "gradient ratio 0.00169 < 0.01" in capsys.readouterr().out


SPACE = """
name = "deep"
description = "cases only: the test below never builds a network"
family = "plain"
[space]
depth = [1, 64]
width = [4, 64]
batch = 2
[expect.gradient_arrival]
lo = 0.1
hi = 10.0
"""


def _run(shrink_seconds: float) -> tuple[list[Case], Case, AssertionError]:
    """The cases a failing test was called with (in order), the first that failed, and what was raised."""
    spec = parse_spec(SPACE)
    calls: list[Case] = []

    @given_spec(spec, profile="ci", shrink_seconds=shrink_seconds)
    def test_fails_from_depth_5_at_width_8(net) -> None:  # type: ignore[no-untyped-def]
        calls.append(net.case)
        assert not (net.case.depth >= 5 and net.case.width >= 8), "too deep"

    with pytest.raises(AssertionError) as info:
        test_fails_from_depth_5_at_width_8()
    first = next(c for c in calls if c.depth >= 5 and c.width >= 8)
    return calls, first, info.value


def test_shrinking_stops_at_its_budget_and_the_depth_is_bisected() -> None:
    """With no shrink budget, nothing new is tried after the first failure but the depth bisection
    of that very case; with a large one, Hypothesis shrinks the width too. Either way the failure
    ends with the command that replays the smallest failing depth, 5."""
    calls, first, exc = _run(0.0)
    after = calls[calls.index(first) + 1 :]
    assert all(
        c == first
        or (c.width, c.batch, c.seed, c.weight_init) == (first.width, first.batch, first.seed, first.weight_init)
        for c in after
    ), after
    assert len(set(after) - {first}) <= 7  # log2(64) + 1 bisection trials
    smallest = Case(**{**first.as_dict(), "depth": 5})
    notes = exc.__notes__
    assert notes[-1] == f"reproduce: {reproduce_command(parse_spec(SPACE), smallest)}"
    assert notes[-2] == f"Failing case: {smallest}"

    calls, first, exc = _run(1e9)
    after = calls[calls.index(first) + 1 :]
    assert any(c.width != first.width for c in after)  # the shrinker went on: what the budget cuts short
    assert exc.__notes__[-1].startswith("reproduce: stability check '<string>' --case depth=5,width=8,")


def test_a_negative_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="shrink_seconds"):
        given_spec(parse_spec(SPACE), shrink_seconds=-1)
