"""Library releases beside the pinned torch: `transformers==4.53.3` installed into a directory of
its own, and a Python process that imports it instead of the environment's copy.

A **release** is `LIBRARY==VERSION` (`transformers`, `timm` or `torchvision`), or a directory: a
`--target` folder of packages (put first on the path) or a virtual environment (its `bin/python`
runs). `environment(release)` returns the interpreter and the variables a child process needs.

**Installing** (`install`): the library's wheel, without its dependencies (`pip install --no-deps
--target`), so torch is never replaced (a loose `transformers` or `timm` requirement would pull a
CUDA build), into `.cache/releases/LIBRARY-VERSION/`. Its own requirements that this environment
does not meet (transformers checks `tokenizers`, `huggingface-hub` and `safetensors` at import:
4.53 wants `tokenizers<0.22`) go into the same folder, each the newest wheel that meets the
requirement, `--no-deps` too; torch and the matrix's libraries (`LIBRARIES`) are never among them.
Every wheel is downloaded once into `.cache/wheels/` (`pip download --no-deps`) and installed from
there with `--no-index`, so a release installs offline after its first download. A folder that
holds `RECORD` (written last) is installed and reused as it is.

The folder goes first on `PYTHONPATH`, ahead of the environment's site-packages, so
`import transformers` there imports the release and `importlib.metadata` reads its version;
`python -m stability.report.release_side` (the zoo's comparison) and `noxfile.py` (the matrix) run in
such a process.

The two sides of `stability zoo --compare` are `stability.run.release_sides`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from stability.errors import UsageError

__all__ = [
    "CACHE",
    "Release",
    "parse_release",
    "install",
    "environment",
    "requirements_to_add",
    "library_of_spec",
    "RELEASE_FIX",
    "matrix_specs",
    "matrix",
]

#: Where wheels and installed releases are kept (gitignored).
CACHE = Path(os.environ.get("STABILITY_RELEASE_CACHE") or Path(__file__).resolve().parents[2] / ".cache")

#: The libraries a release names (the library family's, `stability.families.library_lookup.LIBRARIES`).
LIBRARIES = ("transformers", "timm", "torchvision")

#: Never installed into a release's folder: the pinned torch, and the other libraries of the matrix
#: (each is its own axis; the environment's copy stays in force).
_NEVER = {"torch", *LIBRARIES}

_RELEASE = re.compile(r"(transformers|timm|torchvision)==([0-9][0-9A-Za-z.+-]*)")
#: The fix every refusal of a release names.
RELEASE_FIX = (
    "name a release as LIBRARY==VERSION (transformers==4.53.3, timm==0.9.16, torchvision==0.15.2), "
    "or a folder of packages or a virtual environment"
)


@dataclass(frozen=True)
class Release:
    """One side of a comparison: a library release to install (`library`, `version`) or a folder
    (`path`: a target folder of packages, or a virtual environment)."""

    text: str
    library: str | None = None
    version: str | None = None
    path: Path | None = None

    @property
    def label(self) -> str:
        return f"{self.library}=={self.version}" if self.library else str(self.path)


def parse_release(text: str) -> Release:
    """`transformers==4.53.3` or an existing folder; a UsageError (exit 2) naming the fix otherwise."""
    if not text.strip():
        raise UsageError(f"release {text!r}: empty; {RELEASE_FIX}")
    match = _RELEASE.fullmatch(text.strip())
    if match:
        return Release(text, match.group(1), match.group(2))
    if re.match(r"\s*[A-Za-z0-9_.-]+\s*(==|>=|<=|~=|!=|<|>)", text):
        raise UsageError(f"release {text!r}: not LIBRARY==VERSION of {', '.join(LIBRARIES)}; {RELEASE_FIX}")
    path = Path(text)
    if not path.is_dir():
        raise UsageError(f"release {text!r}: no such folder; {RELEASE_FIX}")
    return Release(text, path=path.resolve())


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args], capture_output=True, text=True, check=False
    )


def _fetch(requirement: str, wheels: Path) -> None:
    """The newest wheel that meets `requirement`, into `wheels` (from there if one is already there)."""
    wheels.mkdir(parents=True, exist_ok=True)
    local = _pip(
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--no-index",
        "--find-links",
        str(wheels),
        "-d",
        str(wheels),
        requirement,
    )
    if local.returncode == 0:
        return
    got = _pip("download", "--no-deps", "--only-binary", ":all:", "-d", str(wheels), requirement)
    if got.returncode != 0:
        last = (got.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise UsageError(
            f"release: cannot download {requirement} ({last}); check the version exists on PyPI as a wheel "
            f"for Python {sys.version_info.major}.{sys.version_info.minor}"
        )


def _wheel(library: str, version: str, wheels: Path) -> Path:
    name = library.replace("-", "_")
    for path in sorted(wheels.glob(f"{name}-{version}-*.whl")):
        return path
    raise UsageError(f"release {library}=={version}: no wheel in {wheels} after the download; {RELEASE_FIX}")


def requirements_to_add(wheel: Path) -> list[str]:
    """The wheel's own requirements (no extras) that this environment does not meet, except torch
    and the matrix's libraries: what its folder must hold besides it."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode("utf-8").splitlines()
    out = []
    for line in lines:
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.partition(":")[2].strip())
        if req.name.lower() in _NEVER or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        try:
            have = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            have = None
        if have is None or not req.specifier.contains(have, prereleases=True):
            out.append(f"{req.name}{req.specifier}")
    return out


def _closure(requirements: list[str], wheels: Path) -> list[str]:
    """`requirements` and, in turn, those of their wheels that this environment does not meet (a
    release's huggingface-hub whose own httpx this environment lacks), each fetched into `wheels`;
    a name already added is not added again."""
    from packaging.requirements import Requirement

    out: list[str] = []
    names: set[str] = set()
    todo = list(requirements)
    while todo:
        requirement = todo.pop(0)
        name = canonicalize_name(Requirement(requirement).name)
        if name in names:
            continue
        names.add(name)
        out.append(requirement)
        _fetch(requirement, wheels)
        wheel = _best_wheel(Requirement(requirement), wheels)
        if wheel is not None:
            todo += requirements_to_add(wheel)
    return out


def _best_wheel(requirement: Any, wheels: Path) -> Path | None:
    """The newest cached wheel that meets `requirement` (what `_fetch` chose), or None."""
    best: tuple[Any, Path] | None = None
    for path in wheels.glob("*.whl"):
        try:
            name, version, _, _ = parse_wheel_filename(path.name)
        except InvalidWheelFilename:
            continue
        if (
            name == canonicalize_name(requirement.name)
            and requirement.specifier.contains(version, prereleases=True)
            and (best is None or version > best[0])
        ):
            best = (version, path)
    return None if best is None else best[1]


def install(release: Release, *, cache: Path = CACHE) -> Path:
    """The folder that holds `release` (module docstring), installed on first use."""
    if release.path is not None:
        return release.path
    assert release.library is not None and release.version is not None
    target = cache / "releases" / f"{release.library}-{release.version}"
    done = target / ".stability-release.json"
    if done.is_file():
        return target
    wheels = cache / "wheels"
    _fetch(f"{release.library}=={release.version}", wheels)
    extra = _closure(requirements_to_add(_wheel(release.library, release.version, wheels)), wheels)
    target.mkdir(parents=True, exist_ok=True)
    got = _pip(
        "install",
        "--quiet",
        "--no-deps",
        "--no-index",
        "--find-links",
        str(wheels),
        "--target",
        str(target),
        "--upgrade",
        f"{release.library}=={release.version}",
        *extra,
    )
    if got.returncode != 0:
        last = (got.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise UsageError(f"release {release.label}: pip could not install it into {target} ({last})")
    done.write_text(json.dumps({"release": release.label, "requirements": extra}, indent=1) + "\n", encoding="utf-8")
    return target


def environment(release: Release, *, cache: Path = CACHE) -> tuple[str, dict[str, str]]:
    """(the interpreter, the environment variables) of a child process that imports `release`."""
    env = dict(os.environ)
    if release.path is not None and (release.path / "bin" / "python").exists():
        return str(release.path / "bin" / "python"), env
    folder = install(release, cache=cache)
    env["PYTHONPATH"] = os.pathsep.join([str(folder), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return sys.executable, env


# ----------------------------------------------------------------------------- the matrix


def library_of_spec(path: Path) -> str | None:
    """The library a zoo spec's `block.model` names (read from the file to pick the specs of a
    release's library, also those the release refuses; the loader validates them)."""
    import tomllib

    try:
        model = str(tomllib.loads(path.read_text(encoding="utf-8")).get("block", {}).get("model", ""))
    except (OSError, ValueError):
        return None
    library = model.partition(":")[0]
    return library if library in LIBRARIES else None


def matrix_specs(release: Release, folder: Path, *, sample: list[str] | None = None) -> list[Path]:
    """The zoo specs a release's session runs: those naming its library (timm's and torchvision's
    for a torchvision release: timm imports torchvision), optionally only the `sample`'s file stems."""
    wanted = {release.library} | ({"timm"} if release.library == "torchvision" else set())
    paths = [p for p in sorted(folder.glob("*.toml")) if library_of_spec(p) in wanted]
    return [p for p in paths if p.stem in sample] if sample else paths


def _inside(paths: list[Path], *, profile: str, depths: str) -> int:
    """Under the release: refusals against the support matrix, then the ci gate (a spec whose
    declared init this release does not build, `INIT_DIFFERS`, on its own: its gate must fail),
    then each spec's corner cases (`matrix` below)."""
    from stability.errors import SpecError
    from stability.families.library_support import expected_init_difference, expected_refusal
    from stability.run.report_model import read_report
    from stability.spec.load import load_spec

    loaded: list[str] = []
    wrong: list[str] = []
    differs: dict[str, str] = {}
    for path in paths:
        expected = expected_refusal(path.name, library_of_spec(path))
        try:
            load_spec(path)
        except SpecError as exc:
            print(f"refused: {exc}")
            if expected is None:
                wrong.append(f"{path}: refused, but the support matrix says this release runs it ({exc})")
            continue
        loaded.append(str(path))
        if expected is not None:
            wrong.append(f"{path}: loads, but the support matrix says it needs {expected}")
        if (why := expected_init_difference(path.name)) is not None:
            differs[str(path)] = why
    gate = 0
    for spec, why in differs.items():  # the spec must see the release's other init: its gate fails (exit 1)
        print(f"matrix: {spec} declares another init than {why}; its gate must fail")
        code = subprocess.run(
            [sys.executable, "-m", "stability", "check", spec, "--profile", profile, "-q", "--jobs", "1"], check=False
        ).returncode
        if code != 1:
            wrong.append(f"{spec}: exit {code} under {why}, where the spec's gate must fail (exit 1)")
    for line in wrong:
        print(f"matrix: {line}", file=sys.stderr)
    rest = [p for p in loaded if p not in differs]
    if rest:
        gate = subprocess.run(
            [sys.executable, "-m", "stability", "check", *rest, "--profile", profile, "-q", "--jobs", "1"], check=False
        ).returncode
    # stability check's "nothing was judged": the profile holds none
    # of these specs' cases (their corner cases still run below)
    if gate == 5:
        print(f"matrix: the {profile} profile judges none of these specs", file=sys.stderr)
        gate = 0
    if not loaded:
        return 1 if wrong else 0
    with tempfile.TemporaryDirectory(prefix="stability-matrix-") as tmp:
        side = subprocess.run(
            [
                sys.executable,
                "-W",
                "ignore",
                "-m",
                "stability.report.release_side",
                "--out",
                tmp,
                "--depths",
                depths,
                *loaded,
            ],
            check=False,
        ).returncode
        errors = (
            read_report((Path(tmp) / "report.json").read_text(encoding="utf-8")).errors or []
            if side == 0
            else [f"exit {side}"]
        )
    for e in errors:
        print(f"matrix: a corner case did not run: {e}", file=sys.stderr)
    return 2 if gate == 2 or errors else max(gate, 1 if wrong else 0)


def matrix(
    release: Release,
    folder: Path,
    *,
    sample: list[str] | None = None,
    profile: str = "ci",
    depths: str = "2",
    cache: Path = CACHE,
) -> int:
    """One session of the matrix (noxfile.py): `release` installed into its folder, then in a
    process that imports it: every zoo spec of its library loads or is refused as the support
    matrix says (`stability.families.library_support`), `stability check --profile ci` on those
    that load (whatever the zoo's ci profile holds), and each one's corner case at `depths`
    (`stability.report.release_side`): it must run. The exit code: 0, 1 (an expectation or the
    support matrix failed), 2 (a spec or case did not run, a `sample` stem that names no zoo spec),
    5 (no spec of the release's library to run: nothing judged)."""
    from stability.errors import did_you_mean

    stems = sorted(p.stem for p in folder.glob("*.toml"))
    unknown = [s for s in sample or [] if s not in stems]
    if unknown:
        raise UsageError(
            f"--sample {unknown[0]}: no zoo spec {unknown[0]}.toml in {folder}{did_you_mean(unknown[0], stems)}"
        )
    paths = matrix_specs(release, folder, sample=sample)
    if not paths:
        print(
            f"stability: error: no zoo spec in {folder} names {release.library}"
            + (f" among {', '.join(sample)}" if sample else "")
            + "; nothing was judged",
            file=sys.stderr,
        )
        return 5
    python, env = environment(release, cache=cache)
    command = [
        python,
        "-m",
        "stability.run.releases",
        "--inside",
        "--profile",
        profile,
        "--depths",
        depths,
        *map(str, paths),
    ]
    return subprocess.run(command, env=env, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    """`python -m stability.run.releases LIBRARY==VERSION [--sample STEM,…]`: one session of the matrix."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m stability.run.releases")
    p.add_argument("release", nargs="?")
    p.add_argument("paths", nargs="*")
    p.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--sample", help="only these zoo specs (file stems, comma-separated)")
    p.add_argument("--profile", default="ci")
    p.add_argument("--depths", default="2")
    p.add_argument("--zoo", default=str(Path(__file__).resolve().parents[2] / "specs" / "zoo"))
    args = p.parse_args(argv)
    if args.inside:
        return _inside(
            [Path(x) for x in ([args.release] if args.release else []) + args.paths],
            profile=args.profile,
            depths=args.depths,
        )
    try:
        release = parse_release(args.release or "")
        if release.library is None:
            raise UsageError(f"release {args.release!r}: the matrix installs LIBRARY==VERSION; {RELEASE_FIX}")
        return matrix(
            release,
            Path(args.zoo),
            sample=args.sample.split(",") if args.sample else None,
            profile=args.profile,
            depths=args.depths,
        )
    except UsageError as exc:
        print(f"stability: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
