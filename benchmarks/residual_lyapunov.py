"""The seed-averaged log-variance profile of the unnormalised pre-activation ReLU residual MLP
(`specs/control_unnormalised_residual.toml`) far past the spec's depth: does the typical network
grow exponentially (a positive Lyapunov exponent), or do its log-increments decay to 0?

x_{l+1} = x_l + W2·relu(W1·relu(x_l)), W ~ N(0, 2/n) (He init, no bias, no norm). The map is
positively homogeneous, so log Var x_l is a sum of increments that depend on x_l's direction only
(a product of random matrices I + W2·D2·W1·D1, Furstenberg & Kesten 1960). One direction is
absorbing: when every coordinate of x_l is ≤ 0, relu(x_l) = 0, the branch adds exactly 0, and
every later block is the identity. Each block reaches it with a probability of order 2^(−n) at
width n, so the typical network's increments decay at a rate that is invisible at n ≥ 16 and
decisive at n = 8 over hundreds of blocks.

Run (single-threaded, low priority: the machine is shared):

    OMP_NUM_THREADS=1 nice -n 19 .venv/bin/python benchmarks/residual_lyapunov.py --width 8 --depth 512 --seeds 2048

Prints, per window of blocks, the seed mean of the per-block log-variance increment with its
standard error, the share of networks already frozen (every coordinate of every sample ≤ 0), the
mean increment of the networks not frozen, and the arithmetic and geometric mean profiles.
`--harness` builds each network with `stability.families.build` (the spec's own builder) instead of the
vectorised draw of the same distribution, as a check that the two agree.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch

SPEC = Path(__file__).resolve().parent.parent / "specs" / "control_unnormalised_residual.toml"


def simulate(
    *, width: int, depth: int, seeds: int, batch: int, seed: int, chunk: int = 512
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log Var x_l for l = 0 … depth, frozen_l) for `seeds` independent networks, each shape (S, L+1).

    The whole-tensor variance over (batch, width), as the probe's `act_var`; float64 (2^512 would
    overflow float32). Networks are drawn in chunks of `chunk` with one generator.
    """
    gen = torch.Generator().manual_seed(seed)
    logs, frozen = [], []
    std = math.sqrt(2.0 / width)  # kaiming_normal, fan_in, ReLU gain √2
    for start in range(0, seeds, chunk):
        s = min(chunk, seeds - start)
        x = torch.randn(s, batch, width, generator=gen, dtype=torch.float64)  # (S, B, n)
        lv = [torch.log(x.flatten(1).var(dim=1, unbiased=False))]
        fz = [(x <= 0).flatten(1).all(dim=1)]
        for _ in range(depth):
            w1 = torch.randn(s, width, width, generator=gen, dtype=torch.float64) * std  # (S, n_out, n_in)
            w2 = torch.randn(s, width, width, generator=gen, dtype=torch.float64) * std
            h = torch.relu(torch.relu(x) @ w1.transpose(1, 2))  # (S, B, n)
            x = x + h @ w2.transpose(1, 2)  # (S, B, n)
            lv.append(torch.log(x.flatten(1).var(dim=1, unbiased=False)))
            fz.append((x <= 0).flatten(1).all(dim=1))
        logs.append(torch.stack(lv, dim=1))
        frozen.append(torch.stack(fz, dim=1))
    return torch.cat(logs), torch.cat(frozen)


def harness(*, width: int, depth: int, seeds: int, batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same quantities with each network built by `stability.families.build` from the spec (float64)."""
    from stability import load_spec
    from stability.families.build import build, make_input
    from stability.spec.case import Case

    spec = load_spec(SPEC)
    logs, frozen = [], []
    for k in range(seeds):
        case = Case(
            depth=depth,
            width=width,
            batch=batch,
            spatial=None,
            input_width=None,
            weight_init="kaiming_normal",
            branch_init="default",
            dtype="float64",
            device="cpu",
            seed=seed + k,
        )
        net = build(spec, case)
        x = make_input(spec, case)  # (B, n)
        lv, fz = [torch.log(x.var(unbiased=False))], [bool((x <= 0).all())]
        with torch.no_grad():
            for block in net.blocks:
                x = block(x)
                lv.append(torch.log(x.var(unbiased=False)))
                fz.append(bool((x <= 0).all()))
        logs.append(torch.stack(lv))
        frozen.append(torch.tensor(fz))
    return torch.stack(logs), torch.stack(frozen)


def report(logs: torch.Tensor, frozen: torch.Tensor, *, windows: list[tuple[int, int]]) -> None:
    inc = logs.diff(dim=1)  # (S, L): increment of block l (1-based) at column l − 1
    n = inc.shape[0]
    print(f"{'blocks':>10} {'mean inc':>9} {'± se':>7} {'frozen':>7} {'inc | live':>10}")
    for a, b in windows:
        d = inc[:, a - 1 : b].mean(dim=1)  # (S,): each network's mean increment over the window
        live = ~frozen[:, b]
        live_inc = float(inc[live, a - 1 : b].mean()) if bool(live.any()) else float("nan")
        print(
            f"{a:>4}-{b:<5} {float(d.mean()):9.4f} {float(d.std() / math.sqrt(n)):7.4f} "
            f"{float(frozen[:, b].double().mean()):7.3f} {live_inc:10.4f}"
        )
    depth = logs.shape[1] - 1
    for at in sorted({8, 16, 32, 63, 64, 128, 256, 512, depth} & set(range(1, depth + 1))):
        geo = float((logs[:, at] - logs[:, 0]).mean())
        print(
            f"l = {at:>3}: log geometric-mean ratio {geo:8.3f} (per block {geo / at:.4f}), log 2·l = "
            f"{at * math.log(2):8.3f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--depth", type=int, default=512)
    ap.add_argument("--seeds", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--harness", action="store_true", help="build each network with stability.families.build (slower)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    t0, c0 = time.perf_counter(), time.process_time()
    run = harness if args.harness else simulate
    logs, frozen = run(width=args.width, depth=args.depth, seeds=args.seeds, batch=args.batch, seed=args.seed)
    edges = [1, 2, 5, 9, 17, 33, 65, 129, 257, 385, 513]
    windows = [(a, min(b - 1, args.depth)) for a, b in zip(edges[:-1], edges[1:], strict=True) if a <= args.depth]
    print(
        f"width {args.width}, batch {args.batch}, depth {args.depth}, {args.seeds} networks "
        f"({'stability.families.build' if args.harness else 'vectorised draw'})"
    )
    report(logs, frozen, windows=windows)
    print(f"wall {time.perf_counter() - t0:.1f} s, CPU {time.process_time() - c0:.1f} s")


if __name__ == "__main__":
    main()
