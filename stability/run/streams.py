"""The standard streams of a gate: a closed or broken stdout or stderr never changes the exit code
or the reports.

Three ways a CI step or a shell takes the terminal away, and what each did before:

- `stability check … | head -1` or `| true`: the reader goes away, every later write raises
  `BrokenPipeError`. rich's `Console.on_broken_pipe` then raises `SystemExit(1)`, so a passing run
  exited 1; a plain `print` to a broken stderr raised out of the command with a traceback.
- `stability check … >&- 2>&-`: file descriptors 1 and 2 are closed when the process starts.
  Python sets `sys.stdout` and `sys.stderr` to None, and the next file the process opens (a pipe
  to a worker, a report's temporary file) takes descriptor 1 or 2, where C code (torch's warnings)
  and child processes would write into it.
- At exit, the interpreter flushes `sys.stdout` once more; unflushed text on a broken pipe turns a
  finished run into exit code 120.

`tolerant_streams()` answers all three: descriptors 0, 1 and 2 are reopened on `/dev/null` when
closed, `sys.stdout` and `sys.stderr` become `Tolerant` wrappers that drop what cannot be written,
and the first failed write points its descriptor at `/dev/null`, so nothing later (another
write, the interpreter's last flush, a child process) meets the broken pipe again. What the
terminal shows is lost; the verdict, the exit code and every report file are not.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

__all__ = ["Tolerant", "ensure_standard_fds", "tolerant_streams"]


def ensure_standard_fds() -> None:
    """Reopen descriptors 0, 1 and 2 on /dev/null where they are closed, before anything else
    opens a file and takes their number."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)


def _silence(stream: Any) -> None:
    """Point the descriptor under `stream` at /dev/null (a no-op for a stream without one, such as
    pytest's capture buffer)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except OSError:
        pass


class Tolerant:
    """A text stream that forwards to `inner` until a write or flush fails, then drops everything.

    Failures are `OSError` (EPIPE, EBADF, EIO) and `ValueError` (a closed file); after the first,
    the stream's descriptor is pointed at /dev/null. `inner` may be None (Python's stand-in for a
    descriptor closed at start-up)."""

    def __init__(self, inner: TextIO | None) -> None:
        self.inner = inner
        self.gone = inner is None

    def _lost(self) -> None:
        self.gone = True
        _silence(self.inner)

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self.inner.write(text)  # type: ignore[union-attr]
            except (OSError, ValueError):
                self._lost()
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.inner.flush()  # type: ignore[union-attr]
            except (OSError, ValueError):
                self._lost()

    def isatty(self) -> bool:
        try:
            return not self.gone and bool(self.inner.isatty())  # type: ignore[union-attr]
        except (AttributeError, OSError, ValueError):
            return False

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, buffer, …: the inner stream's
        if self.inner is None:
            raise AttributeError(name)
        return getattr(self.inner, name)


@contextlib.contextmanager
def tolerant_streams() -> Iterator[None]:
    """Inside the block, `sys.stdout` and `sys.stderr` are `Tolerant`; the standard descriptors are
    open. On leaving, both are flushed (a failure silences them) and the originals come back."""
    ensure_standard_fds()
    saved = sys.stdout, sys.stderr
    out, err = Tolerant(saved[0]), Tolerant(saved[1])
    sys.stdout, sys.stderr = out, err
    try:
        yield
    finally:
        out.flush()
        err.flush()
        sys.stdout, sys.stderr = saved
