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
to fit too, ``write_atomic` below`).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from stability.errors import UsageError

__all__ = ["check_outputs", "check_replaceable", "not_regular", "open_regular", "write_atomic"]

#: How each kind of report this package writes begins (matched on its first KiB): what makes a
#: file provably this package's own, so that a report replaces it. Each is the writer's own fixed
#: opening, not only a format's: the JSON report's first keys in their order; SARIF's schema, its
#: version 2.1.0 and `runs[0].tool.driver.name` "stability" (every SARIF producer writes the
#: `$schema`); the JUnit suite named "stability"; the HTML pages' titles; `stability suggest
#: --json`'s "stability_suggest" format version.
_SIGNATURES = {
    "JSON": re.compile(
        rb'\A\{\s*"schema_version"\s*:\s*\d+\s*,\s*"met"\s*:\s*(true|false)\s*,\s*"interrupted"\s*:\s*(true|false)\s*,\s*"seconds"\s*:'
    ),
    "JUnit": re.compile(rb'\A<\?xml[^>]*\?>\s*<testsuite name="stability"'),
    "HTML": re.compile(rb"\A<!DOCTYPE html>\s*<html[^>]*>\s*<head>.{0,400}?<title>stability (report|sweep)", re.S),
    "SARIF": re.compile(
        rb'\A\{\s*"\$schema"\s*:\s*"https://json.schemastore.org/sarif-2.1.0.json"\s*,\s*"version"\s*:\s*"2\.1\.0"\s*,'
        rb'\s*"runs"\s*:\s*\[\s*\{\s*"tool"\s*:\s*\{\s*"driver"\s*:\s*\{\s*"name"\s*:\s*"stability"\s*,'
    ),
    "suggest JSON": re.compile(rb'\A\{\s*"stability_suggest"\s*:\s*\d+\s*,'),
    "zoo HTML": re.compile(rb"\A<!doctype html><html><head><meta charset='utf-8'><title>stability zoo</title>"),
    "zoo comparison": re.compile(rb"\A### Zoo numbers: `[^`\n]*` \xe2\x86\x92 `[^`\n]*`\n\n- "),
    "scan JSON": re.compile(rb'\A\{\s*"stability_scan"\s*:\s*\d+\s*,'),
    "scan Markdown": re.compile(rb"\A### stability scan(: | --compare: )"),
    "scan HTML": re.compile(rb"\A<!doctype html><html><head><meta charset='utf-8'><title>stability scan</title>"),
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


def not_regular(path: str | Path) -> str | None:
    """What `path` is when it exists and is not a regular file ("a folder", "a FIFO", "a device",
    "a socket"), from its stat alone: nothing is opened, so a FIFO without a reader cannot block
    and a device is not touched. None for a regular file or a missing path (a link is followed).
    The one test every summary, report and store path of this package goes through before it is
    opened; OSError (other than a missing path) is raised to the caller."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # absent, or under a file: nothing there to open
        return None
    return None if stat.S_ISREG(mode) else _kind(mode)


def open_regular(path: str | Path, flags: int, mode: int = 0o666) -> int:
    """`os.open(path, flags)` for a regular file only: refused (OSError, "is a FIFO…") when
    `not_regular` says otherwise, and opened with O_NONBLOCK, then checked again on the open
    descriptor, so a FIFO put in its place in between cannot block either; O_NONBLOCK is cleared
    again (a regular file ignores it)."""
    kind = not_regular(path)
    if kind is not None:
        raise OSError(errno.EINVAL, f"is {kind}, not a regular file")
    fd = os.open(path, flags | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0), mode)
    try:
        got = os.fstat(fd).st_mode
        if not stat.S_ISREG(got):
            raise OSError(errno.EINVAL, f"is {_kind(got)}, not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_replaceable(path: Path, option: str = "report") -> None:
    """Raise UsageError unless `path` is absent or an existing regular file."""
    try:
        kind = not_regular(path)
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot be checked ({exc.strerror}); choose another path") from None
    if kind is not None:
        raise UsageError(
            f"{option} {path}: is {kind}, not a regular file; a report only ever replaces a regular file, "
            "choose a file path"
        )


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
        raise UsageError(
            f"{option} {shown}: {path} exists and is not a stability {kind} report; a report never replaces a "
            "file it did not write, so choose another path or delete that file first"
        )


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
        raise UsageError(
            f"{option} {shown}: cannot write in {probe} ({exc.strerror}); choose a writable folder"
        ) from None
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
            raise UsageError(
                f"{option} {cut if len(shown) > 80 else shown}: the name {cut!r} is {size} bytes, and the "
                f"file system allows {name_max}; choose a shorter name"
            )


def check_outputs(
    *,
    json: str | None,
    junit: str | None,
    html: str | None,
    sarif: str | None = None,
    baseline: str | None = None,
    inputs: Iterable[str | Path] = (),
) -> None:
    """Validate the report paths of one run; raise UsageError (exit 2) on the first problem.
    `baseline` is the `--baseline` file when `--update-baseline` rewrites it (a JSON report)."""
    files: dict[Path, str] = {}
    protected = {Path(p).resolve(): str(p) for p in inputs}
    for option, raw in (
        ("--json", json),
        ("--junit", junit),
        ("--html", html),
        ("--sarif", sarif),
        ("--baseline", baseline),
    ):
        if raw is None:
            continue
        example = {"--junit": "junit.xml", "--sarif": "stability.sarif"}.get(option, "report.json")
        resolved = check_report_path(
            option,
            raw,
            _KINDS[option],
            page="index.html" if option == "--html" else None,
            example=example,
            protected=protected,
        )
        if resolved in files:
            raise UsageError(f"{option} {raw}: is also the path of {files[resolved]}; give each report its own path")
        files[resolved] = option


def check_report_path(
    option: str,
    raw: str,
    kind: str | None,
    *,
    page: str | None = None,
    example: str = "report.json",
    protected: Mapping[Path, str] | None = None,
) -> Path:
    """The checks of one report path, before anything runs; UsageError (exit 2, one line) on the
    first problem, else the resolved file the report will be written to. `page`: the option names
    a folder and the report is FOLDER/page. `kind`: the signature (`_SIGNATURES`) an existing
    non-empty file must carry to be replaced; None: the caller checks what it may replace.
    `protected`: {resolved path: as given} of the input specs, which no report may replace."""
    if not raw.strip():
        raise UsageError(
            f"{option} '': the path is empty; give a {'folder' if page else 'file'} name (or leave the option out)"
        )
    if raw.strip() == "-":  # not standard output: the terminal report is written there already
        raise UsageError(
            f"{option} -: reports are written to files, not to standard output; give a "
            f"{'folder' if page else f'file name such as {example}'}"
        )
    given = Path(raw)
    _names_fit(given, option, raw)  # before any stat: a name that is too long makes every call on it fail
    try:
        what = not_regular(given)
    except OSError as exc:
        raise UsageError(f"{option} {raw}: cannot be checked ({exc.strerror}); choose another path") from None
    if page is not None:
        if given.exists() and what != "a folder":
            raise UsageError(
                f"{option} {raw}: is {what or 'a file'}; give a folder (the report is written to FOLDER/{page})"
            )
        target = given / page
    else:
        target = given
        if raw.endswith(("/", os.sep)) or what == "a folder":
            raise UsageError(f"{option} {raw}: is a folder; give a file path, e.g. {given / example}")
    _writable_folder(target.parent, option, raw)
    check_replaceable(target, option)
    resolved = target.resolve()
    if protected and resolved in protected:
        raise UsageError(
            f"{option} {raw}: is the input spec {protected[resolved]}; a report must not overwrite a spec, "
            "choose another path"
        )
    if kind is not None:
        _check_ours(target, kind, option, raw)
    return resolved


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write `data` to `path` through a temporary file and a rename: all or nothing. Text is
    written as UTF-8; a lone surrogate in it (a file name's byte that does not decode, carried by
    Python as a surrogate escape) is written as its escape `\\udcff`, so the report is still written."""
    path = Path(path)
    check_replaceable(path)  # never replace a device, a FIFO or a folder
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_temporary_prefix(path), suffix=".tmp", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a report is an ordinary file
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8", "backslashreplace") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _temporary_prefix(path: Path) -> str:
    """`.NAME.` for the temporary file beside `path`, NAME cut (in bytes, as the file system counts)
    so that the whole temporary name, with mkstemp's 8 random characters and `.tmp`, stays within
    the folder's NAME_MAX: a report whose own name fits is never lost to its temporary name."""
    try:
        name_max = os.pathconf(path.parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    room = name_max - len(".") - len(".") - 8 - len(".tmp")
    name = path.name
    while name and len(os.fsencode(name)) > room:  # whole characters only
        name = name[:-1]
    return f".{name}."
