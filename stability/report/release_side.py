"""One side of `stability zoo --compare A B`, run in a process that imports one library release
(`stability.run.releases.environment`): `python -m stability.report.release_side --out DIR SPEC...`.

It loads the zoo specs (a spec this release refuses is recorded with its one-line reason, never
run), runs each on the same cases on both sides, the spec's corner case at each depth of
`--depths` (`stability.spec.case.corner_case`: its smallest width, batch and token count, seed 0;
the seed ensemble of `variance_growth` is the spec's own), in this process, and writes
DIR/report.json, a JSON report as `stability check --json` writes it. With `--baseline FILE` (side
A's report) it also writes DIR/compare.json: each expectation's number compared with the
baseline's on the same case by the baseline rule (`stability.report.baseline.compare`), with the
direction it moved in (up or down, toward its bound or away from it). DIR/versions.json records the
releases this process imported, so a comparison states what it compared.

`--imports LIB,…` only prints, as JSON, what this process imports for each library (its version and
the folder it comes from, or why it does not import) and runs nothing: the parent asks it before
either side runs (`stability.run.releases.check_sides`). The run's plugins ($STABILITY_PLUGINS) are
loaded before any spec is, as in every other process of a run.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["main", "imported_versions", "imported_libraries"]


def imported_versions() -> dict[str, str | None]:
    """The version of each library release this process imports (None: not installed here)."""
    from stability.families.library import quiet_imports
    from stability.families.library_lookup import LIBRARIES

    out: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            with quiet_imports():
                out[name] = str(__import__(name).__version__)
        except Exception:
            out[name] = None
    out["torch"] = metadata.version("torch")
    return out


def imported_libraries(names: list[str]) -> dict[str, dict[str, str | None]]:
    """For each library of `names`: {"version", "folder" (the package's own folder), "error"} as
    this process imports it (version and folder None, with the error, when it does not import)."""
    from stability.families.library_support import quiet_imports  # without torch: a quick question

    out: dict[str, dict[str, str | None]] = {}
    for name in names:
        try:
            with quiet_imports():
                module = __import__(name)
            where = getattr(module, "__file__", None)
            folder = str(Path(where).resolve().parent) if where else None
            out[name] = {"version": str(getattr(module, "__version__", None)), "folder": folder, "error": None}
        except Exception as exc:
            what = " ".join(f"{type(exc).__name__}: {exc}".split())
            out[name] = {"version": None, "folder": None, "error": what}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m stability.report.release_side")
    p.add_argument("paths", nargs="*")
    p.add_argument("--out")
    p.add_argument("--depths", default="4")
    p.add_argument("--baseline")
    p.add_argument("--imports", help="LIB,…: print what this process imports for each, as JSON, and run nothing")
    args = p.parse_args(argv)
    if args.imports is not None:
        print(json.dumps(imported_libraries([n for n in args.imports.split(",") if n])))
        return 0
    if not args.paths or not args.out:
        p.error("give --out DIR and the spec files")
    import torch

    from stability.run.plugins import load_plugins

    load_plugins()  # the run's plugins ($STABILITY_PLUGINS): a zoo spec may declare a plugin's invariant

    from stability.errors import SpecError
    from stability.report import baseline as against
    from stability.report.baseline_load import load_baseline
    from stability.report.formats import write_json
    from stability.report.provenance import provenance
    from stability.run.engine import RunOptions
    from stability.run.executor import InProcessExecutor, Task
    from stability.run.report_model import CompareRow
    from stability.spec.case import corner_case
    from stability.spec.load import load_spec

    torch.set_num_threads(1)  # the same numbers on every machine: one thread's reduction order
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "versions.json").write_text(json.dumps(imported_versions()) + "\n", encoding="utf-8")
    depths = [int(d) for d in args.depths.split(",")]
    specs, refused = [], {}
    for path in args.paths:
        try:
            specs.append(load_spec(path))
        except SpecError as exc:
            refused[path] = str(exc)
    options = RunOptions(profile="thorough", case_timeout=None)
    executor = InProcessExecutor()
    groups = [[Task(s, options, str(corner_case(s, depth=d)), None) for s in specs] for d in depths]
    outcomes = [executor.map(g) for g in groups]
    results = [o.result for group in outcomes for o in group]
    errors = [o.error for group in outcomes for o in group if o.error]
    write_json(out / "report.json", results, errors=errors, provenance={s.path: provenance(s) for s in specs})
    (out / "refused.json").write_text(json.dumps(refused) + "\n", encoding="utf-8")
    if args.baseline:
        base = load_baseline(args.baseline)
        rows: list[dict[str, Any]] = []
        for group in outcomes:  # one comparison per case: every entry is compared with this run's own number, no replay
            cases = {str(r.case) for o in group for r in o.result.results if r.case is not None}
            mine = {
                (against.spec_key(o.task.spec.path), o.task.spec.name, r.name, str(r.case)): (o.task.spec, r)
                for o in group
                for r in o.result.results
            }
            entries = [e for e in base.entries if e.key.case in cases]
            comparison = against.compare(
                against.Baseline(path=base.path, entries=entries, provenance=base.provenance),
                group,
                replay=executor.map,
            )
            for d in comparison.deltas:
                spec, result = mine.get((d.key.file, d.key.spec, d.key.invariant, d.key.case), (None, None))
                before = next(e.verdict for e in entries if e.key == d.key)
                toward = None
                if spec is not None and result is not None and result.verdict is not None and d.after is not None:
                    toward = against.toward_bound(spec, d.key.invariant, before, result.verdict)
                change = d.change
                rows.append(
                    CompareRow(
                        **vars(d.key),
                        shown=d.shown,
                        before=d.before,
                        after=d.after,
                        change=change,
                        limit=d.limit,
                        status=d.status,
                        why=d.why,
                        direction=None if change is None or change == 0 else ("up" if change > 0 else "down"),
                        toward_bound=toward,
                        reproduce=d.reproduce,
                    ).to_data()
                )
        (out / "compare.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
