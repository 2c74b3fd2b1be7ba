"""Depth budgets of shipped specs, tracked over commits (`stability sweep`'s bisection): the largest
depth at which a declared invariant holds on every seed of a small ensemble.

asv counts a bigger number as worse, and a budget is better when bigger, so the tracked number is
1000 / budget (unit "1000/blocks"): a change that halves a budget doubles it, and `asv continuous`
reports it as a regression. Read the budget off a graph as 1000 / value. A budget at the top of the
searched range is reported as that depth (the range caps it), one below the smallest depth as 1.

Each case is the spec's corner case (smallest width and batch, first weight init, dtype and seed)
with `branch_init = "default"` where the space allows it (a zero branch is the identity at any
depth and would have no budget), two seeds, probed on the CPU. The specs are those whose budget is
finite within the range and cheap to bisect (a few seconds each on one core): expectations that
must hold, not negative controls, whose "budget" only says how early the control fails.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks import _nets
from benchmarks._compat import internal

#: (spec, invariant, largest depth searched)
CASES = {
    "preact_mlp:gradient_arrival": 1024,
    "plain_tanh_mlp:gradient_arrival": 512,
    "postnorm_mlp:gradient_arrival": 256,
    "highway_mlp:gradient_arrival": 256,
}
SEEDS = 2


class DepthBudget:
    params = [list(CASES)]
    param_names = ["spec_invariant"]
    unit = "1000/blocks"
    timeout = 300

    def setup(self, which: str) -> None:
        try:
            Axis = internal("run.grid").Axis
            Store = internal("run.store").Store
            run_sweep = internal("run.sweep").run_sweep
            exec_module = internal("run.sweep_exec")
            SerialBackend = (
                getattr(exec_module, "SerialBackend", None) or internal("run.executor").InProcessExecutor
            )  # the executor contract replaced the backends
        except ImportError:  # a commit before `stability sweep`
            raise NotImplementedError("no stability.run.sweep at this commit") from None
        from stability import load_spec

        _nets.threads()
        name, invariant = which.split(":")
        spec = load_spec(Path(_nets.SPECS_DIR, f"{name}.toml"))
        axes = (
            [Axis("branch_init", ("default",))]
            if "default" in spec.space.branch_init and spec.family != "plain"
            else []
        )
        with Store(":memory:") as store:
            result = run_sweep(
                spec,
                axes,
                store,
                SerialBackend(),
                seeds=range(spec.space.seed[0], spec.space.seed[0] + SEEDS),
                depth_range=(spec.space.depth[0], CASES[which]),
                version="asv",
            )
        budget = next(b for b in result.budgets if b.invariant == invariant)
        self.budget = budget.budget if budget.budget is not None else 1

    def track_inverse_depth_budget(self, which: str) -> float:
        return 1000.0 / self.budget

    track_inverse_depth_budget.unit = "1000/blocks"  # type: ignore[attr-defined]
