"""Side-by-side performance ratios of the probe, printed as one Markdown table.

    python benchmarks/ratios.py                 # every section (about 10-20 minutes on 2 cores)
    python benchmarks/ratios.py --only a,c,e    # some sections
    python benchmarks/ratios.py --json out.json # also write the numbers

Sections (docs/performance.md has the targets and the latest figures):
  a  probe overhead over bare forward + backward (median of interleaved runs), and the naive
     approach (one autograd.grad per boundary, quadratic in depth) beside it
  b  scaling: probe time against depth 64 … 1024, with the fitted exponent
  c  memory: bytes autograd saves for the backward pass, probe against bare forward + backward,
     and the peak RSS each adds (subprocesses)
  d  depth: a depth-10,000 pre-activation MLP probed with checkpoint_every=100, peak RSS of the
     subprocess, and the verdict against the un-checkpointed probe at a depth where both fit
  e  many seeds: `probe_seeds` (one vectorised pass) against a Python loop of `probe`
  f  the gate: `stability check specs --profile ci` and the whole pytest run, wall time

Not an asv benchmark: asv imports this module while discovering benchmarks, so nothing runs at
import and no function here starts with time_, peakmem_, mem_ or track_.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"
PY = sys.executable


# ----------------------------------------------------------------------------- helpers


def _net(text: str, **case: Any) -> tuple[Any, Any, Any]:
    """(spec, blocks, x) from spec text and case overrides."""
    from benchmarks._compat import internal  # asv runs this (via `network`) on commits from before the stage folders
    from stability import build, make_input, parse_spec

    corner_case = internal("spec.case").corner_case
    spec = parse_spec(text)
    c = corner_case(spec, **case)
    return spec, build(spec, c).blocks, make_input(spec, c)


def _mlp_text(family: str = "plain", norm: str = "none", layer: str = "linear", extra: str = "") -> str:
    return f"""
name = "ratios-{family}-{layer}"
description = "benchmarks/ratios.py"
family = "{family}"
[block]
layer = "{layer}"
activation = "relu"
norm = "{norm}"
{extra}
[space]
depth = [1, 100000]
width = [1, 4096]
batch = [1, 4096]
{"spatial = [1, 64]" if layer == "conv2d" else ""}
weight_init = ["kaiming_normal"]
branch_init = ["default"]
device = ["cpu"]
[expect.gradient_arrival]
lo = 0.5
hi = 100.0
"""


def _ln_first_mlp(depth: int = 256, width: int = 256, batch: int = 64) -> tuple[Any, Any]:
    """(blocks, x): blocks of LayerNorm → Linear → ReLU (Kaiming-normal weights, zero biases), the
    normalised MLP of the issue's independent measurement; the plain family's own normalised
    block is Linear → LayerNorm → ReLU."""
    import torch
    from torch import nn

    gen = torch.Generator().manual_seed(0)
    blocks = []
    for _ in range(depth):
        lin = nn.Linear(width, width)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(width, width, generator=gen) * math.sqrt(2.0 / width))
            lin.bias.zero_()
        blocks.append(nn.Sequential(nn.LayerNorm(width), lin, nn.ReLU()))
    return nn.Sequential(*blocks), torch.randn(batch, width, generator=gen)


def _bare(blocks: Any, x: Any, r: Any) -> Callable[[], None]:
    """One forward + one backward to the input and every parameter, no statistics."""
    import torch

    params = [p for p in blocks.parameters() if p.requires_grad]

    def run() -> None:
        x0 = x.detach().requires_grad_(True)
        y = blocks(x0)
        torch.autograd.grad(y, [x0, *params], grad_outputs=r)

    return run


def _bare_freed(blocks: Any, x: Any, r: Any) -> Callable[[], None]:
    """`_bare`, with each gradient of a parameter the probe hooks (stability.measure.param_norms._HOOK_PARAM
    elements or more) dropped as autograd produces it, as the probe does after taking its norm:
    the same memory traffic as the probe, none of its measurements. The probe against this is
    its overhead with the allocator's share taken out (a training step keeps its gradients, so
    `_bare` is the reference of the targets)."""
    import torch

    from stability.measure.param_norms import _HOOK_PARAM

    params = [p for p in blocks.parameters() if p.requires_grad]
    big = [p for p in params if p.numel() >= _HOOK_PARAM]

    def drop(g: Any) -> Any:
        return g.new_zeros(()).expand_as(g)

    def run() -> None:
        handles = [p.register_hook(drop) for p in big]
        try:
            x0 = x.detach().requires_grad_(True)
            y = blocks(x0)
            torch.autograd.grad(y, [x0, *params], grad_outputs=r)
        finally:
            for h in handles:
                h.remove()

    return run


def _naive(blocks: Any, x: Any, r: Any) -> Callable[[], None]:
    """The obvious way to get every boundary's gradient: keep every boundary and call
    autograd.grad once per boundary. Each call walks back from the output to that boundary, so
    depth L costs L(L+1)/2 block backward passes."""
    import torch

    params = [p for p in blocks.parameters() if p.requires_grad]

    def run() -> None:
        x0 = x.detach().requires_grad_(True)
        hs, h = [x0], x0
        for b in blocks:
            h = b(h)
            hs.append(h)
        loss = (h * r).sum()
        for hi in hs[1:-1]:
            torch.autograd.grad(loss, hi, retain_graph=True)
        torch.autograd.grad(loss, [x0, *params])

    return run


def _interleaved(fns: dict[str, Callable[[], object]], reps: int, warmup: int = 1) -> dict[str, float]:
    """Median seconds per function, the functions run in turn (each round in a new shuffled order,
    fixed seed) so that load changes on a shared machine hit all of them alike and no function
    always inherits the allocator and cache another leaves. The clock is CLOCK (process CPU time by
    default: with one thread it is the work done, and a busy neighbour does not stretch it)."""
    both = _interleaved_clocks(fns, reps, warmup)
    key = "cpu" if CLOCK is time.process_time else "wall"
    return {k: v[key] for k, v in both.items()}


def _interleaved_clocks(
    fns: dict[str, Callable[[], object]], reps: int, warmup: int = 1
) -> dict[str, dict[str, float]]:
    """`_interleaved` by both clocks at once: {function: {"cpu": median, "wall": median}}, process
    CPU time (with several threads: all of them, spin-waiting included) and wall time of the same calls."""
    for _ in range(warmup):
        for f in fns.values():
            f()
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    wall: dict[str, list[float]] = {k: [] for k in fns}
    order = list(fns)
    rng = random.Random(0)
    for _ in range(reps):
        # each function follows each other one: what a call leaves
        # behind (the allocator's free lists, the cache) is shared out
        rng.shuffle(order)
        for k in order:
            c0, t0 = time.process_time(), time.perf_counter()
            fns[k]()
            wall[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)
    return {k: {"cpu": statistics.median(cpu[k]), "wall": statistics.median(wall[k])} for k in fns}


def _fit_exponent(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of log y on log x: t ∝ depth^k."""
    lx, ly = [math.log(v) for v in xs], [math.log(v) for v in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum((a - mx) ** 2 for a in lx)


def _subprocess_json(
    code: str, timeout: float = 3600, env: dict[str, str] | None = None, *, inherit: bool = True
) -> dict[str, Any]:
    """Run `code` in a fresh interpreter; its last stdout line is JSON. `inherit=False`: `env` is
    the whole environment (not added to this process's)."""
    full = {**_env(), **(env or {})} if inherit else dict(env or {})
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=full)
    if out.returncode != 0:
        raise RuntimeError(f"subprocess failed ({out.returncode}):\n{out.stderr[-3000:]}")
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS=str(THREADS))


Row = tuple[str, str, str, str, str]  # what, measured, target, met, command/notes
ROWS: list[Row] = []
DATA: dict[str, Any] = {}
THREADS = 1  # sections b-f: the first of --threads
THREAD_COUNTS: tuple[int, ...] = (1, 2)  # section a: every one of --threads
PROCESSES = 9
CLOCK: Callable[[], float] = time.process_time  # sections b-f: the first of --clock
CLOCKS: tuple[str, ...] = ("cpu", "wall")  # section a: every one of --clock
NAIVE = True  # section (a) also times the naive per-boundary approach (--no-naive skips it)


def _row(what: str, measured: str, target: str, met: bool | str | None, note: str = "") -> None:
    """One table row; `met` is True/False, None (information) or a word of its own ("undecided")."""
    ROWS.append(
        (
            what,
            measured,
            target,
            "—" if met is None else met if isinstance(met, str) else ("yes" if met else "**no**"),
            note,
        )
    )
    print(f"  {what}: {measured} (target {target})", flush=True)


def median_interval(values: Sequence[float], coverage: float = 0.95) -> tuple[float, float, float]:
    """(lo, hi, its coverage): a distribution-free confidence interval for the median of `values`,
    the order statistics [x(k), x(n+1−k)] with the largest k whose coverage
    1 − 2·P(Binomial(n, ½) < k) is at least `coverage` (the sign test's interval; Hahn & Meeker,
    Statistical Intervals, 1991, §5.2). With too few values for that coverage it is [min, max] with
    the coverage it has: 93.75% for 5 values, 96.1% for [x(2), x(8)] of 9."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        raise ValueError("median_interval of no values")

    def covered(k: int) -> float:
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2.0**n

    k = 1
    while k + 1 <= (n + 1) // 2 and covered(k + 1) >= coverage:
        k += 1
    return xs[k - 1], xs[n - k], covered(k)


def ratio_verdict(lo: float, hi: float, target: float) -> bool | str:
    """A target met only when the whole interval of the median is at or under it, missed only when
    the whole interval is over it; an interval that spans the target decides nothing."""
    if hi <= target:
        return True
    if lo > target:
        return False
    return "undecided"


# ----------------------------------------------------------------------------- sections


#: The networks of target (a), by the name asv's `Overhead` and profile_probe.py use: the row's
#: label, the spec-text arguments for `_mlp_text` (None: `_ln_first_mlp`), the case.
NETWORKS: dict[str, tuple[str, dict[str, str] | None, dict[str, int]]] = {
    "mlp": ("MLP: plain, ReLU, Kaiming, depth 256, width 256, batch 64", {}, dict(depth=256, width=256, batch=64)),
    "norm_mlp": (
        "normalised MLP: Linear → LayerNorm → ReLU blocks, depth 256, width 256, batch 64",
        {"norm": "layer"},
        dict(depth=256, width=256, batch=64),
    ),
    "conv": (
        "conv: plain, ReLU, Kaiming, depth 32, 32 channels, 16×16, batch 16",
        {"layer": "conv2d", "extra": "kernel_size = 3"},
        dict(depth=32, width=32, batch=16, spatial=16),
    ),
    "ln_first_mlp": ("normalised MLP: LayerNorm → Linear → ReLU blocks, depth 256, width 256, batch 64", None, {}),
}


def network(name: str) -> tuple[Any, Any]:
    """(blocks, x) of the target-(a) network `name` (a key of NETWORKS)."""
    _, text_args, case = NETWORKS[name]
    if text_args is None:
        return _ln_first_mlp()
    _, blocks, x = _net(_mlp_text(**text_args), **case)
    return blocks, x


_A_CODE = """
import json, torch
torch.set_num_threads({threads})
import benchmarks.ratios as R
print(json.dumps(R._overhead({name!r}, {reps})))
"""


def _overhead(name: str, reps: int) -> dict[str, dict[str, float]]:
    """Median seconds of bare, bare_freed and probe on network `name`, interleaved, by clock:
    {"cpu": {...}, "wall": {...}} (both clocks of the same calls)."""
    import torch

    from stability import probe
    from stability.measure.probe_pass import projection_vector

    blocks, x = network(name)
    with torch.no_grad():
        r = projection_vector(blocks(x).shape, 0, dtype=x.dtype, device=x.device)
    both = _interleaved_clocks(
        {
            "bare": _bare(blocks, x, r),
            "bare_freed": _bare_freed(blocks, x, r),
            "probe": lambda: probe(blocks, x, seed=0),
        },
        reps,
    )
    return {clock: {k: v[clock] for k, v in both.items()} for clock in ("cpu", "wall")}


#: glibc settings under which the allocator keeps freed memory instead of unmapping it and faulting
#: it back in (mallopt(3)): the probe's own overhead without the page-fault churn both passes share.
NO_FAULTS = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


def _overhead_row(
    regime: str,
    env: dict[str, str] | None,
    target: float,
    threads: int,
    clock: str,
    label: str,
    runs: list[dict[str, float]],
) -> None:
    """One row of target (a): one network, regime, thread count and clock, over the processes."""
    ratios = sorted(t["probe"] / t["bare"] for t in runs)
    ratio = statistics.median(ratios)
    freed = statistics.median(t["probe"] / t["bare_freed"] for t in runs)
    probe_ms, bare_ms = (statistics.median(t[k] for t in runs) * 1e3 for k in ("probe", "bare"))
    lo, hi, coverage = median_interval(ratios)
    spread = (
        f"{ratios[0]:.3f}–{ratios[-1]:.3f} over {len(ratios)} processes; median in [{lo:.3f}, {hi:.3f}] "
        f"at {coverage:.1%}"
    )
    DATA[f"a.{regime}.t{threads}.{clock}.{label}"] = {
        "runs": runs,
        "ratio": ratio,
        "ratios": ratios,
        "ratio_freed": freed,
        "median_interval": [lo, hi, coverage],
    }
    where = (
        f"{regime}{' (' + ' '.join(f'{k}={v}' for k, v in env.items()) + ')' if env else ''}, {threads} "
        f"thread{'s' if threads > 1 else ''}, {'wall' if clock == 'wall' else 'CPU'} time"
    )
    note = f"{freed:.3f}× a bare pass that drops large parameter gradients as the probe does"
    if env is not None:
        note = "both passes without glibc unmapping and faulting back their large buffers: the probe's own cost"
    _row(
        f"(a) probe / bare fwd+bwd, {where}, {label}",
        f"{ratio:.3f}× ({probe_ms:.1f} ms vs {bare_ms:.1f} ms; {spread})",
        f"≤ {target:.2f}×",
        ratio_verdict(lo, hi, target),
        note,
    )


#: Target (a) by regime: the allocator's environment (None: glibc's defaults) and the ratio the
#: median's interval must stay under.
REGIMES: tuple[tuple[str, dict[str, str] | None, float], ...] = (
    ("glibc defaults", None, 1.10),
    ("no page-fault churn", NO_FAULTS, 1.15),
)


def section_a(reps: int) -> None:
    """Probe overhead over bare fwd+bwd, at every thread count of THREAD_COUNTS and by every clock
    of CLOCKS. Each network is measured in PROCESSES fresh interpreters per thread count, the
    networks and thread counts taken in turn (so that one network's allocations do not shape the
    allocator the next one meets, and a load change hits them all); each process times both
    clocks on the same calls. The ratio reported is the median over the processes, with their
    range: where the allocator puts a process's buffers moves a whole process's ratio by a few per
    cent. Each target is judged on the median's confidence interval (`median_interval`,
    `ratio_verdict`): met when all of it is at or under the target, missed when all of it is over,
    undecided when it spans the target, never on the median alone. Two regimes (`REGIMES`): glibc's
    defaults (≤ 1.10×), and without its page-fault churn (`NO_FAULTS`, ≤ 1.15×: the probe's own
    cost). Then the naive per-boundary approach beside it."""

    from stability.measure.probe_pass import projection_vector

    print("(a) probe overhead", flush=True)
    for regime, env, target in REGIMES:
        runs: dict[tuple[int, str], list[dict[str, dict[str, float]]]] = {
            (t, name): [] for t in THREAD_COUNTS for name in NETWORKS
        }
        for _ in range(PROCESSES):
            for threads in THREAD_COUNTS:
                for name in NETWORKS:
                    code = _A_CODE.format(threads=threads, name=name, reps=reps)
                    runs[threads, name].append(
                        _subprocess_json(code, env={**(env or {}), "OMP_NUM_THREADS": str(threads)})
                    )
        for threads in THREAD_COUNTS:
            for clock in CLOCKS:
                for name, (label, _, _) in NETWORKS.items():
                    _overhead_row(regime, env, target, threads, clock, label, [t[clock] for t in runs[threads, name]])
    if not NAIVE:
        return
    # The naive approach: quadratic in depth (MLP width 256, batch 64; fewer repeats, it is slow).
    depths, naive, bare = [32, 64, 128, 256], [], []
    for depth in depths:
        _, blocks, x = _net(_mlp_text(), depth=depth, width=256, batch=64)
        r = projection_vector((64, 256), 0, dtype=x.dtype, device=x.device)
        t = _interleaved({"bare": _bare(blocks, x, r), "naive": _naive(blocks, x, r)}, max(3, reps // 4), warmup=0)
        naive.append(t["naive"])
        bare.append(t["bare"])
    k = _fit_exponent(depths, naive)
    DATA["a.naive"] = {"depths": depths, "naive": naive, "bare": bare, "exponent": k}
    ratios = ", ".join(f"{d}: {n / b:.1f}×" for d, n, b in zip(depths, naive, bare, strict=True))
    _row(
        "(a) naive (one autograd.grad per boundary) / bare, MLP width 256",
        ratios + f"; time ∝ depth^{k:.2f}",
        "grows with depth (quadratic)",
        None,
    )


def section_b(reps: int) -> None:
    from stability import probe

    print("(b) scaling", flush=True)
    depths, times = [64, 128, 256, 512, 1024], []
    for depth in depths:
        _, blocks, x = _net(_mlp_text(), depth=depth, width=256, batch=64)
        times.append(_interleaved({"probe": functools.partial(probe, blocks, x, seed=0)}, reps)["probe"])
        del blocks, x
    k = _fit_exponent(depths, times)
    DATA["b"] = {"depths": depths, "seconds": times, "exponent": k}
    detail = ", ".join(f"{d}: {t * 1e3:.0f} ms" for d, t in zip(depths, times, strict=True))
    _row(
        "(b) probe time vs depth 64…1024 (MLP width 256, batch 64), fitted exponent",
        f"{k:.3f} ({detail})",
        "≤ 1.1",
        k <= 1.1,
    )


_RSS_CODE = """
import json, resource, torch
torch.set_num_threads({threads})
from benchmarks.ratios import _net, _mlp_text, _bare
from benchmarks._nets import reset_peak_rss
from stability import probe
from stability.measure.probe_pass import projection_vector
_, blocks, x = _net(_mlp_text(), depth=256, width=256, batch=64)
r = projection_vector((64, 256), 0, dtype=x.dtype, device=x.device)
bare = _bare(blocks, x, r)
bare(); probe(blocks, x)  # warm up allocator and kernels
def rss(): return int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()
before = rss(); reset_peak_rss()
{call}
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({{"before": before, "peak": peak}}))
"""


def section_c() -> None:
    from stability import probe
    from stability.measure.memory import counting_saved_bytes, saved_activation_bytes

    print("(c) memory", flush=True)
    for label, text, case in [
        ("MLP depth 256, width 256, batch 64", _mlp_text(), dict(depth=256, width=256, batch=64)),
        (
            "conv depth 32, 32 channels, 16×16, batch 16",
            _mlp_text(layer="conv2d"),
            dict(depth=32, width=32, batch=16, spatial=16),
        ),
    ]:
        _, blocks, x = _net(text, **case)
        bare = saved_activation_bytes(blocks, x)
        # The probe's own forward pass, counted by the same rule (distinct storages, parameters and
        # buffers excluded): what the probe adds is only what its statistics and hooks make
        # autograd save.
        with counting_saved_bytes([blocks]) as sizes:
            probe(blocks, x)
        probed = sum(sizes.values())
        extra = probed / bare - 1
        DATA[f"c.{label}"] = {"bare_bytes": bare, "probe_bytes": probed}
        _row(
            f"(c) saved activation bytes, probe vs bare, {label}",
            f"{probed / 2**20:.2f} MiB vs {bare / 2**20:.2f} MiB ({extra * 100:+.2f}%)",
            "≤ +5%",
            extra <= 0.05,
        )
    # Peak RSS each adds over the resident network (subprocesses, MLP depth 256).
    rss = {}
    for name, call in [("bare", "bare()"), ("probe", "probe(blocks, x)")]:
        rss[name] = _subprocess_json(_RSS_CODE.format(threads=THREADS, call=call))
    add = {k: (v["peak"] - v["before"]) for k, v in rss.items()}
    DATA["c.rss"] = rss
    _row(
        "(c) peak RSS added by one call, MLP depth 256 (subprocess, after warm-up)",
        f"probe {add['probe'] / 2**20:.1f} MiB vs bare {add['bare'] / 2**20:.1f} MiB",
        "—",
        None,
        "informational: allocator caching makes RSS coarse",
    )


_DEEP_CODE = """
import json, os, resource, time, torch
torch.set_num_threads({threads})
malloc_env = sorted(k for k in os.environ if k.startswith("MALLOC_") or k == "LD_PRELOAD")
from torch.utils.checkpoint import checkpoint
from stability import load_spec, make_input
from stability import build
from stability import probe
from stability.spec.case import corner_case
from stability.judge.invariants import gradient_arrival
from stability.measure.memory import saved_activation_bytes
spec = load_spec("specs/preact_mlp.toml")
case = corner_case(
    spec, depth={depth}, width=64, batch={batch}, weight_init="kaiming_normal", branch_init="default", dtype="float32"
)
t0 = time.perf_counter(); net = build(spec, case); x = make_input(spec, case); t_build = time.perf_counter() - t0
out = {{"build_s": t_build, "malloc_env": malloc_env}}
if {saved}:
    out["saved_bytes"] = saved_activation_bytes(net.blocks, x, checkpoint_every={every})
t0 = time.perf_counter()
if {bare}:  # the same checkpointed forward + backward without the probe (same allocator setting)
    from stability.allocator import tune_malloc
    tune_malloc()
    blocks = list(net.blocks)
    def run(h, a, b):
        for i in range(a, b):
            h = blocks[i](h)
        return h
    x0 = x.detach().requires_grad_(True); h = x0
    for s in range(0, len(blocks), {every}):
        h = checkpoint(run, h, s, min(s + {every}, len(blocks)), use_reentrant=False)
    torch.autograd.grad(h, [x0, *net.blocks.parameters()], grad_outputs=torch.ones_like(h))
else:
    m = probe(net.blocks, x, checkpoint_every={every})
    ga = spec.expect.gradient_arrival
    v = gradient_arrival(m, lo=ga.lo, hi=ga.hi)
    from stability.allocator import tune_malloc
    out.update(ratio=m.gradient_ratio, passed=v.passed, detail=v.detail, nonfinite=m.nonfinite_at,
               grad_norm_head=m.grad_norm[:3], malloc_tuned=tune_malloc())
    if {saved}:  # every number, to compare runs exactly
        out.update(grad_norm=m.grad_norm, act_var=m.act_var, act_sq_mean=m.act_sq_mean,
                   param_grad_norm=m.param_grad_norm, identity_error=m.identity_error,
                   input_grad_error=m.input_grad_error)
out["probe_s"] = time.perf_counter() - t0
out["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(out))
"""


def _deep(
    depth: int, batch: int, every: int, *, bare: bool = False, saved: bool = False, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """One fresh subprocess, with no allocator variable (MALLOC_*, LD_PRELOAD) unless `env` sets one."""
    code = _DEEP_CODE.format(threads=THREADS, depth=depth, batch=batch, every=every, bare=bare, saved=saved)
    clean = {k: v for k, v in _env().items() if not (k.startswith("MALLOC_") or k == "LD_PRELOAD")}
    return _subprocess_json(code, env={**clean, **(env or {})}, inherit=False)


def section_d(batch: int) -> None:
    print("(d) depth 10,000 with checkpointing", flush=True)
    gib = 2**30
    deep = _deep(10_000, batch, 100)  # no allocator variable: the harness sets glibc's mmap threshold itself
    untuned = _deep(10_000, batch, 100, env={"STABILITY_MALLOC_TUNE": "0"})  # glibc's defaults, for reference
    bare = _deep(10_000, batch, 100, bare=True)
    DATA["d.deep"], DATA["d.deep_glibc_defaults"], DATA["d.bare_checkpointed"] = deep, untuned, bare
    _row(
        f"(d) preact MLP depth 10,000, width 64, batch {batch}, checkpoint_every=100: peak RSS, fresh "
        "process, no allocator variable",
        f"{deep['peak_rss'] / gib:.2f} GiB (build {deep['build_s']:.0f} s, probe {deep['probe_s']:.0f} s "
        f"wall; ratio {deep['ratio']:.4g}, "
        f"{'pass' if deep['passed'] else 'fail'}; mmap threshold set by the harness: {deep['malloc_tuned']}; "
        f"allocator variables: {deep['malloc_env'] or 'none'}); "
        f"the same checkpointed fwd+bwd without the probe: {bare['peak_rss'] / gib:.2f} GiB",
        "≤ 4 GiB",
        deep["peak_rss"] <= 4 * gib and not deep["malloc_env"],
        "stability/allocator.py: mallopt(M_MMAP_THRESHOLD, 65536) on glibc, so 64 KiB+ activations come from "
        "mmap and return on free",
    )
    _row(
        "(d) the same with glibc's defaults (STABILITY_MALLOC_TUNE=0), for reference",
        f"{untuned['peak_rss'] / gib:.2f} GiB (probe {untuned['probe_s']:.0f} s wall); ratio {untuned['ratio']:.4g}",
        "—",
        None,
        "freed heap memory stays trapped between long-lived autograd nodes; see docs/performance.md",
    )
    both = {every: _deep(1000, batch, every, saved=True) for every in (1000, 100)}
    DATA["d.compare"] = both
    same = both[1000]["passed"] == both[100]["passed"]
    keys = (
        "ratio",
        "passed",
        "grad_norm",
        "act_var",
        "act_sq_mean",
        "param_grad_norm",
        "identity_error",
        "input_grad_error",
    )
    exact = all(both[1000][k] == both[100][k] for k in keys)  # every number the probe reports
    unckpt_10k = both[1000]["saved_bytes"] * 10 / gib
    _row(
        f"(d) same verdict with and without checkpointing, depth 1,000, batch {batch}",
        f"{'pass' if both[1000]['passed'] else 'fail'} / {'pass' if both[100]['passed'] else 'fail'}; ratio "
        f"{both[1000]['ratio']:.6g} / {both[100]['ratio']:.6g} "
        f"({'bit-identical' if exact else 'differs'}); saved activations "
        f"{both[1000]['saved_bytes'] / 2**20:.0f} MiB / "
        f"{both[100]['saved_bytes'] / 2**20:.1f} MiB "
        f"(so ≈ {unckpt_10k:.1f} GiB un-checkpointed at depth 10,000)",
        "same verdict",
        same,
    )


def section_e(reps: int) -> None:
    from stability import build, load_spec, make_input, probe
    from stability.families.build import derive_seed
    from stability.measure.batched import probe_seeds
    from stability.spec.case import corner_case

    print("(e) many seeds", flush=True)
    grid: list[tuple[str, dict[str, Any], bool]] = [
        ("plain_mlp", dict(depth=16, width=32, batch=8), True),
        ("preact_mlp", dict(depth=16, width=32, batch=8, weight_init="kaiming_normal", branch_init="default"), False),
    ]
    for name, overrides, exact in grid:
        spec = load_spec(SPECS / f"{name}.toml")
        cases = [corner_case(spec, seed=s, **overrides) for s in range(32)]
        nets = [build(spec, c).blocks for c in cases]
        xs = [make_input(spec, c) for c in cases]
        seeds = [derive_seed(c.seed, 2) for c in cases]
        out: dict[str, Any] = {}

        def loop(
            out: dict[str, Any] = out, nets: list[Any] = nets, xs: list[Any] = xs, seeds: list[int] = seeds
        ) -> None:
            out["loop"] = [probe(n, x, seed=s) for n, x, s in zip(nets, xs, seeds, strict=True)]

        def batched(
            out: dict[str, Any] = out, nets: list[Any] = nets, xs: list[Any] = xs, seeds: list[int] = seeds
        ) -> None:
            out["batched"] = probe_seeds(nets, xs, seeds=seeds)

        t = _interleaved({"loop": loop, "batched": batched}, reps)
        speedup = t["loop"] / t["batched"]
        worst, identical = 0.0, True
        for a, b in zip(out["loop"], out["batched"], strict=True):
            pairs = [
                *zip(a.grad_norm, b.grad_norm, strict=True),
                *zip(a.act_var, b.act_var, strict=True),
                *zip(a.act_sq_mean, b.act_sq_mean, strict=True),
            ]
            pairs += [(a.param_grad_norm[k], b.param_grad_norm[k]) for k in a.param_grad_norm]
            for u, v in pairs:
                identical &= u == v
                if u != v:
                    worst = max(worst, abs(u - v) / max(abs(u), abs(v)))
        DATA[f"e.{name}"] = {**t, "speedup": speedup, "identical": identical, "max_rel_diff": worst}
        label = ", ".join(f"{k}={v}" for k, v in overrides.items())
        _row(
            f"(e) 32 seeds, probe_seeds vs loop of probe, {name} ({label})",
            f"{speedup:.2f}× ({t['batched'] * 1e3:.0f} ms vs {t['loop'] * 1e3:.0f} ms); numbers "
            + ("bit-identical" if identical else f"equal to {worst:.1e} relative"),
            "≥ 4×, identical numbers" if exact else "≥ 4× (layer norm: identical up to rounding)",
            speedup >= 4 and (identical or not exact),
            ""
            if identical
            else "layer-norm γ gradients reduced in another order under vmap; see tests/test_batched.py",
        )


def section_f() -> None:
    print("(f) the gate", flush=True)
    specs = sorted(str(p.relative_to(ROOT)) for p in SPECS.glob("*.toml"))
    cli = [str(Path(PY).parent / "stability"), "check", "specs", "--profile", "ci", "-q"]

    def timed(cmd: list[str]) -> tuple[subprocess.CompletedProcess[str], float, float]:
        c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=_env())
        wall = time.perf_counter() - t0
        c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return done, wall, (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)

    done, wall, cpu = timed(cli)
    DATA["f.check"] = {"wall_s": wall, "cpu_s": cpu, "exit": done.returncode, "specs": len(specs)}
    _row(
        f"(f) `stability check specs --profile ci -q` ({len(specs)} specs)",
        f"{wall:.1f} s wall, {cpu:.1f} s CPU, exit {done.returncode}",
        "—",
        None,
    )
    done, wall, cpu = timed([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"])
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-200:]
    DATA["f.pytest"] = {"wall_s": wall, "cpu_s": cpu, "exit": done.returncode, "summary": summary}
    _row(
        "(f) whole pytest run (`pytest -q`)",
        f"{wall:.1f} s wall, {cpu:.1f} s CPU, exit {done.returncode}: {summary}",
        "—",
        None,
    )


# ----------------------------------------------------------------------------- main


def _counts(text: str) -> tuple[int, ...]:
    """`--threads 1,2` → (1, 2); a one-line error naming the bad value otherwise."""
    try:
        counts = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give thread counts of at least 1, comma-separated (e.g. 1,2)")
    return counts


def _clocks(text: str) -> tuple[str, ...]:
    """`--clock cpu,wall` → ("cpu", "wall"); a one-line error naming the bad value otherwise."""
    clocks = tuple(c.strip() for c in text.split(",") if c.strip())
    bad = [c for c in clocks if c not in ("cpu", "wall")]
    if not clocks or bad:
        raise argparse.ArgumentTypeError(f"{text!r}: choose cpu, wall or cpu,wall")
    return clocks


def main(argv: list[str] | None = None) -> int:
    global THREADS, THREAD_COUNTS, CLOCK, CLOCKS, NAIVE, PROCESSES
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--only", default="a,b,c,d,e,f", help="comma-separated sections (default all)")
    p.add_argument("--reps", type=int, default=9, help="timed repetitions per measurement (default 9)")
    p.add_argument(
        "--processes",
        type=int,
        default=PROCESSES,
        help="(a) fresh interpreters per network, the median ratio over them and its 95%% interval reported "
        "(default 9)",
    )
    p.add_argument(
        "--threads",
        type=_counts,
        default=(1, 2),
        help="torch intra-op threads, comma-separated: (a) measures at each, the other sections at the first "
        "(default 1,2)",
    )
    p.add_argument(
        "--clock",
        type=_clocks,
        default=("cpu", "wall"),
        help="cpu: process CPU time (robust), wall: perf_counter; comma-separated: (a) reports each, the "
        "others the first; default cpu,wall",
    )
    p.add_argument("--deep-batch", type=int, default=256, help="batch of the depth-10,000 network (default 256)")
    p.add_argument("--json", metavar="FILE", help="also write every number as JSON")
    p.add_argument("--no-naive", action="store_true", help="(a) without the slow naive per-boundary comparison")
    args = p.parse_args(argv)
    THREAD_COUNTS, CLOCKS = args.threads, args.clock
    THREADS = THREAD_COUNTS[0]
    NAIVE = not args.no_naive
    PROCESSES = args.processes
    CLOCK = time.process_time if CLOCKS[0] == "cpu" else time.perf_counter
    import torch

    torch.set_num_threads(THREADS)
    sections = {s.strip() for s in args.only.split(",") if s.strip()}
    t0 = time.perf_counter()
    if "a" in sections:
        section_a(args.reps)
    if "b" in sections:
        section_b(max(3, args.reps // 2))
    if "c" in sections:
        section_c()
    if "d" in sections:
        section_d(args.deep_batch)
    if "e" in sections:
        section_e(args.reps)
    if "f" in sections:
        section_f()
    DATA["meta"] = {
        "torch": torch.__version__,
        "threads": list(THREAD_COUNTS),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "seconds": time.perf_counter() - t0,
        "clock": list(CLOCKS),
        "command": "python benchmarks/ratios.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "maxrss_self": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    print()
    clocks = " and ".join("process CPU time" if c == "cpu" else "wall time" for c in CLOCKS)
    print(
        f"torch {torch.__version__}, {'/'.join(map(str, THREAD_COUNTS))} thread(s), {os.cpu_count()} CPUs, "
        f"{clocks}, medians of interleaved runs, {DATA['meta']['seconds']:.0f} s\n"
    )
    print("| measurement | measured | target | met | note |")
    print("|---|---|---|---|---|")
    for row in ROWS:
        print("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(DATA, indent=2))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
