"""Hypothesis strategies over a spec's search space, for the engine and for users' own tests.

    from hypothesis import given
    from stability import load_spec, probe, strategies as sst

    spec = load_spec("specs/preact_mlp.toml")

    @given(sst.networks(spec))
    def test_gradient_arrives(net):
        m = probe(net.blocks, net.x, seed=net.loss_seed)
        assert 0.1 < m.gradient_ratio < 10

Strategies draw only plain values (a `Case`); the network is built lazily in the test body on
first access, so Hypothesis's "too slow" health check measures generation, not building. All
randomness (weights, input, projection loss) derives from the case's seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import strategies as st

from stability.families.build import Network, build, derive_seed, make_input, network_input
from stability.run.devices import case_devices
from stability.spec.applicability import narrow_for
from stability.spec.case import Case
from stability.spec.schema import DEFAULT_SIZE, IntSpace, Spec

__all__ = ["cases", "networks", "DrawnNetwork", "integers_in"]


def cases(spec: Spec, *, device: str | None = "cpu", invariant: str | None = None) -> st.SearchStrategy[Case]:
    """Cases from `spec.space`. Shrinks toward the smallest depth, width and batch and the first
    listed init and dtype. `device`: "cpu", "cuda", "auto" (cuda when present) or "all".
    With `invariant`, only the cases it applies to are drawn where its rule narrows a choice key
    (`stability.spec.applicability.narrow_for`: identity_at_init draws zero-branch inits only)."""
    if invariant is not None:
        spec = narrow_for(spec, invariant)
    s = spec.space
    branch = list(s.branch_init)
    conv = spec.block.layer == "conv2d"
    tokens = spec.block.layer == "tokens"
    lo, hi = s.depth
    # One draw in eight takes the deepest allowed depth, so every search covers it; the flag
    # shrinks to "off" and the depth then shrinks toward lo as usual.
    depth = st.tuples(st.integers(0, 7), integers_in(s.depth)).map(lambda t: hi if t[0] == 7 else t[1])
    return st.builds(
        Case,
        depth=depth,
        width=integers_in(s.width),
        batch=integers_in(s.batch),
        spatial=integers_in(s.spatial or (DEFAULT_SIZE, DEFAULT_SIZE)) if conv else st.none(),
        input_width=integers_in(s.input_width) if s.input_width else st.none(),
        weight_init=st.sampled_from(list(s.weight_init)),
        branch_init=st.sampled_from(branch),
        dtype=st.sampled_from(list(s.dtype)),
        device=st.sampled_from(case_devices(spec, device)),
        seed=integers_in(s.seed),
        tokens=integers_in(s.tokens or (DEFAULT_SIZE, DEFAULT_SIZE)) if tokens else st.none(),
    )


def integers_in(space: tuple[int, int]) -> st.SearchStrategy[int]:
    """Only the values an integer key of [space] admits, shrinking toward the smallest: an
    explicit `values` set is sampled by index, a `multiple_of` range draws k and maps it to k·m,
    so a constraint holds by construction and no draw is ever filtered out."""
    lo, hi = space
    if isinstance(space, IntSpace) and space.values is not None:
        return st.sampled_from(space.values)
    step = space.multiple_of if isinstance(space, IntSpace) else 1
    if step == 1:
        return st.integers(lo, hi)
    return st.integers(lo // step, hi // step).map(lambda k: k * step)


@dataclass
class DrawnNetwork:
    """A drawn case whose network and input are built on first access (in the test body)."""

    spec: Spec
    case: Case
    _built: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def network(self) -> Network:
        if "net" not in self._built:
            self._built["net"] = build(self.spec, self.case)
        net: Network = self._built["net"]
        return net

    @property
    def blocks(self) -> torch.nn.Sequential:
        return self.network.blocks

    @property
    def x(self) -> torch.Tensor:
        if "x" not in self._built:
            x = network_input(self.spec, self.case, self.network)  # after the stem; a declared embedding's output
            self._built["x"] = x if x is not None else make_input(self.spec, self.case)  # (a model's own forward)
        x_: torch.Tensor = self._built["x"]
        return x_

    @property
    def loss_seed(self) -> int:
        return derive_seed(self.case.seed, 2)

    def __repr__(self) -> str:
        return f"DrawnNetwork({self.spec.name}: {self.case})"


def networks(
    spec: Spec, *, device: str | None = "cpu", invariant: str | None = None
) -> st.SearchStrategy[DrawnNetwork]:
    """A drawn case with its (lazily built) blocks and input tensor."""
    return cases(spec, device=device, invariant=invariant).map(lambda c: DrawnNetwork(spec, c))
