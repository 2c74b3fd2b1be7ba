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
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from stability.errors import UsageError

__all__ = ["CACHE", "Release", "parse_release", "install", "environment", "requirements_to_add"]

#: Where wheels and installed releases are kept (gitignored).
CACHE = Path(os.environ.get("STABILITY_RELEASE_CACHE") or Path(__file__).resolve().parents[2] / ".cache")

#: The libraries a release names (the library family's, `stability.families.library.LIBRARIES`).
LIBRARIES = ("transformers", "timm", "torchvision")

#: Never installed into a release's folder: the pinned torch, and the other libraries of the matrix
#: (each is its own axis; the environment's copy stays in force).
_NEVER = {"torch", *LIBRARIES}

_RELEASE = re.compile(r"(transformers|timm|torchvision)==([0-9][0-9A-Za-z.+-]*)")
_FIX = "name a release as LIBRARY==VERSION (transformers==4.53.3, timm==0.9.16, torchvision==0.15.2), or a folder of packages or a virtual environment"


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
    match = _RELEASE.fullmatch(text.strip())
    if match:
        return Release(text, match.group(1), match.group(2))
    if "==" in text or text.split("==")[0] in LIBRARIES:
        raise UsageError(f"release {text!r}: not LIBRARY==VERSION of {', '.join(LIBRARIES)}; {_FIX}")
    path = Path(text)
    if not path.is_dir():
        raise UsageError(f"release {text!r}: no such folder; {_FIX}")
    return Release(text, path=path.resolve())


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], capture_output=True, text=True, check=False)


def _fetch(requirement: str, wheels: Path) -> None:
    """The newest wheel that meets `requirement`, into `wheels` (from there if one is already there)."""
    wheels.mkdir(parents=True, exist_ok=True)
    local = _pip("download", "--no-deps", "--only-binary", ":all:", "--no-index", "--find-links", str(wheels), "-d", str(wheels), requirement)
    if local.returncode == 0:
        return
    got = _pip("download", "--no-deps", "--only-binary", ":all:", "-d", str(wheels), requirement)
    if got.returncode != 0:
        last = (got.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise UsageError(f"release: cannot download {requirement} ({last}); check the version exists on PyPI as a wheel for Python {sys.version_info.major}.{sys.version_info.minor}")


def _wheel(library: str, version: str, wheels: Path) -> Path:
    name = library.replace("-", "_")
    for path in sorted(wheels.glob(f"{name}-{version}-*.whl")):
        return path
    raise UsageError(f"release {library}=={version}: no wheel in {wheels} after the download; {_FIX}")


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
    extra = requirements_to_add(_wheel(release.library, release.version, wheels))
    for requirement in extra:
        _fetch(requirement, wheels)
    target.mkdir(parents=True, exist_ok=True)
    got = _pip("install", "--quiet", "--no-deps", "--no-index", "--find-links", str(wheels), "--target", str(target), "--upgrade", f"{release.library}=={release.version}", *extra)
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


def run_side(release: Release, paths: list[str], *, depths: tuple[int, ...], out: Path, baseline: Path | None = None, cache: Path = CACHE) -> Path:
    """Run the zoo specs `paths` under `release` in a child process (`stability.report.release_side`);
    its folder `out` holds report.json, refused.json, versions.json (and compare.json with
    `baseline`). A UsageError (exit 2) when the child fails."""
    python, env = environment(release, cache=cache)
    command = [python, "-W", "ignore", "-m", "stability.report.release_side", "--out", str(out), "--depths", ",".join(map(str, depths)), *paths]
    if baseline is not None:
        command += ["--baseline", str(baseline)]
    run = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if run.returncode != 0 or not (out / "report.json").is_file():
        last = (run.stderr.strip().splitlines() or [f"exit {run.returncode}"])[-1]
        raise UsageError(f"release {release.label}: the zoo did not run under it ({last})")
    return out
