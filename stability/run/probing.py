"""One case measured: built, probed with the observers its declared invariants ask for, then each
one's `after_probe` and `ensemble` measurements (registry order), which see the case through a
`MeasureContext`. `stability.run.engine.evaluate` runs it under the per-case limits and turns what
goes wrong into `CaseRecord.error`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from stability.families.build import Network, build, derive_seed, network_input
from stability.families.construction import watching
from stability.judge.token_invariants import TokenShapeObserver, finish_measurements
from stability.measure.ensemble import ensemble_size
from stability.measure.measurements import Measurements
from stability.measure.probe import probe_network
from stability.spec.case import Case
from stability.spec.registry import INVARIANTS
from stability.spec.schema import Spec

__all__ = ["MeasureContext", "measure_case", "probe_observers"]


@dataclass(kw_only=True)
class MeasureContext:
    """What an invariant's `after_probe` and `ensemble` measurements see (stability.spec.registry):
    the case, its blocks and their input (after the stem; None for a network probed through its
    model's own forward), the probe's measurements, the size of
    the case's seed ensemble (`[probe] ensemble`), and a dict the invariants of one case share
    (variance_growth and mean_field judge the same ensemble members)."""

    spec: Spec
    case: Case
    blocks: Any
    x: torch.Tensor | None
    m: Measurements
    size: int
    shared: dict[str, Any] = field(default_factory=dict)
    #: The built network (`net.model`: the blocks run inside a model's own forward, and `x` is None).
    net: Network | None = None
    #: Each invariant's watcher of the construction (its registry entry's `construction`), by name.
    watchers: dict[str, Any] = field(default_factory=dict)


def _probe_entries(spec: Spec) -> list[Any]:
    """The registry entries of the probe invariants the spec declares, in registry order."""
    return [e for e in (INVARIANTS.get(n) for n, _ in spec.invariants()) if not e.training]


def probe_observers(spec: Spec) -> list[Any]:
    """The observers a spec's probe runs: the token shapes for (B, T, C) inputs, then each declared
    invariant's own (its registry entry's `observers`), in registry order."""
    observers: list[Any] = [TokenShapeObserver()] if spec.block.layer == "tokens" else []
    for e in _probe_entries(spec):
        if e.observers is not None:
            observers += e.observers(spec)
    return observers


def measure_case(spec: Spec, case: Case) -> Measurements:
    """Build and probe one case and take every measurement its declared invariants need: the
    observers during the pass, then each one's `after_probe`, then each one's `ensemble`
    (registry order). Raises what building and probing raise."""
    entries = _probe_entries(spec)
    watchers = {e.name: e.construction(spec) for e in entries if e.construction is not None}
    with watching(*watchers.values()):
        net = build(spec, case)
    x = network_input(spec, case, net)
    observers = probe_observers(spec)
    m = probe_network(
        net,
        x,
        loss=spec.probe.loss,
        seed=derive_seed(case.seed, 2),
        checkpoint_every=spec.probe.checkpoint_every,
        rng_seed=derive_seed(case.seed, 3),
        observers=observers,
    )
    m = finish_measurements(spec, m)
    ctx = MeasureContext(
        spec=spec, case=case, blocks=net.blocks, x=x, m=m, size=ensemble_size(spec), net=net, watchers=watchers
    )
    for e in entries:
        if e.after_probe is not None:
            m.extra.update(e.after_probe(ctx))
    for e in entries:
        if e.ensemble is not None:
            m.extra.update(e.ensemble(ctx))
    return m
