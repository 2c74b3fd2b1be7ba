"""The library matrix: one session per library release of `stability.families.library_support.MATRIX`.

Each session runs in this environment (the pinned CPU torch, no virtual environment of its own:
`venv_backend="none"`) and installs its release with `--no-deps` into `.cache/releases/` (the wheels
are cached in `.cache/wheels/`, so a session runs offline after its first download), then, in a
process that imports that release (`python -m stability.run.releases`): every zoo spec of its
library loads, or is refused as the support matrix says; `stability check --profile ci` on the
ones that load (whatever the zoo specs' ci profile holds); and each one's corner case at depth 2.

    nox -l                                  # the sessions
    nox -s "matrix(transformers==4.40.2)"   # one release
    nox -s ci                               # CI: the oldest supported releases, a sample of families
    nox                                     # nightly: every release, every zoo family

docs/library-models.md ("Supported releases") is the matrix's table.
"""

from __future__ import annotations

import nox

from stability.families.library_support import MATRIX

nox.options.sessions = ["matrix"]

#: The families the CI part runs under the oldest release. zoo-mamba declares the init of
#: transformers >= 4.54 (`library_support.INIT_DIFFERS`): under 4.40.2 its gate must fail.
CI_SAMPLE = {"transformers": "bert,gpt2,t5,mamba", "timm": "timm_vit,timm_resnet", "torchvision": "tv_vit"}

RELEASES = [f"{library}=={version}" for library, versions in MATRIX.items() for version in versions]
#: CI's part: the oldest supported release of each library. The newest is the environment's own
#: (.ci/run installs it), which the ci gate and the test suite run already.
OLDEST = [f"{library}=={versions[0]}" for library, versions in MATRIX.items()]


@nox.session(venv_backend="none")
@nox.parametrize("release", [nox.param(r, id=r) for r in RELEASES])
def matrix(session: nox.Session, release: str) -> None:
    """One library release, every zoo family of its library (nightly)."""
    session.run("python", "-m", "stability.run.releases", release, *session.posargs)


@nox.session(venv_backend="none")
@nox.parametrize("release", [nox.param(r, id=r) for r in OLDEST])
def ci(session: nox.Session, release: str) -> None:
    """The oldest supported release of each library, on a sample of families (.ci/run)."""
    session.run(
        "python",
        "-m",
        "stability.run.releases",
        release,
        "--sample",
        CI_SAMPLE[release.split("==")[0]],
        *session.posargs,
    )
