"""`stability calibrate SPEC [--write]`: every banded number of the spec's invariants measured over
seeds and depths, and the band it sets (`stability.run.calibrate`); `--write` rewrites the bands
the spec declares in place, each with its spread, depths, seeds, margin and releases in a comment
beside it, and nothing else in the file.

Exit codes: 0 measured (and written), 2 bad input or a network that could not be measured (one
line: the file, the case, why, the fix).
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path
from typing import Any

from rich.console import Console

from stability.cli.arg_types import depth_list
from stability.cli.common import EXIT_OK, factories_allowed, load_each
from stability.errors import UsageError
from stability.report.text import printable

__all__ = ["calibrate_command", "measuring_executor"]


def measuring_executor(args: argparse.Namespace, roots: list[str], modules: list[str]) -> Any:
    """The executor `calibrate` and `init` measure on: worker processes (each job in its own child,
    the run's libraries, `modules`, imported once by the server), or this process with --in-process."""
    from stability.families.factory import roots_environment
    from stability.run.executors import executor_for
    from stability.run.plugins import plugins_environment
    from stability.run.worker import default_threads

    if not args.in_process:
        from stability.run.processes import start_server

        start_server(modules)
    return executor_for(
        "in-process" if args.in_process else "workers",
        jobs=args.jobs,
        threads=default_threads(),
        env=plugins_environment(args.plugin, roots_environment(roots)),
    )


def _declared(data: dict[str, Any], invariant: str, key: str) -> bool:
    """Whether the spec bounds `key` of `[expect.invariant]`: written in the file, or a bound the
    judge applies when it is not (gradient_arrival's and residual_stream's lo and hi)."""
    from stability.spec.registry import INVARIANTS

    table = data.get("expect", {}).get(invariant, {})
    field = INVARIANTS.get(invariant).expectation.model_fields.get(key)
    return key in table or (field is not None and field.default is not None)


def calibrate_command(args: argparse.Namespace, console: Console, err: Console) -> int:
    """`stability calibrate ARGS`: the exit code."""
    from stability.families.factory import source_roots
    from stability.report.calibrate import print_calibration
    from stability.report.outputs import write_atomic
    from stability.run.bands import written_bands
    from stability.run.calibrate import calibrate, calibration_depths, calibration_seeds, measure
    from stability.run.engine import RunOptions
    from stability.spec.edit import commented_text

    if not args.spec:
        raise UsageError("stability calibrate: give one spec file (stability calibrate SPEC [--write])")
    if Path(args.spec).is_dir():
        raise UsageError(f"{args.spec}: is a folder; calibrate reads one spec file")
    depths = depth_list(args.depths) if args.depths else None
    for root in args.source_root or []:
        if not Path(root).is_dir():
            raise UsageError(f"--source-root {root}: is not a folder; give the folder that holds your factory modules")
    from stability.spec.load import preload_modules

    roots = [str(Path(r).resolve()) for r in args.source_root or []]
    executor = measuring_executor(args, roots, preload_modules([args.spec]))  # its server imports while this loads
    specs, errors = load_each([args.spec])
    if errors:
        raise errors[0]
    allowed, refused = factories_allowed(specs, roots)
    if refused:
        raise refused[0]
    spec = allowed[0]
    text = Path(spec.path).read_text(encoding="utf-8-sig")
    measured_depths = calibration_depths(spec, depths)
    seeds = calibration_seeds(spec, args.seeds)
    with source_roots(roots):
        measured = measure(
            spec,
            executor=executor,
            depths=measured_depths,
            seeds=seeds,
            options=RunOptions(case_timeout=args.case_timeout or None),
        )
    calibration = calibrate(measured)
    print_calibration(calibration, console)
    if not args.write:
        return EXIT_OK
    if Path(spec.path).read_text(encoding="utf-8-sig") != text:
        raise UsageError(f"{spec.path}: changed while it was calibrated; not written: run stability calibrate again")
    data = tomllib.loads(text)
    values = written_bands(calibration, keys=lambda invariant, key: _declared(data, invariant, key))
    if not values:
        print(f"stability: {printable(spec.path)} not written: no band it declares could be set", file=sys.stderr)
        return EXIT_OK
    write_atomic(spec.path, commented_text(text, values))
    skipped = [f"{f.invariant}.{f.number} ({f.problem})" for f in calibration.fits if f.problem]
    console.print(
        f"wrote {len(values)} bound(s) into {printable(spec.path)}"
        + (f"; not set: {'; '.join(skipped)}" if skipped else ""),
        highlight=False,
        soft_wrap=True,
    )
    return EXIT_OK
