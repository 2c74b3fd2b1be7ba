"""The sweep's executors: a real Dask `LocalCluster` of two worker processes gives bit-identical
rows to this process, and a factory that kills its worker process fails its point, not the
sweep."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from spec_support import SPECS

from stability.measure.measurements import Measurements
from stability.run.executor import InProcessExecutor
from stability.run.grid import parse_axis
from stability.run.store import Store
from stability.run.sweep import run_sweep
from stability.run.sweep_exec import PointTask
from stability.spec.load import load_spec

pytest.importorskip("distributed", reason="Dask distributed is not installed (pip install 'stability[sweep]')")


CRASHING = """
import os
from torch import nn


def crash_at_3(depth, width):
    if depth == 3:
        os._exit(3)  # what a segfaulting extension does to its process
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])
"""

CUSTOM = """
name = "crashing"
description = "a factory that kills its process at depth 3"
family = "custom"
[block]
factory = "sweep_exec_crashing:crash_at_3"
[space]
depth = [1, 8]
width = 4
batch = 2
[expect.gradient_arrival]
lo = 1e-6
hi = 1e6
"""


@pytest.fixture(scope="module")
def dask_backend() -> Iterator[object]:
    from stability.run.sweep_exec import DaskExecutor

    backend = DaskExecutor(n_workers=2)  # a LocalCluster: processes=True, threads_per_worker=1, dashboard_address=None
    try:
        yield backend
    finally:
        backend.close()


@pytest.mark.slow  # a two-process Dask cluster started and a grid run on it
def test_two_dask_workers_give_the_serial_rows_bit_for_bit(tmp_path: Path, dask_backend: object) -> None:
    spec = load_spec(SPECS / "preact_mlp.toml")
    axes = [parse_axis("depth=2,9,17"), parse_axis("width=16,24")]
    with Store(tmp_path / "serial.sqlite") as a, Store(tmp_path / "dask.sqlite") as b:
        serial = run_sweep(spec, axes, a, InProcessExecutor(), seeds=[0, 1], depth_range=(1, 32))
        dask = run_sweep(spec, axes, b, dask_backend, seeds=[0, 1], depth_range=(1, 32))  # type: ignore[arg-type]
        assert dask.workers == 2 and dask.probed == serial.probed > 0
        assert b.table("probes") == a.table("probes")  # every measurement, as stored: identical float reprs
        assert b.table("budgets") == a.table("budgets")


@pytest.mark.slow  # a sweep whose worker dies; nightly
def test_a_factory_that_kills_its_worker_fails_that_point_and_the_sweep_goes_on(
    tmp_path: Path, dask_backend: object
) -> None:
    (tmp_path / "sweep_exec_crashing.py").write_text(CRASHING)
    (tmp_path / "spec.toml").write_text(CUSTOM)
    spec = load_spec(tmp_path / "spec.toml")
    with Store(tmp_path / "r.sqlite") as store:
        result = run_sweep(spec, [parse_axis("depth=1,2,3,4")], store, dask_backend, seeds=[0, 1], budgets=False)  # type: ignore[arg-type]
    by_depth = {p.point["depth"]: p for p in result.points}
    assert by_depth[3].failed and "worker process running this job died" in by_depth[3].rows[0]["error"]
    for depth in (1, 2, 4):
        assert not by_depth[depth].failed and all(r["error"] is None for r in by_depth[depth].rows)


def test_measurements_round_trip_exactly(tmp_path: Path) -> None:
    spec = load_spec(SPECS / "plain_tanh_mlp.toml")
    (outcome,) = InProcessExecutor().map([PointTask(spec, {"depth": 5}, (0,))])
    rows = outcome.result
    m = Measurements.from_json(rows[0]["m"])
    assert m.to_json() == rows[0]["m"] and all(math.isfinite(g) for g in m.grad_norm)


_CLUSTER = """
import socket, sys
held = socket.socket()
held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed cluster's TIME_WAIT does not count
try:
    held.bind(("127.0.0.1", 8787))  # the port Dask's metrics server wants: taken, as by another cluster
    held.listen()
    print("held here")
except OSError:
    print("held elsewhere")  # another process has it: taken all the same, unless it lets go first
from stability.run.sweep_exec import DaskExecutor
executor = DaskExecutor(n_workers=1, verbose=sys.argv[1] == "verbose")
executor.close()
"""


@pytest.mark.slow  # a Dask cluster started twice in subprocesses
def test_dask_warnings_stay_out_of_stderr_unless_verbose() -> None:
    """`stability sweep` prints what failed itself; Dask's own warnings (the metrics port taken, a
    nanny killing a worker at shutdown) reach stderr only with `--verbose`. Where another process
    held the port and let go of it before this cluster started (no warning to show), the verbose
    run is tried again, up to five times."""
    import subprocess
    import sys

    quiet = subprocess.run([sys.executable, "-c", _CLUSTER, "quiet"], capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0, quiet.stderr
    assert "Port 8787 is already in use" not in quiet.stderr and "distributed." not in quiet.stderr, quiet.stderr
    for _ in range(5):
        verbose = subprocess.run(
            [sys.executable, "-c", _CLUSTER, "verbose"], capture_output=True, text=True, timeout=300
        )
        assert verbose.returncode == 0, verbose.stderr
        if "held here" in verbose.stdout or "Port 8787 is already in use" in verbose.stderr:
            break
    assert "Port 8787 is already in use" in verbose.stderr, verbose.stdout + verbose.stderr
