"""One side of `stability scan LIBRARY --compare A B`, run in a process that imports one library
release (`stability.run.releases.environment`):
`python -m stability.report.scan_side LIBRARY --out DIR [--only P] [--jobs N] [--case-timeout S]`.

It scans the library as `stability scan` does (`stability.run.scan`: each model in its own worker
process, forked from a server that imports this release) and writes DIR/rows.json (every row,
`ScanRow.to_dict`) and DIR/versions.json (the releases this process imports,
`stability.report.release_side.imported_versions`). `--version` only prints the library's version
and exits: how the parent refuses two sides that are one release. Exit 2 with one line when the
library does not import here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m stability.report.scan_side")
    p.add_argument("library")
    p.add_argument("--out")
    p.add_argument("--only")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--case-timeout", type=float, default=120.0)
    p.add_argument("--memory-budget", type=int)
    p.add_argument("--version", action="store_true")
    args = p.parse_args(argv)
    from stability.families.library_support import installed

    try:
        version = installed(args.library)
    except Exception as exc:  # noqa: BLE001 -- the release does not import beside this environment
        what = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        print(f"{args.library} does not import here ({what})", file=sys.stderr)
        return 2
    if args.version:
        print(version)
        return 0
    from stability.report.release_side import imported_versions
    from stability.run.executors import executor_for
    from stability.run.processes import start_server
    from stability.run.scan import ScanOptions, run_scan, warm_up_spec
    from stability.run.scan_plan import plan_scan
    from stability.spec.registry import FAMILIES

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "versions.json").write_text(json.dumps(imported_versions()) + "\n", encoding="utf-8")
    preload = list(FAMILIES.get("library").preload({"model": f"{args.library}:"}) or [])  # type: ignore[misc]
    start_server(preload, warm_up=warm_up_spec(args.library, args.only))
    options = ScanOptions(case_timeout=args.case_timeout or None, memory_budget=args.memory_budget)
    executor = executor_for("workers", jobs=args.jobs, env=dict(os.environ))
    plan = plan_scan(args.library, only=args.only, options=options, executor=executor)
    run = run_scan(plan, executor)
    rows = [r.to_dict() for r in run.rows]
    (out / "rows.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
