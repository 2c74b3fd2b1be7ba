"""`stability init TARGET [--out SPEC] [--depths D,…]`: a calibrated spec for a library model or a
factory nobody calibrated (`stability.run.init`), written, then checked on the model it was made
from by `stability check --profile ci`'s path.

Exit codes: 0 written, and every expectation holds on the model; 1 written, but an expectation does
not hold: the model breaks its own declared init (`init_conformance`), or another (the failure is
stated either way); 2 bad input (one line: an unknown library name, a factory that crashes, hangs
or returns no module, an `--out` that is not init's own file), nothing written.
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from stability.cli.arg_types import depth_list
from stability.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from stability.errors import UsageError
from stability.report.text import printable

__all__ = ["init_command"]


def init_command(args: argparse.Namespace, console: Console, err: Console) -> int:
    """`stability init ARGS`: the exit code."""
    from stability.cli.calibrate import measuring_executor
    from stability.report.calibrate import print_calibration
    from stability.report.formats import print_failures, print_table, summary_line
    from stability.report.outputs import write_atomic
    from stability.run.calibrate import DEFAULT_DEPTHS
    from stability.run.init import init
    from stability.run.init_draft import parse_target, spec_path
    from stability.spec.registry import FAMILIES

    if not args.target:
        raise UsageError(
            "stability init: give a model (transformers:CLASS, timm:NAME, torchvision:NAME) or a factory "
            "(module:function, path/to/file.py:function)"
        )
    depths = depth_list(args.depths) if args.depths else DEFAULT_DEPTHS
    preload = FAMILIES.get("library").preload
    # the workers' server imports the library while this process resolves the name with it
    executor = measuring_executor(args, [], list(preload({"model": args.target})) if preload is not None else [])
    target = parse_target(args.target)
    path, factory = spec_path(target, args.out)
    if not args.quiet:
        console.print(f"stability init {printable(args.target)} → {printable(str(path))}", highlight=False)
    result = init(
        target,
        path,
        factory,
        executor=executor,
        depths=depths,
        seeds=args.seeds,
        case_timeout=args.case_timeout or None,
        write=write_atomic,
        on_step=None if args.quiet else lambda step: console.print(f"  {step} …", highlight=False),
    )
    print_calibration(result.calibration, console)
    check = result.check.result
    print_table([check], console)
    print_failures([check], console, spec_errors={check.spec.path: result.check.error} if result.check.error else None)
    console.print(summary_line([check], result.seconds.get("check", 0.0)), highlight=False, soft_wrap=True)
    steps = ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items())
    console.print(f"wrote {printable(str(path))} in {sum(result.seconds.values()):.1f} s ({steps})", highlight=False)
    if result.check.error:
        print(f"stability: error: {printable(result.check.error)}", file=sys.stderr)
        return EXIT_USAGE
    unmet = [r for r in check.results if not r.met]
    if not unmet:
        return EXIT_OK
    if any(r.name == "init_conformance" for r in unmet):
        what = next(r for r in unmet if r.name == "init_conformance")
        print(
            f"stability: {printable(str(path))} written, but the model breaks its own declared init: "
            f"{printable(what.message)}",
            file=sys.stderr,
        )
    else:
        print(
            f"stability: {printable(str(path))} written, but it does not hold on the model it was made from: "
            f"{printable(unmet[0].message)}",
            file=sys.stderr,
        )
    return EXIT_FAILED
