"""stability/allocator.py: glibc's mmap threshold, set by the harness where it is safe."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from spec_support import ROOT

from stability.allocator import tune_malloc

GLIBC = (
    sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION") is not None
    if hasattr(os, "confstr")
    else False
)

_CHILD = """
import importlib.util, json, sys
# the module alone: no torch import
spec = importlib.util.spec_from_file_location("allocator", "stability/allocator.py")
allocator = importlib.util.module_from_spec(spec); spec.loader.exec_module(allocator)
tune_malloc = allocator.tune_malloc
first = tune_malloc()
print(json.dumps({"first": first, "again": tune_malloc()}))
"""


def _child(env: dict[str, str]) -> dict[str, bool]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "STABILITY_MALLOC_TUNE"}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD],
        capture_output=True,
        text=True,
        env={**clean, **env},
        cwd=ROOT,
        check=True,
        timeout=120,
    )
    result: dict[str, bool] = json.loads(out.stdout)
    return result


@pytest.mark.skipif(
    not GLIBC, reason="mallopt(M_MMAP_THRESHOLD) is a glibc setting; elsewhere tune_malloc does nothing"
)
def test_on_glibc_the_threshold_is_set_once_and_stays() -> None:
    assert _child({}) == {"first": True, "again": True}


def test_a_users_choice_is_left_alone() -> None:
    assert _child({"MALLOC_MMAP_THRESHOLD_": "131072"}) == {"first": False, "again": False}
    assert _child({"STABILITY_MALLOC_TUNE": "0"}) == {"first": False, "again": False}


def test_this_process_gets_a_stable_answer() -> None:
    assert tune_malloc() is tune_malloc()


_DEEP = """
import json, resource, torch
torch.set_num_threads(1)
from stability import load_spec, make_input
from stability import build
from stability import probe
from stability.spec.case import corner_case
spec = load_spec("specs/preact_mlp.toml")
case = corner_case(
    spec, depth={depth}, width=64, batch=256, weight_init="kaiming_normal", branch_init="default", dtype="float32"
)
net = build(spec, case); x = make_input(spec, case)
import gc; gc.collect()
base = int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()
open("/proc/self/clear_refs", "w").write("5")
m = probe(net.blocks, x, checkpoint_every=50)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({{"added": peak - base, "grad": m.grad_norm, "var": m.act_var}}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_deep_checkpointed_probe_stays_small_with_the_same_numbers() -> None:
    """Depth 1,000 (a tenth of benchmarks/ratios.py (d)): with glibc's defaults the resident memory
    climbs ~0.4 MiB per block; with the harness's setting it does not. Same numbers either way."""

    def run(env: dict[str, str]) -> dict[str, object]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "STABILITY_MALLOC_TUNE"}
        out = subprocess.run(
            [sys.executable, "-c", _DEEP.format(depth=1000)],
            capture_output=True,
            text=True,
            env={**clean, **env},
            cwd=ROOT,
            check=True,
            timeout=600,
        )
        result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
        return result

    tuned, default = run({}), run({"STABILITY_MALLOC_TUNE": "0"})
    assert tuned["grad"] == default["grad"] and tuned["var"] == default["var"]
    assert isinstance(tuned["added"], int) and isinstance(default["added"], int)
    assert tuned["added"] < default["added"] / 2, (tuned["added"] / 2**20, default["added"] / 2**20)
