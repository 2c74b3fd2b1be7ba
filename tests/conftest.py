"""Shared fixtures for the reliability tests: spec files on disk, the CLI with its captured output,
and one module of deliberately broken, slow or NaN-producing block factories."""

from __future__ import annotations

import gc
import itertools
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from stability.cli import main

# The cycle collector, tuned for a suite from collection on: the youngest generation is collected every
# 50,000 allocations instead of 700 (collection builds ~3,000 test items and imports the libraries, and at
# 700 it walked the growing heap again and again: 10 s → 6 s per xdist worker); `pytest_collection_finish`
# freezes what collection leaves. Reference counting still frees what is not in a cycle at once.
gc.set_threshold(50_000, 20, 20)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """`pytest -n N` hands out tests by work stealing (an idle xdist worker takes queued tests from a
    busy one) instead of fixed chunks: a few tests take seconds among many that take milliseconds,
    and with fixed chunks one worker can sit idle at the end while the other works through its share."""
    if getattr(config.option, "dist", None) == "load":
        config.option.dist = "worksteal"


#: A valid plain spec; tests derive broken ones from it with `str.replace`.
BASE_SPEC = """\
name = "base"
description = "a small plain MLP"
family = "plain"

[space]
depth = [1, 4]
width = [4, 8]
batch = 2

[expect.gradient_arrival]
lo = 0.1
hi = 10.0
"""

#: Factories for `family = "custom"` specs. The module name is unusual on purpose: Python caches
#: imported modules by name, so it must not clash with anything else a test imports.
FACTORIES = '''
import os
import time

import torch
from torch import nn


def raises(depth, width):
    raise ValueError("the factory itself is broken")


def not_a_module(depth, width):
    return 42


def shapes_do_not_chain(depth, width):
    return nn.Sequential(nn.Linear(width, width + 1), nn.Linear(width, width))


class Picky(nn.Module):
    def forward(self, x):
        raise ValueError("my block only takes even widths")


class NeedsThreads(nn.Linear):
    def forward(self, x):
        n = torch.get_num_threads()
        if n < 3:
            raise ValueError(f"ran with {n} torch threads")
        return super().forward(x)


def needs_three_threads(depth, width):
    return nn.Sequential(*[NeedsThreads(width, width) for _ in range(depth)])


def block_raises(depth, width):
    return nn.Sequential(*[Picky() for _ in range(depth)])


class NaNAt(nn.Module):
    """A linear block; the one with `bad` multiplies its output by NaN."""

    def __init__(self, width, bad):
        super().__init__()
        self.bad = bad
        self.lin = nn.Linear(width, width)

    def forward(self, x):
        y = self.lin(x)
        return y * float("nan") if self.bad else y


def nan_at_block_7(depth, width):
    return nn.Sequential(*[NaNAt(width, i == 7) for i in range(depth)])


class NaNGradientAt(nn.Module):
    """Finite forward; in `bad`, y = W x + sqrt(0 * x) has the gradient inf * 0 = NaN."""

    def __init__(self, width, bad):
        super().__init__()
        self.bad = bad
        self.lin = nn.Linear(width, width)

    def forward(self, x):
        y = self.lin(x)
        return y + torch.sqrt(0.0 * x) if self.bad else y


def nan_gradient_at_block_3(depth, width):
    return nn.Sequential(*[NaNGradientAt(width, i == 3) for i in range(depth)])


class Slow(nn.Module):
    """Sleeps ~10 s in a Python loop (interruptible) before a linear layer; touches
    $STABILITY_TEST_MARKER first, so a test knows the forward pass has started."""

    def __init__(self, width):
        super().__init__()
        self.lin = nn.Linear(width, width)

    def forward(self, x):
        marker = os.environ.get("STABILITY_TEST_MARKER")
        if marker:
            open(marker, "w").close()
        for _ in range(1000):
            time.sleep(0.01)
        return self.lin(x)


def slow(depth, width):
    return nn.Sequential(*[Slow(width) for _ in range(depth)])


def slow_to_build(depth, width):
    for _ in range(1000):
        time.sleep(0.01)
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])


def built_in_a_second(depth, width):
    time.sleep(1.0)
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])
'''

FACTORY_MODULE = "stability_reliability_factories"


@pytest.fixture
def base_spec() -> str:
    return BASE_SPEC


@pytest.fixture
def write_spec(tmp_path: Path) -> Callable[..., Path]:
    """write_spec(text or bytes, name="spec.toml") → the path of a new spec file."""

    def write(content: str | bytes, name: str = "spec.toml") -> Path:
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return path

    return write


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """cli("check", path, ...) → (exit code, stdout, stderr) of `stability.cli.main`."""

    def run(*args: str | Path) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture(scope="session")
def factory_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the factory module; custom specs are written beside it (the builder puts
    a spec's folder on sys.path)."""
    folder = tmp_path_factory.mktemp("factories")
    (folder / f"{FACTORY_MODULE}.py").write_text(FACTORIES, encoding="utf-8")
    (folder / "stability_reliability_broken.py").write_text("import a_module_that_does_not_exist_anywhere\n")
    return folder


_counter = itertools.count()


@pytest.fixture
def custom_spec(factory_dir: Path) -> Callable[..., Path]:
    """custom_spec("function", depth=..., width=..., extra=...) → a custom spec using
    `FACTORY_MODULE:function` (or `module:function` when given whole), written beside it."""

    def write(factory: str, *, depth: str = "10", width: str = "4", batch: str = "2", expect: str = "") -> Path:
        target = factory if ":" in factory else f"{FACTORY_MODULE}:{factory}"
        text = textwrap.dedent(f"""\
            name = "custom-{factory.replace(":", "-")}"
            description = "a test factory"
            family = "custom"

            [block]
            factory = "{target}"

            [space]
            depth = {depth}
            width = {width}
            batch = {batch}
            """) + (expect or "\n[expect.gradient_arrival]\nlo = 0.1\nhi = 10.0\n")
        path = factory_dir / f"spec_{next(_counter)}.toml"
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture(autouse=True)
def _seeded() -> None:
    """Every test starts from the same global torch RNG state, whatever ran before it in its
    process: pytest-xdist hands tests to processes in an order that changes with the set of tests
    (fewer extras installed, fewer tests), and a module built from the global stream must not
    change with it."""
    torch.manual_seed(0)


@pytest.fixture(autouse=True, scope="session")
def _one_thread() -> Iterator[None]:
    """The tests' tensors are small; intra-op threads only add synchronisation, and on a loaded
    2-core runner they spin against each other (10× slower measured). Restored afterwards."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Everything alive after collection (torch, the libraries, every collected test) moves out of
    the collector's generations (`gc.freeze`), so a collection walks only what the tests create
    (with the threshold set at the top of this file). Measured on the idle 2-core machine: the
    suite's CPU 3 min 31 s → 3 min 0 s, its wall time 127 s → 112 s (no bytecode cached)."""
    gc.collect()
    gc.freeze()
