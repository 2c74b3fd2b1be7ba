"""What the tests over every shipped spec need from this environment."""

from __future__ import annotations

import pytest

#: The libraries the shipped library specs (specs/zoo/) name, and how to get each.
SHIPPED_LIBRARIES = {
    "transformers": 'pip install -e ".[hf]"',
    "timm": "docs/library-models.md, section 7",
    "torchvision": "docs/library-models.md, section 7",
}


def require_shipped_libraries() -> None:
    """Skip, saying what to install, unless every library a shipped spec names is installed here: a
    library spec whose library is missing is refused when it is loaded (exit 2)."""
    import importlib.util

    for name, how in SHIPPED_LIBRARIES.items():
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"specs/zoo/ names {name} models and {name} is not installed: {how}")
