"""benchmarks/_compat.py: asv measures older commits with the current benchmarks, so an internal
module is found at its stage-folder path or, on a commit from before the stage folders, flat."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "bench_compat", Path(__file__).resolve().parent.parent / "benchmarks" / "_compat.py"
)
assert _spec is not None and _spec.loader is not None
compat = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compat)


def _package(root: Path, name: str, files: dict[str, str]) -> None:
    for rel, text in {"__init__.py": "", **files}.items():
        path = root / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_stage_folder_path_first_and_the_flat_module_on_an_older_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _package(tmp_path, "staged_pkg", {"spec/__init__.py": "", "spec/case.py": "WHERE = 'spec/case.py'\n"})
    _package(
        tmp_path,
        "flat_pkg",
        {"case.py": "WHERE = 'case.py'\n", "spec.py": "WHERE = 'spec.py: a module, not a package'\n"},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert compat.internal("spec.case", package="staged_pkg").WHERE == "spec/case.py"
    assert compat.internal("spec.case", package="flat_pkg").WHERE == "case.py"  # 'flat_pkg.spec' is not a package


def test_every_mapped_module_exists_today_and_a_missing_one_still_fails() -> None:
    for path in compat.FLAT:
        assert compat.internal(path).__name__ == f"stability.{path}"
    with pytest.raises(KeyError):
        compat.internal("measure.nothing_here")
