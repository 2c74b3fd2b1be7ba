"""User text on the terminal: spec names, file names and exception messages are shown with their
control characters escaped, so a name holding ESC or OSC sequences cannot recolour, retitle or
rewrite the terminal (or hide a line from a CI log)."""

from __future__ import annotations

import re

__all__ = ["printable"]

# C0 and C1 control characters, DEL, and the Unicode controls that reorder or hide text (bidi
# embeddings, overrides and isolates, line and paragraph separators).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` with every control character written as an escape (`\\x1b`, `\\u202e`)."""
    return _UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text)
