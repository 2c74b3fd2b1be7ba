"""The types of the command line's values: a time limit, a count, a list of depths, the usable cores.

Each refuses a bad value with a message argparse prints in one line (exit 2).
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable

from stability.errors import UsageError

__all__ = ["seconds", "count", "cores", "depth_list"]


def seconds(text: str) -> float:
    """--case-timeout: seconds ≥ 0, finite (0 = no limit)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time limit; give seconds ≥ 0 (0 = no limit)")
    return value


def count(option: str, *, auto: bool = False) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if auto and text == "auto":
            return cores()
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a count; give a whole number ≥ 1" + (" or auto" if auto else "")
            )
        return value

    parse.__name__ = option
    return parse


def cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def depth_list(text: str) -> tuple[int, ...]:
    """--depths: positive integers separated by commas, sorted, each once."""
    try:
        depths = tuple(sorted({int(d) for d in text.split(",") if d.strip()}))
    except ValueError:
        raise UsageError(f"--depths {text!r}: give positive integers separated by commas, e.g. 4,16,64") from None
    if not depths or depths[0] < 1:
        raise UsageError(f"--depths {text!r}: give positive integers separated by commas, e.g. 4,16,64")
    return depths
