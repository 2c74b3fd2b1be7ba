"""The language-model invariants registered for the tests that need them (stability.judge.lm_catalog,
a plugin), and unregistered after each such module, so the rest of the suite sees the built-in
registry only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def lm_registered() -> Iterator[None]:
    from stability.judge import lm_catalog

    lm_catalog.register_lm()
    yield
    lm_catalog.unregister_lm()
