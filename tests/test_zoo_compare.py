"""`stability zoo --compare A B`'s report and command without installing a release: the rows and
the report (stability/report/zoo_compare.py), and the command with both sides stubbed
(stability/cli/zoo.py); `stability zoo` itself with its rows stubbed. The command refuses sides that
would compare nothing (a library that does not import, a folder that holds none, one release twice)
and `--html`, exits 2 when a side refuses every spec and 5 when nothing was compared."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import Cli, one_error
from spec_support import ZOO

from stability.report.zoo_compare import direction_text, markdown, terminal_rows
from stability.run.report_model import CompareRow

PLAIN = """\
name = "plain"
description = "a short plain stack"
family = "plain"

[block]
activation = "tanh"

[space]
depth = [1, 4]
width = 4
batch = 2

[expect.gradient_arrival]
lo = 0.01
hi = 100.0
"""

ROW: dict[str, Any] = {
    "file": "z.toml",
    "spec": "zoo-x",
    "invariant": "gradient_arrival",
    "case": "depth=4,width=8,seed=0",
    "shown": "depth=4",
    "before": 1.5,
    "after": 3.0,
    "change": 1.0,
    "limit": 0.1,
    "status": "drift",
    "why": "rose, toward its bound",
    "direction": "up",
    "toward_bound": True,
}


def _row(**changes: Any) -> CompareRow:
    return CompareRow.model_validate({**ROW, **changes})


def test_a_moved_row_is_shown_with_its_varying_keys_numbers_change_limit_and_direction() -> None:
    assert terminal_rows([_row()]) == [
        ("zoo-x", "gradient_arrival", "depth=4", "1.50 → 3.00", "+100.0%", "10%", "up, toward its bound", ROW["why"])
    ]
    (row,) = terminal_rows([_row(shown="", before=None, after=2.0, change=None, limit=None, direction=None)])
    assert row[2:7] == ("depth=4,width=8,seed=0", "— → 2.00", "—", "—", "—")
    assert terminal_rows([_row(change=0.0)])[0][4] == "0%"
    assert [terminal_rows([_row(change=c)])[0][4] for c in (float("inf"), -float("inf"))] == ["inf", "-inf"]
    assert direction_text(_row(direction=None, toward_bound=True)) == "—"
    assert direction_text(_row(direction="down", toward_bound=None)) == "down"


def test_only_the_moved_rows_are_listed() -> None:
    rows = [_row(), _row(status="within", invariant="variance_growth"), _row(status="not_comparable")]
    assert [r[1] for r in terminal_rows(rows)] == ["gradient_arrival"]


def test_the_markdown_counts_what_it_compared_and_names_each_side_s_releases() -> None:
    rows = [_row(), _row(invariant="variance_growth"), _row(status="not_comparable", invariant="x")]
    md = markdown(
        "timm==1.0",
        "timm==2.0",
        rows,
        {"timm==1.0": {"/long/path/to/q.toml": "/long/path/to/q.toml: block.model: needs timm >= 2"}},
        {"timm==1.0": {"timm": "1.0", "transformers": None, "torch": "2.13.0"}, "timm==2.0": {"timm": "2.0"}},
        compared=2,
    )
    lines = md.splitlines()
    assert lines[0] == "### Zoo numbers: `timm==1.0` → `timm==2.0`"
    assert "- timm==1.0: timm 1.0, torch 2.13.0" in lines and "- timm==2.0: timm 2.0" in lines
    assert "2 number(s) moved past their drift limit, of 2 compared on the same cases and seeds." in lines
    assert [line.split(" | ")[1] for line in lines if line.startswith("| zoo-x")] == [
        "gradient_arrival",
        "variance_growth",
    ]
    assert "- not compared, refused under timm==1.0: `q.toml`: block.model: needs timm >= 2" in lines


# ----------------------------------------------------------------------------- the command, both sides stubbed


def _sides(
    monkeypatch: pytest.MonkeyPatch, *, rows: list[dict[str, Any]], refused: dict[str, list[str]] | None = None
) -> list[dict[str, Any]]:
    """Both sides stubbed: `run_side` writes what a side writes and records how it was asked."""
    from stability.run import release_sides

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(release_sides, "check_sides", lambda a, b, paths: None)

    def run_side(release: Any, paths: list[str], *, depths: Any, out: Path, **kw: Any) -> Path:
        calls.append({"release": release.label, "paths": paths, "depths": depths, **kw})
        out.mkdir(parents=True)
        mine = {p: f"{p}: refused under {release.label}" for p in (refused or {}).get(release.label, [])}
        versions = {"timm": release.label}
        for name, data in (("report", {}), ("refused", mine), ("versions", versions), ("compare", rows)):
            (out / f"{name}.json").write_text(json.dumps(data))
        return out

    monkeypatch.setattr(release_sides, "run_side", run_side)
    return calls


@pytest.fixture
def two(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    return a, b


def test_zoo_compare_runs_side_b_against_side_a_s_report_at_depth_4_and_writes_the_sides_in_order(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, two: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = two
    calls = _sides(monkeypatch, rows=[ROW])
    md = tmp_path / "compare.md"
    code, out, err = cli("zoo", "--compare", a, b, ZOO / "bert.toml", "--md", md)
    assert code == 1, (code, out, err)
    assert [c["release"] for c in calls] == [str(a), str(b)] and [c["depths"] for c in calls] == [(4,), (4,)]
    assert calls[0].get("baseline") is None and calls[1]["baseline"].name == "report.json"
    assert calls[1]["baseline"].parent.name == "a"
    said = " ".join(err.split())
    assert f"families under {a}" in said and f"families under {b}" in said  # progress, without -q
    assert md.read_text(encoding="utf-8").startswith(f"### Zoo numbers: `{a}` → `{b}`")


def test_zoo_compare_quiet_prints_no_progress(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, two: tuple[Path, Path]
) -> None:
    _sides(monkeypatch, rows=[{**ROW, "status": "within"}])
    code, _, err = cli("zoo", "--compare", *two, ZOO / "bert.toml", "-q")
    assert code == 0 and err == ""


def test_zoo_compare_where_a_side_refuses_some_specs_compares_the_rest(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, two: tuple[Path, Path]
) -> None:
    a, b = two
    rows = [{**ROW, "status": "within"}, {**ROW, "status": "not_comparable", "after": None, "change": None}]
    _sides(monkeypatch, rows=rows, refused={str(a): [str(ZOO / "gpt2.toml")]})
    code, out, err = cli("zoo", "--compare", a, b, ZOO / "bert.toml", ZOO / "gpt2.toml", "-q")
    assert code == 0 and "of 1 compared" in out and "not compared, refused under" in out, (code, out, err)


def test_zoo_compare_on_a_folder_without_specs_is_refused_before_either_side_runs(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, two: tuple[Path, Path], tmp_path: Path
) -> None:
    calls = _sides(monkeypatch, rows=[ROW])
    (tmp_path / "empty").mkdir()
    code, _, err = cli("zoo", "--compare", *two, tmp_path / "empty")
    assert code == 2 and "--compare: no spec files under" in err and calls == []


@pytest.mark.parametrize("bad", ["0", "4,0", "-4"])
def test_depths_below_one_are_refused(bad: str) -> None:
    from stability.cli.arg_types import depth_list
    from stability.errors import UsageError

    with pytest.raises(UsageError, match="give positive integers"):
        depth_list(bad)
    assert depth_list("8,4,") == (4, 8)


def test_zoo_rows_are_asked_with_the_budget_and_progress_the_flags_say(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from stability.run import zoo

    asked: list[dict[str, Any]] = []
    monkeypatch.setattr(zoo, "zoo_row", lambda spec, **kw: asked.append(kw) or pytest.skip("rows are not stubbed"))
    spec = tmp_path / "plain.toml"
    spec.write_text(PLAIN, encoding="utf-8")
    for flags in ([], ["--no-budget", "-q"]):
        with pytest.raises(pytest.skip.Exception):
            cli("zoo", spec, "--depths", "4", *flags)
    assert [(k["budget"], k["on_case"] is None) for k in asked] == [(True, False), (False, True)]


def test_zoo_md_and_html_on_one_file_by_a_relative_path_are_refused(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from stability.run import zoo

    monkeypatch.setattr(zoo, "zoo_row", lambda spec, **kw: pytest.fail("ran the zoo"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plain.toml").write_text(PLAIN, encoding="utf-8")
    code, _, err = cli("zoo", "plain.toml", "--md", "out/zoo.html", "--html", "out")
    assert code == 2 and "is also the page --html writes" in err, (code, err)


# ----------------------------------------------------------------------------- refusals and exit codes


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
    pytest.importorskip("transformers")
    (tmp_path / "empty").mkdir()
    b = _stub(tmp_path / "b", '__version__ = "0.0.1"\n')
    one_error(
        cli("zoo", "--compare", tmp_path / "empty", b, ZOO / "bert.toml", "-q"),
        f"release {tmp_path / 'empty'}: the folder holds no transformers",
        "this environment's own",
    )


#: A row with no number after: counted as not compared.
NOT_COMPARABLE: dict[str, Any] = {
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
    _sides(monkeypatch, rows=[NOT_COMPARABLE])
    a, b = (tmp_path / "a", tmp_path / "b")
    a.mkdir(), b.mkdir()
    code, out, err = cli("zoo", "--compare", a, b, ZOO / "bert.toml", "-q")
    assert code == 5 and "of 0 compared" in out and "nothing was compared" in err, (code, out, err)
    within = {**NOT_COMPARABLE, "status": "within", "after": 1.0, "change": 0.0}
    _sides(monkeypatch, rows=[NOT_COMPARABLE, within])
    assert cli("zoo", "--compare", a, b, ZOO / "bert.toml", "-q")[0] == 0  # one number compared, none moved
    _sides(monkeypatch, rows=[{**within, "status": "drift"}])
    assert cli("zoo", "--compare", a, b, ZOO / "bert.toml", "-q")[0] == 1


def test_zoo_compare_where_a_side_refuses_every_spec_exits_2(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    a, b = (tmp_path / "a", tmp_path / "b")
    a.mkdir(), b.mkdir()
    _sides(monkeypatch, rows=[], refused={str(a): [str(ZOO / "bert.toml"), str(ZOO / "gpt2.toml")]})
    code, out, err = cli("zoo", "--compare", a, b, ZOO / "bert.toml", ZOO / "gpt2.toml", "-q")
    assert code == 2 and f"{a} refused every spec (2)" in err and "Traceback" not in err, (code, err)
    assert out.count("not compared, refused under") == 2
