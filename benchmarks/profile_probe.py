"""Where the probe's time goes, by design and by thread count, on the networks of
docs/performance.md target (a).

    python benchmarks/profile_probe.py [--threads 1,2,4] [--reps N] [--designs grouped,tensor,device] [networks ...]
    python benchmarks/profile_probe.py --parts [--threads 1,2] [--reps N] [networks ...]
    python benchmarks/profile_probe.py --floor [--threads 1,2] [--reps N] [networks ...]

Without `--parts` it compares the pass's designs (stability/measure/boundaries.py): for each
thread count (`torch.set_num_threads`), REPS rounds (default 15) of the bare forward + backward and
of the probe in each design, in a new shuffled order each round (fixed seed), all in this one
process so that a load change hits them alike; it prints each design's median ratio to the bare
pass of the same round, by wall time and by process CPU time (which with more than one thread
also counts what torch's other threads spend, spinning included), and the bare pass's median
milliseconds. "tensor" is the CPU design (each boundary reduced as it arrives), "grouped" the
same arithmetic on groups of boundaries copied into one buffer, "device" the no-synchronisation
design of a GPU, run on the CPU.

With `--parts` it times each part inside the full probe (the CPU design in use), mean per probe over
REPS probes interleaved with bare passes, by wall time of the calling thread at each thread count:
the boundary moments, the boundary-gradient hooks, the parameter hooks, the remaining
parameter-gradient norms, the module walk, the projection vector, the final read with the
identity errors; "rest" is the probe minus the bare pass minus those parts (Python per block, hook
registration, the input's copy, the RNG fork).

With `--floor` it sets the probe beside the bare pass and beside a pass that takes the same
measurements with nothing of the harness around them (`floor`: each boundary's Σh and Σh², each
boundary gradient's and large parameter gradient's norm by rows in a hook, the small parameters'
norms, the identity errors, written inline for these float32 networks, with none of the probe's
checks, fallbacks, walk, RNG fork or bookkeeping): the floor of a hook-based pass with this
arithmetic, and what the harness adds above it.
Not an asv benchmark (nothing runs at import; no function is named time_/peakmem_/track_).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DESIGNS = ("tensor", "grouped", "device")


def _probe_in(design: str, blocks: Any, x: Any) -> Callable[[], None]:
    from stability.measure import boundaries
    from stability.measure.probe import probe

    def run() -> None:
        saved = boundaries.CPU_DESIGN
        boundaries.CPU_DESIGN = design  # type: ignore[assignment]
        try:
            probe(blocks, x, seed=0)
        finally:
            boundaries.CPU_DESIGN = saved

    return run


def designs(blocks: Any, x: Any, r: Any, names: list[str], threads: int, reps: int) -> dict[str, dict[str, float]]:
    """Median wall and CPU ratios to the bare pass of each design at `threads`, interleaved."""
    import torch

    from benchmarks.ratios import _bare

    torch.set_num_threads(threads)
    fns = {"bare": _bare(blocks, x, r), **{name: _probe_in(name, blocks, x) for name in names}}
    for f in fns.values():  # warm up each (a process's first backward costs ~0.4 s)
        f()
        f()
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    order, rng = list(fns), random.Random(0)
    for _ in range(reps):
        rng.shuffle(order)
        for k in order:
            c0, t0 = time.process_time(), time.perf_counter()
            fns[k]()
            wall[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)
    out = {"bare": {"wall_ms": statistics.median(wall["bare"]) * 1e3, "cpu_ms": statistics.median(cpu["bare"]) * 1e3}}
    for k in names:
        out[k] = {
            "wall": statistics.median(a / b for a, b in zip(wall[k], wall["bare"], strict=True)),
            "cpu": statistics.median(a / b for a, b in zip(cpu[k], cpu["bare"], strict=True)),
        }
    return out


def parts(blocks: Any, x: Any, r: Any, reps: int) -> dict[str, float]:
    """Mean wall seconds per probe spent in each part of it (see the module docstring)."""
    import torch

    from benchmarks.ratios import _bare
    from stability.measure import boundaries
    from stability.measure import probe_pass as mod  # the pass: its parameter norms, projection vector and module walk
    from stability.measure.probe import probe

    clock = time.perf_counter
    spent: dict[str, float] = {}
    saved: list[tuple[Any, str, Any]] = []
    inner: list[float] = []  # per timed call in progress: the time its timed callees took (counted to them, not to it)

    def timed(key: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def g(*args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            inner.append(0.0)
            try:
                return f(*args, **kwargs)
            finally:
                took = clock() - t0
                own = took - inner.pop()
                spent[key] = spent.get(key, 0.0) + own
                if inner:
                    inner[-1] += took

        return g

    def wrap(owner: Any, name: str, key: str) -> None:
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, timed(key, getattr(owner, name)))

    wrap(boundaries._HostReductions, "add", "moments")  # (a group's reduction runs inside the add that fills it)
    wrap(boundaries._HostReductions, "end_forward", "moments")  # (the last group's)
    wrap(mod, "param_grad_norms", "other parameter norms")
    wrap(boundaries._HostReductions, "read", "final read, identity errors")
    wrap(mod, "projection_vector", "projection vector")
    wrap(mod, "_ModuleState", "module walk")
    wrap(mod, "_named_parameters", "module walk")  # (the walk itself is in _ModuleState)
    on = boundaries._GradientHooks.on
    saved.append((boundaries._GradientHooks, "on", on))

    def hooked(
        self: Any, i: int, h: Any, fn: Any, grad: Any
    ) -> None:  # a boundary's hook: its registration and its calls
        on(self, i, h, timed("boundary-gradient hooks", fn), grad)

    boundaries._GradientHooks.on = timed("boundary-gradient hooks", hooked)  # type: ignore[method-assign]
    hook: Callable[..., Any] = torch.Tensor.register_hook
    saved.append((torch.Tensor, "register_hook", hook))

    def register(
        self: Any, fn: Any
    ) -> Any:  # the large parameters' hooks, and the output's (a tensor hook: `_GradientHooks`)
        return hook(self, timed("parameter hooks" if self.is_leaf else "boundary-gradient hooks", fn))

    torch.Tensor.register_hook = register  # type: ignore[method-assign]
    bare = _bare(blocks, x, r)
    total = {"probe": 0.0, "bare": 0.0}
    try:
        for _ in range(2):
            probe(blocks, x, seed=0)
            bare()
        spent.clear()
        for _ in range(reps):
            t0 = clock()
            probe(blocks, x, seed=0)
            total["probe"] += clock() - t0
            t0 = clock()
            bare()
            total["bare"] += clock() - t0
    finally:
        for owner, name, f in reversed(saved):
            setattr(owner, name, f)
    out = {k: v / reps for k, v in total.items()}
    out.update({k: v / reps for k, v in spent.items()})
    out["rest"] = out["probe"] - out["bare"] - sum(v / reps for v in spent.values())
    return out


def floor(blocks: Any, x: Any, r: Any, reps: int) -> dict[str, float]:
    """Median wall seconds of the bare pass, the probe and `_floor_pass` (module docstring),
    interleaved in a new shuffled order each round."""
    from benchmarks.ratios import _bare
    from stability.measure.probe import probe

    fns = {"bare": _bare(blocks, x, r), "probe": lambda: probe(blocks, x, seed=0), "floor": _floor_pass(blocks, x)}
    wall: dict[str, list[float]] = {k: [] for k in fns}
    for f in fns.values():
        f()
    order, rng = list(fns), random.Random(0)
    for _ in range(reps):
        rng.shuffle(order)
        for k in order:
            t0 = time.perf_counter()
            fns[k]()
            wall[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in wall.items()}


def _floor_pass(blocks: Any, x: Any) -> Callable[[], None]:
    """The probe's measurements of a stack of float32 blocks on the CPU, inline: Σh and Σh² of each
    boundary (`sum`, and `square().sum()` or, above 65,536 elements, the norm by rows), each
    boundary gradient's norm by rows in a pre-hook on its node, each large parameter gradient's
    norm by rows in a hook that hands autograd a zero, the small ones stacked at the end, the
    identity errors and the projection vector. No checks, fallbacks or bookkeeping: a lower bound."""
    import math

    import torch

    from stability.measure.param_norms import _HOOK_PARAM
    from stability.measure.probe_pass import projection_vector
    from stability.measure.reductions import SQUARES_MAX

    mods = list(blocks)
    params = [p for p in blocks.parameters() if p.requires_grad]
    large = [p for p in params if p.numel() >= _HOOK_PARAM]
    small = [j for j, p in enumerate(params) if p.numel() < _HOOK_PARAM]
    hypot, norm = math.hypot, torch.linalg.vector_norm

    def rows(g: Any) -> float:
        return hypot(*norm(g.reshape(-1, 1024), dim=1).tolist())

    def run() -> None:
        sums: list[tuple[float, float]] = []
        grads: list[float] = [0.0] * (len(mods) + 1)
        pnorms: dict[int, float] = {}
        zeros = {p.shape: p.new_zeros(()).expand(p.shape) for p in large}

        def param_hook(j: int) -> Any:
            def hook(g: Any) -> Any:
                pnorms[j] = rows(g)
                return zeros[g.shape]

            return hook

        handles = [p.register_hook(param_hook(j)) for j, p in enumerate(large)]
        x0 = x.detach().requires_grad_(True)
        h = x0.clone()
        for i, m in enumerate(mods):
            f = h.detach().reshape(-1)
            sums.append((f.sum().item(), rows(f) ** 2 if f.numel() > SQUARES_MAX else f.square().sum().item()))
            if i:

                def pre(go: Any, i: int = i) -> None:
                    grads[i] = rows(go[0])

                h.grad_fn.register_prehook(pre)
            h = m(h)
        out_grad = projection_vector(h.shape, 0, dtype=h.dtype, device=h.device)
        got = torch.autograd.grad(h, [x0, *params], grad_outputs=out_grad)
        stacked = [norm(got[1 + j]) for j in small]
        [
            rows(got[0]),
            rows(h.detach() - x0),
            rows(x0),
            rows(got[0] - out_grad),
            rows(out_grad),
            *[float(t) for t in stacked],
        ]  # noqa: B018  (the identity errors' norms, the small parameters')
        for handle in handles:
            handle.remove()

    return run


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    import torch

    from benchmarks.ratios import NETWORKS, network
    from stability.measure.probe_pass import projection_vector

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("networks", nargs="*", default=list(NETWORKS), help=f"networks (default all: {', '.join(NETWORKS)})")
    p.add_argument("--parts", action="store_true", help="time each part inside the probe instead of comparing designs")
    p.add_argument(
        "--floor", action="store_true", help="the probe beside the same measurements taken inline, without the harness"
    )
    p.add_argument("--threads", default="1,2,4", help="comma-separated torch thread counts (default 1,2,4)")
    p.add_argument("--reps", type=int, default=15, help="interleaved rounds (default 15)")
    p.add_argument(
        "--designs", default=",".join(DESIGNS), help=f"comma-separated designs to compare (default {','.join(DESIGNS)})"
    )
    args = p.parse_args(argv)
    names = [d.strip() for d in args.designs.split(",") if d.strip()]
    unknown = sorted(set(names) - set(DESIGNS)) + sorted(set(args.networks) - set(NETWORKS))
    if unknown:
        p.error(
            f"unknown design or network {', '.join(unknown)}: designs are {', '.join(DESIGNS)}, networks "
            f"{', '.join(NETWORKS)}"
        )
    for name in args.networks:
        blocks, x = network(name)
        with torch.no_grad():
            r = projection_vector(blocks(x).shape, 0, dtype=x.dtype, device=x.device)
        for threads in (int(t) for t in args.threads.split(",")):
            torch.set_num_threads(threads)
            if args.floor:
                got = floor(blocks, x, r, args.reps)
                b = got["bare"]
                cells = " ".join(f"{k}={got[k] / b:.3f}x (+{(got[k] - b) * 1e3:.2f} ms)" for k in ("probe", "floor"))
                print(f"{name} threads={threads} bare={b * 1e3:.1f}ms {cells}", flush=True)
                continue
            if args.parts:
                got = parts(blocks, x, r, args.reps)
                print(
                    f"{name} threads={threads}",
                    f"probe={got['probe'] * 1e3:.1f}ms bare={got['bare'] * 1e3:.1f}ms "
                    f"({got['probe'] / got['bare']:.3f}x);",
                    "; ".join(f"{k} {v * 1e3:.2f} ms" for k, v in got.items() if k not in ("probe", "bare")),
                    flush=True,
                )
                continue
            by = designs(blocks, x, r, names, threads, args.reps)
            cells = " ".join(f"{k}={by[k]['wall']:.3f}x/{by[k]['cpu']:.3f}x" for k in names)
            print(
                f"{name} threads={threads} bare={by['bare']['wall_ms']:.1f}ms wall, "
                f"{by['bare']['cpu_ms']:.1f}ms CPU; probe/bare wall/CPU: {cells}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
