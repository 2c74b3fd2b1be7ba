"""Stage 4, for laws: one case → an ensemble of S networks of the same architecture, probed together.

A growth law (how the variance grows over depth, and at what rate) is a property of the
distribution of networks an architecture and an init draw, not of one draw (stability/judge/growth.py
explains why and how the ensemble is judged). The ensemble of a case is the case itself plus S − 1
cases that differ only in their seed, `ensemble_seeds(case.seed, S)`: seeds derived from the case's
seed on their own stream, so the ensemble is as reproducible as the case (`--case ... seed=N`
rebuilds the same ensemble) and never overlaps the case's weight, input or loss streams.

The S − 1 new members are built and probed in one vectorised pass (`probe_seeds`); where vmap
cannot run a block (a custom block doing something vmap has no rule for, a library model run
through its own forward), the members are built and probed one at a time with `probe`, each freed
before the next is built, which gives the same numbers as probing each case alone.
`mean_field` judges the ensemble's median per-block gradient factor (a log of a ratio of two
gradient norms of one network at batch 1 has a heavy lower tail). `gradient_arrival` and
`identity_at_init` stay per-case: they bound what one network, the one a
user would train, does (an identity is exact or not, a gradient reaches the input or not); only
the *law* needs the distribution.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

from stability.errors import BlockError
from stability.families.build import Network, build, derive_seed, network_input
from stability.measure.batched import probe_seeds
from stability.measure.channels import ChannelProfile, ChannelStats
from stability.measure.lesion import network_lesion
from stability.measure.measurements import serializable
from stability.measure.probe import BoundaryObserver, Measurements, probe_network
from stability.spec.case import Case
from stability.spec.schema import Spec

__all__ = [
    "Ensemble",
    "ENSEMBLE_STREAM",
    "ensemble_seeds",
    "probe_ensemble",
    "probe_ensemble_until_decided",
    "ensemble_size",
    "probe_channel_ensemble",
    "lesion_ensemble",
]

#: The `derive_seed` stream the ensemble's seeds come from (0 weights, 1 input, 2 loss are the
#: case's own; a high number keeps clear of streams other features add).
ENSEMBLE_STREAM = 0x454E53  # "ENS"

_T = TypeVar("_T")


@serializable
@dataclass(frozen=True, kw_only=True)
class Ensemble:
    """The variance profiles of S networks of one case's architecture (member 0 is the case)."""

    seeds: list[int]  # the members' case seeds; seeds[0] is the case's
    act_var: list[list[float]]  # (S, L+1)
    act_sq_mean: list[list[float]]  # (S, L+1)
    vectorised: bool  # True when probe_seeds measured the new members, False for the loop of probe
    #: (S, L+1): each member's gradient norms at every boundary (for `mean_field`); empty where not kept
    grad_norm: list[list[float]] = dataclasses.field(default_factory=list)

    @property
    def size(self) -> int:
        return len(self.seeds)

    def profiles(self, statistic: str) -> list[list[float]]:
        return self.act_var if statistic == "variance" else self.act_sq_mean


def ensemble_seeds(seed: int, size: int) -> list[int]:
    """The seeds of a case's ensemble: the case's own, then size − 1 derived on `ENSEMBLE_STREAM`."""
    if size < 1:
        raise ValueError(f"ensemble size {size}: must be at least 1")
    base = derive_seed(seed, ENSEMBLE_STREAM)
    return [seed] + [derive_seed(base, k) for k in range(1, size)]


def ensemble_size(spec: Spec) -> int:
    """The spec's `[probe] ensemble`, or 1 where the field is absent."""
    return int(getattr(spec.probe, "ensemble", 1))


def probe_ensemble(spec: Spec, case: Case, first: Measurements, *, size: int, vectorise: bool = True) -> Ensemble:
    """Measure the ensemble of `case`: `first` is the case's own probe; the size − 1 other members
    are built from `ensemble_seeds` and probed with the case's loss (each with its own loss seed).

    With `vectorise` (the default) they go through `probe_seeds`; if vmap cannot run a block the
    loop of `probe` runs instead (same numbers as probing each member alone). Raises what `build`
    and `probe` raise.
    """
    seeds = ensemble_seeds(case.seed, size)
    found, vectorised = _probe_members(spec, case, seeds[1:], vectorise=vectorise)
    everyone = [first, *found]
    return Ensemble(
        seeds=seeds,
        act_var=[m.act_var for m in everyone],
        act_sq_mean=[m.act_sq_mean for m in everyone],
        vectorised=vectorised,
        grad_norm=[m.grad_norm for m in everyone],
    )


def probe_ensemble_until_decided(
    spec: Spec,
    case: Case,
    first: Measurements,
    *,
    size: int,
    enough: Callable[[list[list[float]]], bool],
    max_size: int | None = None,
) -> Ensemble:
    """`probe_ensemble`, then, until the judge has `enough` of the members' profiles (of the spec's
    `variance_growth.statistic`; `stability.judge.growth.enough_members`: the growth laws are decided,
    or cannot be at this depth), double the ensemble with the next seeds of the same stream, up to
    `max_size` (default 4 × size). A sequential design: the cases whose verdict hinges on the noise
    get the seeds they need, the rest cost `size`. The judge is passed in: measuring never imports
    judging."""
    ens = probe_ensemble(spec, case, first, size=size)
    vg = spec.expect.variance_growth
    limit = max_size if max_size is not None else 4 * size
    if vg is None:
        return ens
    while ens.size < limit:
        usable = [p for p in ens.profiles(vg.statistic) if p and p[0] > 0 and all(math.isfinite(v) for v in p)]
        if len(usable) < 2 or enough(usable):
            break
        more = min(ens.size, limit - ens.size)
        seeds = ensemble_seeds(case.seed, ens.size + more)
        found, vectorised = _probe_members(spec, case, seeds[ens.size :])
        ens = Ensemble(
            seeds=seeds,
            act_var=ens.act_var + [m.act_var for m in found],
            act_sq_mean=ens.act_sq_mean + [m.act_sq_mean for m in found],
            vectorised=ens.vectorised and vectorised,
            grad_norm=ens.grad_norm + [m.grad_norm for m in found],
        )
    return ens


def _built(spec: Spec, case: Case, seeds: list[int]) -> list[tuple[Network, torch.Tensor | None]]:
    """(network, its input after the stem) of the case's architecture with each of these seeds
    (the input None where the network runs inside its model's own forward)."""
    return [_member(spec, case, s) for s in seeds]


def _member(spec: Spec, case: Case, seed: int) -> tuple[Network, torch.Tensor | None]:
    member = dataclasses.replace(case, seed=seed)
    net = build(spec, member)
    return net, network_input(spec, member, net)


def _one_at_a_time(
    spec: Spec,
    case: Case,
    seeds: list[int],
    measure: Callable[[Network, torch.Tensor | None, int], _T],
    first: list[tuple[Network, torch.Tensor | None]] | None = None,
) -> list[_T]:
    """`measure(net, x, seed)` of each member, each built after the one before is freed (a library
    model's members are whole models: one resident at a time besides the case's own, which the
    memory guard's estimate counts). `first`, when given, holds the first seed's member already
    built (taken out of it, so nothing else keeps it alive)."""
    out: list[_T] = []
    for s in seeds:
        net, x = first.pop() if first else _member(spec, case, s)
        out.append(measure(net, x, s))
        del net, x
    return out


def _probe_member(
    spec: Spec, net: Network, x: torch.Tensor | None, seed: int, *, observers: Sequence[BoundaryObserver] = ()
) -> Measurements:
    """`probe_network` of one member with the streams the engine gives a case of that seed (loss 2, RNG 3)."""
    return probe_network(
        net,
        x,
        loss=spec.probe.loss,
        seed=derive_seed(seed, 2),
        checkpoint_every=spec.probe.checkpoint_every,
        rng_seed=derive_seed(seed, 3),
        observers=observers,
    )


def _probe_members(
    spec: Spec, case: Case, seeds: list[int], *, vectorise: bool = True
) -> tuple[list[Measurements], bool]:
    """The members with these seeds, probed together (or one by one where vmap cannot run a block)."""
    if not seeds:
        return [], False
    head = _member(spec, case, seeds[0])
    # Blocks called with keyword arguments (a library Stack's call_kwargs) or inside a model's own
    # forward go through `probe_network`, which passes them; probe_seeds calls each block with the
    # hidden state alone.
    alone = head[0].call_kwargs is None and head[0].model is None and head[1] is not None
    if vectorise and alone and spec.probe.checkpoint_every == 0 and spec.probe.loss in ("projection", "sum"):
        built = [head, *_built(spec, case, seeds[1:])]
        if all(net.call_kwargs is None and net.model is None and x is not None for net, x in built):
            try:
                return probe_seeds(
                    [net.blocks for net, _ in built],
                    [x for _, x in built if x is not None],
                    seeds=[derive_seed(s, 2) for s in seeds],
                    loss=spec.probe.loss,
                ), True
            except (BlockError, RuntimeError, ValueError) as exc:
                if "out of memory" in str(exc).lower():
                    raise
            del built  # fresh buffers below: the failed pass may have run some blocks
            head = _member(spec, case, seeds[0])
        else:
            head = built[0]
            del built
    pending = [head]
    del head
    return _one_at_a_time(spec, case, seeds, lambda net, x, s: _probe_member(spec, net, x, s), first=pending), False


def probe_channel_ensemble(spec: Spec, case: Case, first: Measurements, *, size: int) -> list[ChannelProfile]:
    """The channel statistics (`ChannelStats`) of the case's ensemble, for `mean_shift`: member 0
    is the case's own (`first.extra["channels"]`), the size − 1 others are built from
    `ensemble_seeds` and probed one at a time with the observer (`probe_seeds` hands no boundary
    to observers). The mean shift of one finite network is a noisy sample of the architecture's
    (a centred tanh stack of width 18 at batch 8 gives ρ from −0.1 to 0.3 across seeds, around a
    median of −0.03), so the invariant judges the ensemble's median."""
    seeds = ensemble_seeds(case.seed, size)[1:]
    members = _one_at_a_time(
        spec, case, seeds, lambda net, x, s: _probe_member(spec, net, x, s, observers=[ChannelStats()])
    )
    return [first.extra["channels"], *(m.extra["channels"] for m in members)]


def lesion_ensemble(spec: Spec, case: Case, first: list[float], *, size: int) -> list[list[float]]:
    """The lesion changes (`stability.measure.lesion.lesion_changes`) of the case's ensemble: member 0 is
    the case's own, the others built from `ensemble_seeds`. One network seeing one input of a few
    values is a noisy sample (a 1/√L-scaled pre-activation stack at width 16, batch 1 exceeds a
    change of 0.8 in ~1 of 80 draws), so `lesion` judges the median over the networks."""
    return [
        first,
        *_one_at_a_time(spec, case, ensemble_seeds(case.seed, size)[1:], lambda net, x, s: network_lesion(net, x)),
    ]
