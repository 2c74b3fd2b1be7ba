"""benchmarks/profile_probe.py keeps working as the probe's internals move: each mode runs on the
conv network of target (a) and prints one line per thread count, and `--parts` finds every part
it wraps (a renamed function fails here, not on the next idle measurement)."""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest
from spec_support import ROOT


@pytest.fixture(scope="module")
def profile_probe() -> object:
    spec = importlib.util.spec_from_file_location("profile_probe", ROOT / "benchmarks" / "profile_probe.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # (`benchmarks.ratios`, which it imports, is found from the root)
    return module


@pytest.mark.parametrize(
    "mode",
    [
        ["--floor"],
        pytest.param(["--parts"], marks=pytest.mark.slow),
        pytest.param(["--designs", "tensor,grouped"], marks=pytest.mark.slow),
    ],
)
def test_each_mode_prints_its_line_for_the_conv_network(
    profile_probe: object, mode: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    threads = torch.get_num_threads()
    try:
        assert profile_probe.main([*mode, "--threads", "1", "--reps", "1", "conv"]) == 0  # type: ignore[attr-defined]
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("conv threads=1"), out
    if mode == ["--parts"]:
        for part in (
            "moments",
            "boundary-gradient hooks",
            "other parameter norms",
            "module walk",
            "projection vector",
            "final read, identity errors",
        ):
            assert re.search(rf"{part} \d+\.\d+ ms", out[0]), (part, out[0])
        assert not re.search(r"(moments|boundary-gradient hooks|other parameter norms) 0\.00 ms", out[0]), out[
            0
        ]  # each wrapped function was called
    if mode == ["--floor"]:
        assert re.search(r"probe=\d\.\d+x .* floor=\d\.\d+x", out[0]), out[0]
