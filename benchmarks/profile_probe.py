"""Where the probe's time goes: each part of it replaced by a no-op in turn, against a bare forward
+ backward, on the three networks of docs/performance.md target (a).

    python benchmarks/profile_probe.py [REPS] [mlp|norm_mlp|conv|ln_first_mlp ...]
    python benchmarks/profile_probe.py --parts [REPS] [networks ...]

Prints, per network, the median process CPU time (one thread, REPS interleaved runs of all six
variants, default 9) of: bare, probe, probe without the boundary moments, without the
parameter-gradient norms, without the boundary-gradient hooks, and with none of the three.
Switching a part off also changes what the others find in the cache, so with `--parts` it
instead times each part inside the full probe (thread CPU time spent in the wrapped function,
mean per probe over REPS probes interleaved with bare passes): the boundary moments, the
boundary-gradient hooks, the parameter hooks, the remaining parameter-gradient norms, the module
walks, the projection vector and the identity errors; "rest" is the probe minus the bare pass
minus those parts.
Not an asv benchmark (nothing runs at import; no function is named time_/peakmem_/track_).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


class _NoHandle:
    def remove(self) -> None:
        pass


def variants(blocks: Any, x: Any, r: Any) -> dict[str, Callable[[], None]]:
    import torch

    from benchmarks.ratios import _bare
    from stability.measure.probe import probe

    mod = sys.modules["stability.measure.probe"]  # the module (stability.measure.probe the attribute is the function)
    orig = {"add": mod._Moments.add, "norms": mod._param_norms, "hook": torch.Tensor.register_hook, "large": mod._LargeParamNorms.__enter__}

    def run(*, moments: bool = True, norms: bool = True, hooks: bool = True) -> Callable[[], None]:
        def f() -> None:
            if not moments:
                mod._Moments.add = lambda self, h: None
            if not norms:
                mod._param_norms = lambda grads, nd, given=None: torch.zeros(len(grads), dtype=torch.float64)
                mod._LargeParamNorms.__enter__ = lambda self: self
            if not hooks:
                torch.Tensor.register_hook = lambda self, hook: _NoHandle() if not self.is_leaf else orig["hook"](self, hook)  # boundaries only
            try:
                probe(blocks, x, seed=0)
            finally:
                mod._Moments.add, mod._param_norms, torch.Tensor.register_hook = orig["add"], orig["norms"], orig["hook"]
                mod._LargeParamNorms.__enter__ = orig["large"]

        return f

    return {
        "bare": _bare(blocks, x, r),
        "probe": run(),
        "no_moments": run(moments=False),
        "no_param_norms": run(norms=False),
        "no_grad_hooks": run(hooks=False),
        "skeleton": run(moments=False, norms=False, hooks=False),
    }


def parts(blocks: Any, x: Any, r: Any, reps: int) -> dict[str, float]:
    """Mean thread CPU seconds per probe spent in each part of it (see the module docstring)."""
    import torch

    from benchmarks.ratios import _bare

    mod = sys.modules["stability.measure.probe"]
    clock = time.thread_time
    spent: dict[str, float] = {}
    saved: list[tuple[Any, str, Any]] = []

    def timed(key: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def g(*args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            try:
                return f(*args, **kwargs)
            finally:
                spent[key] = spent.get(key, 0.0) + clock() - t0

        return g

    def wrap(owner: Any, name: str, key: str) -> None:
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, timed(key, getattr(owner, name)))

    wrap(mod._Moments, "add", "moments")
    wrap(mod, "_param_norms", "small and middle parameter norms")
    wrap(mod, "_rel_diff", "identity errors")
    wrap(mod, "projection_vector", "projection vector")
    wrap(mod, "_ModuleState", "module walks")
    wrap(mod, "_named_parameters", "module walks")  # (the walk itself is in _ModuleState)
    hook = torch.Tensor.register_hook
    saved.append((torch.Tensor, "register_hook", hook))

    def register(self: Any, fn: Any) -> Any:  # boundaries (non-leaf) and parameters (leaf) apart
        return hook(self, timed("parameter hooks" if self.is_leaf else "boundary-gradient hooks", fn))

    torch.Tensor.register_hook = register  # type: ignore[method-assign]
    bare = _bare(blocks, x, r)
    total = {"probe": 0.0, "bare": 0.0}
    try:
        for _ in range(2):
            mod.probe(blocks, x, seed=0)
            bare()
        spent.clear()
        for _ in range(reps):
            t0 = clock()
            mod.probe(blocks, x, seed=0)
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


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    import torch

    from benchmarks.ratios import NETWORKS, network
    from stability.measure.probe import projection_vector

    torch.set_num_threads(1)
    by_part = bool(argv) and argv[0] == "--parts"
    argv = argv[1:] if by_part else argv
    reps = int(argv[0]) if argv else 9
    for name in argv[1:] or list(NETWORKS):
        blocks, x = network(name)
        with torch.no_grad():
            r = projection_vector(blocks(x).shape, 0, dtype=x.dtype, device=x.device)
        if by_part:
            got = parts(blocks, x, r, reps)
            print(
                name,
                f"probe={got['probe'] * 1e3:.1f}ms bare={got['bare'] * 1e3:.1f}ms ({got['probe'] / got['bare']:.3f}x);",
                "; ".join(f"{k} {v * 1e3:.2f} ms" for k, v in got.items() if k not in ("probe", "bare")),
                flush=True,
            )
            continue
        fns = variants(blocks, x, r)
        for f in fns.values():
            f()
        times: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(reps):
            for k, f in fns.items():
                t0 = time.process_time()
                f()
                times[k].append(time.process_time() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(name, " ".join(f"{k}={v * 1e3:.1f}ms({v / med['bare']:.3f}x)" for k, v in med.items()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
