"""Where the points of `stability sweep` run, from its backend options: `--serial` (one worker
process at a time), `--workers N` (a local Dask cluster of at most `WORKERS_PER_CORE` workers per
usable core) or `--scheduler ADDRESS` (a running Dask cluster, at an address of one of
`SCHEDULER_SCHEMES`). `check_backend` refuses bad options before any process or cluster starts
(UsageError, exit 2); `backend_for` then starts the executor.
"""

from __future__ import annotations

import argparse
from typing import Any

from stability.cli.arg_types import cores
from stability.errors import UsageError

__all__ = ["WORKERS_PER_CORE", "SCHEDULER_SCHEMES", "check_backend", "backend_for"]

#: `--workers` at most this many times the usable cores: more processes than that only compete.
WORKERS_PER_CORE = 4
#: The Dask address schemes `--scheduler` takes (each HOST:PORT).
SCHEDULER_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")


def _scheduler(text: str) -> str:
    """`--scheduler`: SCHEME://HOST:PORT with a Dask scheme and a port number, checked before any
    connection is tried (Dask's own parser raises tracebacks at these)."""
    import urllib.parse

    fix = "give tcp://HOST:PORT, e.g. tcp://127.0.0.1:8786, or run without --scheduler"
    parts = urllib.parse.urlsplit(text.strip())
    if not parts.scheme or "://" not in text:
        raise UsageError(f"--scheduler {text!r}: not an address; {fix}")
    if parts.scheme not in SCHEDULER_SCHEMES:
        raise UsageError(
            f"--scheduler {text}: {parts.scheme!r} is not a Dask scheme ({', '.join(SCHEDULER_SCHEMES)}); {fix}"
        )
    try:
        port = parts.port
    except ValueError:
        port = -1
    if not parts.hostname or port is None or port < 1 or parts.path.strip("/") or parts.query:
        raise UsageError(f"--scheduler {text}: needs a host and a port number (1-65535) and nothing else; {fix}")
    return text.strip()


def check_backend(args: argparse.Namespace) -> None:
    """The backend options, refused before any cluster or process is started."""
    if args.device == "cuda" and not args.scheduler:
        import torch

        if not torch.cuda.is_available():
            raise UsageError(
                "--device cuda: CUDA is not available on this machine; use --device cpu, or --scheduler with "
                "GPU workers"
            )
    if args.serial and (args.scheduler or args.workers is not None):
        raise UsageError(
            "--serial runs one point at a time on this machine; drop --workers / --scheduler, or drop --serial"
        )
    if args.workers is not None:
        if args.scheduler:
            raise UsageError(
                "--workers sizes a local cluster, and --scheduler uses a running one (whose workers run the "
                "points); drop one of them"
            )
        most = WORKERS_PER_CORE * cores()
        if not 1 <= args.workers <= most:
            raise UsageError(
                f"--workers {args.workers}: give 1 to {most} ({WORKERS_PER_CORE} per usable core), or --serial"
            )
    if args.scheduler is not None:
        args.scheduler = _scheduler(args.scheduler)


def _quiet_dask() -> None:
    """Dask's own log lines (a worker restarted, a task lost with it, a heartbeat's traceback from
    a dying worker) would interleave with the sweep's output; the sweep reports every failed point
    itself, with its reason. Only critical ones are shown, in this process and in the workers it
    starts, unless $DASK_LOGGING__DISTRIBUTED says otherwise."""
    import logging
    import os

    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "critical")
    level = logging.getLevelName(os.environ["DASK_LOGGING__DISTRIBUTED"].upper())
    if not isinstance(level, int):
        return
    try:
        import distributed  # noqa: F401 -- its loggers exist once it is imported (and set their own levels)
    except ImportError:
        return
    for name in [n for n in logging.root.manager.loggerDict if n == "distributed" or n.startswith("distributed.")]:
        logging.getLogger(name).setLevel(level)


def backend_for(args: argparse.Namespace) -> Any:
    """Where the points run (stability.run.executors.executor_for): `--serial` in one worker process
    at a time (each point isolated from the next), else on Dask. `check_backend` first."""
    from stability.run.executors import executor_for
    from stability.run.plugins import plugins_environment

    if args.serial:
        return executor_for("workers", jobs=1, threads=1, env=plugins_environment(args.plugin))
    if not getattr(args, "verbose", False):  # --verbose: Dask's own warnings reach stderr
        _quiet_dask()
    try:
        return executor_for(
            "dask",
            jobs=args.workers or 0,
            scheduler=args.scheduler,
            gpu=args.device == "cuda",
            env=plugins_environment(args.plugin),
            verbose=getattr(args, "verbose", False),
        )
    except ImportError:
        raise UsageError(
            "Dask distributed is not installed: pip install 'stability[sweep]', or run with --serial"
        ) from None
    except Exception as exc:  # whatever the address answers (nothing, or not Dask): one line, exit 2
        if not args.scheduler:
            raise
        from stability.run.sweep_exec import CONNECT_TIMEOUT_S

        why = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        raise UsageError(
            f"--scheduler {args.scheduler}: no Dask scheduler answered there within {CONNECT_TIMEOUT_S:g} s "
            f"({why}); check the address, or run without --scheduler"
        ) from None
