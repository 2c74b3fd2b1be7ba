"""Planted scan jobs for tests/test_scan.py: a model whose worker crashes, one that hangs, one that
exits. Each is a `ScanJob` (so the parent concludes it as it concludes any model) whose `execute`
misbehaves in the worker; the module is imported by name there."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from stability.run.executor import Emit
from stability.run.scan import ScanJob
from stability.spec.case import Case

START = Case(
    depth=2,
    width=1,
    batch=2,
    spatial=None,
    input_width=None,
    weight_init="default",
    branch_init="default",
    dtype="float32",
    device="cpu",
    seed=0,
)


@dataclass(frozen=True)
class PlantedJob(ScanJob):
    """`how`: "segfault" (the worker dies of a signal), "hang" (it never ends), "exit" (os._exit)."""

    how: str = "hang"

    def execute(self, emit: Emit) -> dict[str, Any]:
        emit({"kind": "start", "case": START.as_dict()})
        if self.how == "segfault":
            import ctypes

            ctypes.string_at(0)  # reads address 0: SIGSEGV
        if self.how == "exit":
            os._exit(7)
        while True:
            time.sleep(0.05)
