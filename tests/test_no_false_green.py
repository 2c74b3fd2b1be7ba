"""No false green on the newest surfaces: each break of the round-5 hostile trial (issue 51), through
the command line where the promise is the command line's (the exit code and its one line), and
through the report where it is the report's.

- a per-case time limit too long for the timers (`case_timeout = 1e308`) is no limit, not exit 3;
- `drift = inf` is the documented "never", not refused;
- a value given as '' is refused for every option and argument (`zoo --depths ''`, `--compare '' ''`);
- `zoo --compare` refuses sides that would compare nothing (a library that does not import, a folder
  that holds none, one release twice), exits 2 when a side refuses every spec and 5 when nothing was
  compared, and refuses `--html`; `check --baseline` exits 5 when the baseline compared nothing;
- an option a mode does nothing with is refused, never silently ignored;
- `init_conformance` is never met on a model with no parameter, and `std = -1` is refused;
- an annotation's `file=` round-trips a newline, and its line is read from the path the check was
  given, whatever folder it runs from.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stability.cli.arg_types import seconds
from stability.report.github import command
from stability.run.guard import LONGEST_LIMIT_S, case_limit, time_limit
from stability.spec.load import parse_spec

Cli = Callable[..., tuple[int, str, str]]
ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "specs" / "zoo"

PLAIN = """\
name = "plain"
description = "a short plain tanh stack"
family = "plain"

[block]
activation = "tanh"

[space]
depth = [1, 2]
width = 4
batch = 2
dtype = ["float64"]
{extra}
[expect.gradient_arrival]
lo = 0.01
hi = 100.0
{expect}
"""


def one_error(result: tuple[int, str, str], *needles: str) -> str:
    """The run exited 2 with one line on stderr holding every needle, and no traceback."""
    code, _, err = result
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, (code, err)
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# ----------------------------------------------------------------------------- the time limit


def test_a_limit_longer_than_the_timers_hold_is_no_limit() -> None:
    spec = parse_spec(PLAIN.format(extra="[probe]\ncase_timeout = 1e308\n", expect=""))
    assert case_limit(spec, 120.0) is None  # raised to 1e308: no limit, not an overflow
    assert case_limit(spec, 0.0) is None
    small = parse_spec(PLAIN.format(extra="[probe]\ncase_timeout = 900\n", expect=""))
    assert case_limit(small, 120.0) == 900.0 and case_limit(small, LONGEST_LIMIT_S * 2) is None
    with time_limit(1e308):  # the in-process timer (and a train.seconds = 1e308) sets nothing it cannot hold
        pass
    assert seconds("1e308") == 1e308


def test_case_timeout_1e308_runs_the_spec_in_workers_and_exits_0(write_spec: Callable[..., Path], cli: Cli) -> None:
    """It was an OverflowError in the parent's wait on its workers, exit 3 (the spec's limit and the
    option's meet in `case_limit`)."""
    path = write_spec(PLAIN.format(extra="[probe]\ncase_timeout = 1e308\n", expect=""))
    code, out, err = cli("check", path, "--profile", "ci", "-q", "--jobs", "1", "--case-timeout", "1e308")
    assert code == 0 and "1 met" in out and "Traceback" not in err, (code, out, err)


# ----------------------------------------------------------------------------- drift = inf


def test_drift_inf_is_never_and_loads(write_spec: Callable[..., Path], cli: Cli, tmp_path: Path) -> None:
    path = write_spec(PLAIN.format(extra="", expect="drift = inf\n"))
    assert math.isinf(parse_spec(path.read_text()).expect.gradient_arrival.drift)
    base = tmp_path / "base.json"
    assert cli("check", path, "--profile", "ci", "--in-process", "-q", "--json", base)[0] == 0
    data = json.loads(base.read_text())
    for inv in data["specs"][0]["invariants"]:  # the baseline's number moved a long way: never a drift with inf
        inv["observed"] = inv["observed"] * 1e6
    base.write_text(json.dumps(data))
    code, out, _ = cli("check", path, "--profile", "ci", "--in-process", "-q", "--baseline", base)
    assert code == 0 and "1 expectation(s) compared on the same cases, 0 moved" in out, out
    bad = write_spec(PLAIN.format(extra="", expect="drift = nan\n"), "nan.toml")
    one_error(cli("check", bad, "-q"), "drift = nan", "at least 0")


# ----------------------------------------------------------------------------- empty values


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["zoo", "--depths", ""], "zoo --depths ''"),
        (["zoo", "--compare", "", ""], "zoo --compare ''"),
        (["check", "{spec}", "--json", ""], "check --json ''"),
        (["check", "{spec}", "--case", ""], "check --case ''"),
        (["check", "{spec}", "--baseline", ""], "check --baseline ''"),
        (["check", ""], "check PATHS ''"),
        (["check", "{spec}", "--source-root", ""], "check --source-root ''"),
        (["sweep", "{spec}", "--db", ""], "sweep --db ''"),
        (["suggest", "{spec}", "--out", ""], "suggest --out ''"),
        (["list", ""], "list PATHS ''"),
    ],
)
def test_an_empty_value_is_refused_never_read_as_not_given(
    write_spec: Callable[..., Path], cli: Cli, args: list[str], needle: str
) -> None:
    """`--depths ''` ran the zoo on its default depths and `--compare '' ''` compared the current
    folder with itself: both exit 0. An unset shell variable expands to ''."""
    path = write_spec(PLAIN.format(extra="", expect=""))
    one_error(cli(*(str(path) if a == "{spec}" else a for a in args)), needle, "an empty value")


# ----------------------------------------------------------------------------- zoo --compare


def _stub(folder: Path, body: str) -> Path:
    """A folder of packages holding a `transformers` whose __init__ is `body` (imported in a child)."""
    (folder / "transformers").mkdir(parents=True)
    (folder / "transformers" / "__init__.py").write_text(body)
    return folder


def test_zoo_compare_html_is_refused(cli: Cli, tmp_path: Path) -> None:
    """`--html DIR` was accepted and silently ignored by `zoo --compare`."""
    one_error(
        cli("zoo", "--compare", "transformers==4.53.3", "transformers==4.54.1", ZOO / "bert.toml", "--html", tmp_path),
        "--html",
        "--md FILE",
    )


def test_zoo_compare_of_one_release_twice_is_refused_naming_it(cli: Cli, tmp_path: Path) -> None:
    """Two folders that import the same release compare it with itself: refused before either side runs."""
    a = _stub(tmp_path / "a", '__version__ = "0.0.1"\n')
    b = _stub(tmp_path / "b", '__version__ = "0.0.1"\n')
    one_error(cli("zoo", "--compare", a, b, ZOO / "bert.toml", "-q"), "both import transformers 0.0.1", "itself")
    one_error(
        cli("zoo", "--compare", "transformers==4.53.3", "transformers==4.53.3", ZOO / "bert.toml"),
        "are the same release",
    )


def test_zoo_compare_where_the_library_does_not_import_is_refused(cli: Cli, tmp_path: Path) -> None:
    """Neither side could import the library: every spec was refused on both, "0 compared", exit 0."""
    a = _stub(tmp_path / "a", 'raise ImportError("broken on purpose")\n')
    b = _stub(tmp_path / "b", 'raise ImportError("broken on purpose")\n')
    one_error(
        cli("zoo", "--compare", a, b, ZOO / "bert.toml", "-q"),
        f"release {a}: transformers does not import under it (ImportError: broken on purpose)",
    )


def test_zoo_compare_of_a_folder_without_the_library_is_refused(cli: Cli, tmp_path: Path) -> None:
    """An empty folder imports this environment's own release under the folder's name."""
    (tmp_path / "empty").mkdir()
    b = _stub(tmp_path / "b", '__version__ = "0.0.1"\n')
    one_error(
        cli("zoo", "--compare", tmp_path / "empty", b, ZOO / "bert.toml", "-q"),
        f"release {tmp_path / 'empty'}: the folder holds no transformers",
        "this environment's own",
    )


def _sides(monkeypatch: pytest.MonkeyPatch, *, rows: list[dict[str, Any]], refused_a: str = "") -> None:
    """Both sides stubbed (`run_side` writes what a side writes), the sides' check passed."""
    from stability.run import release_sides

    monkeypatch.setattr(release_sides, "check_sides", lambda a, b, paths: None)

    def run_side(release: Any, paths: list[str], *, depths: Any, out: Path, **kw: Any) -> Path:
        out.mkdir(parents=True)
        refused = {p: f"{p}: refused" for p in paths} if release.label.endswith(refused_a or "\0") else {}
        for name, data in (("report", {}), ("refused", refused), ("versions", {}), ("compare", rows)):
            (out / f"{name}.json").write_text(json.dumps(data))
        return out

    monkeypatch.setattr(release_sides, "run_side", run_side)


ROW = {
    "file": "z.toml",
    "spec": "zoo-x",
    "invariant": "gradient_arrival",
    "case": "depth=4",
    "shown": "depth=4",
    "before": 1.0,
    "after": None,
    "change": None,
    "limit": 0.1,
    "status": "not_comparable",
    "why": "no number to compare",
    "direction": None,
    "toward_bound": None,
}


def test_zoo_compare_that_compared_nothing_exits_5(cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _sides(monkeypatch, rows=[ROW])
    a, b = (tmp_path / "a", tmp_path / "b")
    a.mkdir(), b.mkdir()
    code, out, err = cli("zoo", "--compare", a, b, ZOO / "bert.toml", "-q")
    assert code == 5 and "of 0 compared" in out and "nothing was compared" in err, (code, out, err)
    within = {**ROW, "status": "within", "after": 1.0, "change": 0.0}
    _sides(monkeypatch, rows=[ROW, within])
    assert cli("zoo", "--compare", a, b, ZOO / "bert.toml", "-q")[0] == 0  # one number compared, none moved
    _sides(monkeypatch, rows=[{**within, "status": "drift"}])
    assert cli("zoo", "--compare", a, b, ZOO / "bert.toml", "-q")[0] == 1


def test_zoo_compare_where_a_side_refuses_every_spec_exits_2(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    a, b = (tmp_path / "a", tmp_path / "b")
    a.mkdir(), b.mkdir()
    _sides(monkeypatch, rows=[], refused_a=str(a))
    code, out, err = cli("zoo", "--compare", a, b, ZOO / "bert.toml", ZOO / "gpt2.toml", "-q")
    assert code == 2 and f"{a} refused every spec (2)" in err and "Traceback" not in err, (code, err)
    assert out.count("not compared, refused under") == 2


def test_the_matrix_with_a_misspelt_sample_or_no_spec_judges_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    from stability.errors import UsageError
    from stability.run.releases import matrix, parse_release

    with pytest.raises(UsageError, match=r"--sample brt: no zoo spec brt.toml in .* \(did you mean \"bert\"\?\)"):
        matrix(parse_release("transformers==4.53.3"), ZOO, sample=["brt"])
    assert matrix(parse_release("timm==1.0.9"), ZOO, sample=["bert"]) == 5  # bert is no timm spec: nothing run
    assert "nothing was judged" in capsys.readouterr().err


# ----------------------------------------------------------------------------- --baseline


def test_a_baseline_that_compares_nothing_exits_5(write_spec: Callable[..., Path], cli: Cli, tmp_path: Path) -> None:
    path = write_spec(PLAIN.format(extra="", expect=""))
    other = write_spec(PLAIN.format(extra="", expect="").replace('name = "plain"', 'name = "other"'), "other.toml")
    base = tmp_path / "base.json"
    assert cli("check", other, "--profile", "ci", "--in-process", "-q", "--json", base)[0] == 0
    code, out, err = cli("check", path, "--profile", "ci", "--in-process", "-q", "--baseline", base)
    assert code == 5 and "0 expectation(s) compared" in out, (code, out, err)
    assert f"nothing was compared against the baseline {base}: it holds no entry" in err
    # writing a first baseline compares nothing, and is no failure
    assert cli("check", path, "--profile", "ci", "--in-process", "-q", "--baseline", base, "--update-baseline")[0] == 0
    assert cli("check", path, "--profile", "ci", "--in-process", "-q", "--baseline", base)[0] == 0  # now it compares


# ----------------------------------------------------------------------------- flags that did nothing


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["check", "{spec}", "--in-process", "--jobs", "3"], "--jobs: --in-process runs the specs in this process"),
        (["check", "{spec}", "--case", "depth=1", "--seed", "4"], "--seed: --case replays one case"),
        (["suggest", "{spec}", "--list"], "--list lists the registered remedies and reads no spec"),
        (["suggest", "--list", "--json", "x.json", "--holds"], "--holds, --json: --list only lists"),
        (["suggest", "{spec}", "--force"], "--force: --force lets --out replace an existing file"),
        (["suggest", "{spec}", "--in-process", "-j", "3"], "--jobs: --in-process runs the remedies"),
        (["sweep", "--compare", "a", "b", "--seeds", "3"], "--seeds: --compare reads budgets from the store"),
        (["sweep", "--compare", "a", "b", "--serial", "--x", "width"], "--serial, --x: --compare reads budgets"),
        (["sweep", "{spec}", "--over", "width=4,8", "--x", "width"], "--x: --x sets the x axis of the HTML report"),
        (["sweep", "{spec}", "--no-budget", "--depth-range", "1:8"], "--depth-range: --depth-range is where"),
        (["sweep", "{spec}", "--serial", "--verbose"], "--verbose: --verbose shows the Dask cluster's warnings"),
        (["zoo", "--compare", "a", "b", "--no-budget"], "--no-budget: --compare measures each family's corner cases"),
    ],
)
def test_an_option_the_mode_does_nothing_with_is_refused(
    write_spec: Callable[..., Path], cli: Cli, args: list[str], needle: str
) -> None:
    path = write_spec(PLAIN.format(extra="", expect=""))
    one_error(cli(*(str(path) if a == "{spec}" else a for a in args)), needle, "drop")


@pytest.mark.slow  # a pytest run in a subprocess each
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--stability-case-timeout", "-1"], "'-1' is not a time limit"),
        (["--stability-case", ""], "--stability-case '': an empty value"),
    ],
)
def test_the_pytest_options_refuse_what_stability_check_refuses(tmp_path: Path, args: list[str], needle: str) -> None:
    """A negative time limit was no limit, and an empty case a search, where `stability check` refuses both."""
    (tmp_path / "spec.toml").write_text(PLAIN.format(extra="", expect=""))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", "spec.toml", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == pytest.ExitCode.USAGE_ERROR and needle in run.stderr, (run.returncode, run.stderr)


# ----------------------------------------------------------------------------- init_conformance


NO_PARAMETERS = """
import torch
from torch import nn


class Scale(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x


def scales(depth: int, width: int) -> nn.Sequential:
    return nn.Sequential(*[Scale() for _ in range(depth)])
"""

SCALES = """\
name = "scales"
description = "blocks without a parameter"
family = "custom"

[block]
factory = "scales_factory:scales"

[space]
depth = [1, 3]
width = 4
batch = 2

[expect.init_conformance]
rules = [{{ param = "weight", law = "normal", std = {std}, source = "the test" }}]
{extra}
"""


@pytest.mark.parametrize("extra", ["", 'uncovered = "allow"'])
def test_init_conformance_on_a_model_with_no_parameter_is_not_met(cli: Cli, tmp_path: Path, extra: str) -> None:
    """It was exit 0, "1 met": the rule held for each of no parameters."""
    (tmp_path / "scales_factory.py").write_text(NO_PARAMETERS)
    path = tmp_path / "scales.toml"
    path.write_text(SCALES.format(std="0.02", extra=extra))
    report = tmp_path / "r.json"
    code, out, _ = cli("check", path, "--profile", "ci", "--in-process", "-q", "--json", report)
    assert code == 1 and "0 met, 1 not met" in out, (code, out)
    (inv,) = json.loads(report.read_text())["specs"][0]["invariants"]
    assert inv["met"] is False and "nothing was judged: it has no parameters" in inv["message"], inv


def test_an_init_rule_with_a_negative_std_is_refused(cli: Cli, tmp_path: Path) -> None:
    """It was accepted and reported as "declared N(0, 1²)"."""
    path = tmp_path / "scales.toml"
    path.write_text(SCALES.format(std="-1", extra=""))
    one_error(cli("check", path, "-q"), "rules[0].std = -1", "is negative", "write 1.0")


def test_an_init_rule_whose_std_computes_negative_cannot_be_read() -> None:
    from types import SimpleNamespace

    from stability.judge.init_conformance import init_conformance
    from stability.measure.init_stats import InitRecord
    from stability.spec.init_expect import InitConformance

    e = InitConformance.model_validate(
        {"rules": [{"param": "weight", "law": "normal", "std": "0.02 - fan_in", "source": "t"}]}
    )
    p = SimpleNamespace(
        name="0.weight", module=["Linear"], within=[], fan_in=4, fan_out=4, n=16, mean=0.0, var=1e-4, min=-0.05
    )
    p.max, p.eps = 0.05, 0.0
    record = InitRecord(model=("Sequential",), variables={}, parameters=(p,))  # type: ignore[arg-type]
    v = init_conformance(SimpleNamespace(extra={"init_conformance": record}), e)
    assert not v.measured and "its std = '0.02 - fan_in' is -3.98 for this model" in v.detail, v


# ----------------------------------------------------------------------------- annotations


def test_an_annotations_file_property_round_trips_a_newline() -> None:
    """The newline was shown as `\\x0a`, which the runner reads as four characters: the annotation
    landed on no file."""
    line = command("error", "m", file="specs/a\nb\r.toml", title="t", line=3)
    props = dict(p.split("=", 1) for p in line.split("::")[1].split(" ", 1)[1].split(","))
    runner = props["file"].replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",")
    assert runner.replace("%25", "%") == "specs/a\nb\r.toml"
    # a command after the break is still neutralised (":\:error"), before the runner's escapes
    assert "file=a%0A%3A\\%3Aerror" in command("error", "m", file="a\n::error::x")


FAILING = """\
name = "sigmoid"
description = "a plain sigmoid stack: the gradient vanishes"
family = "plain"

[block]
activation = "sigmoid"

[space]
depth = [20, 30]
width = 4
batch = 2
weight_init = ["xavier_normal"]

# the expectation's table is on line 15
[expect.gradient_arrival]
lo = 0.01
hi = 100.0
"""


@pytest.mark.parametrize("name", ["x.toml", "new\nline.toml"])
def test_annotations_point_at_the_expectations_line_from_another_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """Run from a folder that is not the workspace, every annotation pointed at line 1 when the line
    was read from the workspace-relative path; the spec file name may hold a newline."""
    from stability.cli import main

    sub = tmp_path / "repo" / "project"
    (sub / "specs").mkdir(parents=True)
    (sub / "specs" / name).write_text(FAILING)
    summary = tmp_path / "summary.md"
    monkeypatch.chdir(sub)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path / "repo"))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert FAILING.splitlines()[14] == "[expect.gradient_arrival]"
    capsys.readouterr()
    code = main(["check", f"specs/{name}", "--profile", "ci", "--in-process", "-q", "--sarif", "out.sarif"])
    out = capsys.readouterr().out
    assert code == 1
    (line,) = [x for x in out.splitlines() if x.startswith("::error")]
    props = dict(p.split("=", 1) for p in line.split("::")[1].split(" ", 1)[1].split(","))
    assert props["line"] == "15", line
    assert props["file"].replace("%0A", "\n") == f"project/specs/{name}", line
    sarif = json.loads(Path("out.sarif").read_text())
    (result,) = sarif["runs"][0]["results"]
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == 15
    assert re.search(r"line 15\)", summary.read_text()), summary.read_text()


# ----------------------------------------------------------------------------- judged nothing


def test_no_probe_invariant_is_evidence_on_a_network_with_no_block() -> None:
    """Every probe verdict passes through `conclude.judge`: a network with no block judged nothing,
    whatever its judge would say of one boundary (a gradient ratio of 1, an exact identity)."""
    from stability.judge.verdict import is_evidence
    from stability.measure.probe import Measurements
    from stability.run.conclude import judge
    from stability.run.results import CaseRecord
    from stability.spec.case import corner_case
    from stability.spec.registry import INVARIANTS

    spec = parse_spec(
        PLAIN.format(extra="", expect="[expect.variance_growth]\n[expect.lesion]\n").replace('"plain"', '"preact"', 1)
    )
    m = Measurements(
        grad_norm=[1.0],
        act_var=[1.0],
        act_sq_mean=[1.0],
        param_grad_norm={},
        identity_error=0.0,
        input_grad_error=0.0,
        nonfinite_at=None,
    )
    record = CaseRecord(case=corner_case(spec), measurements=m)
    names = [n for n, _ in spec.invariants() if not INVARIANTS.get(n).training]
    assert names == ["gradient_arrival", "variance_growth", "lesion"]
    m.extra["lesion"] = [0.0]
    for name in names:
        assert INVARIANTS.get(name).judge(m, getattr(spec.expect, name)).passed  # the judge alone: a pass
        v = judge(spec, name, record)
        assert not is_evidence(v) and "no block" in v.detail, v
