"""Report paths checked before anything runs, so that a run never ends with its results lost to a
bad path and never destroys a file it was not asked to write.

Rules (docs/ci.md): a report path must not be empty; `--json` / `--junit` / `--sarif` (and the
`--baseline` file that `--update-baseline` rewrites) must not name a folder;
`--html` names a folder (it gets `index.html`) and must not name a file; a report may only replace
a regular file (never a device such as `/dev/null`, a FIFO or a socket); two reports may not share
a path; a report may not be one of the input spec files, and an existing non-empty file is only
replaced when it is a stability report of the same kind (so `--json my_factory.py` or
`--html docs` over a hand-written index.html is refused). A missing parent folder is created when
the report is written, provided the nearest existing ancestor is a writable folder (checked by
creating and removing a temporary file in it, so `/proc` or a read-only mount is refused up front),
and every name on the path fits the file system's NAME_MAX (the report's own temporary name is cut
to fit too, `stability.report.formats.write_atomic`).
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

from stability.errors import UsageError

__all__ = ["check_outputs", "check_replaceable"]

#: How each kind of report this package writes begins (matched on its first KiB).
_SIGNATURES = {
    "JSON": re.compile(rb'\A\s*\{\s*"schema_version"\s*:'),
    "JUnit": re.compile(rb'\A<\?xml[^>]*\?>\s*<testsuite name="stability"'),
    "HTML": re.compile(rb"\A<!DOCTYPE html>\s*<html[^>]*>\s*<head>.{0,400}?<title>stability (report|sweep)", re.S),
    "SARIF": re.compile(rb'\A\s*\{\s*"\$schema"\s*:\s*"https://json.schemastore.org/sarif-2.1.0.json"'),
}
_KINDS = {"--json": "JSON", "--junit": "JUnit", "--html": "HTML", "--sarif": "SARIF", "--baseline": "JSON"}


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_replaceable(path: Path, option: str = "report") -> None:
    """Raise UsageError unless `path` is absent or an existing regular file."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot be checked ({exc.strerror}); choose another path") from None
    if not stat.S_ISREG(mode):
        raise UsageError(f"{option} {path}: is {_kind(mode)}, not a regular file; a report only ever replaces a regular file, choose a file path")


def _check_ours(path: Path, kind: str, option: str, shown: str) -> None:
    """Raise UsageError when `path` (a regular file or absent: `check_replaceable` first) is a
    non-empty file that is not a stability report of `kind` ("JSON", "JUnit" or "HTML"): a report
    replaces its own earlier self, never a file a user wrote."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1024)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UsageError(f"{option} {shown}: {path} cannot be read ({exc.strerror}); choose another path") from None
    if head and not _SIGNATURES[kind].match(head):
        raise UsageError(f"{option} {shown}: {path} exists and is not a stability {kind} report; a report never replaces a file it did not write, so choose another path or delete that file first")


def _writable_folder(folder: Path, option: str, shown: str) -> None:
    """The nearest existing ancestor of `folder` must be a folder we can create a file in."""
    probe = folder
    while not os.path.lexists(probe):
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"{option} {shown}: {probe} is not a folder; choose a path inside a folder")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".stability-check.", dir=probe)
    except OSError as exc:
        raise UsageError(f"{option} {shown}: cannot write in {probe} ({exc.strerror}); choose a writable folder") from None
    os.close(fd)
    os.unlink(tmp)


def _names_fit(target: Path, option: str, shown: str) -> None:
    """Every name on the path fits the file system's NAME_MAX (in bytes), so the report can be
    created after the run, not refused by the kernel when its results are in."""
    try:
        name_max = os.pathconf(".", "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    for part in target.parts:
        size = len(os.fsencode(part))
        if size > name_max:
            cut = part if len(part) <= 40 else part[:37] + "..."
            raise UsageError(f"{option} {cut if len(shown) > 80 else shown}: the name {cut!r} is {size} bytes, and the file system allows {name_max}; choose a shorter name")


def check_outputs(*, json: str | None, junit: str | None, html: str | None, sarif: str | None = None, baseline: str | None = None, inputs: Iterable[str | Path] = ()) -> None:
    """Validate the report paths of one run; raise UsageError (exit 2) on the first problem.
    `baseline` is the `--baseline` file when `--update-baseline` rewrites it (a JSON report)."""
    files: dict[Path, str] = {}
    protected = {Path(p).resolve(): str(p) for p in inputs}
    for option, raw in (("--json", json), ("--junit", junit), ("--html", html), ("--sarif", sarif), ("--baseline", baseline)):
        if raw is None:
            continue
        if not raw.strip():
            raise UsageError(f"{option} '': the path is empty; give a file name (or leave the option out)")
        if raw.strip() == "-":  # not standard output: the terminal report is written there already
            raise UsageError(f"{option} -: reports are written to files, not to standard output; give a file name such as report.json")
        given = Path(raw)
        _names_fit(given, option, raw)  # before any stat: a name that is too long makes every call on it fail
        if option == "--html":
            if given.exists() and not given.is_dir():
                raise UsageError(f"{option} {raw}: is a file; give a folder (the report is written to FOLDER/index.html)")
            target = given / "index.html"
        else:
            target = given
            if raw.endswith(("/", os.sep)) or given.is_dir():
                example = {"--junit": "junit.xml", "--sarif": "stability.sarif"}.get(option, "report.json")
                raise UsageError(f"{option} {raw}: is a folder; give a file path, e.g. {given / example}")
        _writable_folder(target.parent, option, raw)
        check_replaceable(target, option)
        resolved = target.resolve()
        if resolved in protected:
            raise UsageError(f"{option} {raw}: is the input spec {protected[resolved]}; a report must not overwrite a spec, choose another path")
        _check_ours(target, _KINDS[option], option, raw)
        if resolved in files:
            raise UsageError(f"{option} {raw}: is also the path of {files[resolved]}; give each report its own path")
        files[resolved] = option
