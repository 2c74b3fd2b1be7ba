"""Hypothesis settings for the three run profiles: ci, dev, thorough.

- `ci`: derandomized (the same examples on every run and machine), no example database, a small
  budget, so `stability check` on the shipped specs is quick and a failure in CI replays exactly
  with `--profile ci` or the printed `--case`.
- `dev` (the default locally): random search with the example database in `.hypothesis/`, so a
  failure found once is tried first on the next run.
- `thorough` (nightly): a large budget, the database, and `hypothesis.target()` steering toward
  the worst gradient ratio and the fastest variance growth.

The settings are also registered as Hypothesis profiles named `stability-ci`, `stability-dev` and
`stability-thorough` for users' own `@given` tests. Hypothesis's own `ci` profile is left alone.

Each profile is built on Hypothesis's `default` profile, not on whatever profile is loaded: with a
`CI` variable set, Hypothesis loads its own `ci` profile (derandomized, no database) at import,
and a profile built on that would make `dev` and `thorough` derandomized in every CI job.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import ExampleDatabase

from stability.errors import UsageError, did_you_mean

__all__ = ["PROFILES", "get_profile", "default_profile_name", "KeyedDatabase", "keyed"]

_BASE = settings.get_profile("default")  # never the loaded one: see the module's docstring
_COMMON: dict[str, Any] = dict(
    parent=_BASE, deadline=None, suppress_health_check=list(HealthCheck), print_blob=False, report_multiple_bugs=False
)

PROFILES: dict[str, settings] = {
    "ci": settings(
        max_examples=10,
        derandomize=True,
        database=None,
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        **_COMMON,
    ),
    "dev": settings(
        max_examples=25,
        derandomize=False,
        phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),
        **_COMMON,
    ),
    "thorough": settings(max_examples=300, derandomize=False, **_COMMON),
}

for _name, _settings in PROFILES.items():
    settings.register_profile(f"stability-{_name}", _settings)


def default_profile_name() -> str:
    """STABILITY_PROFILE if set; else `ci` when the CI variable is set; else `dev`."""
    name = os.environ.get("STABILITY_PROFILE")
    if name:
        return name
    return "ci" if os.environ.get("CI") else "dev"


def get_profile(name: str | None = None) -> tuple[str, settings]:
    name = name or default_profile_name()
    if name not in PROFILES:
        raise UsageError(f"unknown profile '{name}'{did_you_mean(name, PROFILES)}; choose one of {', '.join(PROFILES)}")
    return name, PROFILES[name]


class KeyedDatabase(ExampleDatabase):
    """An example database that files every key under `prefix` in another database.

    Hypothesis keys a test's saved examples by a digest of the test function's source; `run_spec`
    runs the same function for every (spec, invariant, device), so without a prefix those would
    all share one entry. Built on the public `ExampleDatabase` interface (save, fetch, delete,
    move), so it does not depend on how Hypothesis computes its keys.
    """

    def __init__(self, inner: ExampleDatabase, prefix: bytes) -> None:
        super().__init__()
        self.inner = inner
        self.prefix = prefix

    def __repr__(self) -> str:
        return f"KeyedDatabase({self.inner!r}, {self.prefix!r})"

    def save(self, key: bytes, value: bytes) -> None:
        self.inner.save(self.prefix + key, value)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self.inner.fetch(self.prefix + key)

    def delete(self, key: bytes, value: bytes) -> None:
        self.inner.delete(self.prefix + key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.inner.move(self.prefix + src, self.prefix + dest, value)


def keyed(profile: settings, key: str) -> settings:
    """`profile` with its example database (if any) keyed by `key`: one entry per key. The key holds
    the spec's path, encoded as the file system's bytes (a name's byte that is not UTF-8 too)."""
    if profile.database is None:
        return profile
    return settings(profile, database=KeyedDatabase(profile.database, os.fsencode(key) + b"::"))
