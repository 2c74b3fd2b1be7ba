"""How an ensemble is grown and measured (stability/measure/ensemble.py), on small stacks: the doubling while
the law is undecided, the members' values against probing each member alone (with a stem, through
the vectorised pass and through its fallback), and the errors that must not be swallowed. Written
from the mutation check (docs/mutation.md)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from spec_support import make_case, make_spec

from stability import parse_spec
from stability.families.build import build, derive_seed, make_input
from stability.judge import growth
from stability.judge.growth import enough_members
from stability.measure import ensemble as ens_mod
from stability.measure.ensemble import ensemble_seeds, probe_ensemble, probe_ensemble_until_decided
from stability.measure.probe import Measurements, probe
from stability.spec.case import Case
from stability.spec.schema import Spec


def _spec(extra: str = "") -> Spec:
    space = f'depth = [1, 8]\nwidth = 8\nbatch = 4\ndtype = ["float64"]\n{extra}\n'
    return make_spec(
        "preact",
        block='activation = "relu"\n',
        space=space,
        expect="[expect.variance_growth]\n",
        file="specs/e.toml",
        name="e",
        description="d",
    )


def _case(
    depth: int = 4, seed: int = 2
) -> Case:  # seed 2: the first four members' input variances are 0.50, 1.44, 1.67, 1.10
    return make_case(depth=depth, width=8, batch=4, seed=seed)


def _alone(spec: Spec, case: Case) -> Measurements:
    net = build(spec, case)
    x = make_input(spec, case)
    if net.stem is not None:
        with torch.no_grad():
            x = net.stem(x)
    return probe(
        net.blocks, x, loss=spec.probe.loss, seed=derive_seed(case.seed, 2), rng_seed=derive_seed(case.seed, 3)
    )


def _first(spec: Spec, case: Case) -> Measurements:
    return _alone(spec, case)


def test_undecided_ensembles_double_up_to_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    spec, case = _spec(), _case()
    seen: list[int] = []

    def undecided(profiles: list[list[float]], **_: Any) -> Any:
        seen.append(len(profiles))
        return SimpleNamespace(decided=False)

    monkeypatch.setattr(growth, "classify_ensemble", undecided)
    e = probe_ensemble_until_decided(spec, case, _first(spec, case), size=2, enough=enough_members(case.depth))
    assert seen == [2, 4] and e.size == 8 and e.seeds == ensemble_seeds(case.seed, 8)
    assert len(e.act_var) == len(e.act_sq_mean) == 8 and e.vectorised
    for k, seed in enumerate(e.seeds):
        alone = _alone(
            spec,
            make_case(depth=4, width=8, batch=4, seed=seed),
        )
        assert e.act_var[k] == pytest.approx(alone.act_var, rel=1e-12, abs=0.0)
        assert e.act_sq_mean[k] == pytest.approx(alone.act_sq_mean, rel=1e-12, abs=0.0)
    seen.clear()
    e = probe_ensemble_until_decided(
        spec, case, _first(spec, case), size=2, enough=enough_members(case.depth), max_size=6
    )
    assert seen == [2, 4] and e.size == 6  # 2 → 4 → 6: the last step only fills up to the limit


def test_a_decided_ensemble_stops_and_shallow_or_lawless_ones_never_grow(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec()
    calls: list[int] = []

    def decided(profiles: list[list[float]], **_: Any) -> Any:
        calls.append(len(profiles))
        return SimpleNamespace(decided=True)

    monkeypatch.setattr(growth, "classify_ensemble", decided)
    assert probe_ensemble_until_decided(
        spec, _case(), _first(spec, _case()), size=3, enough=enough_members(_case().depth)
    ).size == 3 and calls == [3]
    assert probe_ensemble_until_decided(
        spec, _case(2), _first(spec, _case(2)), size=3, enough=enough_members(2)
    ).size == 3 and calls == [3]  # depth 2 < 3


def test_one_member_is_not_vectorised_and_a_failed_vmap_falls_back_to_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    spec, case = _spec(), _case()
    first = _first(spec, case)
    assert probe_ensemble(spec, case, first, size=1).vectorised is False

    def no_vmap(*_: Any, **__: Any) -> Any:
        raise RuntimeError("vmap: no batching rule for this op")

    monkeypatch.setattr(ens_mod, "probe_seeds", no_vmap)
    e = probe_ensemble(spec, case, first, size=3)
    assert not e.vectorised
    for k, seed in enumerate(e.seeds):
        assert (
            e.act_var[k]
            == _alone(
                spec,
                make_case(depth=4, width=8, batch=4, seed=seed),
            ).act_var
        )  # the loop is `probe` itself


@pytest.mark.parametrize("message", ["CUDA out of memory. Tried to allocate 2 GiB", "Out Of Memory while stacking"])
def test_running_out_of_memory_in_the_vectorised_pass_is_not_swallowed(
    monkeypatch: pytest.MonkeyPatch, message: str
) -> None:
    def oom(*_: Any, **__: Any) -> Any:
        raise RuntimeError(message)

    monkeypatch.setattr(ens_mod, "probe_seeds", oom)
    spec, case = _spec(), _case()
    with pytest.raises(RuntimeError, match=message):
        probe_ensemble(spec, case, _first(spec, case), size=3)


def test_members_of_a_stack_with_a_stem_are_probed_after_it(tmp_path: Path) -> None:
    (tmp_path / "stability_ensemble_stem.py").write_text(
        "import torch\nfrom torch import nn\nfrom stability import Stack\n\n\ndef make(depth, width):\n"
        "    return Stack(blocks=nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in "
        "range(depth)]),\n"
        "                 stem=nn.Linear(width, width))\n",
        encoding="utf-8",
    )
    spec = parse_spec(
        'name = "s"\ndescription = "d"\nfamily = "custom"\n[block]\nfactory = "stability_ensemble_stem:make"\n[space]\n'
        'depth = 3\nwidth = 6\nbatch = 4\ndtype = ["float64"]\n[expect.variance_growth]\n',
        file=str(tmp_path / "s.toml"),
    )
    case = make_case(width=6, batch=4, seed=1)
    e = probe_ensemble(spec, case, _alone(spec, case), size=3)
    for k, seed in enumerate(e.seeds[1:], start=1):
        alone = _alone(
            spec,
            make_case(width=6, batch=4, seed=seed),
        )
        assert e.act_var[k] == pytest.approx(alone.act_var, rel=1e-12, abs=0.0)
