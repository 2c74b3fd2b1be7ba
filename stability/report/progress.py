"""What `stability check` shows while it runs.

- On a terminal (and not under CI): rich's progress bar on stderr, cleared when the run ends.
- Anywhere else (a CI log, output redirected to a file): one line per spec on stdout as it
  finishes (when there are several: one spec's line would repeat its summary)
  (`stability.report.formats.spec_line`: its name, each expectation's verdict, what ran, and its
  time), and, while no spec finishes for `heartbeat` seconds, a heartbeat line naming the specs
  still running and for how long, so a long spec is never a silent log. The period is
  `HEARTBEAT_ENV` seconds (default `HEARTBEAT_S`; `0` turns the heartbeat off).
- With `--quiet`: nothing until the summary.

Which specs are running is what the executors' contract implies: jobs start in order, `workers`
at a time, and the next one starts when one finishes (`stability.run.executor`).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque
from typing import Literal

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress

from stability.errors import UsageError
from stability.report.formats import spec_line
from stability.report.text import printable
from stability.run.results import SpecResult

__all__ = ["HEARTBEAT_ENV", "HEARTBEAT_S", "RunProgress", "heartbeat_seconds", "duration", "mode_for"]

#: Seconds between heartbeat lines while no spec finishes (at most one line per period).
HEARTBEAT_S = 30.0
#: The environment variable that sets the period (seconds; 0: no heartbeat).
HEARTBEAT_ENV = "STABILITY_HEARTBEAT"

Mode = Literal["bar", "lines", "off"]


def heartbeat_seconds() -> float:
    """`$STABILITY_HEARTBEAT` seconds (0: off), else `HEARTBEAT_S`; anything else is a usage error."""
    raw = os.environ.get(HEARTBEAT_ENV, "").strip()
    if not raw:
        return HEARTBEAT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{HEARTBEAT_ENV}={raw!r}: give the seconds between heartbeat lines (e.g. 30), or 0 for none")
    return value


def duration(seconds: float) -> str:
    """45 s, 2 min 05 s, 1 h 02 min."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class RunProgress:
    """The progress of one run of `labels` (one per job, in job order) on `workers` at a time.
    `finished(index, result)` is called as each job finishes; use it as a context manager around
    the run."""

    def __init__(
        self,
        labels: list[str],
        *,
        mode: Mode,
        out: Console,
        err: Console,
        workers: int = 1,
        heartbeat: float = HEARTBEAT_S,
        noun: str = "spec(s)",
        verb: str = "checking",
    ) -> None:
        self.labels, self.mode, self.out, self.workers, self.period = labels, mode, out, max(1, workers), heartbeat
        self.noun = noun
        self.bar = Progress(console=err, transient=True, disable=mode != "bar")
        self.task = self.bar.add_task(verb, total=len(labels))
        self.waiting = deque(range(len(labels)))
        self.running: dict[int, float] = {}
        self.done = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.t0 = self.last_line = time.monotonic()

    def __enter__(self) -> RunProgress:
        self.t0 = self.last_line = time.monotonic()
        self._start_next(self.t0)
        self.bar.__enter__()
        if self.mode == "lines" and self.period > 0 and self.labels:
            self.thread = threading.Thread(target=self._beat, name="stability-heartbeat", daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
        self.bar.__exit__(None, None, None)

    def _start_next(self, now: float) -> None:
        while self.waiting and len(self.running) < self.workers:
            self.running[self.waiting.popleft()] = now

    def finished(self, index: int, result: SpecResult | None, *, line: str | None = None) -> None:
        """Job `index` is done; in lines mode its line is printed: `line` where given (a job that is
        no spec's), else the spec's line of `result`."""
        now = time.monotonic()
        with self.lock:
            started = self.running.pop(index, now)
            self.done += 1
            self._start_next(now)
            if self.mode == "lines" and line is not None:
                self._print(line, now)
            elif (
                self.mode == "lines" and result is not None and len(self.labels) > 1
            ):  # one spec's line would be its summary
                self._print(spec_line(result, seconds=now - started), now)
        self.bar.update(
            self.task, advance=1, description=escape(printable(self.labels[index]))
        )  # the bar's text column reads markup: a name is text

    def _print(self, line: str, now: float) -> None:
        self.out.print(line, highlight=False, markup=False, soft_wrap=True)
        self.out.file.flush()
        self.last_line = now

    def heartbeat_line(self, now: float) -> str:
        """The heartbeat: "… still running: NAME (running 45 s); 3 of 43 spec(s) done in 2 min 10 s"."""
        running = ", ".join(
            f"{printable(self.labels[i])} (running {duration(now - t)})" for i, t in sorted(self.running.items())
        )
        return (
            f"… still running: {running or 'nothing'}; {self.done} of {len(self.labels)} {self.noun} done "
            f"in {duration(now - self.t0)}"
        )

    def _beat(self) -> None:
        while not self.stop.wait(min(self.period, max(0.05, self.last_line + self.period - time.monotonic()))):
            now = time.monotonic()
            with self.lock:
                if now - self.last_line >= self.period and self.running:
                    self._print(self.heartbeat_line(now), now)


def mode_for(out: Console, *, quiet: bool) -> Mode:
    """The bar on a terminal outside CI, lines elsewhere, nothing with --quiet."""
    if quiet:
        return "off"
    return "bar" if out.is_terminal and not os.environ.get("CI") else "lines"
