"""One side of `stability zoo --compare A B` run here, in this process, on tiny plain stacks
(stability/report/release_side.py): the two sides are this environment twice, the spec's block
changed between them so its numbers move."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from stability.report import release_side

SPEC = """\
name = "plain"
description = "a short plain stack"
family = "plain"

[block]
activation = "{activation}"

[space]
depth = [1, 3]
width = 4
batch = 2
dtype = ["float64"]

[expect.gradient_arrival]
lo = 0.01
hi = 100.0
drift = 0.05
"""

REFUSED = SPEC.replace('family = "plain"', 'family = "plain"\nno_such_key = 1')


def _side(out: Path, *args: str) -> dict[str, Any]:
    import torch

    from stability.families import library_lookup

    threads = torch.get_num_threads()
    try:
        with pytest.MonkeyPatch.context() as mp:  # no library release to record: importing timm costs seconds
            mp.setattr(library_lookup, "LIBRARIES", ())
            assert release_side.main(["--out", str(out), *args]) == 0
    finally:  # a side runs on one thread; this process goes on with its own
        torch.set_num_threads(threads)
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in out.glob("*.json")}


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any], Path]:
    tmp_path = tmp_path_factory.mktemp("sides")
    spec, refused, still = tmp_path / "plain.toml", tmp_path / "refused.toml", tmp_path / "still.toml"
    spec.write_text(SPEC.format(activation="tanh"), encoding="utf-8")
    refused.write_text(REFUSED.format(activation="tanh"), encoding="utf-8")
    still.write_text(SPEC.format(activation="tanh").replace('name = "plain"', 'name = "still"'), encoding="utf-8")
    a = _side(tmp_path / "a", "--depths", "1,3", str(spec), str(refused), str(still))
    spec.write_text(SPEC.format(activation="relu"), encoding="utf-8")  # the other "release" builds another block
    b = _side(
        tmp_path / "b", "--depths", "1,3", "--baseline", str(tmp_path / "a" / "report.json"), str(spec), str(still)
    )
    return a, b, spec


def _numbers(report: dict[str, Any]) -> dict[int, float]:
    return {
        int(r["case"]["depth"]): r["observed"]
        for spec in report["specs"]
        if spec["name"] == "plain"
        for r in spec["invariants"]
        if r.get("observed") is not None
    }


def test_a_side_runs_each_spec_s_corner_case_at_every_depth_and_records_what_it_refused_and_imported(
    sides: tuple[dict[str, Any], dict[str, Any], Path],
) -> None:
    a, _, spec = sides
    assert sorted(_numbers(a["report"])) == [1, 3]
    assert {s["profile"] for s in a["report"]["specs"]} == {"thorough"}  # the corner case under the full profile
    assert a["report"]["errors"] in ([], None)
    (why,) = a["refused"].values()
    assert list(a["refused"]) == [str(spec.parent / "refused.toml")] and "no_such_key" in why
    assert a["versions"] == {"torch": metadata.version("torch")}


def test_side_b_compares_each_number_once_with_side_a_s_on_the_same_case(
    sides: tuple[dict[str, Any], dict[str, Any], Path],
) -> None:
    a, b, _ = sides
    before, after = _numbers(a["report"]), _numbers(b["report"])
    rows = [r for r in b["compare"] if r["spec"] == "plain"]
    assert sorted(r["case"] for r in rows) == sorted({r["case"] for r in rows})  # one row per case, no replay
    assert len(rows) == 2
    still = [r for r in b["compare"] if r["spec"] == "still"]
    assert [(r["change"], r["direction"], r["status"]) for r in still] == [(0.0, None, "within")] * 2
    for row in rows:
        depth = int(row["case"].split("depth=")[1].split(",")[0])
        assert row["before"] == before[depth] and row["after"] == after[depth]  # the very numbers each side wrote
        assert row["limit"] == 0.05
        change = row["change"]
        assert change == pytest.approx((after[depth] - before[depth]) / abs(before[depth]), rel=1e-12, abs=0.0)
        assert row["direction"] == ("up" if change > 0 else "down" if change < 0 else None)
        # gradient_arrival must stay in [0.01, 100]: toward its bound is farther from 1 on a log scale
        farther = abs(math.log(after[depth])) > abs(math.log(before[depth]))
        assert row["toward_bound"] is farther, row


def test_a_case_that_did_not_run_is_the_side_s_error(custom_spec: Callable[..., Path], tmp_path: Path) -> None:
    got = _side(tmp_path / "a", "--depths", "2", str(custom_spec("not_a_module", depth="[1, 3]")))
    assert got["report"]["errors"], got["report"]


def test_a_side_without_a_spec_or_a_folder_is_a_usage_error(tmp_path: Path) -> None:
    for args in (["--out", str(tmp_path)], ["x.toml"]):
        with pytest.raises(SystemExit) as exc:
            release_side.main(args)
        assert exc.value.code == 2


def test_a_side_loads_the_run_s_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = tmp_path / "side_plugin_marker.py"
    plugin.write_text(f"open({str(tmp_path / 'loaded')!r}, 'w').close()\n", encoding="utf-8")
    monkeypatch.setenv("STABILITY_PLUGINS", str(plugin))
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = tmp_path / "plain.toml"
    spec.write_text(SPEC.format(activation="tanh"), encoding="utf-8")
    _side(tmp_path / "a", "--depths", "1", str(spec))
    assert (tmp_path / "loaded").is_file()
    sys.modules.pop("side_plugin_marker", None)


def test_what_a_side_imports_names_the_package_s_own_folder() -> None:
    got = release_side.imported_libraries(["json", "no_such_library_here"])
    assert got["json"]["folder"] == str(Path(json.__file__).resolve().parent) and got["json"]["error"] is None
    assert got["no_such_library_here"]["version"] is None and "ModuleNotFoundError" in str(
        got["no_such_library_here"]["error"]
    )


def test_a_library_without_a_version_is_recorded_as_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    from stability.families import library_lookup

    monkeypatch.setattr(library_lookup, "LIBRARIES", ("os",))  # a module without __version__
    assert release_side.imported_versions() == {"os": None, "torch": metadata.version("torch")}
