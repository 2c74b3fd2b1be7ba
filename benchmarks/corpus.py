"""A corpus of initialisation bugs that shipped in released model libraries, each judged by the
project's own zoo spec for that family on the buggy release and on the release that fixed it.

`benchmarks/corpus.toml` lists the bugs (library, zoo spec, buggy and fixed release, mechanism,
source). Each release is installed once, wheel only and `--no-deps`, into its own folder
`.cache/corpus/<library>-<version>/` (with the versions of its own requirements that this
environment does not satisfy, torch never among them), and selected with `PYTHONPATH`: nothing in
the environment is changed, and after the first run nothing is downloaded. Each spec is checked
by `stability check SPEC --profile P --json F` in a subprocess whose `PYTHONPATH` puts the release
first, after checking that the subprocess imports the release from that folder. A bug is *caught*
when the check exits 1 (an expectation not met) on the buggy release; the fixed release is a
*false alarm* when its check exits 1 too.

    python -m benchmarks.corpus [--only ID ...] [--profile ci|thorough] [--json FILE]

prints the table of `docs/zoo.md`, section "Real init bugs caught".
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
BUGS = Path(__file__).with_name("corpus.toml")
CACHE = ROOT / ".cache" / "corpus"
#: Never installed into a release folder: the environment's own build is used (a loose torch is a multi-GB CUDA build).
NEVER = frozenset({"torch"})
#: Releases these libraries import beside this environment's torch (docs/library-models.md, section 1).
LIBRARIES = ("transformers", "timm", "torchvision")
DONE = ".complete"


class ReleaseUnavailable(RuntimeError):
    """A release that is not cached and could not be downloaded (no network, no such wheel)."""


@dataclass(frozen=True)
class Bug:
    """One shipped initialisation bug (an entry of corpus.toml)."""

    id: str
    library: str
    spec: str
    buggy: str
    fixed: str
    mechanism: str
    source: str
    fix: str
    #: Versions of the release's own requirements pinned beside it (`name==version`), where the newest match is wrong.
    pins: tuple[str, ...] = ()
    #: Packages of this environment the release must not see (`hidden_env`): one that imports the
    #: release's own dependencies at a version they do not have.
    hide: tuple[str, ...] = ()

    def release(self, which: str) -> str:
        return {"buggy": self.buggy, "fixed": self.fixed}[which]


def load_bugs(path: Path = BUGS) -> list[Bug]:
    """The bugs of `path`, checked: known library, existing spec, buggy release older than the fixed one, unique ids."""
    data = tomllib.loads(path.read_text())
    bugs: list[Bug] = []
    for i, raw in enumerate(data.get("bug", [])):
        where = f"{path}: bug[{i}]"
        try:
            bug = Bug(**{**raw, "pins": tuple(raw.get("pins", ())), "hide": tuple(raw.get("hide", ()))})
        except TypeError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if bug.library not in LIBRARIES:
            raise ValueError(f"{where}.library = {bug.library!r}: one of {', '.join(LIBRARIES)}")
        if not (ROOT / bug.spec).is_file():
            raise ValueError(f"{where}.spec = {bug.spec!r}: no such file under {ROOT}")
        if Version(bug.buggy) >= Version(bug.fixed):
            raise ValueError(f"{where}: buggy release {bug.buggy} is not older than fixed release {bug.fixed}")
        if any(b.id == bug.id for b in bugs):
            raise ValueError(f"{where}.id = {bug.id!r}: given twice")
        bugs.append(bug)
    return bugs


# --- releases: installed once, selected with PYTHONPATH ------------------------------------------


def release_dir(library: str, version: str, cache: Path = CACHE) -> Path:
    return cache / f"{canonicalize_name(library)}-{version}"


def _pip(*args: str, timeout: float = 600) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "--retries", "1", "--timeout", "20", *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ReleaseUnavailable(f"pip {' '.join(args)} did not finish in {timeout:.0f} s") from None
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout).split())[-400:]
        raise ReleaseUnavailable(f"pip {' '.join(args)} failed (not cached, and no network or no such wheel): {tail}")


def _installed(folder: Path | None) -> dict[str, tuple[Version, list[Requirement]]]:
    """Every distribution visible with `folder` first on the path: name → (version, requirements)."""
    paths = ([str(folder)] if folder else []) + [p for p in sys.path if p and Path(p).resolve() != ROOT]
    out: dict[str, tuple[Version, list[Requirement]]] = {}
    for dist in importlib.metadata.distributions(path=paths):
        name = canonicalize_name(dist.metadata["Name"] or "")
        if name and name not in out:  # the first on the path wins, as for an import
            reqs = [Requirement(r) for r in dist.requires or ()]
            out[name] = (Version(dist.version), reqs)
    return out


def _applies(req: Requirement) -> bool:
    return req.marker is None or req.marker.evaluate({"extra": ""})


def unmet(folder: Path) -> list[Requirement]:
    """The requirements of the distributions in `folder` that nothing visible beside it satisfies."""
    seen = _installed(folder)
    own = {canonicalize_name(p.name.split("-")[0]) for p in folder.glob("*.dist-info")}
    missing: list[Requirement] = []
    for name in sorted(own):
        for req in seen[name][1] if name in seen else ():
            got = seen.get(canonicalize_name(req.name))
            if _applies(req) and (got is None or not req.specifier.contains(got[0], prereleases=True)):
                missing.append(req)
    return missing


def install_release(library: str, version: str, *, pins: Sequence[str] = (), cache: Path = CACHE) -> Path:
    """The folder holding `library==version` (installed on first use, wheel only, `--no-deps`),
    with whatever of its requirements this environment does not satisfy beside it. Raises
    ReleaseUnavailable when it is not cached and cannot be downloaded."""
    folder = release_dir(library, version, cache)
    if (folder / DONE).is_file():
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=cache))
    try:
        wanted = [f"{library}=={version}", *pins]
        for _ in range(8):  # a requirement's own requirements, a few levels deep (huggingface_hub → httpx → httpcore)
            if not wanted:
                break
            if any(canonicalize_name(Requirement(w).name) in NEVER for w in wanted):
                raise ReleaseUnavailable(
                    f"{library}=={version} needs {', '.join(wanted)}, which would install torch beside this "
                    "environment's"
                )
            _pip("install", "--no-deps", "--only-binary=:all:", "--upgrade", "--target", str(work), *wanted)
            wanted = [str(r) for r in unmet(work)]
        else:
            raise ReleaseUnavailable(f"{library}=={version}: requirements still unmet after 8 rounds: {wanted}")
        (work / DONE).write_text(f"{library}=={version}\n")
        if folder.exists():
            shutil.rmtree(folder)
        work.rename(folder)
        return folder
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


def hidden_env(hide: Sequence[str], cache: Path = CACHE) -> Path:
    """A folder whose `sitecustomize` makes the packages `hide` unimportable (`sys.modules[name] =
    None`, so `importlib.util.find_spec` finds none, as in an environment without them): this
    environment's `kernels` imports huggingface_hub's newest API, which transformers 4.53's own
    huggingface_hub lacks, and transformers imports `kernels` wherever it finds it."""
    folder = cache / f"_hidden-{'-'.join(sorted(hide))}"
    script = folder / "sitecustomize.py"
    text = "import sys\n" + "".join(f"sys.modules.setdefault({name!r}, None)\n" for name in sorted(hide))
    if not script.is_file() or script.read_text() != text:
        folder.mkdir(parents=True, exist_ok=True)
        script.write_text(text)
    return folder


def release_env(folder: Path, base: Mapping[str, str] | None = None, *, hide: Sequence[str] = ()) -> dict[str, str]:
    """The environment that imports the release in `folder` before anything installed (and none
    of the packages `hide`)."""
    env = dict(os.environ if base is None else base)
    shim = [str(hidden_env(hide, folder.parent))] if hide else []
    env["PYTHONPATH"] = os.pathsep.join([str(folder), *shim, *filter(None, [env.get("PYTHONPATH", "")])])
    return env


def imported_version(library: str, folder: Path, *, hide: Sequence[str] = ()) -> str:
    """The version a subprocess with `folder` first imports, checked to come from `folder`."""
    code = (
        f"import {library}, pathlib, sys; f = pathlib.Path({library}.__file__).resolve(); "
        f"print({library}.__version__); sys.exit(0 if "
        f"f.is_relative_to({str(folder.resolve())!r}) else 3)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=release_env(folder, hide=hide), capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout).split())[-600:]
        raise RuntimeError(
            f"{library} from {folder} does not import beside this environment (exit {done.returncode}): {tail}"
        )
    return done.stdout.strip().splitlines()[-1]


# --- judging: the zoo spec on a release -----------------------------------------------------------


@dataclass
class Outcome:
    """One `stability check` of a spec on a release."""

    release: str
    profile: str
    exit_code: int
    failed: list[str] = field(default_factory=list)  # "invariant: message" for each expectation judged and violated
    seconds: float = 0.0
    error: str = ""

    @property
    def caught(self) -> bool:
        """An expectation judged and violated (exit 1 with a failed verdict): the gate fails the
        build because of the bug. A run whose every unmet expectation is a case that could not be
        measured (the release does not build the model beside this environment) also exits 1, but
        catches nothing: it names the error instead."""
        return self.exit_code == 1 and bool(self.failed)

    @property
    def passed(self) -> bool:
        return self.exit_code == 0


def spec_profile(spec: Path, wanted: str = "ci") -> str:
    """`wanted` where the spec runs in it, else the first profile the spec runs in (`probe.profiles`)."""
    from stability import load_spec

    profiles = list(load_spec(spec).probe.profiles)
    return wanted if wanted in profiles else profiles[0]


def check(spec: Path, folder: Path, *, profile: str, timeout: float = 1800, hide: Sequence[str] = ()) -> Outcome:
    """`stability check SPEC --profile P` in a subprocess importing the release in `folder`."""
    with tempfile.TemporaryDirectory(prefix="corpus-") as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "stability", "check", str(spec), "--profile", profile, "-q", "--json", str(report)]
        env = release_env(folder, hide=hide)
        done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        release = folder.name
        if not report.is_file():
            return Outcome(
                release, profile, done.returncode, error=" ".join((done.stderr or done.stdout).split())[-600:]
            )
        data = json.loads(report.read_text())
    return outcome_of(release, profile, done.returncode, data)


def outcome_of(release: str, profile: str, exit_code: int, data: Mapping[str, Any]) -> Outcome:
    """The outcome a JSON report (`--json`) records: the violated expectations, and as the error
    the run's errors and every expectation whose case could not be measured."""
    invariants = [inv for s in data["specs"] for inv in s["invariants"]]
    failed = [f"{inv['name']}: {inv['message']}" for inv in invariants if inv.get("status") == "failed"]
    unmeasured = [
        f"{inv['name']}: {inv.get('error') or inv['message']}" for inv in invariants if inv.get("status") == "error"
    ]
    errors = "; ".join([*(str(e) for e in data.get("errors", [])), *unmeasured])
    return Outcome(release, profile, exit_code, failed, float(data.get("seconds", 0.0)), errors)


def judge(bug: Bug, which: str, *, profile: str = "ci", cache: Path = CACHE) -> Outcome:
    """The bug's zoo spec checked on its buggy or fixed release (installed on first use)."""
    version = bug.release(which)
    folder = install_release(bug.library, version, pins=bug.pins, cache=cache)
    got = imported_version(bug.library, folder, hide=bug.hide)
    if got != version:
        raise RuntimeError(f"{folder} imports {bug.library} {got}, not {version}")
    spec = ROOT / bug.spec
    return check(spec, folder, profile=spec_profile(spec, profile), hide=bug.hide)


# --- the table --------------------------------------------------------------------------------------


def _cell(o: Outcome) -> str:
    if o.caught:
        names = sorted({f.split(":", 1)[0] for f in o.failed})
        return "✗ caught (" + ", ".join(names) + ")"
    return "✓ passes" if o.passed else f"error (exit {o.exit_code})"


def table(rows: Iterable[tuple[Bug, Outcome, Outcome]]) -> str:
    rows = list(rows)
    lines = [
        "| bug | library | spec | buggy → fixed | mechanism | source | on the buggy release | on the fixed release |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for bug, bad, good in rows:
        spec, source = f"[{Path(bug.spec).stem}](../{bug.spec})", f"[issue]({bug.source}), [fix]({bug.fix})"
        lines.append(
            f"| {bug.id} | {bug.library} | {spec} | {bug.buggy} → {bug.fixed} | {bug.mechanism} | {source} | "
            f"{_cell(bad)} | {_cell(good)} |"
        )
    caught = sum(bad.caught for _, bad, _ in rows)
    alarms = sum(good.caught for _, _, good in rows)
    lines.append("")
    lines.append(
        f"Caught by the spec alone: {caught} of {len(rows)}; false alarms on the fixed releases: {alarms} of "
        f"{len(rows)}."
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.corpus", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None, help="bug ids to judge (default: every bug)")
    parser.add_argument(
        "--profile", default="ci", help="the profile to check in where the spec runs in it (else the spec's first)"
    )
    parser.add_argument("--json", type=Path, default=None, help="write every outcome here")
    args = parser.parse_args(argv)
    bugs = [b for b in load_bugs() if args.only is None or b.id in args.only]
    rows = []
    for bug in bugs:
        bad, good = judge(bug, "buggy", profile=args.profile), judge(bug, "fixed", profile=args.profile)
        print(
            f"{bug.id}: buggy {_cell(bad)} ({bad.seconds:.0f} s), fixed {_cell(good)} ({good.seconds:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
        for o in (bad, good):
            for f in o.failed:
                print(f"    {o.release}: {f}", file=sys.stderr)
        rows.append((bug, bad, good))
    if args.json:
        args.json.write_text(
            json.dumps([{"id": b.id, "buggy": vars(x), "fixed": vars(y)} for b, x, y in rows], indent=1)
        )
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
