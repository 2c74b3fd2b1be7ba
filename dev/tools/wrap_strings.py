"""Split single-line string literals that run past the line limit into parenthesised implicit
concatenations at word boundaries, so `ruff format` can lay them out within the limit."""

from __future__ import annotations

import io
import re
import sys
import tokenize
from pathlib import Path

LIMIT = 120
PART = 80  # target length of each piece


def _prefix(tok: str) -> tuple[str, str, str]:
    m = re.match(r"^([rRbBuUfF]*)('''|\"\"\"|'|\")", tok)
    assert m, tok
    prefix, quote = m.group(1), m.group(2)
    body = tok[len(prefix) + len(quote) : len(tok) - len(quote)]
    return prefix, quote, body


def _split_points(body: str, is_f: bool) -> list[int]:
    """Indices just after a space where the body may be cut (outside {…} in f-strings, not after a backslash)."""
    points = []
    depth = 0
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            i += 2
            continue
        if is_f:
            if body.startswith("{{", i) or body.startswith("}}", i):
                i += 2
                continue
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
        if c == " " and depth == 0 and 0 < i < len(body) - 1:
            points.append(i + 1)
        i += 1
    return points


def split_literal(tok: str, first_width: int) -> str | None:
    prefix, quote, body = _prefix(tok)
    if len(quote) == 3:
        return None
    is_f = "f" in prefix.lower()
    points = _split_points(body, is_f)
    if not points:
        return None
    pieces, start = [], 0
    budget = max(first_width, 30)
    while len(body) - start > budget:
        cands = [p for p in points if start < p <= start + budget]
        if not cands:
            cands = [p for p in points if p > start]
            if not cands:
                break
            cut = cands[0]
        else:
            cut = cands[-1]
        pieces.append(body[start:cut])
        start = cut
        budget = PART
    pieces.append(body[start:])
    if len(pieces) == 1:
        return None
    out = []
    for piece in pieces:
        p = prefix
        if is_f and "{" not in piece and "}" not in piece:
            p = prefix.replace("f", "").replace("F", "")
        out.append(f"{p}{quote}{piece}{quote}")
    return "(" + " ".join(out) + ")"


def fix(path: Path) -> int:
    src = path.read_text()
    lines = src.splitlines(keepends=True)
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(src).readline))
    except (tokenize.TokenError, SyntaxError):
        return 0
    sig = [t for t in toks if t.type not in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)]
    edits = []  # (line, col_start, col_end, text, bracketed)
    depth = 0
    for i, t in enumerate(sig):
        if t.type == tokenize.OP and t.string in "([{":
            depth += 1
        elif t.type == tokenize.OP and t.string in ")]}":
            depth -= 1
        if t.type != tokenize.STRING or t.start[0] != t.end[0]:
            continue
        line = lines[t.start[0] - 1]
        if len(line.rstrip("\n")) <= LIMIT:
            continue
        if re.match(r"^[rRbBuUfF]*('\'\'|\"\"\")", t.string):
            continue
        adjacent = (i > 0 and sig[i - 1].type == tokenize.STRING) or (
            i + 1 < len(sig) and sig[i + 1].type == tokenize.STRING
        )
        if depth == 0 and adjacent:
            continue
        edits.append((t.start[0], t.start[1], t.end[1], t.string, depth > 0 or adjacent))
    n = 0
    for ln, a, b, text, bracketed in sorted(edits, reverse=True):
        new = split_literal(text, LIMIT - a - 12)
        if new is None:
            continue
        if bracketed:
            new = new[1:-1]
        line = lines[ln - 1]
        lines[ln - 1] = line[:a] + new + line[b:]
        n += 1
    if n:
        path.write_text("".join(lines))
    return n


if __name__ == "__main__":
    total = 0
    for arg in sys.argv[1:]:
        for p in Path(arg).rglob("*.py") if Path(arg).is_dir() else [Path(arg)]:
            total += fix(p)
    print(f"{total} literals split")
