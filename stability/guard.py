"""Keeps one case from taking the run down: a memory estimate checked before building, and a
per-case time limit.

The estimate counts parameters plus the activations autograd saves for the backward pass, from the
same formulas the builder uses (channels per boundary, layers per block). It is deliberately an
over-estimate (a handful of saved tensors per layer), so a refused case is refused with margin.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
from collections.abc import Iterator

import torch

from stability.build import channel_counts, torch_dtype
from stability.case import Case
from stability.errors import CaseError
from stability.spec import Spec

__all__ = ["estimate_bytes", "memory_budget", "check_budget", "time_limit", "CaseTimeout", "format_bytes"]

# Saved tensors per layer-sized activation, by family: a generous count of what autograd keeps
# (layer input, norm input and statistics, activation output, the addition's operands).
_SAVED_PER_BLOCK = {"plain": 4, "postnorm": 9, "preact": 9, "highway": 8, "dense": 4}


class CaseTimeout(CaseError):
    """A case ran past the per-case time limit."""


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def estimate_bytes(spec: Spec, case: Case) -> int | None:
    """Parameters + saved activations of one case, in bytes; None for custom factories."""
    if spec.family == "custom":
        return None
    item = torch.empty((), dtype=torch_dtype(case.dtype)).element_size()
    conv = spec.block.layer == "conv2d"
    k2 = spec.block.kernel_size**2 if conv else 1
    pixels = (case.spatial or 8) ** 2 if conv else 1
    counts = channel_counts(spec, case)
    params = 0
    acts = 0
    per_block = _SAVED_PER_BLOCK[spec.family]
    for c_in, c_out in zip(counts[:-1], counts[1:]):
        if spec.family == "dense":
            params += c_in * spec.block.growth * k2
        else:
            layers = 1 if spec.family == "plain" else 2
            params += layers * c_in * c_out * k2 + (c_in * c_out if spec.block.skip == "projection" else 0)
        acts += per_block * case.batch * max(c_in, c_out) * pixels
    return int((params * 3 + acts) * item)  # weights, their gradients, one optimiser-free copy


def memory_budget(device: str) -> int:
    """Default budget: STABILITY_MEMORY_BUDGET (bytes, or with a GiB/MiB suffix) if set; else half
    the available host RAM, or 80% of the free memory of the CUDA device."""
    raw = os.environ.get("STABILITY_MEMORY_BUDGET")
    if raw:
        return parse_size(raw)
    if device.startswith("cuda") and torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info()
        return int(free * 0.8)
    return int(_available_ram() * 0.5)


def parse_size(text: str) -> int:
    units = {"k": 2**10, "kib": 2**10, "m": 2**20, "mib": 2**20, "g": 2**30, "gib": 2**30, "t": 2**40, "tib": 2**40}
    t = text.strip().lower().replace(" ", "")
    for suffix in sorted(units, key=len, reverse=True):
        if t.endswith(suffix):
            return int(float(t[: -len(suffix)]) * units[suffix])
    return int(float(t))


def _available_ram() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def check_budget(spec: Spec, case: Case, budget: int | None = None) -> None:
    """Raise CaseError (with the estimate) when a case would not fit the memory budget."""
    est = estimate_bytes(spec, case)
    if est is None:
        return
    budget = memory_budget(case.device) if budget is None else budget
    if est > budget:
        raise CaseError(
            f"refused: this case needs about {format_bytes(est)} (parameters + saved activations) and the "
            f"memory budget is {format_bytes(budget)}; narrow space.depth/width/batch or raise "
            f"STABILITY_MEMORY_BUDGET"
        )


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise CaseTimeout if the body runs longer than `seconds` (main thread on POSIX only;
    elsewhere no limit applies). The check fires between tensor operations."""
    usable = (
        seconds is not None
        and seconds > 0
        and math.isfinite(seconds)
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def on_alarm(signum: int, frame: object) -> None:
        raise CaseTimeout(f"ran past the per-case time limit of {seconds:g} s; lower space.depth/width or raise --case-timeout")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
