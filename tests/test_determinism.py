"""The same case gives bit-identical measurements every time, in one process and across processes
(CPU), and the `ci` profile finds the same minimal failing case on every run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stability.case import parse_case_string
from stability.engine import evaluate
from stability.probe import Measurements
from stability.spec import parse_spec

SPECS_DIR = Path(__file__).resolve().parent.parent / "specs"

#: Conv and linear layers, every low-precision dtype and several inits: every case is drawn from it.
MIXED = """\
name = "mixed"
description = "a preact stack over dtypes and inits"
family = "preact"

[block]
layer = "conv2d"
norm = "batch"

[space]
depth = [1, 5]
width = [2, 6]
batch = [2, 3]
spatial = [2, 4]
weight_init = ["kaiming_normal", "orthogonal", "default"]
branch_init = ["default", "zero"]
dtype = ["float32", "float64", "bfloat16"]
device = ["cpu"]

[expect.gradient_arrival]
lo = 0.5
hi = 2.0

[expect.variance_growth]
max_growth = "bounded"
"""


def _bits(m: Measurements) -> list[str]:
    """Every number the probe measured, as exact hex (NaN-safe: NaN == NaN here)."""
    xs = [*m.grad_norm, *m.act_var, *m.act_sq_mean, *m.param_grad_norm.values(), m.identity_error, m.input_grad_error]
    return [float(x).hex() if x is not None else "None" for x in xs]


@pytest.mark.parametrize(
    ("text", "case"),
    [
        (MIXED, "depth=5,width=6,batch=3,spatial=4,init=orthogonal,dtype=bfloat16,seed=11"),
        (MIXED, "depth=4,width=3,spatial=3,init=kaiming_normal,dtype=float64,branch_init=zero,seed=7"),
        ((SPECS_DIR / "highway_mlp.toml").read_text(), "seed=3"),
        ((SPECS_DIR / "dense_conv.toml").read_text(), "seed=5"),
        ((SPECS_DIR / "custom_rezero.toml").read_text(), "depth=6,width=8,seed=9"),
    ],
    ids=["preact-conv-bf16", "preact-conv-f64", "highway", "dense-conv", "custom"],
)
def test_one_case_twice_in_one_process_is_bit_identical(text: str, case: str) -> None:
    spec = parse_spec(text, file=str(SPECS_DIR / "determinism.toml"))
    c = parse_case_string(case, spec)
    first, second = evaluate(spec, c), evaluate(spec, c)
    assert first.measurements is not None and second.measurements is not None, (first.error, second.error)
    assert _bits(first.measurements) == _bits(second.measurements)


def _measured(report: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(json.dumps(c["case"], sort_keys=True), c["measurements"]) for s in report["specs"] for c in s["cases"]]


def test_the_same_search_in_two_processes_probes_the_same_cases_bit_identically(tmp_path: Path) -> None:
    spec = tmp_path / "mixed.toml"
    spec.write_text(MIXED)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "STABILITY_PROFILE")}
    env["OMP_NUM_THREADS"] = "1"  # the same in both; two processes on two cores do not oversubscribe
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "stability", "check", str(spec), "--profile", "ci", "--only", "variance_growth",
             "--json", str(tmp_path / f"{i}.json"), "-q"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
        )
        for i in range(2)
    ]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode in (0, 1), (out, err)
    a, b = (json.loads((tmp_path / f"{i}.json").read_text()) for i in range(2))
    cases_a, cases_b = _measured(a), _measured(b)
    assert len(cases_a) >= 5 and {json.loads(c)["dtype"] for c, _ in cases_a} >= {"float32", "float64"}
    assert sorted(cases_a, key=lambda t: t[0]) == sorted(cases_b, key=lambda t: t[0])
    # the verdicts built on them agree too
    strip = lambda r: [{k: v for k, v in inv.items() if k != "seconds"} for s in r["specs"] for inv in s["invariants"]]  # noqa: E731
    assert strip(a) == strip(b)


def test_a_failing_property_shrinks_to_the_same_minimal_case_twice(cli: Callable[..., tuple[int, str, str]], write_spec: Callable[..., Path], base_spec: str, tmp_path: Path) -> None:
    # default init, ReLU, width 4..8: the gradient vanishes past a small depth
    path = write_spec(base_spec.replace("depth = [1, 4]", "depth = [1, 12]"))
    reports = []
    for i in range(2):
        code, out, err = cli("check", path, "--profile", "ci", "--json", tmp_path / f"{i}.json", "-q")
        assert code == 1, err
        reports.append(json.loads((tmp_path / f"{i}.json").read_text()))
    first, second = (r["specs"][0]["invariants"][0] for r in reports)
    assert first["case"] is not None and first["verdict"] == "violated"
    assert first["case"] == second["case"]
    assert first["observed"] == second["observed"] and first["message"] == second["message"]
