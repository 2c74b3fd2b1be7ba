"""The keys a sweep's stored numbers are filed under besides their point, seed and device: the
spec's content (`spec_hash`), everything besides the harness's code that can change a number
(`inputs_hash`: the content and a custom spec's factory module), and the harness's code itself
(`code_version`). A JSON report's provenance (`stability.report.provenance`) records the same.
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
from pathlib import Path

from stability._version import __version__
from stability.spec.schema import Spec

__all__ = ["PACKAGE", "spec_hash", "inputs_hash", "code_version"]


def spec_hash(spec: Spec) -> str:
    """The spec's content (every validated value, not the file's path or comments), hashed."""
    data = spec.model_dump(mode="json", exclude={"path"})
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def inputs_hash(spec: Spec) -> str:
    """What a sweep's stored numbers depend on besides the harness's code: the spec's content
    (`spec_hash`) and, for a spec whose family runs user code, the bytes of its factory module as
    the factory rule finds it (`stability.families.factory.locate_factory`, under the source roots
    in force), or the fact that it is missing. Editing the module, or creating it, gives other
    keys, so no stored row outlives the code that made it. (Modules the factory module imports in
    turn are not covered: edit the factory module, or use a fresh `--db`.)"""
    from stability.errors import SpecError
    from stability.families.factory import locate_factory
    from stability.spec.registry import FAMILIES

    content = spec_hash(spec)
    if not (FAMILIES.get(spec.family).user_code and spec.block.factory):
        return content
    h = hashlib.sha256(content.encode() + b"\0")
    try:
        h.update(locate_factory(spec.path, spec.block.factory)[2].read_bytes())
    except (SpecError, OSError):
        h.update(b"\0missing factory module")
    return h.hexdigest()[:16]


#: The package's folder: every stage's code, whose state `code_version` names.
PACKAGE = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=4)
def code_version(package: Path = PACKAGE) -> str:
    """The code that probes, for the store's keys. In the project's own git checkout (`package` is
    `<top>/stability` beside a `pyproject.toml`): `<package version>+g<commit>`, with
    `.dirty<hash>` when any file under `package` differs from that commit, so an edited tree never
    reuses stale results. Anywhere else (an installed copy, or one inside someone else's
    repository, whose commits say nothing about this code): `<package version>+src<hash>`, a hash
    of every `.py` file under `package`, so two releases with one version number never share rows."""
    here = package.resolve()

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=30, check=True).stdout

    try:
        top = Path(git("rev-parse", "--show-toplevel").strip()).resolve()
        if top / "stability" != here or not (top / "pyproject.toml").is_file():
            raise ValueError("not the project's own checkout")
        commit = git("rev-parse", "HEAD").strip()
        diff = git("diff", "HEAD", "--", ".")
        untracked = git("ls-files", "--others", "--exclude-standard", "--", ".")
    except (OSError, ValueError, subprocess.SubprocessError):
        return f"{__version__}+src{_source_hash(here)}"
    version = f"{__version__}+g{commit[:12]}"
    if diff or untracked:
        h = hashlib.sha256(diff.encode())
        for name in sorted(untracked.split()):
            h.update(name.encode() + (here / name).read_bytes())
        version += f".dirty{h.hexdigest()[:8]}"
    return version


def _source_hash(package: Path) -> str:
    """12 hex digits of a SHA-256 over every `.py` file under `package` (relative path and bytes,
    in sorted order; compiled caches and other files left out)."""
    h = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        h.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]
