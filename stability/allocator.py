"""The C allocator setting deep checkpointed probes and streamed library models need to stay small,
applied by the harness (a process-wide setting, so it sits beside the stages: families and measure both call it).

With glibc's default malloc, a checkpointed probe of a depth-10,000 pre-activation MLP (width 64,
batch 256) peaks at ~5.3 GiB resident although its live memory is under 2 GiB: glibc raises its
mmap threshold dynamically (up to 32 MiB on 64-bit) after the first large blocks are freed, then
serves the short-lived 64 KiB activations from the heap, where the long-lived small allocations
of the autograd graph placed between them keep the freed space from being reused or returned to
the system. Serving every block of 64 KiB or more from `mmap` instead (returned on `free`) keeps
the same probe at ~1.9 GiB. That is what `MALLOC_MMAP_THRESHOLD_=65536` does; `tune_malloc`
makes the same `mallopt(M_MMAP_THRESHOLD, 65536)` call itself, so nobody has to know the variable
(the glibc manual, "Memory Allocation Tunables"; mallopt(3)).

It is applied only where it is known to be safe: on glibc (Linux), once per process, and never
over a choice the user made (a `MALLOC_MMAP_THRESHOLD_` in the environment, or
`STABILITY_MALLOC_TUNE=0` to turn it off). Elsewhere (macOS, Windows, musl, jemalloc or tcmalloc
preloaded in place of glibc's malloc) it does nothing. It changes no number the probe reports.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["MMAP_THRESHOLD", "tune_malloc"]

#: Allocations of at least this many bytes are served by mmap (and returned on free).
MMAP_THRESHOLD = 65536
_M_MMAP_THRESHOLD = -3  # from glibc's <malloc.h>
_state: dict[str, bool] = {}


def tune_malloc() -> bool:
    """Set glibc's mmap threshold to `MMAP_THRESHOLD` once per process; True if it is in force
    (set now or before by this function), False where it does not apply or the user opted out."""
    if "applied" in _state:
        return _state["applied"]
    _state["applied"] = applied = _apply()
    return applied


def _apply() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    if os.environ.get("STABILITY_MALLOC_TUNE", "1") == "0" or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  (only glibc has it: musl's mallopt is a no-op)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1)
