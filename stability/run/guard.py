"""Keeps one case from taking the run down: a memory estimate checked before building, and a
per-case time limit; and gives a case the threads its spec asks for (`case_threads`).

The estimate is the family's memory model (its registry entry's `estimate`: parameters plus the
activations autograd saves, with margin; stability.families.memory for the built-in families).
The check costs no allocation that grows with the case: the family's per-block lower bound from
the depth alone comes first, so depth 10**9 is refused before a list of 10**9 channel counts is made.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import string
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

from pydantic import ByteSize

from stability.errors import CaseError
from stability.spec.case import Case
from stability.spec.registry import FAMILIES
from stability.spec.schema import Spec

__all__ = [
    "estimate_bytes",
    "memory_budget",
    "check_budget",
    "fit_budget",
    "check_least",
    "case_limit",
    "LONGEST_LIMIT_S",
    "case_threads",
    "past_limit",
    "time_limit",
    "warm_up",
    "CaseTimeout",
    "format_bytes",
]


class CaseTimeout(CaseError):
    """A case ran past the per-case time limit."""


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def _min_bytes(spec: Spec, case: Case) -> int:
    """A lower bound on `estimate_bytes` from the depth alone (O(1), allocates nothing)."""
    return case.depth * FAMILIES.get(spec.family).block_bytes


def estimate_bytes(spec: Spec, case: Case) -> int | None:
    """Parameters + saved activations + per-block overhead of one case, in bytes, from the
    family's memory model (stability.families.memory); None where the family has none (a user's
    factory)."""
    return FAMILIES.get(spec.family).estimate(spec, case)


def memory_budget(device: str) -> int:
    """Default budget: STABILITY_MEMORY_BUDGET (a size `parse_size` reads: 4GiB, 4GB, 512M) if set; else half
    the available host RAM, or 80% of the free memory of the CUDA device."""
    raw = os.environ.get("STABILITY_MEMORY_BUDGET")
    if raw:
        try:
            return parse_size(raw)
        except (ValueError, OverflowError):
            from stability.errors import UsageError

            raise UsageError(f"STABILITY_MEMORY_BUDGET={raw!r}: write a size like 4GiB or 512MiB") from None
    if device.startswith("cuda"):
        import torch  # here, not at the top: parsing --memory-budget (a usage error) imports no torch

        if torch.cuda.is_available():
            free, _ = torch.cuda.mem_get_info()
            return int(free * 0.8)
    return int(_available_ram() * 0.5)


#: A lone letter is the binary unit, as it always was here: `4G` is 4 GiB. Every other unit is
#: pydantic's `ByteSize` table: `4GB` is 4·10⁹ bytes, `4GiB` 4·2³⁰, `1Gbit` 1.25·10⁸ (IEC 80000-13).
_LETTERS = {letter: ByteSize.byte_sizes[f"{letter}ib"] for letter in "kmgtpe"}


def parse_size(text: str) -> int:
    """'4GiB', '4GB', '512MiB', '512M', '1e9' → bytes: a number (any float, `1e9` and `1.5` too,
    rounded down to whole bytes) and a unit of `ByteSize` or a lone letter (binary; see `_LETTERS`),
    spaces anywhere and any case. Raises ValueError for anything that is not a finite, positive
    size (inf, nan, -1, 0, 'bogus', an unknown unit)."""
    squeezed = text.strip().lower().replace(" ", "")
    number = squeezed.rstrip(string.ascii_lowercase)
    unit = squeezed[len(number) :]
    factor = _LETTERS.get(unit) or ByteSize.byte_sizes.get(unit or "b")
    if factor is None:
        raise ValueError(f"{text!r}: {unit!r} is not a unit of size")
    try:
        size = int(float(number) * factor)
    except ValueError:
        raise ValueError(f"{text!r}: {number!r} is not a number") from None
    except OverflowError:
        raise ValueError(f"{text!r} is not a finite size") from None
    if size <= 0:
        raise ValueError(f"{text!r} is not a positive size")
    return size


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


def check_least(spec: Spec, case: Case, budget: int) -> None:
    """Raise CaseError when the family's per-block lower bound from the depth alone is over the budget."""
    least = _min_bytes(spec, case)
    if least > budget:
        raise CaseError(
            f"refused: this case needs at least {format_bytes(least)} ({case.depth} blocks at "
            f"{format_bytes(least // max(case.depth, 1))} each for modules and autograd bookkeeping alone) "
            f"and the memory budget is {format_bytes(budget)} ({_which(spec, case)}); narrow space.depth or "
            "raise --memory-budget (STABILITY_MEMORY_BUDGET)"
        )


def check_budget(spec: Spec, case: Case, budget: int | None = None) -> None:
    """Raise CaseError (with the estimate) when a case would not fit the memory budget."""
    fit_budget(spec, case, budget, other_ways=False)


def fit_budget(
    spec: Spec, case: Case, budget: int | None = None, *, other_ways: bool = True
) -> tuple[Spec, dict[str, Any] | None]:
    """The spec to build the case with and, where it is not `spec`, what the report says of it
    (`how`, `estimate`, `need`, `budget` and the `text`): `spec` when the case fits the budget;
    else, with `other_ways`, the way its family builds it within the budget (its registry entry's
    `over_budget`: a library model streamed block by block). CaseError otherwise, the refusal
    naming what would fit where the family knows."""
    budget = memory_budget(case.device) if budget is None else budget
    check_least(spec, case, budget)
    est = estimate_bytes(spec, case)
    if est is None or est <= budget:
        return spec, None
    rule = FAMILIES.get(spec.family).over_budget if other_ways else None
    other = rule(spec, case, budget) if rule is not None else None
    if other is not None and other.spec is not None:
        text = (
            f"built {other.how}, about {format_bytes(other.need)}: as specified the case needs about "
            f"{format_bytes(est)} and the memory budget is {format_bytes(budget)}"
        )
        return other.spec, {"how": other.how, "estimate": est, "need": other.need, "budget": budget, "text": text}
    fits = f"; or {other.how} (about {format_bytes(other.need)})" if other is not None else ""
    raise CaseError(
        f"refused: this case needs about {format_bytes(est)} (parameters, saved activations and overhead) "
        f"and the memory budget is {format_bytes(budget)} ({_which(spec, case)}); narrow "
        "space.depth/width/batch/tokens or "
        f"raise --memory-budget (STABILITY_MEMORY_BUDGET){fits}"
    )


def _which(spec: Spec, case: Case) -> str:
    """The spec and the case a refusal names, so that the line stands alone."""
    return f"spec {spec.path}, case {case}"


# An import interrupted half-way leaves a broken module in sys.modules for the rest of the run (torch
# imports parts of itself lazily during the first backward pass; a later case then fails with
# "module 'sympy' has no attribute 'printing'"). So the alarm never fires inside an import: it
# retries every _RETRY_S, for at most _IMPORT_GRACE_S past the limit (a user module that hangs on
# import is still stopped).
_RETRY_S = 0.05
_IMPORT_GRACE_S = 30.0


def _importing(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


@functools.cache
def warm_up(device: str = "cpu") -> None:
    """Run one tiny probe on `device`, untimed, once per process and device: the first backward
    pass imports parts of torch lazily (torch.fx's symbolic shapes and sympy, ~0.5 s cold) and the
    first CUDA call creates the context (seconds), which is no case's own time."""
    import torch

    from stability.measure.probe import probe

    probe(torch.nn.Sequential(torch.nn.Linear(2, 2)).to(device), torch.ones(1, 2, device=device))


#: The longest time limit the timers hold on every path (the parent waits on its workers in
#: milliseconds of a C int, about 24.8 days; `setitimer` overflows near 10¹² s): a longer limit
#: (`case_timeout = 1e308`) is no limit, as 0 is.
LONGEST_LIMIT_S = 1e6


def case_limit(spec: Spec, run_limit: float | None) -> float | None:
    """The per-case time limit of `spec`'s cases in a run whose limit is `run_limit` (`--case-timeout`):
    raised to the spec's own `[probe] case_timeout` where that is longer, never lowered; None where
    the run has none or the limit is longer than `LONGEST_LIMIT_S`. Every path asks this: the
    in-process limit (`engine.evaluate`), the parent that stops a worker (`Task.case_timeout`) and a
    sweep's (`PointTask.case_timeout`)."""
    if not run_limit:
        return None
    limit = max(run_limit, spec.probe.case_timeout or 0.0)
    return limit if limit <= LONGEST_LIMIT_S else None


def past_limit(seconds: float, what: str = "") -> str:
    """The one message of a case stopped at its time limit, on every path (`what`: how it was
    stopped, " and was stopped"), with the three ways to let it finish."""
    return (
        f"ran past the per-case time limit of {seconds:g} s{what}; lower space.depth/width, or raise --case-timeout "
        "or the spec's [probe] case_timeout, or give its cases more threads ([probe] threads)"
    )


@contextlib.contextmanager
def case_threads(spec: Spec) -> Iterator[None]:
    """torch's intra-op threads raised to the spec's `[probe] threads` while the body runs (never
    lowered), and put back after. `engine.evaluate` asks this, so every path that probes a case
    (check's workers and `--in-process`, pytest, sweeps) gives it the same threads."""
    import torch

    before = torch.get_num_threads()
    wanted = max(before, spec.probe.threads or 0)
    if wanted != before:
        torch.set_num_threads(wanted)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise CaseTimeout if the body runs longer than `seconds` (main thread on POSIX only;
    elsewhere, and for a limit longer than `LONGEST_LIMIT_S`, no limit applies). The check fires
    between tensor operations, never inside an import."""
    usable = (
        seconds is not None
        and seconds > 0
        and seconds <= LONGEST_LIMIT_S
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    assert seconds is not None  # for mypy: `usable` checked it
    give_up = time.monotonic() + seconds + _IMPORT_GRACE_S

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        if _importing(frame) and time.monotonic() < give_up:
            signal.setitimer(signal.ITIMER_REAL, _RETRY_S)
            return
        raise CaseTimeout(past_limit(seconds))

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
