"""Every shipped spec either sweeps or is refused by `stability sweep` up front with exit 2 and one
line saying why (a training invariant is judged on an optimizer run, which a grid point does not
take); none ends in a traceback. The whole set runs under `-m slow`; the default run takes a probe
spec, a token spec, a custom spec and a training spec."""

from __future__ import annotations

from pathlib import Path

import pytest
from spec_support import ROOT

from stability.cli import main
from stability.spec.load import find_specs, load_spec
from stability.spec.registry import INVARIANTS

SPECS = sorted(find_specs([ROOT / "specs"]))
SAMPLE = {"plain_mlp", "transformer_preln", "custom_rezero", "warmup_free_residual"}


def _sweep(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = load_spec(path)
    code = main(
        [
            "sweep",
            str(path),
            "--over",
            f"depth={spec.space.depth[0]}",
            "--seeds",
            "1",
            "--no-budget",
            "--serial",
            "-q",
            "--db",
            str(tmp_path / "s.sqlite"),
        ]
    )
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    training = [n for n, _ in spec.invariants() if INVARIANTS.get(n).training]
    if training:
        assert code == 2, out + err
        lines = err.strip().splitlines()
        assert (
            len(lines) == 1
            and lines[0].startswith("stability: error: stability sweep ")
            and f"expect.{training[0]} cannot be swept" in lines[0]
        ), err
    else:
        assert code == 0, out + err
        assert "1 grid point(s) × 1 seed(s)" in out and "point(s) failed" not in out, out


@pytest.mark.parametrize("path", [p for p in SPECS if p.stem in SAMPLE], ids=lambda p: p.stem)
def test_a_shipped_spec_sweeps_or_is_refused_in_one_line(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _sweep(path, tmp_path, capsys)


@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in SPECS if p.stem not in SAMPLE], ids=lambda p: p.stem)
def test_every_shipped_spec_sweeps_or_is_refused_in_one_line(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _sweep(path, tmp_path, capsys)
