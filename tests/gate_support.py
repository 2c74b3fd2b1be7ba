"""Shared material for the tests of the gate against hostile input and code (test_cli_inputs, test_outputs,
test_worker_isolation, test_factory_rule, …): hostile factories, and a helper that runs `stability check` in a real
subprocess (exits, kills and leaked threads only show there)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

#: Factories a hostile or careless user could write. The module name is unusual on purpose.
HOSTILE = '''
import os
import sys
import threading
import time

import torch
from torch import nn


def linear(depth, width):
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])


def empty(depth, width):
    return nn.Sequential()


def exit_in_factory(depth, width):
    sys.exit(0)


class Exit(nn.Module):
    def __init__(self, code, hard):
        super().__init__()
        self.code, self.hard = code, hard

    def forward(self, x):
        if self.hard:
            os._exit(self.code)
        sys.exit(self.code)


def exit_in_forward(depth, width):
    return nn.Sequential(Exit(3, False))


def os_exit_in_forward(depth, width):
    return nn.Sequential(Exit(0, True))


class Swallow(nn.Module):
    """Catches every exception, the harness's timeout included, and runs on for 30 s."""

    def forward(self, x):
        end = time.monotonic() + 30
        while time.monotonic() < end:
            try:
                time.sleep(0.01)
            except Exception:
                pass
        return x


class Crash(nn.Module):
    def __init__(self, how):
        super().__init__()
        self.how = how

    def forward(self, x):
        if self.how == "segfault":
            import ctypes

            ctypes.string_at(0)
        if self.how == "killed":
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        return x + torch.empty(2**40)  # 4 TiB, more memory than the machine has: torch raises


def segfault(depth, width):
    return nn.Sequential(Crash("segfault"))


def killed(depth, width):
    return nn.Sequential(Crash("killed"))


def out_of_memory(depth, width):
    return nn.Sequential(Crash("oom"))


def swallow_timeout(depth, width):
    return nn.Sequential(Swallow())


def leak_thread(depth, width):
    threading.Thread(target=time.sleep, args=(3600,), daemon=False).start()  # an hour: longer than any test waits
    return linear(depth, width)


def leak_state(depth, width):
    torch.set_default_dtype(torch.float64)
    torch.backends.cudnn.deterministic = True
    torch.manual_seed(1234)
    sys.path.insert(0, "/nonexistent-leaked-path")
    return nn.Sequential(*[nn.Linear(width, width, dtype=torch.float32) for _ in range(depth)])


class Shrink(nn.Module):
    def forward(self, x):
        return x * 1e-3


def patch_judge(depth, width):
    """Replaces the invariant in its worker with one that always passes, on a stack whose gradient vanishes."""
    import stability.judge.invariants as invariants

    def always(m, lo=0.1, hi=10.0, include_entry=None):
        return invariants.Verdict(
            invariant="gradient_arrival", passed=True, observed=1.0, bound="[lo, hi]", block=None, detail="fine"
        )

    invariants.gradient_arrival = always
    return nn.Sequential(*[Shrink() for _ in range(depth)])


def needs_clean_state(depth, width):
    leaked = []
    if torch.get_default_dtype() != torch.float32:
        leaked.append("default dtype")
    if torch.backends.cudnn.deterministic:
        leaked.append("deterministic flag")
    if "/nonexistent-leaked-path" in sys.path:
        leaked.append("sys.path")
    if torch.get_num_threads() != 1:
        leaked.append("threads")
    if leaked:
        raise RuntimeError("state leaked from another spec: " + ", ".join(leaked))
    return linear(depth, width)
'''

MODULE = "stability_gate_hostile"

PLAIN = """\
name = "{name}"
description = "a small plain MLP"
family = "plain"
[block]
activation = "{activation}"
[space]
depth = {depth}
width = 4
batch = 2
weight_init = ["xavier_normal"]
[expect.gradient_arrival]
lo = 0.01
hi = 100.0
"""


def plain(name: str, *, activation: str = "relu", depth: str = "[1, 3]") -> str:
    """A plain spec; `activation="sigmoid", depth="[20, 30]"` fails (the gradient vanishes)."""
    return PLAIN.format(name=name, activation=activation, depth=depth)


def custom(name: str, factory: str, *, depth: str = "2", extra: str = "", expect: str = "") -> str:
    target = factory if ":" in factory else f"{MODULE}:{factory}"
    return textwrap.dedent(f"""\
        name = "{name}"
        description = "a hostile factory"
        family = "custom"
        [block]
        factory = "{target}"
        {extra}
        [space]
        depth = {depth}
        width = 4
        batch = 2
        """) + (expect or "[expect.gradient_arrival]\nlo = 0.01\nhi = 100.0\n")


def write_factories(folder: Path) -> None:
    (folder / f"{MODULE}.py").write_text(HOSTILE, encoding="utf-8")
    (folder / "stability_gate_exit_at_import.py").write_text("import sys\nsys.exit(0)\n", encoding="utf-8")
    (folder / "stability_gate_os_exit_at_import.py").write_text("import os\nos._exit(0)\n", encoding="utf-8")


def run_check(
    *args: str | Path, cwd: Path, timeout: float = 120, shell_tail: str = ""
) -> subprocess.CompletedProcess[str]:
    """`python -m stability check ARGS` in a subprocess (with `| tail` when `shell_tail`)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "STABILITY_PROFILE")}
    cmd = [sys.executable, "-m", "stability", "check", *map(str, args)]
    if shell_tail:
        line = " ".join(f"'{c}'" for c in cmd) + f" | {shell_tail}; exit ${{PIPESTATUS[0]}}"
        return subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)


#: x_{l+1} = g·x_l exactly (W = g·I, no bias, identity activation): r₀ = g^L and Var ratio g^(2L).
SCALAR_CHAIN = """\
name = "scalar-chain"
description = "W = g I, identity activation: every number is a power of g"
family = "plain"
[block]
activation = "identity"
[space]
depth = [1, 8]
width = 4
batch = 2
weight_init = ["identity"]
init_gain = 0.9
bias_init = 0.0
[expect.gradient_arrival]
lo = 0.1
hi = 10.0
"""
