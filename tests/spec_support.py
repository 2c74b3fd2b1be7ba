"""Spec files written by tests: one place that lays out a spec's text, so every test states only
what it varies (the family, its [block] keys, its [space] and its expectations)."""

from __future__ import annotations

from typing import Any

from stability.spec.load import parse_spec

__all__ = ["spec_text", "make_spec"]


def spec_text(
    family: str,
    *,
    block: str = "",
    space: str = "",
    expect: str = "[expect.gradient_arrival]\n",
    name: str = "t",
    description: str = "t",
) -> str:
    """A spec file's text: `block`, `space` and `expect` are TOML lines placed under their tables
    (`expect` holds its own `[expect.NAME]` headers, and may hold a `[probe]` table before them)."""
    return (
        f'name = "{name}"\ndescription = "{description}"\nfamily = "{family}"\n'
        f"[block]\n{block}\n[space]\n{space}\n{expect}\n"
    )


def make_spec(family: str, *, file: str = "<string>", **parts: Any) -> Any:
    """`spec_text`'s spec, validated as `stability check` would (`file` is where errors point)."""
    return parse_spec(spec_text(family, **parts), file=file)
