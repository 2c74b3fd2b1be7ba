"""The zoo's depth budgets tracked over commits (docs/zoo.md): for each family of specs/zoo/, the
budget of `gradient_arrival` as `stability zoo` computes it (`stability.run.zoo`: the largest depth
up to 64 at which it holds on seeds 0 and 1, bisected by `stability sweep`'s own bisection), so a
library upgrade or an init change that moves a family's budget shows on the graph.

As in bench_budget.py, asv counts a bigger number as worse and a budget is better when bigger, so
the tracked number is 1000 / budget (unit "1000/blocks"); a budget at the top of the range is 64, a
family that fails at depth 1 is tracked as 1000 / 1. Families whose library does not import here
(timm, torchvision) are skipped by asv (NotImplementedError).
"""

from __future__ import annotations

from pathlib import Path

from benchmarks import _nets

ZOO = Path(__file__).resolve().parent.parent / "specs" / "zoo"
FAMILIES = sorted(p.stem for p in ZOO.glob("*.toml"))
TOP = 64


class ZooBudget:
    params = [FAMILIES]
    param_names = ["family"]
    unit = "1000/blocks"
    timeout = 900

    def setup(self, family: str) -> None:
        try:
            from stability.run.zoo import zoo_budget
        except ImportError:  # a commit before the zoo
            raise NotImplementedError("no stability.run.zoo at this commit") from None
        from stability import load_spec
        from stability.errors import SpecError

        _nets.threads()
        try:
            spec = load_spec(ZOO / f"{family}.toml")
        except SpecError as exc:  # its library does not import here
            raise NotImplementedError(str(exc)) from None
        b = zoo_budget(spec, top=TOP)
        self.budget = (
            b.budget if b is not None and b.budget else 1
        )  # "fails at the smallest depth" and "not applicable" have none

    def track_inverse_depth_budget(self, family: str) -> float:
        return 1000.0 / self.budget

    track_inverse_depth_budget.unit = "1000/blocks"  # type: ignore[attr-defined]
