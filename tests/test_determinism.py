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

from stability.measure.probe import Measurements
from stability.run.engine import evaluate
from stability.spec.case import parse_case_string
from stability.spec.load import parse_spec

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


@pytest.mark.slow  # two whole searches in fresh processes
def test_the_same_search_in_two_processes_probes_the_same_cases_bit_identically(tmp_path: Path) -> None:
    spec = tmp_path / "mixed.toml"
    spec.write_text(MIXED)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "STABILITY_PROFILE")}
    env["OMP_NUM_THREADS"] = "1"  # the same in both; two processes on two cores do not oversubscribe
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stability",
                "check",
                str(spec),
                "--profile",
                "ci",
                "--only",
                "variance_growth",
                "--json",
                str(tmp_path / f"{i}.json"),
                "-q",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
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


def test_a_failing_property_shrinks_to_the_same_minimal_case_twice(
    cli: Callable[..., tuple[int, str, str]], write_spec: Callable[..., Path], base_spec: str, tmp_path: Path
) -> None:
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


ENCODER_FACTORY = '''
from torch import nn

from stability import Stack


def pre_ln_encoder(depth, width):
    """PyTorch's pre-LN encoder layers with dropout 0.1 as the library builds them; the stem makes
    the drawn (batch, width) input one sequence of `batch` tokens."""
    layer = nn.TransformerEncoderLayer(
        width, 1, dim_feedforward=2 * width, dropout=0.1, batch_first=True, norm_first=True
    )
    return Stack(
        blocks=nn.TransformerEncoder(layer, depth, enable_nested_tensor=False).layers, stem=nn.Unflatten(0, (1, -1))
    )
'''

DROPOUT_SPEC = """\
name = "dropout-encoder"
description = "pre-LN encoder layers with dropout 0.1, measured with dropout on"
family = "custom"

[block]
factory = "determinism_encoder:pre_ln_encoder"

[space]
depth = [1, 6]
width = [4, 12]
batch = [3, 8]

[probe]
dropout = "{dropout}"

[expect.gradient_arrival]
lo = 0.9
hi = 1.5
"""


def _without_seconds(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_seconds(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [_without_seconds(v) for v in value]
    return value


@pytest.mark.slow  # three checks and a replay; nightly
def test_a_dropout_spec_gives_identical_json_three_times_and_replays_bit_for_bit(
    cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    import torch

    (tmp_path / "determinism_encoder.py").write_text(ENCODER_FACTORY, encoding="utf-8")
    spec = tmp_path / "dropout.toml"
    spec.write_text(DROPOUT_SPEC.format(dropout="on"), encoding="utf-8")
    reports = []
    for i in range(3):
        torch.manual_seed(1000 + i)  # the caller's RNG differs on every run; the masks must not
        out = tmp_path / f"run{i}.json"
        code, text, err = cli("check", spec, "--profile", "ci", "--json", out)
        assert code in (0, 1) and not err, err
        reports.append(_without_seconds(json.loads(out.read_text())))
    assert reports[0] == reports[1] == reports[2]
    inv = reports[0]["specs"][0]["invariants"][0]
    searched = next(c["measurements"] for c in reports[0]["specs"][0]["cases"] if c["case"] == inv["case"])
    case = ",".join(f"{k}={v}" for k, v in inv["case"].items() if v is not None)
    replays = []
    for i in range(2):
        torch.manual_seed(i)
        out = tmp_path / f"replay{i}.json"
        cli("check", spec, "--case", case, "--json", out)
        replays.append(json.loads(out.read_text())["specs"][0]["cases"][0]["measurements"])
    assert replays[0] == replays[1] == searched  # the same floats, bit for bit
    spec.write_text(DROPOUT_SPEC.format(dropout="off"), encoding="utf-8")
    out = tmp_path / "off.json"
    cli("check", spec, "--case", case, "--json", out)
    off = json.loads(out.read_text())["specs"][0]["cases"][0]["measurements"]
    assert off["grad_norm"] != searched["grad_norm"]  # dropout was really on: the masks change the numbers


RANDOM_FACTORY = '''
import random

import numpy as np
import torch
from torch import nn


class NumpyNoise(nn.Module):
    """Scales its input by a gain drawn from numpy's global generator on every call."""

    def forward(self, h):
        return h * float(np.random.uniform(0.5, 1.5))


def make(depth, width):
    gains = [random.gauss(1.0, 0.5) for _ in range(depth)]  # Python's global generator, at build time
    blocks = []
    for g in gains:
        lin = nn.Linear(width, width)
        with torch.no_grad():
            lin.weight.mul_(g)
        blocks.append(nn.Sequential(lin, NumpyNoise()))
    return nn.Sequential(*blocks)
'''


def test_a_factory_and_blocks_drawing_from_python_and_numpy_generators_replay_exactly(tmp_path: Path) -> None:
    import random

    import numpy as np

    (tmp_path / "stability_det_random.py").write_text(RANDOM_FACTORY)
    text = (
        'name = "r"\ndescription = "r"\nfamily = "custom"\n[block]\nfactory = '
        '"stability_det_random:make"\n[space]\ndepth = 6\nwidth = 4\nbatch = '
        "2\n[expect.gradient_arrival]\n"
    )
    spec = parse_spec(text, file=str(tmp_path / "r.toml"))
    case = parse_case_string("depth=6,width=4,batch=2,seed=3", spec)
    random.seed(1)
    np.random.seed(1)
    first = evaluate(spec, case).measurements
    py_next, np_next = random.random(), np.random.random()
    random.seed(2)  # other states before the replay: the case must not depend on them
    np.random.seed(2)
    for _ in range(5):
        random.random()
        np.random.random()
    again = evaluate(spec, case).measurements
    assert (
        first is not None
        and again is not None
        and first.grad_norm == again.grad_norm
        and first.act_var == again.act_var
    )
    random.seed(1)
    np.random.seed(1)
    evaluate(spec, case)
    assert (random.random(), np.random.random()) == (py_next, np_next)  # the caller's sequences go on as if nothing ran
