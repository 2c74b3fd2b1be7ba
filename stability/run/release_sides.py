"""The two sides of `stability zoo --compare A B`: each a process under one library release
(`stability.run.releases.environment`) that runs the zoo specs (`run_side`, through
`python -m stability.report.release_side`).

**Two sides that compare something** (`check_sides`): before either side of `stability zoo
--compare` runs, each is asked what it imports of the libraries its specs name. A side under which
a library does not import, a folder of packages that holds none of them (it would import this
environment's own copy under the folder's name), and two sides that import the same release of
every library (both folders empty, one release named twice) are refused in one line naming what
each side imports (exit 2): such a comparison would judge nothing and pass.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from stability.errors import UsageError
from stability.run.releases import CACHE, LIBRARIES, RELEASE_FIX, Release, environment, library_of_spec

__all__ = ["imports", "check_sides", "run_side"]


def imports(release: Release, libraries: list[str], *, cache: Path = CACHE) -> dict[str, dict[str, str | None]]:
    """What a process under `release` imports of each of `libraries`: {"version", "folder",
    "error"} (`stability.report.release_side.imported_libraries`), asked of a child process."""
    python, env = environment(release, cache=cache)
    command = [python, "-W", "ignore", "-m", "stability.report.release_side", "--imports", ",".join(libraries)]
    run = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    try:
        got: dict[str, dict[str, str | None]] = json.loads(run.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        last = (run.stderr.strip().splitlines() or [f"exit {run.returncode}"])[-1]
        raise UsageError(f"release {release.label}: stability does not run under it ({last})") from None
    return got


def _within(folder: str | None, root: Path) -> bool:
    return folder is not None and Path(folder).resolve().is_relative_to(root.resolve())


def check_sides(a: Release, b: Release, paths: list[str], *, cache: Path = CACHE) -> None:
    """Refuse (UsageError, exit 2) two sides that would compare nothing (the module docstring), each
    installed first (`environment`); the libraries are those the specs `paths` name (every library
    of the matrix when they name none)."""
    libraries = sorted({lib for p in paths if (lib := library_of_spec(Path(p))) is not None}) or list(LIBRARIES)
    if a.label == b.label:  # before installing anything
        raise UsageError(
            f"releases {a.label} and {b.label} are the same release: the comparison would judge nothing; {RELEASE_FIX}"
        )
    seen: dict[str, dict[str, dict[str, str | None]]] = {}
    for release in (a, b):
        got = imports(release, libraries, cache=cache)
        for lib in libraries:
            if got[lib]["version"] is None:
                raise UsageError(
                    f"release {release.label}: {lib} does not import under it ({got[lib]['error']}), so none of its "
                    f"specs would run; {RELEASE_FIX}"
                )
        venv = release.path is not None and (release.path / "bin" / "python").exists()
        if (
            release.path is not None
            and not venv
            and not any(_within(got[x]["folder"], release.path) for x in libraries)
        ):
            found = ", ".join(f"{x} {got[x]['version']} from {got[x]['folder']}" for x in libraries)
            raise UsageError(
                f"release {release.label}: the folder holds no {' or '.join(libraries)}, so it would run this "
                f"environment's own ({found}); install the release there (pip install --no-deps --target "
                f"{release.path} {libraries[0]}==VERSION) or name it as {libraries[0]}==VERSION"
            )
        seen[release.label] = got
    first, second = seen[a.label], seen[b.label]
    if all(first[x]["version"] == second[x]["version"] for x in libraries):
        same = ", ".join(f"{x} {first[x]['version']}" for x in libraries)
        raise UsageError(
            f"releases {a.label} and {b.label} both import {same}: the comparison would compare a release with "
            f"itself and judge nothing; name two different releases"
        )


def run_side(
    release: Release,
    paths: list[str],
    *,
    depths: tuple[int, ...],
    out: Path,
    baseline: Path | None = None,
    cache: Path = CACHE,
    plugins: list[str] | None = None,
) -> Path:
    """Run the zoo specs `paths` under `release` in a child process (`stability.report.release_side`),
    with the run's `plugins` (`stability.run.plugins`); its folder `out` holds report.json,
    refused.json, versions.json (and compare.json with `baseline`). A UsageError (exit 2) when the
    child fails."""
    from stability.run.plugins import plugins_environment

    python, env = environment(release, cache=cache)
    env = plugins_environment(plugins or [], env)
    command = [
        python,
        "-W",
        "ignore",
        "-m",
        "stability.report.release_side",
        "--out",
        str(out),
        "--depths",
        ",".join(map(str, depths)),
        *paths,
    ]
    if baseline is not None:
        command += ["--baseline", str(baseline)]
    run = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if run.returncode != 0 or not (out / "report.json").is_file():
        last = (run.stderr.strip().splitlines() or [f"exit {run.returncode}"])[-1]
        raise UsageError(f"release {release.label}: the zoo did not run under it ({last})")
    return out
