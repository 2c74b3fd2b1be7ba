"""Your own property tests over a spec's space, failing the way `stability check` fails.

    from stability import given_spec, load_spec
    from stability.assertions import assert_gradient_arrives

    spec = load_spec("specs/preact_mlp.toml")


    @given_spec(spec)
    def test_gradient_arrives(net):
        ga = spec.expect.gradient_arrival
        assert_gradient_arrives(net.blocks, net.x, lo=ga.lo, hi=ga.hi, seed=net.loss_seed)

`given_spec(spec)` is Hypothesis's `@given` over the spec's cases (`stability.strategies.networks`)
with the settings of a stability profile (`ci`, `dev`, `thorough`: no deadline, no health checks
that a network's build time trips) and a bounded shrink:

- Shrinking stops after `shrink_seconds` (default `SHRINK_SECONDS`): from then on only the cases
  already seen to fail are run again, so Hypothesis ends with the smallest failing case it has
  found instead of shrinking for minutes (its own limit is five minutes, then a health warning).
- Then the failing case's depth is bisected down to the smallest depth that still fails, the
  other values held, as `stability check` does (`stability.run.engine.smallest_depth`):
  Hypothesis's shrinker cannot leave the one-in-eight draw of the deepest depth.
- The failure ends with the command that replays the case through the spec's own expectations,
  `reproduce: stability check SPEC --case depth=…,seed=…`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from stability.spec.case import Case, reproduce_command
from stability.spec.schema import Spec

__all__ = ["SHRINK_SECONDS", "given_spec"]

#: How long a failure is shrunk before the smallest failing case found so far is reported.
SHRINK_SECONDS = 20.0

Test = Callable[[Any], None]


@dataclasses.dataclass
class _Budget:
    """The shrink budget of one run of the test: when the first failure was seen, the cases that
    failed, and the last one that raised (the case Hypothesis reports)."""

    seconds: float
    first: float | None = None
    failed: set[Case] = dataclasses.field(default_factory=set)
    last: Case | None = None

    def spent(self) -> bool:
        return self.first is not None and time.monotonic() - self.first > self.seconds

    def fail(self, case: Case) -> None:
        if self.first is None:
            self.first = time.monotonic()
        self.failed.add(case)
        self.last = case


def given_spec(
    spec: Spec,
    *,
    profile: str | None = None,
    device: str = "cpu",
    invariant: str | None = None,
    shrink_seconds: float = SHRINK_SECONDS,
) -> Callable[[Test], Callable[[], None]]:
    """Decorate a test taking one drawn network (`stability.strategies.DrawnNetwork`: `.blocks`,
    `.x`, `.case`, `.loss_seed`) into a test of the spec's space (see the module docstring).
    `profile`: the search budget (default `$STABILITY_PROFILE`, else `ci` under CI, else `dev`);
    `device`; `invariant`: draw only the cases it applies to (identity_at_init: zero-branch inits)."""
    from hypothesis import given, settings

    from stability.run.profiles import get_profile, keyed
    from stability.run.strategies import DrawnNetwork, networks

    if shrink_seconds < 0:
        raise ValueError(f"shrink_seconds={shrink_seconds!r}: give seconds >= 0")
    _, base = get_profile(profile)

    def decorate(test: Test) -> Callable[[], None]:
        where = f"{getattr(test, '__module__', '')}.{getattr(test, '__qualname__', repr(test))}"
        budget = _Budget(shrink_seconds)

        def body(net: DrawnNetwork) -> None:
            if budget.spent() and net.case not in budget.failed:
                return  # past the budget: nothing new is tried, so Hypothesis settles on what it has
            try:
                test(net)
            except Exception:
                budget.fail(net.case)
                raise

        _name_like(body, test)
        search = keyed(settings(base), f"given_spec::{spec.path}::{where}")(
            given(networks(spec, device=device, invariant=invariant))(body)
        )

        def run() -> None:
            budget.first, budget.last = None, None
            budget.failed.clear()
            try:
                search()
            except Exception as exc:
                if budget.last is None:
                    raise  # not a failure of the test (an error of the search itself)
                _report(spec, test, budget.last, exc)

        _name_like(run, test)
        return run

    return decorate


def _report(spec: Spec, test: Test, case: Case, exc: Exception) -> None:
    """Bisect the failing case's depth, then raise the smallest failure with the replay command."""
    from stability.run.engine import smallest_depth
    from stability.run.strategies import DrawnNetwork

    raised: dict[Case, Exception] = {case: exc}

    def fails(trial: Case) -> bool:
        try:
            test(DrawnNetwork(spec, trial))
        except type(exc) as again:  # the same kind of failure, at a smaller depth
            raised[trial] = again
            return True
        except Exception:
            return False
        return False

    smallest = smallest_depth(spec, case, fails) if case.depth > spec.space.depth[0] else case
    final = raised.get(smallest, exc)
    if smallest != case:
        final.add_note(
            f"Smallest failing depth: {smallest.depth} (the case Hypothesis reported, {case}, with its depth bisected)"
        )
    final.add_note(f"Failing case: {smallest}")
    final.add_note(f"reproduce: {reproduce_command(spec, smallest)}")
    if final is exc:
        raise exc
    raise final from None  # the bisection's own failure: Hypothesis's report was of a deeper case


def _name_like(fn: Callable[..., Any], test: Test) -> None:
    """Give `fn` the test's name (what Hypothesis and pytest print) without `__wrapped__`, which
    would make pytest look for a fixture named after the test's argument."""
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        if hasattr(test, attr):
            setattr(fn, attr, getattr(test, attr))
