"""The baseline's edges (stability/report/baseline.py and baseline_load.py, its callers in
stability/check_cli.py): bounded input, `--update-baseline` on a run that could not judge a spec,
drift either way with its direction named (negative controls too), crossing the bound within the
drift, spec paths written in any form, what `--update-baseline` annotates on GitHub, `drift = inf` as
the documented "never", and exit 5 when the baseline compared nothing."""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from approx_support import approx
from cli_support import PLAIN, Cli, one_error
from test_baseline import MODULE, checkout

from stability.cli import main
from stability.report import baseline_load
from stability.report.baseline import spec_key
from stability.report.baseline_load import MAX_DEPTH, _depth
from stability.spec.load import parse_spec

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    """run(folder, *argv) → (exit code, stdout, stderr) of
    `stability check --profile ci --in-process ARGV` in `folder`."""
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)

    def go(folder: Path, *argv: str | Path) -> tuple[int, str, str]:
        monkeypatch.chdir(folder)
        capsys.readouterr()
        code = main(["check", "--profile", "ci", "--in-process", *map(str, argv)])
        out, err = capsys.readouterr()
        return code, out, err

    return go


def _deltas(path: Path) -> list[dict[str, object]]:
    return list(json.loads(path.read_text())["baseline"]["deltas"])


# ----------------------------------------------------------------------------- bounded input


def test_depth_counts_arrays_and_objects_but_not_brackets_in_strings() -> None:
    assert _depth("") == 0 and _depth("1") == 0 and _depth("[]") == 1 and _depth('{"a": [[1], {"b": []}]}') == 4
    assert _depth('["[[[[", "\\"[[[", {"k": "{{{"}]') == 2
    assert _depth("[" * 100_000) == MAX_DEPTH + 1  # stops counting past the limit


def test_100000_nested_brackets_are_one_line_and_exit_2(tmp_path: Path, run: Run) -> None:
    base = checkout(tmp_path, "base", 1.0)
    (base / "b.json").write_text("[" * 100_000)
    code, out, err = run(base, "specs/gain.toml", "--baseline", "b.json")
    assert code == 2 and out == "", err
    assert err.count("\n") == 1 and err.startswith(
        "stability: error: --baseline b.json: nests arrays and objects more than 64 deep"
    ), err
    assert "Traceback" not in err and "RecursionError" not in err


def test_a_report_at_the_nesting_limit_is_read(tmp_path: Path, run: Run) -> None:
    """A JSON report whose `extra` holds a value nested up to the limit loads (the limit refuses
    only what is deeper)."""
    base = checkout(tmp_path, "base", 1.0)
    assert run(base, "specs/gain.toml", "--json", "b.json")[0] == 0
    report = json.loads((base / "b.json").read_text())
    deep: object = 1
    for _ in range(MAX_DEPTH - 6):  # report → specs → spec → invariants → entry → extra: 6 levels
        deep = [deep]
    report["specs"][0]["invariants"][0].setdefault("extra", {})["deep"] = deep
    (base / "b.json").write_text(json.dumps(report))
    assert _depth((base / "b.json").read_text()) == MAX_DEPTH
    assert run(base, "specs/gain.toml", "--baseline", "b.json")[0] == 0
    deep = [deep]
    report["specs"][0]["invariants"][0]["extra"]["deep"] = deep
    (base / "b.json").write_text(json.dumps(report))
    code, _, err = run(base, "specs/gain.toml", "--baseline", "b.json")
    assert code == 2 and "nests arrays and objects more than 64 deep" in err


def test_a_baseline_over_the_size_limit_is_one_line_and_exit_2(
    tmp_path: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = checkout(tmp_path, "base", 1.0)
    assert run(base, "specs/gain.toml", "--json", "b.json")[0] == 0
    size = (base / "b.json").stat().st_size
    monkeypatch.setattr(baseline_load, "MAX_BYTES", size)  # exactly at the limit: read
    assert run(base, "specs/gain.toml", "--baseline", "b.json")[0] == 0
    monkeypatch.setattr(baseline_load, "MAX_BYTES", size - 1)
    code, out, err = run(base, "specs/gain.toml", "--baseline", "b.json")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(
        f"stability: error: --baseline b.json: is {size} bytes, over the limit of {size - 1}"
    ), err


def test_the_default_size_limit_refuses_a_file_past_64_mib_before_reading_it(tmp_path: Path, run: Run) -> None:
    base = checkout(tmp_path, "base", 1.0)
    with open(base / "b.json", "wb") as fh:  # sparse: no 64 MiB written
        fh.truncate(64 * 2**20 + 1)
    code, _, err = run(base, "specs/gain.toml", "--baseline", "b.json")
    assert code == 2 and err.count("\n") == 1 and "over the limit of 67108864 (64 MiB)" in err, err


# ----------------------------------------------------------------------------- --update-baseline on exit 2


def test_update_baseline_on_a_run_that_exits_2_leaves_the_baseline_as_it_was(tmp_path: Path, run: Run) -> None:
    base = checkout(tmp_path, "base", 1.0)
    twin = (base / "specs" / "gain.toml").read_text().replace('name = "gain"', 'name = "twin"')
    (base / "specs" / "twin.toml").write_text(twin)
    assert run(base, "specs", "--baseline", "b.json", "--update-baseline")[0] == 0
    before = (base / "b.json").read_bytes()
    assert {s["name"] for s in json.loads(before)["specs"]} == {"gain", "twin"}
    (base / "specs" / "twin.toml").write_text(
        twin.replace(f'factory = "{MODULE}:make"', 'factory = "stability_no_such_module:make"')
    )
    code, _, err = run(base, "specs", "--baseline", "b.json", "--update-baseline")
    assert code == 2
    assert (base / "b.json").read_bytes() == before  # the twin's entries are not lost
    (line,) = [x for x in err.splitlines() if "--update-baseline" in x]
    assert line == (
        "stability: --update-baseline: b.json not written (left as it was): 1 spec(s) could not be judged, "
        "and a baseline written now would hold no entries for them; fix the errors above and run again"
    )
    (base / "specs" / "twin.toml").write_text(twin)  # fixed: the next comparison still checks the twin
    code, out, _ = run(base, "specs", "--baseline", "b.json")
    assert code == 0 and "2 expectation(s) compared on the same cases" in out


# ----------------------------------------------------------------------------- drift either way


CONTROL = """\
name = "gain-control"
description = "y = g x with g outside [0.5, 2]: a negative control"
family = "custom"

[block]
factory = "{module}:make"

[space]
depth = 1
width = 4
batch = 2

[expect.gradient_arrival]
expect = "violated"
lo = 0.5
hi = 2.0
drift = 0.1
"""


@pytest.mark.parametrize(
    "before, after, code, says",
    [
        (4.0, 8.0, 1, "rose, away from its bound, by more than"),
        (4.0, 3.0, 1, "fell, toward its bound, by more than"),
        (4.0, 4.2, 0, "rose, away from its bound, within"),
    ],
    ids=["away", "toward", "within"],
)
def test_a_negative_control_drifts_both_ways(
    tmp_path: Path, run: Run, before: float, after: float, code: int, says: str
) -> None:
    """The gradient ratio of a violated band growing from 4 to 8 is a worse model, not a safer control."""
    folders = []
    for name, gain in (("base", before), ("pr", after)):
        folder = checkout(tmp_path, name, gain)
        (folder / "specs" / "gain.toml").write_text(CONTROL.format(module=MODULE))
        folders.append(folder)
    base, pr = folders
    assert run(base, "specs/gain.toml", "--json", "base.json")[0] == 0
    got, out, _ = run(pr, "specs/gain.toml", "--baseline", base / "base.json", "--json", "r.json")
    assert got == code, out
    (delta,) = _deltas(pr / "r.json")
    assert delta["status"] == ("drift" if code else "within") and str(delta["why"]).startswith(says), delta


def test_crossing_the_bound_fails_even_within_the_drift(tmp_path: Path, run: Run) -> None:
    """1.95 → 2.05 in [0.5, 2] is a 5% move, inside the 10% drift, but the case no longer holds."""
    base, pr = checkout(tmp_path, "base", 1.95), checkout(tmp_path, "pr", 2.05)
    assert run(base, "specs/gain.toml", "--json", "base.json")[0] == 0
    code, out, _ = run(pr, "specs/gain.toml", "--baseline", base / "base.json", "--json", "r.json")
    assert code == 1
    (delta,) = _deltas(pr / "r.json")
    assert delta["status"] == "drift" and delta["why"] == "the case no longer meets the expectation", delta
    assert json.loads((pr / "r.json").read_text())["baseline"]["failed"] is True
    assert "1 moved past the drift limit" in out


# ----------------------------------------------------------------------------- keys


@pytest.mark.parametrize("written", ["./specs/gain.toml", "specs/../specs/gain.toml", "ABSOLUTE"])
@pytest.mark.parametrize("given", ["specs/gain.toml", "./specs//gain.toml", "ABSOLUTE"])
def test_a_baseline_entry_is_compared_whatever_form_its_path_takes(
    tmp_path: Path, run: Run, written: str, given: str
) -> None:
    folder = checkout(tmp_path, "pr", 1.31)
    absolute = str(folder / "specs" / "gain.toml")
    assert (
        run(folder, absolute if written == "ABSOLUTE" else written, "--case", "seed=5", "--json", "base.json")[0] == 0
    )
    code, out, _ = run(
        folder, absolute if given == "ABSOLUTE" else given, "--baseline", "base.json", "--json", "r.json"
    )
    assert code == 0 and "1 expectation(s) compared on the same cases, 0 moved past the drift limit" in out, out
    (delta,) = _deltas(folder / "r.json")  # the baseline's seed=5 case, replayed (not this run's deciding case)
    assert (
        delta["case"] == "depth=1,width=4,batch=2,init=default,branch_init=default,dtype=float32,device=cpu,seed=5"
        and delta["file"] == "specs/gain.toml"
    )
    assert delta["status"] == "within" and delta["before"] == delta["after"] == approx(1.31, rel=1e-6)


def test_spec_key_is_one_form_for_every_spelling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    forms = [
        "specs/x.toml",
        "./specs/x.toml",
        "specs/../specs/x.toml",
        "specs//x.toml",
        str(tmp_path / "specs" / "x.toml"),
    ]
    assert {spec_key(f) for f in forms} == {os.path.join("specs", "x.toml")}
    assert spec_key("/elsewhere/../elsewhere/x.toml") == "/elsewhere/x.toml"  # outside this folder: absolute
    assert (
        spec_key(str(tmp_path) + "-sibling/x.toml") == str(tmp_path) + "-sibling/x.toml"
    )  # a prefix of the name is not a parent


# ----------------------------------------------------------------------------- GitHub, while updating


def test_update_baseline_annotates_drift_as_a_warning_not_an_error(tmp_path: Path, run: Run) -> None:
    base, pr = checkout(tmp_path, "base", 1.0), checkout(tmp_path, "pr", 1.31)
    assert run(base, "specs/gain.toml", "--json", "b.json")[0] == 0
    shutil.copy(base / "b.json", pr / "b.json")
    code, out, _ = run(pr, "specs/gain.toml", "--baseline", "b.json", "--github")
    assert code == 1
    assert [x.split(" ", 1)[0] for x in out.splitlines() if x.startswith("::") and "drift limit" in x] == ["::error"]
    shutil.copy(base / "b.json", pr / "b.json")
    code, out, _ = run(pr, "specs/gain.toml", "--baseline", "b.json", "--update-baseline", "--github")
    assert code == 0
    drift = [x for x in out.splitlines() if x.startswith("::") and "drift limit" in x]
    assert (
        len(drift) == 1
        and drift[0].startswith("::warning ")
        and "title=stability%3A gradient_arrival moved past its drift" in drift[0]
    ), drift
    assert not [x for x in out.splitlines() if x.startswith("::error")]


# ----------------------------------------------------------------------------- the noise a replay has


REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "spec, case",
    [
        pytest.param("specs/plain_mlp.toml", None, marks=pytest.mark.slow),
        ("specs/transformer_preln.toml", None),
        pytest.param("specs/zoo/gpt2.toml", "depth=3,seed=7", marks=pytest.mark.slow),
        pytest.param("specs/zoo/llama.toml", "depth=2,seed=1", marks=pytest.mark.slow),
    ],
    ids=["plain-mlp", "transformer-preln", "zoo-gpt2", "zoo-llama"],
)
def test_a_rerun_with_the_same_cases_and_seeds_shows_zero_drift(
    tmp_path: Path, run: Run, spec: str, case: str | None
) -> None:
    """The replay is bit for bit: on unchanged code every number's change is exactly 0, so any
    drift limit above 0 flags only a change of the code (docs/ci.md)."""
    if spec.startswith("specs/zoo/"):
        pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[hf]')")
    given = ["--case", case] if case else []
    assert run(REPO, spec, *given, "--json", tmp_path / "base.json")[0] == 0
    code, out, _ = run(REPO, spec, *given, "--baseline", tmp_path / "base.json", "--json", tmp_path / "r.json")
    assert code == 0, out
    deltas = _deltas(tmp_path / "r.json")
    assert deltas and all(d["status"] == "within" and d["change"] == 0 and d["why"] == "unchanged" for d in deltas), (
        deltas
    )


# ----------------------------------------------------------------------------- drift = inf; nothing compared


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
