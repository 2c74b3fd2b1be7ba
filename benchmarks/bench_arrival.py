"""Gradient arrival of every shipped spec (specs/*.toml) at a fixed depth and seed, tracked over
commits so that a change which quietly moves a network's gradient shows up as a regression.

The tracked number is the distance of the gradient ratio r = ‖∂L/∂x_0‖ / ‖∂L/∂x_L‖ from 1 in
decades, |log10 r|: 0 when the output gradient arrives at the input unchanged, 1 when it arrives
10× too small or 10× too large, so bigger is worse in both directions (vanishing and exploding),
which is the orientation asv's regression detection assumes. It describes the network, not whether
the spec is met: for a negative control (expect = "violated") a bigger value means the control
fails more clearly, and a drop towards 0 is the suspicious change.

The case is the spec's corner case (`corner_case`) at depth min(16, the spec's largest depth),
the first seed of its range, `branch_init = "default"` where the space allows it (zero-branch
initialisations are the identity, |log10 r| = 0, and would track nothing), on the CPU. A ratio
that under- or overflowed to 0 or inf is reported as 400 decades (asv cannot plot inf).
"""

from __future__ import annotations

import math
from pathlib import Path

from benchmarks import _nets
from benchmarks._compat import internal

SPECS = sorted(p.stem for p in _nets.SPECS_DIR.glob("*.toml"))
DEPTH = 16
#: Reported when the ratio under/overflows to 0 or inf: beyond float64's ±308 decades.
SATURATED = 400.0


class GradientArrival:
    params = [SPECS]
    param_names = ["spec"]
    unit = "decades"
    timeout = 300

    def setup(self, spec: str) -> None:
        from stability import load_spec

        evaluate = internal("run.engine").evaluate
        corner_case = internal("spec.case").corner_case

        _nets.threads()
        s = load_spec(Path(_nets.SPECS_DIR, f"{spec}.toml"))
        overrides = {"depth": min(DEPTH, s.space.depth[1]), "seed": s.space.seed[0], "device": "cpu"}
        if "default" in s.space.branch_init:
            overrides["branch_init"] = "default"
        record = evaluate(s, corner_case(s, **overrides))
        if record.measurements is None:
            raise NotImplementedError(f"{spec}: the case was not measured: {record.error}")
        self.ratio = record.measurements.gradient_ratio

    def track_arrival_decades(self, spec: str) -> float:
        r = self.ratio
        return abs(math.log10(r)) if r > 0 and math.isfinite(r) else SATURATED

    track_arrival_decades.unit = "decades"  # type: ignore[attr-defined]
