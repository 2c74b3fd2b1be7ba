"""User text on the terminal and in a CI log.

Two dangers, one module:

- **Control characters.** Spec names, file names and exception messages are shown with their
  control characters escaped (`printable`), so a name holding ESC or OSC sequences cannot
  recolour, retitle or rewrite the terminal (or hide a line from a CI log).
- **Workflow commands.** A CI runner reads its log for commands: GitHub Actions runs a line that
  starts with `::` (after leading blanks: `::add-mask::…`, `::stop-commands::…`) and the older
  `##[command]` form anywhere in a line (`##[add-mask]…`, `##[error]…`); Azure Pipelines runs
  `##vso[…]` anywhere in a line. `neutralise` breaks each with a visible backslash (`##\\[`,
  `##vso\\[`, a leading `:\\:`), the one rule every stream of the tool goes through: `printable`
  applies it to every text from outside (names, messages, paths, worker output), `LogSafe`
  applies it again to whatever reaches `sys.stdout` and `sys.stderr` of the command line (so
  text pieced together on one line, a wrapped table cell or a library's message cannot form a
  command either), and the tool's own annotations (`stability.report.github`) are the only lines
  written past it, their values neutralised and escaped. A backslash and not a zero-width mark:
  the runner compares with culture-sensitive string functions, which skip zero-width characters,
  and a reader sees that the text was changed; in the Markdown job summary `\\[` and `\\:` render
  as `[` and `:`.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import Any, TextIO

__all__ = ["printable", "escape_controls", "neutralise", "LogSafe", "log_safe_streams", "write_command"]

# C0 and C1 control characters, DEL, the Unicode controls that reorder or hide text (bidi
# embeddings, overrides and isolates, line and paragraph separators), and lone surrogates: no
# character at all, what Python makes of a byte a file name or a message does not decode (a
# surrogate escape), which no UTF-8 stream, summary or report can be written with.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")

# What a reader of the log may take as the end of a line: more than a runner splits on (CR, LF),
# every break Python's str.splitlines knows, so a line start is never missed.
_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
# `##[` and `##vso[` anywhere (the bracket gets a backslash before it); `::` after a line start
# and blanks (the second colon gets one).
_BRACKET = re.compile(r"(?<=##)\[|(?i:(?<=##vso))\[")
_LEADING = re.compile(rf"(?<![^{_BREAKS}])([^\S{_BREAKS}]*:)(?=:)")


def neutralise(text: str) -> str:
    """`text` with no workflow command a CI runner would run: `##[` → `##\\[`, `##vso[` →
    `##vso\\[` anywhere, and `::` at the start of a line (after blanks) → `:\\:`. Idempotent, and
    it only inserts characters, so escaping for a workflow command's value round-trips."""
    return _LEADING.sub(r"\1\\", _BRACKET.sub(r"\\[", text))


def escape_controls(text: str) -> str:
    """`text` with every control character written as an escape (`\\x1b`, `\\u202e`; a lone
    surrogate as `\\udcff`)."""
    return _UNSAFE.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text
    )


def printable(text: str) -> str:
    """`text` with every control character escaped (`escape_controls`) and no workflow command
    (`neutralise`): what the tool prints of a text that came from outside it."""
    return neutralise(escape_controls(text))


class LogSafe:
    """A text stream that passes everything written to it through `neutralise`, across writes:
    a `##` ending one write and a `[` starting the next, or a line begun by blanks in one write
    and `::` in the next, are neutralised like the same text written at once. `command` writes
    one of the tool's own workflow commands as it is, on a line of its own."""

    def __init__(self, inner: TextIO | Any) -> None:
        self.inner = inner
        # what decides the next write's fate: the current line's
        # blanks (and a colon), or a marker and its last characters
        self._line = ""

    def write(self, text: str) -> int:
        context = self._line
        out = neutralise(context + text)
        new = out[len(context) :]  # neutralise only inserts, after a context that is already safe
        self._line = _context(out)
        self.inner.write(new)
        return len(text)

    def command(self, line: str) -> None:
        """One workflow command of the tool's own (its values escaped by its maker), on its own line."""
        if self._line:
            self.inner.write("\n")
        self.inner.write(line + "\n")
        self._line = ""
        self.inner.flush()

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return bool(self.inner.isatty())

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, buffer, …: the inner stream's
        return getattr(self.inner, name)


def _context(out: str) -> str:
    """What of the written text the next write is neutralised with: the blanks of the current line
    (and one colon after them) while nothing else is on it, else a marker that is no blank and the
    last five characters (enough for `##vso` before a `[`)."""
    cut = max(out.rfind(c) for c in _BREAKS)
    line = out[cut + 1 :]
    rest = line.lstrip()
    if rest in ("", ":"):
        return " " + rest if line else ""
    return "x" + line[-5:]


@contextlib.contextmanager
def log_safe_streams() -> Iterator[None]:
    """Inside the block, `sys.stdout` and `sys.stderr` are `LogSafe`."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = LogSafe(saved[0]), LogSafe(saved[1])
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def write_command(line: str) -> None:
    """Print one of the tool's own workflow commands on standard output: past `LogSafe` when it
    guards the stream (the command's values are neutralised and escaped by `github.command`)."""
    out = sys.stdout
    if isinstance(out, LogSafe):
        out.command(line)
    else:
        print(line, flush=True)
