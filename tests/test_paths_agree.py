"""Every path judges alike: for every shipped spec and every invariant it declares, on a handful of
cases, the verdict and the observed number from `stability check --case` (worker processes), from
`--in-process`, from the pytest plugin (`--stability-case`), from a one-point `stability sweep`
and in the HTML report are identical; and a spec's `applies_when` makes the same cases not
applicable everywhere. (One rule per thing, stability/spec/registry.py: a second copy of a rule
in one path would show here as a disagreement.)

Both comparisons are marked slow and run nightly (.ci/nightly, `python -m pytest -m slow`): the
sample (one spec of each kind, on one case) and the full one (every shipped spec, two cases, about
10 minutes on 2 cores). The applies_when check runs in the default suite."""

from __future__ import annotations

import html as html_lib
import json
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from spec_support import ROOT

from stability.cli import main
from stability.numbers import number_text
from stability.report.html import render_html
from stability.run.engine import RunOptions
from stability.run.executor import Task
from stability.run.executors import executor_for
from stability.run.store import Store
from stability.run.sweep import run_sweep
from stability.spec.case import parse_case_string
from stability.spec.load import find_specs, load_spec
from stability.spec.registry import INVARIANTS
from stability.spec.schema import Spec

SPECS = sorted(find_specs([ROOT / "specs"]))
#: A handful of cases every shipped spec can draw: the corner of its space, and the corner with another seed.
CASES = ("seed=0", "seed=7")  # keys left out take the corner's values: seed=0 is the corner itself
#: One spec of each way a result is made (a built-in family, the channel statistics in `extra`, a
#: custom factory, a training run, a library model: bert, specs/zoo/) for the default run; every
#: shipped spec, each family included, under `-m slow` (.ci/nightly).
SAMPLE = (
    "plain_mlp",
    "control_mean_shift_relu",
    "custom_rezero",
    "warmup_free_residual",
    "bert",
)

Outcome = dict[str, tuple[bool, str, bool | None, float | None]]  # invariant → (met, status, verdict passed, observed)


def _key(r: Any) -> tuple[bool, str, bool | None, float | None]:
    v = r.verdict
    return (r.met, r.status, None if v is None else v.passed, None if v is None else v.observed)


def _same(a: Outcome, b: Outcome) -> bool:
    if a.keys() != b.keys():
        return False
    for name in a:
        x, y = a[name], b[name]
        if x[:3] != y[:3]:
            return False
        if not (x[3] == y[3] or (x[3] is not None and y[3] is not None and math.isnan(x[3]) and math.isnan(y[3]))):
            return False
    return True


def _tasks(specs: list[Spec], cases: tuple[str, ...]) -> list[Task]:
    return [Task(spec, RunOptions(profile="ci"), case=c) for spec in specs for c in cases]


def _pytest(paths: list[Path], case: str, tmp_path: Path) -> dict[tuple[str, str], Outcome]:
    """The plugin's results for every item of `paths` at `case`, through a pytest plugin that records them."""
    folder = tmp_path / f"pytest-{len(case)}"
    folder.mkdir()
    (folder / "record_results.py").write_text(
        textwrap.dedent(
            """
            import json, math
            seen = {}
            def pytest_runtest_makereport(item, call):
                r = getattr(item, "result", None)
                if call.when == "call" and r is not None:
                    v = r.verdict
                    passed = None if v is None else v.passed
                    observed = None if v is None else (str(v.observed) if math.isnan(v.observed) else v.observed)
                    seen.setdefault(item.spec.name, {})[r.name] = [r.met, r.status, passed, observed]
            def pytest_sessionfinish(session):
                with open("seen.json", "w") as fh:
                    json.dump(seen, fh)
            """
        )
    )
    (folder / "pytest.ini").write_text("[pytest]\n")
    args = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "record_results",
        "--stability-profile",
        "ci",
        "--rootdir",
        str(folder),
    ]
    args += [f"--stability-case={case}", *map(str, paths)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run(args, cwd=folder, capture_output=True, text=True, timeout=1800, env=env)
    assert (folder / "seen.json").is_file(), run.stdout + run.stderr
    seen = json.loads((folder / "seen.json").read_text())
    return {
        (spec, case): {n: (m, st, p, float(o) if isinstance(o, str) else o) for n, (m, st, p, o) in inv.items()}
        for spec, inv in seen.items()
    }


def _sweep_outcome(spec: Spec, case_text: str, executor: Any, tmp_path: Path) -> Outcome:
    """A one-point, one-seed sweep at the case (depth and seed; every other value the corner's)."""
    case = parse_case_string(case_text, spec)
    names = [n for n, _ in spec.invariants() if not INVARIANTS.get(n).training]
    with Store(tmp_path / f"{spec.name}.sqlite") as store:
        result = run_sweep(
            spec, [], store, executor, seeds=[case.seed], budgets=False, invariants=names, version="paths"
        )
    (point,) = result.points
    out: Outcome = {}
    for n in names:
        holds, _, _, observed = point.verdicts[n]
        out[n] = (bool(holds), "ok" if holds else "failed", None if holds is None else bool(holds), observed)
    return out


def _html_numbers(results: list[Any]) -> list[tuple[str, str]]:
    """(invariant, the observed number as the HTML verdict table prints it), row by row."""
    page = render_html(results, pngs=lambda res: {})
    table = page.split('<table class="verdicts">', 1)[1].split("</table>", 1)[0]
    found = re.findall(r'<td class="inv">(.*?)</td>.*?<td class="num">(.*?)</td>', table, flags=re.S)
    return [(html_lib.unescape(name), html_lib.unescape(number)) for name, number in found]


def _compare(paths: list[Path], cases: tuple[str, ...], tmp_path: Path) -> None:
    specs = [load_spec(p.relative_to(ROOT)) for p in paths]
    tasks = _tasks(specs, cases)
    here = {
        (t.spec.name, t.case): {r.name: _key(r) for r in o.result.results}
        for t, o in zip(tasks, executor_for("in-process").map(tasks), strict=True)
    }
    workers = executor_for("workers", jobs=2)
    there_outcomes = workers.map(tasks)
    there = {
        (t.spec.name, t.case): {r.name: _key(r) for r in o.result.results}
        for t, o in zip(tasks, there_outcomes, strict=True)
    }
    assert there == here or all(_same(there[k], here[k]) for k in here), "workers and in-process disagree"
    plugin: dict[tuple[str, str], Outcome] = {}
    for case in cases:
        plugin.update(_pytest(paths, case, tmp_path))
    for key, outcome in here.items():
        assert _same(plugin[key], outcome), f"pytest disagrees at {key}: {plugin[key]} vs {outcome}"
    # the HTML shows each result's number as the terminal table does (3 significant digits), in order
    ordered = [(t, o.result) for t, o in zip(tasks, there_outcomes, strict=True)]
    by_case: dict[str, list[Any]] = {}
    for t, res in ordered:
        by_case.setdefault(t.case or "", []).append(res)
    for case, results in by_case.items():
        printed = _html_numbers(results)
        expected = [
            (r.name, number_text(r.verdict.observed) if r.verdict is not None else "—")
            for res in results
            for r in res.results
        ]
        assert [(n, shown.split(" ")[0]) for n, shown in printed] == expected, (
            f"the HTML report shows other numbers at case {case!r}"
        )
    for spec in specs:
        if all(INVARIANTS.get(n).training for n, _ in spec.invariants()):
            continue  # a sweep refuses training invariants (tests/test_sweep.py)
        for case in cases:
            swept = _sweep_outcome(spec, case, workers, tmp_path)
            checked = {n: v for n, v in here[(spec.name, case)].items() if n in swept}
            for n in swept:  # the sweep's verdict is "holds on every seed"; met depends on the expectation
                assert (swept[n][2], swept[n][3]) == (checked[n][2], checked[n][3]) or (
                    checked[n][3] is not None
                    and math.isnan(checked[n][3])
                    and swept[n][3] is not None
                    and math.isnan(swept[n][3])
                ), f"sweep disagrees at {spec.name} {case} {n}: {swept[n]} vs {checked[n]}"


@pytest.mark.slow  # five specs through five paths, a pytest run in a subprocess among them (.ci/nightly runs it)
def test_a_sample_of_families_judges_alike_on_every_path(tmp_path: Path) -> None:
    _compare([p for p in SPECS if p.stem in SAMPLE], CASES[:1], tmp_path)


#: The shipped specs in this many parts, so pytest -n spreads the whole comparison over its workers.
PARTS = 4
#: Invariants whose one case is a grid of whole training runs (lr_sensitivity: ~40 s of CPU a case,
#: four fifths of the comparison's time): their specs are compared on their corner alone.
GRID_RUNS = {"lr_sensitivity"}


@pytest.mark.slow
@pytest.mark.parametrize("part", range(PARTS))
def test_every_shipped_spec_judges_alike_on_every_path(tmp_path: Path, part: int) -> None:
    mine = SPECS[part::PARTS]
    grids = [p for p in mine if any(n in GRID_RUNS for n, _ in load_spec(p).invariants())]
    _compare([p for p in mine if p not in grids], CASES, tmp_path)
    if grids:
        (tmp_path / "grids").mkdir()
        _compare(grids, CASES[:1], tmp_path / "grids")


def test_applies_when_makes_the_same_cases_not_applicable_on_every_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_text = (
        (ROOT / "specs" / "plain_mlp.toml")
        .read_text()
        .replace("[expect.gradient_arrival]", "[expect.gradient_arrival]\napplies_when = { depth = [1, 2, 3] }", 1)
    )
    path = tmp_path / "specs" / "narrow.toml"
    path.parent.mkdir()
    path.write_text(spec_text.replace('name = "plain-mlp"', 'name = "narrow"'))
    # check and the JSON report: depth 5 is not applicable, depth 2 is judged
    main(
        [
            "check",
            str(path),
            "--case",
            "depth=5",
            "--json",
            str(tmp_path / "five.json"),
            "--html",
            str(tmp_path / "html"),
        ]
    )
    capsys.readouterr()
    five = {r["name"]: r for r in json.loads((tmp_path / "five.json").read_text())["specs"][0]["invariants"]}
    assert (
        five["gradient_arrival"]["status"] == "not_applicable" and five["variance_growth"]["status"] != "not_applicable"
    )
    page = (tmp_path / "html" / "index.html").read_text()
    assert (
        'title="not applicable"' in page
        and "✗" not in re.sub(r"<style>.*?</style>", "", page, flags=re.S).split("gradient_arrival")[1][:300]
    )
    main(["check", str(path), "--case", "depth=2", "--json", str(tmp_path / "two.json")])
    capsys.readouterr()
    two = {r["name"]: r for r in json.loads((tmp_path / "two.json").read_text())["specs"][0]["invariants"]}
    assert two["gradient_arrival"]["status"] in ("ok", "failed") and two["gradient_arrival"]["verdict"] is not None
    # a sweep: the point at depth 5 is not applicable, at depth 2 it is judged
    spec = load_spec(path)
    with Store(tmp_path / "s.sqlite") as store:
        from stability.run.grid import parse_axis

        result = run_sweep(spec, [parse_axis("depth=2,5")], store, seeds=[0], budgets=False)
    by_depth = {p.point["depth"]: p.verdicts["gradient_arrival"] for p in result.points}
    assert by_depth[5][0] is None and "applies_when" in by_depth[5][2]
    assert by_depth[2][0] is not None
    # the search only ever judges applicable cases
    (outcome,) = executor_for("in-process").map([Task(spec, RunOptions(profile="ci"), only="gradient_arrival")])
    assert outcome.result.results[0].judged and all(c.depth <= 3 for c in outcome.result.results[0].judged)
