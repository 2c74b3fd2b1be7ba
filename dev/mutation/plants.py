"""The hand-planted mutation round of the release surfaces (docs/mutation.md, "Round 6").

    python dev/mutation/plants.py list                 # every plant, its module and its tests
    python dev/mutation/plants.py run [--only ID,...]  # plant each, run its tests, put it back
    python dev/mutation/plants.py tally                # killed and survived per module

Each plant is one small bug written by hand into one module (an operator, a constant, an
off-by-one, swapped arguments, a dropped condition): `old` is replaced by `new` (it must occur
exactly once in the file), the plant's test files run (`pytest -x -n 0 -m 'not slow'`, the
narrowest files that cover the module), and the file is put back whatever happens. A plant is
**killed** when a test fails (or the run passes its time limit), **survived** when they all pass.
Results go to dev/mutation/plants_results.json (docs/mutation.md is their summary). Run from the
repository root with `PYTHONPATH=$PWD`; the tests import the planted code from the working tree.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "dev" / "mutation" / "plants_results.json"  # the round's record: status and killing test
LIMIT = 600.0  # seconds per plant: a run past it counts as killed (a hang)


@dataclass(frozen=True, kw_only=True)
class Plant:
    id: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    what: str


def _p(id: str, file: str, old: str, new: str, tests: str, what: str) -> Plant:
    return Plant(id=id, file=file, old=old, new=new, tests=tuple(tests.split()), what=what)


# ----------------------------------------------------------------------------- the survivors issue 51 lists

VALUES = "stability/families/library_values.py"
MEMORY = "stability/families/library_memory.py"
STREAM = "stability/families/library_stream.py"
DRAWS = "stability/families/library_draws.py"
RELEASES = "stability/run/releases.py"
SIDES = "stability/run/release_sides.py"
SIDE = "stability/report/release_side.py"
COMPARE = "stability/report/zoo_compare.py"
ZOO_CLI = "stability/cli/zoo.py"
ARG_TYPES = "stability/cli/arg_types.py"  # --depths, parsed for zoo (and sweep)

ISSUE: list[Plant] = [
    _p(
        "issue-widht",
        VALUES,
        "(match.group(1) or match.group(3))",
        "match.group(1)",
        "tests/test_library.py",
        'a misspelt case key under a divisor ("widht/64") no longer refused',
    ),
    _p(
        "issue-median-nan",
        "stability/judge/stream.py",
        "if len(live) == len(values) and live else",
        "if live else",
        "tests/test_stream.py",
        "the ensemble median skips an undefined member",
    ),
    _p(
        "issue-tied-twice",
        MEMORY,
        "(True, model.parameters()), (False, model.buffers())):\n        for t in tensors:\n"
        "            if id(t) in seen:\n                continue\n",
        "(True, [p for _, p in model.named_parameters(remove_duplicate=False)]), (False, model.buffers())):\n"
        "        for t in tensors:\n",
        "tests/test_library_memory.py",
        "a tied weight counted twice in the estimate (once per module that holds it)",
    ),
    _p(
        "issue-tied-untied-on-meta",
        MEMORY,
        'if param is not None and param.device.type != "meta":',
        "if param is not None:",
        "tests/test_library_memory.py",
        "a tied weight copied per module when registered on the meta device (two tensors, counted twice)",
    ),
    _p(
        "issue-corpus-error-alarm",
        "benchmarks/corpus.py",
        "alarms = sum(good.caught for _, _, good in rows)",
        "alarms = sum(not good.passed for _, _, good in rows)",
        "tests/test_corpus.py",
        "an error on the fixed release counted as a false alarm",
    ),
    _p(
        "issue-side-every-entry",
        SIDE,
        "entries = [e for e in base.entries if e.key.case in cases]",
        "entries = list(base.entries)",
        "tests/test_release_side.py tests/test_releases.py tests/test_zoo_compare.py",
        "the release side compares every baseline entry in each depth group",
    ),
    _p(
        "issue-matrix-mismatch-0",
        RELEASES,
        "return 2 if gate == 2 or errors else max(gate, 1 if wrong else 0)",
        "return 2 if gate == 2 or errors else gate",
        "tests/test_release_runner.py tests/test_releases.py",
        "a support-matrix mismatch exits 0",
    ),
    _p(
        "issue-stream-keep",
        STREAM,
        "streamer.materialise(i, keep=(i + 1,))",
        "streamer.materialise(i, keep=(i - 1,))",
        "tests/test_library_stream.py",
        "the streamed backward keeps the block before instead of the block after",
    ),
    _p(
        "issue-stream-estimate",
        STREAM,
        "return int(rest + 2 * block + depth * hidden_bytes + saved + work)",
        "return int(rest + block + depth * hidden_bytes + saved + work)",
        "tests/test_library_stream.py tests/test_library_family.py tests/test_guard.py",
        "the streamed estimate holds one block instead of two",
    ),
    _p(
        "issue-draw-call",
        DRAWS,
        "_chunk_seed(self.seed, call, j)",
        "_chunk_seed(self.seed, 0, j)",
        "tests/test_library_draws.py",
        "chunked init seeds ignore the call index",
    ),
]

# ----------------------------------------------------------------------------- this round's plants

T_RELEASES = "tests/test_releases.py tests/test_release_runner.py"
T_SIDES = "tests/test_zoo_compare.py tests/test_releases.py tests/test_release_runner.py"
T_SIDE = "tests/test_release_side.py tests/test_zoo_compare.py tests/test_releases.py"
T_COMPARE = "tests/test_zoo_compare.py tests/test_releases.py tests/test_release_side.py"
T_ZOO = "tests/test_zoo_compare.py tests/test_cli_usage.py tests/test_output_paths.py tests/test_releases.py"
T_STREAM = "tests/test_stream_units.py tests/test_library_stream.py tests/test_library_family.py tests/test_guard.py"
T_DRAWS = "tests/test_library_draws.py tests/test_library_stream.py"
T_MEMORY = "tests/test_memory_units.py tests/test_library_memory.py tests/test_library_family.py tests/test_guard.py"

ROUND: list[Plant] = [
    # --- run/releases.py: releases named, installed and run as the matrix's sessions
    _p(
        "rel-parse-operator",
        RELEASES,
        r"(==|>=|<=|~=|!=|<|>)",
        r"(>=|<=|~=|!=|<|>)",
        T_RELEASES,
        "a pin of another package (torch==2.13.0) read as a folder name",
    ),
    _p(
        "rel-parse-match",
        RELEASES,
        "match = _RELEASE.fullmatch(text.strip())",
        "match = _RELEASE.match(text.strip())",
        T_RELEASES,
        "a release with trailing text read as its prefix",
    ),
    _p(
        "rel-never-case",
        RELEASES,
        "if req.name.lower() in _NEVER",
        "if req.name in _NEVER",
        T_RELEASES,
        "a requirement on Torch (capitalised) installed into the release's folder",
    ),
    _p(
        "rel-closure-names",
        RELEASES,
        "names.add(name)",
        "names.add(requirement)",
        T_RELEASES,
        "a requirement named twice with other specifiers added twice",
    ),
    _p(
        "rel-best-oldest",
        RELEASES,
        "and (best is None or version > best[0])",
        "and (best is None or version < best[0])",
        T_RELEASES,
        "the oldest cached wheel that meets a requirement instead of the newest",
    ),
    _p(
        "rel-best-any",
        RELEASES,
        "            and requirement.specifier.contains(version, prereleases=True)\n",
        "",
        T_RELEASES,
        "a cached wheel outside the requirement chosen",
    ),
    _p(
        "rel-install-reuse",
        RELEASES,
        "    if done.is_file():\n        return target",
        "    if target.is_dir():\n        return target",
        T_RELEASES,
        "a half-installed folder (no record written) reused",
    ),
    _p(
        "rel-install-deps",
        RELEASES,
        '        "install",\n        "--quiet",\n        "--no-deps",\n',
        '        "install",\n        "--quiet",\n',
        T_RELEASES,
        "the release installed with its dependencies (torch replaced)",
    ),
    _p(
        "rel-install-record",
        RELEASES,
        'done.write_text(json.dumps({"release": release.label, "requirements": extra}, indent=1) + "\\n'
        '", encoding="utf-8")',
        "pass",
        T_RELEASES,
        "an installed release never recorded (installed again every time)",
    ),
    _p(
        "rel-env-order",
        RELEASES,
        'os.pathsep.join([str(folder), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])',
        'os.pathsep.join([*([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []), str(folder)])',
        T_RELEASES,
        "the release's folder after the environment's path",
    ),
    _p(
        "rel-env-venv",
        RELEASES,
        '        return str(release.path / "bin" / "python"), env',
        "        return sys.executable, env",
        T_RELEASES,
        "a virtual environment run with this interpreter",
    ),
    _p(
        "rel-library-any",
        RELEASES,
        "return library if library in LIBRARIES else None",
        "return library or None",
        T_RELEASES,
        "a spec's model of another package taken as a release's library",
    ),
    _p(
        "rel-matrix-tv-timm",
        RELEASES,
        '({"timm"} if release.library == "torchvision" else set())',
        "set()",
        T_RELEASES,
        "a torchvision release without the timm specs",
    ),
    _p(
        "rel-matrix-sample",
        RELEASES,
        "return [p for p in paths if p.stem in sample] if sample else paths",
        "return [p for p in paths if p.name in sample] if sample else paths",
        T_RELEASES,
        "the sample matched on file names",
    ),
    _p(
        "rel-inside-unexpected-refusal",
        RELEASES,
        "            if expected is None:\n                wrong.append",
        "            if expected is not None:\n                wrong.append",
        T_RELEASES,
        "a refusal the support matrix does not expect accepted (and an expected one flagged)",
    ),
    _p(
        "rel-inside-unexpected-load",
        RELEASES,
        "        if expected is not None:\n"
        '            wrong.append(f"{path}: loads, but the support matrix says it needs {expected}")\n',
        "",
        T_RELEASES,
        "a spec that loads where the support matrix expects a refusal accepted",
    ),
    _p(
        "rel-inside-differs-code",
        RELEASES,
        "        if code != 1:\n",
        "        if code == 0:\n",
        T_RELEASES,
        "a spec that must fail under another init accepted when it errors (exit 2)",
    ),
    _p(
        "rel-inside-gate-1",
        RELEASES,
        "        gate == 5\n",
        "        gate in (1, 5)\n",
        T_RELEASES,
        "a failing ci gate read as nothing judged (exit 0)",
    ),
    _p(
        "rel-inside-rest",
        RELEASES,
        "rest = [p for p in loaded if p not in differs]",
        "rest = loaded",
        T_RELEASES,
        "a spec that must fail also run in the gate that must pass",
    ),
    _p(
        "rel-inside-none-loaded",
        RELEASES,
        "        return 1 if wrong else 0\n",
        "        return 0\n",
        T_RELEASES,
        "every spec refused against the support matrix, exit 0",
    ),
    _p(
        "rel-inside-errors",
        RELEASES,
        "return 2 if gate == 2 or errors else",
        "return 2 if gate == 2 else",
        T_RELEASES,
        "a corner case that did not run ignored",
    ),
    _p(
        "rel-inside-side-exit",
        RELEASES,
        '            else [f"exit {side}"]',
        "            else []",
        T_RELEASES,
        "a release side that crashed read as no error",
    ),
    _p(
        "rel-inside-max",
        RELEASES,
        "max(gate, 1 if wrong else 0)",
        "min(gate, 1 if wrong else 0)",
        T_RELEASES,
        "the gate's failure hidden by the support matrix's agreement",
    ),
    _p(
        "rel-matrix-unknown",
        RELEASES,
        "unknown = [s for s in sample or [] if s not in stems]",
        "unknown = [s for s in sample or [] if s in stems]",
        T_RELEASES,
        "a misspelt sample stem accepted",
    ),
    _p(
        "rel-matrix-inside-flag",
        RELEASES,
        '        "stability.run.releases",\n        "--inside",\n',
        '        "stability.run.releases",\n',
        T_RELEASES,
        "the session's child run without --inside",
    ),
    _p(
        "rel-matrix-profile",
        RELEASES,
        '        "--profile",\n        profile,\n        "--depths",\n        depths,\n        *map(str, paths),',
        '        "--depths",\n        depths,\n        *map(str, paths),',
        T_RELEASES,
        "the session's profile not passed on",
    ),
    _p(
        "rel-main-folder",
        RELEASES,
        "        if release.library is None:\n            raise UsageError",
        "        if release.library is None and False:\n            raise UsageError",
        T_RELEASES,
        "a folder given to the matrix, which installs releases",
    ),
    _p(
        "rel-main-sample",
        RELEASES,
        'sample=args.sample.split(",") if args.sample else None',
        "sample=[args.sample] if args.sample else None",
        T_RELEASES,
        "--sample a,b read as one stem",
    ),
    _p(
        "rel-main-inside-first",
        RELEASES,
        "[Path(x) for x in ([args.release] if args.release else []) + args.paths]",
        "[Path(x) for x in args.paths]",
        T_RELEASES,
        "the first spec of an --inside run dropped",
    ),
    _p(
        "rel-main-exit",
        RELEASES,
        '        print(f"stability: error: {exc}", file=sys.stderr)\n        return 2',
        '        print(f"stability: error: {exc}", file=sys.stderr)\n        return 1',
        T_RELEASES,
        "a bad release exits 1 (not met) instead of 2",
    ),
    # --- run/release_sides.py: the two sides of zoo --compare
    _p(
        "sides-imports-first",
        SIDES,
        '"--imports", ",".join(libraries)]',
        '"--imports", ",".join(libraries[:1])]',
        T_SIDES,
        "only the first library asked about",
    ),
    _p(
        "sides-imports-line",
        SIDES,
        "json.loads(run.stdout.strip().splitlines()[-1])",
        "json.loads(run.stdout.strip().splitlines()[0])",
        T_SIDES,
        "the child's first line read instead of its answer",
    ),
    _p(
        "sides-imports-value",
        SIDES,
        "except (IndexError, ValueError):",
        "except IndexError:",
        T_SIDES,
        "a child that prints no JSON ends in a traceback",
    ),
    _p(
        "sides-within-swap",
        SIDES,
        "Path(folder).resolve().is_relative_to(root.resolve())",
        "root.resolve().is_relative_to(Path(folder).resolve())",
        T_SIDES,
        "the folder test reversed",
    ),
    _p(
        "sides-libraries-empty",
        SIDES,
        "or list(LIBRARIES)",
        "or []",
        T_SIDES,
        "specs that name no library checked against no library",
    ),
    _p(
        "sides-same-text",
        SIDES,
        "    if a.label == b.label:",
        "    if a.text == b.text:",
        T_SIDES,
        "one release spelt twice differently installed and run",
    ),
    _p(
        "sides-first-lib",
        SIDES,
        "        for lib in libraries:\n",
        "        for lib in libraries[:1]:\n",
        T_SIDES,
        "a second library that does not import let through",
    ),
    _p(
        "sides-venv-any",
        SIDES,
        'venv = release.path is not None and (release.path / "bin" / "python").exists()',
        "venv = release.path is not None",
        T_SIDES,
        "every folder taken as a virtual environment",
    ),
    _p(
        "sides-any-all",
        SIDES,
        'and not any(_within(got[x]["folder"], release.path) for x in libraries)',
        'and not all(_within(got[x]["folder"], release.path) for x in libraries)',
        T_SIDES,
        "a folder that holds one of two libraries refused",
    ),
    _p(
        "sides-same-any",
        SIDES,
        'if all(first[x]["version"] == second[x]["version"] for x in libraries):',
        'if any(first[x]["version"] == second[x]["version"] for x in libraries):',
        T_SIDES,
        "two releases that share one library's version refused",
    ),
    _p(
        "sides-seen-label",
        SIDES,
        "        seen[release.label] = got",
        "        seen[a.label] = got",
        T_SIDES,
        "both sides' imports filed under side A",
    ),
    _p(
        "sides-plugins",
        SIDES,
        "    env = plugins_environment(plugins or [], env)\n",
        "",
        T_SIDES,
        "the run's plugins not passed to a side",
    ),
    _p(
        "sides-baseline",
        SIDES,
        '        command += ["--baseline", str(baseline)]',
        "        pass",
        T_SIDES,
        "side B run without side A's report",
    ),
    _p(
        "sides-report-missing",
        SIDES,
        'if run.returncode != 0 or not (out / "report.json").is_file():',
        "if run.returncode != 0:",
        T_SIDES,
        "a side that wrote no report taken as run",
    ),
    _p("sides-depths", SIDES, '",".join(map(str, depths))', "str(depths[0])", T_SIDES, "only the first depth run"),
    # --- report/release_side.py: one side, in the release's process
    _p(
        "side-torch-version",
        SIDE,
        '    out["torch"] = metadata.version("torch")\n',
        "",
        T_SIDE,
        "the side's torch not recorded",
    ),
    _p(
        "side-version-none",
        SIDE,
        "                out[name] = str(__import__(name).__version__)",
        "                out[name] = str(getattr(__import__(name), '__version__', None))",
        T_SIDE,
        "a library without a version recorded as 'None'",
    ),
    _p(
        "side-folder-parent",
        SIDE,
        "folder = str(Path(where).resolve().parent) if where else None",
        "folder = str(Path(where).resolve().parent.parent) if where else None",
        T_SIDE,
        "the folder a library comes from read one level up",
    ),
    _p(
        "side-error-version",
        SIDE,
        'out[name] = {"version": None, "folder": None, "error": what}',
        'out[name] = {"version": "", "folder": None, "error": what}',
        T_SIDE,
        "a library that does not import given a version",
    ),
    _p(
        "side-number",
        SIDE,
        "direction=None if change is None or change == 0 else",
        "direction=None if change is None else",
        T_SIDE,
        "an unchanged number given a direction",
    ),
    _p(
        "side-depths-first",
        SIDE,
        'depths = [int(d) for d in args.depths.split(",")]',
        'depths = [int(args.depths.split(",")[0])]',
        T_SIDE,
        "only the first depth run",
    ),
    _p(
        "side-refused-empty",
        SIDE,
        '(out / "refused.json").write_text(json.dumps(refused) + "\\n", encoding="utf-8")',
        '(out / "refused.json").write_text(json.dumps({}) + "\\n", encoding="utf-8")',
        T_SIDE,
        "the refusals not written",
    ),
    _p(
        "side-profile",
        SIDE,
        'options = RunOptions(profile="thorough", case_timeout=None)',
        'options = RunOptions(profile="ci", case_timeout=None)',
        T_SIDE,
        "the side run in the ci profile",
    ),
    _p(
        "side-corner-depth",
        SIDE,
        "str(corner_case(s, depth=d))",
        "str(corner_case(s, depth=depths[0]))",
        T_SIDE,
        "every depth group run at the first depth",
    ),
    _p(
        "side-toward-swap",
        SIDE,
        "toward = against.toward_bound(spec, d.key.invariant, before, result.verdict)",
        "toward = against.toward_bound(spec, d.key.invariant, result.verdict, before)",
        T_SIDE,
        "toward and away from the bound swapped",
    ),
    _p(
        "side-direction",
        SIDE,
        '("up" if change > 0 else "down")',
        '("down" if change > 0 else "up")',
        T_SIDE,
        "up and down swapped",
    ),
    _p(
        "side-before-after",
        SIDE,
        "before=d.before,",
        "before=d.after,",
        T_SIDE,
        "the number before written as the number after",
    ),
    _p(
        "side-limit",
        SIDE,
        "limit=d.limit,",
        "limit=d.change,",
        T_SIDE,
        "the drift limit written as the change",
    ),
    _p(
        "side-errors",
        SIDE,
        'write_json(out / "report.json", results, errors=errors,',
        'write_json(out / "report.json", results, errors=[],',
        T_SIDE,
        "a case that did not run not reported",
    ),
    _p(
        "side-no-paths",
        SIDE,
        "    if not args.paths or not args.out:",
        "    if not args.out:",
        T_SIDE,
        "a side with no spec runs and reports nothing",
    ),
    _p(
        "side-plugins",
        SIDE,
        "    load_plugins()  # the run's plugins",
        "    pass  # the run's plugins",
        T_SIDE,
        "the run's plugins not loaded in a side",
    ),
    _p(
        "side-mine-key",
        SIDE,
        "(against.spec_key(o.task.spec.path), o.task.spec.name, r.name, str(r.case))",
        "(against.spec_key(o.task.spec.path), o.task.spec.name, r.name, str(o.task.case))",
        T_SIDE,
        "this run's result looked up by the task's case string",
    ),
    # --- report/zoo_compare.py: the comparison's report
    _p(
        "cmp-moved",
        COMPARE,
        'return [r for r in rows if r.status == "drift"]',
        'return [r for r in rows if r.status != "within"]',
        T_COMPARE,
        "a number not compared counted as moved",
    ),
    _p(
        "cmp-direction-none",
        COMPARE,
        '    if row.direction is None:\n        return "—"\n',
        "",
        T_COMPARE,
        "an unchanged number given a direction",
    ),
    _p(
        "cmp-toward-swap",
        COMPARE,
        '"toward its bound" if toward else "away from its bound"',
        '"away from its bound" if toward else "toward its bound"',
        T_COMPARE,
        "toward and away swapped",
    ),
    _p(
        "cmp-toward-false",
        COMPARE,
        'where = "" if toward is None else',
        'where = "" if not toward else',
        T_COMPARE,
        "away from its bound never said",
    ),
    _p("cmp-change-zero", COMPARE, '"0%" if c == 0 else ', "", T_COMPARE, "no change shown as +0.0%"),
    _p("cmp-change-sign", COMPARE, 'f"{c:+.1%}"', 'f"{c:.1%}"', T_COMPARE, "a change shown without its sign"),
    _p(
        "cmp-change-inf",
        COMPARE,
        "    if c is None or not math.isfinite(c):\n",
        "    if c is None:\n",
        T_COMPARE,
        "an infinite change shown as a percentage",
    ),
    _p(
        "cmp-limit-none",
        COMPARE,
        'return "—" if row.limit is None else fmt_limit(float(row.limit))',
        "return fmt_limit(float(row.limit or 0.0))",
        T_COMPARE,
        "a row without a drift limit shown with limit 0",
    ),
    _p(
        "cmp-shown",
        COMPARE,
        "r.shown or r.case,",
        "r.case,",
        T_COMPARE,
        "a case shown in full, not as the keys that vary",
    ),
    _p(
        "cmp-terminal-all",
        COMPARE,
        "        for r in moved(rows)\n    ]",
        "        for r in rows\n    ]",
        T_COMPARE,
        "every row listed as moved",
    ),
    _p(
        "cmp-md-moved-count",
        COMPARE,
        'f"{len(hit)} number(s) moved',
        'f"{len(rows)} number(s) moved',
        T_COMPARE,
        "every number counted as moved",
    ),
    _p(
        "cmp-md-compared",
        COMPARE,
        "of {compared} compared",
        "of {len(rows)} compared",
        T_COMPARE,
        "numbers that could not be compared counted as compared",
    ),
    _p(
        "cmp-md-versions",
        COMPARE,
        "for k, v in v_.items() if v)",
        "for k, v in v_.items())",
        T_COMPARE,
        "a library a side lacks listed as 'None'",
    ),
    _p("cmp-md-file", COMPARE, "`{Path(file).name}`", "`{file}`", T_COMPARE, "a refused spec named by its whole path"),
    _p(
        "cmp-num-none",
        COMPARE,
        "return fmt(None if x is None else float(x))",
        "return fmt(float(x or 0))",
        T_COMPARE,
        "a missing number shown as 0",
    ),
    _p(
        "cmp-md-table-rows",
        COMPARE,
        "for f, i, c, ab, ch, lim, d, _ in terminal_rows(rows)",
        "for f, i, c, ab, ch, lim, d, _ in terminal_rows(rows)[:1]",
        T_COMPARE,
        "only the first moved row in the table",
    ),
    # --- cli/zoo.py: the command
    _p(
        "zoo-depths-blank",
        ARG_TYPES,
        'for d in text.split(",") if d.strip()}',
        'for d in text.split(",")}',
        T_ZOO,
        "--depths 4,8, (a trailing comma) refused",
    ),
    _p(
        "zoo-depths-zero",
        ARG_TYPES,
        "if not depths or depths[0] < 1:",
        "if not depths or depths[0] < 0:",
        T_ZOO,
        "--depths 0 accepted",
    ),
    _p(
        "zoo-compare-default-depths",
        ZOO_CLI,
        'depth_list("4" if args.depths is None else args.depths))',
        'depth_list("4,8,16" if args.depths is None else args.depths))',
        T_ZOO,
        "--compare at three depths by default",
    ),
    _p(
        "zoo-md-check",
        ZOO_CLI,
        "    if args.md is not None:\n        check_markdown(args.md)\n",
        "",
        T_ZOO,
        "--md checked only after the zoo ran",
    ),
    _p(
        "zoo-md-html-same",
        ZOO_CLI,
        "if args.md is not None and Path(args.md).resolve() == page:",
        "if args.md is not None and Path(args.md) == page:",
        T_ZOO,
        "--md and --html on one file by a relative path",
    ),
    _p("zoo-budget", ZOO_CLI, "budget=not args.no_budget,", "budget=args.no_budget,", T_ZOO, "--no-budget inverted"),
    _p(
        "zoo-no-budget-refused",
        ZOO_CLI,
        '    refuse_unused(parser(), args, ["--no-budget"], "--compare'
        " measures each family's corner cases and no budget\")\n",
        "",
        T_ZOO,
        "--compare --no-budget accepted and ignored",
    ),
    _p(
        "zoo-compare-md-check",
        ZOO_CLI,
        '        check_report_path("--md", args.md, "zoo comparison", example="compare.md")\n',
        "        pass\n",
        T_ZOO,
        "--compare --md checked only after both sides ran",
    ),
    _p(
        "zoo-refused-swap",
        ZOO_CLI,
        '            a.label: json.loads((side_a / "refused.json")',
        '            a.label: json.loads((side_b / "refused.json")',
        T_ZOO,
        "side B's refusals shown under side A",
    ),
    _p(
        "zoo-compared-all",
        ZOO_CLI,
        'compared = sum(r.status != "not_comparable" for r in rows)',
        "compared = len(rows)",
        T_ZOO,
        "numbers that could not be compared counted as compared",
    ),
    _p(
        "zoo-refused-every",
        ZOO_CLI,
        "        if len(files) == len(paths):",
        "        if files:",
        T_ZOO,
        "a side that refuses one spec of several exits 2",
    ),
    _p(
        "zoo-moved-exit",
        ZOO_CLI,
        "    if moved(rows):\n        return EXIT_FAILED",
        "    if moved(rows):\n        return EXIT_OK",
        T_ZOO,
        "a moved number exits 0",
    ),
    _p(
        "zoo-md-labels",
        ZOO_CLI,
        "markdown(a.label, b.label, rows,",
        "markdown(b.label, a.label, rows,",
        T_ZOO,
        "the comparison's sides swapped in --md",
    ),
    _p(
        "zoo-baseline-side",
        ZOO_CLI,
        'baseline=side_a / "report.json", plugins=args.plugin',
        "baseline=None, plugins=args.plugin",
        T_ZOO,
        "side B compared with no baseline",
    ),
    _p(
        "zoo-quiet",
        ZOO_CLI,
        "        if not args.quiet:\n"
        '            err.print(f"zoo --compare: {len(paths)} families under {escape(a.label)}"',
        '        if args.quiet:\n            err.print(f"zoo --compare: {len(paths)} families under {escape(a.label)}"',
        T_ZOO,
        "progress printed under -q",
    ),
    _p(
        "zoo-no-specs",
        ZOO_CLI,
        '    if not paths:\n        raise UsageError(f"--compare: no spec files',
        '    if not paths and False:\n        raise UsageError(f"--compare: no spec files',
        T_ZOO,
        "--compare on a folder without specs runs both sides",
    ),
    # --- families/library_stream.py: scale = "shipped"
    _p(
        "stream-block-seed",
        STREAM,
        'f"{seed}:{index}".encode()',
        'f"{seed}".encode()',
        T_STREAM,
        "every block drawn from one seed (all blocks alike)",
    ),
    _p(
        "stream-fork",
        STREAM,
        "with torch.random.fork_rng(devices=[]), torch.no_grad(), chunked_draws(seed):",
        "with torch.no_grad(), chunked_draws(seed):",
        T_STREAM,
        "the caller's generator moved by a block's init",
    ),
    _p(
        "stream-storage-bytes",
        STREAM,
        "* st for n, st in zip(p.shape, p.stride(), strict=True)) + 1)",
        "* st for n, st in zip(p.shape, p.stride(), strict=True)))",
        T_STREAM,
        "a parameter's storage one entry short",
    ),
    _p(
        "stream-poison",
        STREAM,
        "        if poison and p.is_floating_point():",
        "        if False:",
        T_STREAM,
        "a block's storage not filled with NaN before its first init",
    ),
    _p(
        "stream-keep-ignored",
        STREAM,
        "for j in sorted(self.live - {i, *keep}):",
        "for j in sorted(self.live - {i}):",
        T_STREAM,
        "the block the backward may still need released",
    ),
    _p(
        "stream-live-return",
        STREAM,
        "        if i in self.live:\n            return\n",
        "",
        T_STREAM,
        "a live block made again",
    ),
    _p(
        "stream-first-always",
        STREAM,
        "params, first = self.params[i], i not in self.checked",
        "params, first = self.params[i], True",
        T_STREAM,
        "every materialisation taken as the first",
    ),
    _p(
        "stream-peak",
        STREAM,
        "self.peak_live = max(self.peak_live, len(self.live))",
        "self.peak_live = len(self.live)",
        T_STREAM,
        "the peak of live blocks records the last count",
    ),
    _p(
        "stream-release-forward",
        STREAM,
        "            return original(*args, **kwargs)\n        finally:\n            self.release(i)",
        "            return original(*args, **kwargs)\n        finally:\n            pass",
        T_STREAM,
        "a block kept after its forward",
    ),
    _p(
        "stream-no-checkpoint",
        STREAM,
        "            return checkpoint(run, *args, use_reentrant=False, context_fn=contexts, **kwargs)",
        "            return run(*args, **kwargs)",
        T_STREAM,
        "blocks run without checkpointing",
    ),
    _p(
        "stream-known",
        STREAM,
        "if i is not None and id(p) not in known:",
        "if i is not None:",
        T_STREAM,
        "a block made again for parameters already read",
    ),
    _p(
        "stream-release-all",
        STREAM,
        "                yield name, p\n        finally:\n            self.release_all()",
        "                yield name, p\n        finally:\n            pass",
        T_STREAM,
        "the last block read for statistics kept",
    ),
    _p(
        "stream-shipped-order",
        STREAM,
        "config = {**fill(spec.config, values), **fill(spec.shipped, values)}",
        "config = {**fill(spec.shipped, values), **fill(spec.config, values)}",
        T_STREAM,
        "the case's config over the shipped one",
    ),
    _p(
        "stream-marked",
        STREAM,
        "marked = [m for r in runs if r.marked for m in r.modules]",
        "marked = [m for r in runs if not r.marked for m in r.modules]",
        T_STREAM,
        "the unmarked runs streamed",
    ),
    _p(
        "stream-named-slice",
        STREAM,
        'model.get_submodule(named.split("[")[0].strip())',
        "model.get_submodule(named)",
        T_STREAM,
        "a block.blocks with a slice streams nothing",
    ),
    _p(
        "stream-init-whole",
        STREAM,
        "        init_streamed(model, block, block_seed(seed, i))",
        "        init_streamed(model, block, block_seed(seed, i + 1))",
        T_STREAM,
        "the whole model's blocks drawn from their neighbours' seeds",
    ),
    _p(
        "stream-saved",
        STREAM,
        "saved = max(two.saved - one.saved, one.saved)",
        "saved = two.saved - one.saved",
        T_STREAM,
        "the first block's saved tensors (with the embedding's) left out",
    ),
    _p(
        "stream-work",
        STREAM,
        "work = 2 * max(one.largest_param, two.largest_param) + 2 *",
        "work = max(one.largest_param, two.largest_param) + 2 *",
        T_STREAM,
        "the largest gradient's norm copy left out",
    ),
    _p(
        "stream-hidden",
        STREAM,
        "depth * hidden_bytes",
        "(depth - 1) * hidden_bytes",
        T_STREAM,
        "one block's input too few",
    ),
    _p(
        "stream-rest",
        STREAM,
        "rest = max(one.params - least * block, 0)",
        "rest = one.params",
        T_STREAM,
        "a block counted in the parts outside the blocks",
    ),
    _p(
        "stream-unset-index",
        STREAM,
        "of block {i} unset",
        "of block {i + 1} unset",
        T_STREAM,
        "the unset parameter's block misnamed",
    ),
    _p(
        "stream-storageless-tie",
        STREAM,
        "            if id(p) not in done:\n",
        "            if True:\n",
        T_STREAM,
        "a tied parameter split in two without storage",
    ),
    _p(
        "stream-trace-real",
        STREAM,
        "        if out is None:\n            return self._forward_real(i, original, args, kwargs)",
        "        if out is None:\n            return None",
        T_STREAM,
        "a block discovery cannot trace hands on nothing",
    ),
    _p(
        "stream-rest-skip",
        STREAM,
        'init_streamed(model, model, block_seed(seed, "rest"), skip=streamed)',
        'init_streamed(model, model, block_seed(seed, "rest"), skip=set())',
        T_STREAM,
        "the blocks initialised with the rest (storageless)",
    ),
    # --- families/library_draws.py: the chunked init draws
    _p(
        "draws-chunk-index",
        DRAWS,
        'f"{seed}:{call}:{chunk}"',
        'f"{seed}:{call}"',
        T_DRAWS,
        "every chunk of a draw alike",
    ),
    _p(
        "draws-call-stays",
        DRAWS,
        "call, self.calls = self.calls, self.calls + 1",
        "call, self.calls = self.calls, self.calls",
        T_DRAWS,
        "the call index never advances",
    ),
    _p(
        "draws-own-generator",
        DRAWS,
        'if func not in _DRAWS or kwargs.get("generator") is not None or',
        "if func not in _DRAWS or",
        T_DRAWS,
        "a draw with its own generator taken over",
    ),
    _p(
        "draws-contiguous",
        DRAWS,
        "or not target.is_contiguous():",
        "or False:",
        T_DRAWS,
        "a non-contiguous tensor split",
    ),
    _p(
        "draws-no-grad",
        DRAWS,
        "            with torch.no_grad():  # (grad mode is per thread",
        "            if True:  # (grad mode is per thread",
        T_DRAWS,
        "a pool thread draws into a parameter with grad mode on",
    ),
    _p(
        "draws-generator",
        DRAWS,
        '**{**kwargs, "generator": generator}',
        "**kwargs",
        T_DRAWS,
        "a chunk drawn from the global generator",
    ),
    _p(
        "draws-args",
        DRAWS,
        "func(chunks[j], *args[1:], **",
        "func(chunks[j], **",
        T_DRAWS,
        "a chunk drawn without the call's mean and std",
    ),
    _p(
        "draws-wait",
        DRAWS,
        "            list(self.pool.map(draw, range(len(chunks))))",
        "            [self.pool.submit(draw, j) for j in range(len(chunks))]",
        T_DRAWS,
        "the draw not waited for",
    ),
    _p(
        "draws-return",
        DRAWS,
        "        return target\n",
        "        return None\n",
        T_DRAWS,
        "the in-place draw returns nothing",
    ),
    _p(
        "draws-uniform",
        DRAWS,
        "_DRAWS = {torch.ops.aten.normal_.default, torch.ops.aten.uniform_.default}",
        "_DRAWS = {torch.ops.aten.normal_.default}",
        T_DRAWS,
        "uniform draws left to the global generator",
    ),
    _p(
        "draws-seed-mod",
        DRAWS,
        'return int.from_bytes(digest, "little") % 2**63',
        'return int.from_bytes(digest[:1], "little") % 2**63',
        T_DRAWS,
        "chunk seeds from one byte of the digest (256 streams)",
    ),
    _p(
        "draws-split-view",
        DRAWS,
        "chunks = torch.split(target.view(-1), CHUNK)",
        "chunks = torch.split(target.view(-1).clone(), CHUNK)",
        T_DRAWS,
        "the chunks drawn into a copy",
    ),
    _p(
        "draws-single-pool",
        DRAWS,
        "if self.pool is None or len(chunks) == 1:",
        "if self.pool is None and len(chunks) == 1:",
        T_DRAWS,
        "one thread's draws sent to a pool that is not there",
    ),
    _p("draws-threads", DRAWS, "if threads > 1 else None", "if threads > 0 else None", T_DRAWS, "a pool of one thread"),
    _p("draws-float", DRAWS, "or not target.is_floating_point() or", "or", T_DRAWS, "an integer tensor split"),
    # --- families/library_memory.py: the memory estimate
    _p(
        "mem-statm-field",
        MEMORY,
        "int(fh.read().split()[1])",
        "int(fh.read().split()[0])",
        T_MEMORY,
        "the virtual size read as the resident set",
    ),
    _p("mem-statm-pages", MEMORY, '* os.sysconf("SC_PAGE_SIZE")', "* 1", T_MEMORY, "pages read as bytes"),
    _p(
        "mem-buffers-flag",
        MEMORY,
        "        if buffers and isinstance(tensor, torch.Tensor)",
        "        if isinstance(tensor, torch.Tensor)",
        T_MEMORY,
        "buffers moved to meta where they must stay real",
    ),
    _p(
        "mem-restore",
        MEMORY,
        "        nn.Module.register_parameter = register_parameter  # type: ignore[method-assign]\n"
        "        nn.Module.register_buffer = register_buffer",
        "        nn.Module.register_buffer = register_buffer",
        T_MEMORY,
        "register_parameter left patched",
    ),
    _p(
        "mem-stray",
        MEMORY,
        "    if stray:  # (a tensor assigned",
        "    if False:  # (a tensor assigned",
        T_MEMORY,
        "a tensor the constructor assigned outside register_* left real",
    ),
    _p(
        "mem-int-bytes",
        MEMORY,
        "size = t.numel() * (dtype.itemsize if t.is_floating_point() else t.element_size())",
        "size = t.numel() * dtype.itemsize",
        T_MEMORY,
        "integer buffers counted in the case's dtype",
    ),
    _p(
        "mem-count-buffers",
        MEMORY,
        "            if is_param:\n                count += t.numel()",
        "            count += t.numel()",
        T_MEMORY,
        "buffers counted as parameters",
    ),
    _p(
        "mem-largest-last",
        MEMORY,
        "            largest = max(largest, size)",
        "            largest = size",
        T_MEMORY,
        "the largest tensor read as the last",
    ),
    _p(
        "mem-owned",
        MEMORY,
        "        if storage._cdata not in owned:",
        "        if True:",
        T_MEMORY,
        "parameters counted again among the saved tensors",
    ),
    _p(
        "mem-storage-twice",
        MEMORY,
        "            storages[storage._cdata] = storage.nbytes()",
        "            storages[storage._cdata] = storages.get(storage._cdata, 0) + storage.nbytes()",
        T_MEMORY,
        "a tensor saved twice counted twice",
    ),
    _p(
        "mem-stop-first",
        MEMORY,
        "handle = found.blocks.modules[-1].register_forward_hook(_raise_stop)",
        "handle = found.blocks.modules[0].register_forward_hook(_raise_stop)",
        T_MEMORY,
        "the forward stopped at the first probed block",
    ),
    _p(
        "mem-largest-param-all",
        MEMORY,
        "(p.numel() * p.element_size() for block in found.blocks.modules for p in block.parameters())",
        "(p.numel() * p.element_size() for p in model.parameters())",
        T_MEMORY,
        "the largest gradient read from the embedding too",
    ),
    _p(
        "mem-fake-dtype",
        MEMORY,
        "meta = t.detach().to(dtype) if t.is_floating_point() else t.detach()",
        "meta = t.detach()",
        T_MEMORY,
        "the fake pass run in float32 whatever the case's dtype",
    ),
    _p(
        "mem-runs-first",
        MEMORY,
        "run = max(runs, key=lambda r: len(r.modules))",
        "run = runs[0]",
        T_MEMORY,
        "the first run of blocks, not the longest",
    ),
    _p(
        "mem-block-dtype",
        MEMORY,
        "        p.numel() * (dtype.itemsize if p.is_floating_point() else p.element_size())\n"
        "        for m in run.modules",
        "        p.numel() * p.element_size()\n        for m in run.modules",
        T_MEMORY,
        "the largest block parameter in float32 whatever the case's dtype",
    ),
    _p(
        "mem-fallback-largest",
        MEMORY,
        "largest_param = _largest_block_param(model, dtype) or largest",
        "largest_param = largest",
        T_MEMORY,
        "without a fake pass the largest gradient is the embedding's",
    ),
    _p(
        "mem-float32",
        MEMORY,
        "float32 = count_bytes(model, torch.float32)[0]",
        "float32 = params",
        T_MEMORY,
        "the constructed size in the case's dtype",
    ),
    _p(
        "mem-swap",
        MEMORY,
        "        largest_param=largest_param,\n        largest_saved=largest_saved,\n",
        "        largest_param=largest_saved,\n        largest_saved=largest_param,\n",
        T_MEMORY,
        "the largest parameter and saved activation swapped",
    ),
    _p(
        "mem-enable-grad",
        MEMORY,
        "with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):",
        "with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):",
        T_MEMORY,
        "under no_grad the fake pass saves nothing",
    ),
    _p(
        "mem-meta-fallback",
        MEMORY,
        "    except Exception:  # a constructor that reads numbers back",
        "    except TypeError:  # a constructor that reads numbers back",
        T_MEMORY,
        "a constructor that reads numbers back fails the estimate",
    ),
]


# ----------------------------------------------------------------------------- part 2: suggest and the rule tables

RULES_TOML = "stability/judge/init_rules.toml"
CONFORMANCE = "stability/judge/init_conformance.py"
TABLES = "stability/judge/init_tables.py"
INTENT = "stability/judge/init_intent.py"
SUGGESTIONS = "stability/run/suggestions.py"
SUGGEST = "stability/run/suggest.py"
T_TABLES = "tests/test_init_tables_units.py tests/test_init_conformance.py"
T_INTENT = "tests/test_intent_units.py tests/test_init_intent.py tests/test_init_tables_units.py"
T_SUGGEST = (
    "tests/test_suggestions.py tests/test_suggest_units.py tests/test_suggest_candidates.py tests/test_suggest.py"
)

ISSUE_2: list[Plant] = [
    _p(
        "issue-resnet-fan-in",
        RULES_TOML,
        'std = "sqrt(2 / fan_out)"\nsource = "He et al. 2015 (Kaiming, mode fan_out, ReLU gain); transformers ResNet',
        'std = "sqrt(2 / fan_in)"\nsource = "He et al. 2015 (Kaiming, mode fan_out, ReLU gain); transformers ResNet',
        T_TABLES,
        "a rule row's std from fan-in instead of fan-out (transformers ResNet convolutions)",
    ),
    _p(
        "issue-layer-scale-off",
        RULES_TOML,
        'count = "sum(depths[:num_stages]) if layer_scale_init_value > 0 else 0"',
        'count = "sum(depths[:num_stages])"',
        T_TABLES,
        "a layer-scale count applied with layer scale off (the convnext row)",
    ),
    _p(
        "issue-count-when",
        CONFORMANCE,
        "if j.applies and j.row.count is not None:",
        "if j.row.count is not None:",
        T_TABLES,
        "a rule row's count checked even when its when does not apply",
    ),
    _p(
        "issue-suggest-margin-first",
        SUGGESTIONS,
        "key=lambda a: (len(a.changes), ranks[a.remedy], order[a.remedy])",
        "key=lambda a: (ranks[a.remedy], len(a.changes), order[a.remedy])",
        T_SUGGEST,
        "suggest ranks by margin before fewest changes",
    ),
    _p(
        "issue-suggest-margin-reversed",
        SUGGESTIONS,
        "column = sorted({a.margin[k] for a in held if k < len(a.margin)})",
        "column = sorted({a.margin[k] for a in held if k < len(a.margin)}, reverse=True)",
        T_SUGGEST,
        "suggest's margin order reversed",
    ),
    _p(
        "issue-suggest-replay-inapplicable",
        SUGGEST,
        "replayed.met and replayed.applicable",
        "replayed.met",
        T_SUGGEST,
        "a replay where the invariant no longer applies counted as fixed",
    ),
]


def _tab(id: str, old: str, new: str, what: str) -> Plant:
    return _p(f"tab-{id}", TABLES, old, new, T_TABLES, what)


def _int(id: str, old: str, new: str, what: str) -> Plant:
    return _p(f"int-{id}", INTENT, old, new, T_INTENT, what)


def _sug(id: str, file: str, old: str, new: str, what: str) -> Plant:
    return _p(f"sug-{id}", file, old, new, T_SUGGEST, what)


ROUND_2: list[Plant] = [
    # --- judge/init_tables.py: the tables chosen and a row's law
    _tab("choose-none", "    if name is False:\n", "    if not name:\n", "no table chosen by default"),
    _tab(
        "named-mismatch",
        "if not t.models or _matched(t, model) is not None:",
        "if True:",
        "a named table applied to a class it is not written for",
    ),
    _tab(
        "generic-never",
        "if t.models and not (t.generic and recorded) else None",
        "if t.models and not t.generic else None",
        "a generic table never chosen, also where no init was recorded",
    ),
    _tab(
        "generic-always",
        "if t.models and not (t.generic and recorded) else None",
        "if t.models else None",
        "a generic table chosen where the init was recorded",
    ),
    _tab(
        "overriding-self",
        "overriding = next((c for c in model[:at] if c in init_defined_by), None)",
        "overriding = next((c for c in model[: at + 1] if c in init_defined_by), None)",
        "the matched class's own init read as overriding it",
    ),
    _tab(
        "overriding-ignored", "        if overriding is None:\n", "        if True:\n", "a derived class's init ignored"
    ),
    _tab(
        "rows-extends",
        "table = rule_tables()[table.extends] if table.extends else None",
        "table = None",
        "the extended table's rows dropped",
    ),
    _tab(
        "rows-generic",
        "if table is first or not (recorded and table.generic):",
        "if table is first or not table.generic:",
        "a generic table's rows dropped also where no init was recorded",
    ),
    _tab(
        "rows-order",
        "out += [(table.name, r) for r in table.rows]",
        "out = [(table.name, r) for r in table.rows] + out",
        "the extended table's rows before the table's own",
    ),
    _tab(
        "number-bool",
        "if isinstance(value, bool) or not isinstance(value, (int, float))",
        "if not isinstance(value, (int, float))",
        "a row's number that computes true read as 1",
    ),
    _tab(
        "number-finite",
        " or not math.isfinite(value):\n        raise RuleError",
        ":\n        raise RuleError",
        "a row's number that computes inf accepted",
    ),
    _tab(
        "when-undefined",
        "    except Undefined:\n        return False",
        "    except Undefined:\n        return True",
        "a when naming an undeclared key read as true",
    ),
    _tab(
        "when-none",
        "    if row.when is None:\n        return True",
        "    if row.when is None:\n        return False",
        "a row without when never applies",
    ),
    _tab(
        "bound-abs",
        'bound = abs(row_number(row, "bound", env))',
        'bound = row_number(row, "bound", env)',
        "a negative bound gives an inverted range",
    ),
    _tab("std-negative", "    if std < 0:\n", "    if std < -1:\n", "a negative std accepted"),
    _tab(
        "std-zero",
        '    if std == 0:\n        return Law("constant", value=mean)\n',
        "",
        "a std of 0 read as a normal law, not the constant mean",
    ),
    _tab("trunc-a", "if row.a is not None else -2.0", "if row.a is not None else -3.0", "the default truncation at -3"),
    _tab(
        "trunc-order",
        'law = Law("trunc_normal", mean=mean, std=std, a=min(a, b), b=max(a, b))',
        'law = Law("trunc_normal", mean=mean, std=std, a=a, b=b)',
        "a truncation given high first kept inverted",
    ),
    _tab(
        "mean-default",
        'mean = row_number(row, "mean", env) if row.mean is not None else 0.0',
        'mean = row_number(row, "mean", env) if row.mean is not None else 1.0',
        "a row without a mean centred on 1",
    ),
    _tab(
        "declared-exprs",
        "if isinstance(getattr(row, k, None), str)]",
        "if getattr(row, k, None) is not None]",
        "a row's literal numbers shown as expressions",
    ),
    # --- judge/init_intent.py: the model's declared intent
    _int("group-digit", r"(?:(?<=\.)|^)\d+(?=\.|$|\[)", r"(?:(?<=\.)|^)\d(?=\.|$|\[)", "layer 12 not grouped"),
    _int(
        "left-vector",
        "if key is not None and len(p.shape) >= 2:",
        "if key is not None and len(p.shape) >= 1:",
        "a vector left at default flagged by the config's initializer_range",
    ),
    _int(
        "left-range-zero",
        "(_number(record.variables.get(k)) or 0) > 0",
        "_number(record.variables.get(k)) is not None",
        "an initializer_range of 0 read as declaring a std",
    ),
    _int(
        "blanket-one",
        'blanket = [(scope, s) for (_, scope), s in sites.items() if len(s["groups"]) >= 2]',
        'blanket = [(scope, s) for (_, scope), s in sites.items() if len(s["groups"]) >= 1]',
        "a line that writes one named part read as writing every module of its class",
    ),
    _int(
        "scope-prefix",
        'inside = scope == "" or p.name.startswith(scope + ".")',
        'inside = scope == "" or p.name.startswith(scope)',
        "a sibling whose name begins with the scope's (h.1 and h.10) read as inside it",
    ),
    _int(
        "scope-any",
        'inside = scope == "" or p.name.startswith(scope + ".")',
        "inside = True",
        "a parameter outside an init site's scope judged by it",
    ),
    _int(
        "vector-any",
        "return p.n > 0 and max(p.shape, default=1) == p.n",
        "return p.n > 0",
        "a matrix taken as a layer-scale vector",
    ),
    _int(
        "constant-eps",
        "abs(law.value - v) <= max(eps, 1e-12) * abs(v)",
        "abs(law.value - v) <= 0.0",
        "a layer scale off by its dtype's rounding flagged",
    ),
    _int(
        "scale-right",
        "if given is None or _is_constant(t.law, given[1], p.eps):",
        "if given is None:",
        "a layer scale set to its value flagged",
    ),
    _int(
        "norm-live",
        "if t.created_live is not True:",
        "if t.created_live is False:",
        "a placeholder whose liveness cannot be told judged as a norm offset",
    ),
    _int(
        "norm-equal",
        'if t.created.kind != "constant" or t.law.kind != "constant" or t.law.value == t.created.value:',
        'if t.created.kind != "constant" or t.law.kind != "constant":',
        "a norm left at its created value flagged",
    ),
    _int(
        "norm-model-code",
        'if _module_of(t.writer) in (owner, model_module, ""):',
        'if _module_of(t.writer) in (owner, ""):',
        "the model's own code read as generic",
    ),
    _int(
        "frozen-trainable",
        "if not t.requires_grad and table and",
        "if table and",
        "a trainable table at zero flagged as frozen",
    ),
    _int(
        "frozen-vector",
        "table = sum(d > 1 for d in p.shape) >= 2",
        "table = sum(d > 1 for d in p.shape) >= 1",
        "a frozen vector at zero flagged",
    ),
    _int(
        "never-created",
        'if t.law.kind == "empty":',
        'if t.created.kind == "empty":',
        "a parameter created empty and then written flagged as never written",
    ),
    _int(
        "depth-2n",
        "factors = (1 / math.sqrt(depth), 1 / math.sqrt(2 * depth))",
        "factors = (1 / math.sqrt(depth),)",
        "GPT-2's 1/sqrt(2N) scaling not recognised",
    ),
    _int(
        "depth-one",
        "if key is None or depth < 2 or not rows:",
        "if key is None or not rows:",
        "a one-layer model asked for depth scaling",
    ),
    _int(
        "first-rule", "found.setdefault(d.name, d)", "found[d.name] = d", "a parameter's last rule kept, not its first"
    ),
    # --- run/suggestions.py and run/suggest.py: ranking and judging the remedies
    _sug(
        "held-all",
        SUGGESTIONS,
        "held = [a for a in self.attempts if a.held]",
        "held = list(self.attempts)",
        "a remedy that fails ranked",
    ),
    _sug(
        "order-reversed",
        SUGGESTIONS,
        "(len(a.changes), ranks[a.remedy], order[a.remedy])",
        "(len(a.changes), ranks[a.remedy], -order[a.remedy])",
        "ties broken against registry order",
    ),
    _sug(
        "rank-missing",
        SUGGESTIONS,
        "if k < len(a.margin) else len(column)",
        "if k < len(a.margin) else 0",
        "a remedy without a margin ranked best",
    ),
    _sug(
        "rank-last",
        SUGGESTIONS,
        "ranks[a.remedy] += column.index(a.margin[k])",
        "ranks[a.remedy] = column.index(a.margin[k])",
        "only the last invariant's margin counted",
    ),
    _sug(
        "rank-ties",
        SUGGESTIONS,
        "column = sorted({a.margin[k] for a in held if k < len(a.margin)})",
        "column = sorted([a.margin[k] for a in held if k < len(a.margin)])",
        "tied margins push the next remedy's rank down",
    ),
    _sug(
        "best-last",
        SUGGESTIONS,
        "return ranked[0] if ranked else None",
        "return ranked[-1] if ranked else None",
        "the worst remedy named best",
    ),
    _sug(
        "json-margin",
        SUGGESTIONS,
        '"margin": [m if math.isfinite(m) else None for m in self.margin],',
        '"margin": list(self.margin),',
        "an infinite margin written as bare Infinity (not JSON)",
    ),
    _sug(
        "margin-none",
        SUGGEST,
        "    if r is None or r.verdict is None or r.name not in INVARIANTS:\n        return math.inf",
        "    if r is None or r.verdict is None or r.name not in INVARIANTS:\n        return 0.0",
        "an invariant with no verdict given the best margin",
    ),
    _sug(
        "margin-first-only",
        SUGGEST,
        "attempt.margin = tuple(_margin(edited, by_name.get(r.name)) for r in failing)",
        "attempt.margin = tuple(_margin(edited, by_name.get(r.name)) for r in failing[:1])",
        "the margin of the first fixed invariant only",
    ),
    _sug(
        "confirm-unmet",
        SUGGEST,
        "        elif unmet:\n",
        "        elif False:\n",
        "a remedy that breaks another expectation holds",
    ),
    _sug(
        "confirm-skipped",
        SUGGEST,
        "if r.name not in by_name or not by_name[r.name].applicable or by_name[r.name].skipped",
        "if r.name not in by_name or not by_name[r.name].applicable",
        "a fixed expectation the remedied spec skips counted as fixed",
    ),
    _sug(
        "replay-error",
        SUGGEST,
        "ok = outcome.error is None and replayed is not None and",
        "ok = replayed is not None and",
        "a replay that errored counted as fixed",
    ),
    _sug(
        "failing-controls",
        SUGGEST,
        'if not r.met and r.expect == "holds" and r.applicable',
        "if not r.met and r.applicable",
        "a negative control offered remedies",
    ),
    _sug(
        "failing-skipped",
        SUGGEST,
        "r.applicable and not r.skipped and (only",
        "r.applicable and (only",
        "a skipped expectation offered remedies",
    ),
    _sug(
        "nearest-tie",
        SUGGEST,
        "return int(min(values, key=lambda v: (abs(v - value), v)))",
        "return int(min(values, key=lambda v: (abs(v - value), -v)))",
        "the larger of two nearest values",
    ),
    _sug(
        "map-first-choice",
        SUGGEST,
        "            changes[key] = choices[0]\n",
        "            changes[key] = choices[-1]\n",
        "a choice the space no longer offers replaced by its last",
    ),
]

PLANTS: list[Plant] = [*ISSUE, *ROUND, *ISSUE_2, *ROUND_2]

#: Plants that change nothing a caller can observe, and why: counted apart, not as survivors.
EQUIVALENT: dict[str, str] = {
    "side-mine-key": "a task's results are judged at the task's own case (engine._replay), so str(r.case) is "
    "the task's case string",
    "draws-no-grad": "the chunks are views made inside the dispatch, below autograd: they carry no grad history, "
    "so a pool thread's grad mode changes nothing",
    "draws-threads": "a one-thread pool draws the same chunks from the same seeds as the loop (only slower)",
    "draws-return": "the Python binding of an in-place draw returns its own tensor whatever the mode returns",
    "tab-bound-abs": "the range is [min(a, b), max(a, b)] of -bound and bound: a negative bound gives the same law",
    "int-norm-equal": "a constant written over with its created value is no overwrite (ParameterTrace.overwritten), "
    "so its created_live is None and the next check skips it",
}


def _module(p: Plant) -> str:
    return Path(p.file).name


def _clear_bytecode(file: Path) -> None:
    for pyc in (file.parent / "__pycache__").glob(f"{file.stem}.*.pyc"):
        pyc.unlink(missing_ok=True)


def run_one(p: Plant, tests: list[str] | None = None) -> dict[str, object]:
    path = ROOT / p.file
    text = path.read_text(encoding="utf-8")
    count = text.count(p.old)
    if count != 1:
        return {"id": p.id, "status": "stale", "detail": f"old text found {count} times"}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    tests = [t for t in (tests or p.tests) if (ROOT / t).is_file()]  # (a test file written later runs once it exists)
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-n", "0", "-p", "no:cacheprovider", "-rf", *tests]
    t0 = time.monotonic()
    try:
        path.write_text(text.replace(p.old, p.new), encoding="utf-8")
        _clear_bytecode(path)
        try:
            done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=LIMIT)
        except subprocess.TimeoutExpired:
            return {"id": p.id, "status": "killed", "detail": f"timeout after {LIMIT:.0f} s", "seconds": LIMIT}
    finally:
        path.write_text(text, encoding="utf-8")
        _clear_bytecode(path)
    seconds = round(time.monotonic() - t0, 1)
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", done.stdout, flags=re.M)
    if done.returncode == 0:
        return {"id": p.id, "status": "survived", "detail": "", "seconds": seconds, "tests": tests}
    detail = failed[0] if failed else (done.stdout.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return {"id": p.id, "status": "killed", "detail": detail, "seconds": seconds, "tests": tests}


def _load() -> dict[str, dict[str, object]]:
    return json.loads(RESULTS.read_text(encoding="utf-8")) if RESULTS.is_file() else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python dev/mutation/plants.py")
    parser.add_argument("command", choices=["list", "check", "run", "tally"])
    parser.add_argument("--only", help="plant ids or module file names, comma-separated")
    parser.add_argument("--tests", help="run these test files instead of each plant's own (space-separated)")
    parser.add_argument("--again", action="store_true", help="record what this run finds, even where it undoes a kill")
    args = parser.parse_args(argv)
    chosen = PLANTS
    if args.only:
        wanted = set(args.only.split(","))
        chosen = [p for p in PLANTS if p.id in wanted or _module(p) in wanted]
    if args.command == "list":
        for p in chosen:
            print(f"{p.id}\t{p.file}\t{' '.join(p.tests)}\t{p.what}")
        return 0
    if args.command == "check":  # every plant's text is in its module once
        stale = [p.id for p in chosen if (ROOT / p.file).read_text(encoding="utf-8").count(p.old) != 1]
        print("\n".join(f"stale: {s}" for s in stale) or f"{len(chosen)} plants, none stale")
        return 1 if stale else 0
    if args.command == "run":
        if args.tests:  # a test that fails on the code as it is would "kill" every plant
            clean = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-x", "-n", "0", "-p", "no:cacheprovider", *args.tests.split()],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                capture_output=True,
                text=True,
            )
            if clean.returncode != 0:
                print(f"the tests fail without a plant:\n{clean.stdout[-2000:]}", file=sys.stderr)
                return 1
        results = _load()
        for p in chosen:
            got = run_one(p, args.tests.split() if args.tests else None)
            if not args.again and got["status"] == "survived" and results.get(p.id, {}).get("status") == "killed":
                print(f"{p.id}: survives these tests; kept as killed by {results[p.id].get('detail')}")
                continue  # (a narrower run does not undo the kill of an earlier one)
            results[p.id] = got
            RESULTS.parent.mkdir(exist_ok=True)
            RESULTS.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
            print(f"{p.id}: {got['status']} {got.get('detail', '')} ({got.get('seconds', 0)} s)", flush=True)
        return 0
    results = _load()
    table: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for p in chosen:
        status = str(results.get(p.id, {}).get("status", "not run"))
        if status == "survived" and p.id in EQUIVALENT:
            status = "equivalent"
            print(f"equivalent: {p.id} ({p.file}): {EQUIVALENT[p.id]}")
        table[_module(p)][status] += 1
        if status == "survived":
            print(f"survived: {p.id} ({p.file}): {p.what}")
    for module, counts in table.items():
        planted = sum(counts.values())
        killed, equivalent = counts["killed"], counts["equivalent"]
        rate = killed / max(1, planted - equivalent)
        print(
            f"{module}: planted {planted}, killed {killed}, survived {counts['survived']}, "
            f"equivalent {equivalent}, not run {counts['not run']}: {rate:.0%} of the non-equivalent killed"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
