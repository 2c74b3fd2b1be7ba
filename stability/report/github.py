"""GitHub Actions: the verdicts where a reviewer looks.

With `GITHUB_ACTIONS=true` (set by every Actions runner) or `--github`, `stability check`

- appends a Markdown job summary to the file `$GITHUB_STEP_SUMMARY` names (GitHub renders it on
  the run's page): an h3 heading with the verdict, one table of specs × invariants (✓, ✗, n/a,
  skipped; observed; bound; deciding case), the comparison with a baseline, and under an h3 each
  unmet expectation with its message, its reproduce command and, folded in `<details>`, the long
  detail (the error, the last lines its code printed), as GitHub's summary guidance asks;
- prints one `::error file=SPEC,line=N,title=…::message` workflow command per unmet expectation
  and per drift past its limit, at the line of its `[expect.NAME]` table
  (`stability.spec.locate`), so the pull request shows it inline on the spec; `::warning` for a
  replayed case the invariant does not apply to (n/a) and a baseline entry that could not be
  compared, `::notice` for an invariant skipped in this profile; `::error file=SPEC` for a spec
  that does not load.

Workflow-command values are escaped as GitHub's toolkit does (`@actions/core` command.ts): `%`,
CR and LF in the message; those and `:` and `,` in properties; and neutralised first
(`stability.report.text.neutralise`: `##[` becomes `##\\[`), since the runner reads the older
`##[command]` form anywhere in a line, its own commands' lines included. Table cells escape Markdown
punctuation and pipes, so a spec name cannot break the table or inject markup; code blocks use
a fence longer than any backtick run inside. The summary stays under GitHub's 1 MiB per step
(whole sections are left out past it, with a note). A summary file that cannot be appended to
gives one warning line on stderr; the verdict and the exit code stay the run's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from stability.report.baseline import Comparison, fmt, fmt_change, fmt_limit, headline
from stability.report.formats import summary_line
from stability.report.outputs import open_regular
from stability.report.suggest import suggestion_line
from stability.report.text import escape_controls, neutralise, printable
from stability.run.results import OUTPUT_LINES, InvariantResult, SpecResult
from stability.spec.locate import locate_expectation

__all__ = [
    "workflow_commands",
    "enabled",
    "escape_data",
    "escape_property",
    "job_summary",
    "write_summary",
    "SUMMARY_LIMIT",
]

#: GitHub refuses a step summary over 1 MiB; stay below with room for other tools' lines.
SUMMARY_LIMIT = 1024 * 1024 - 16 * 1024


def enabled(flag: bool | None, environ: Mapping[str, str] = os.environ) -> bool:
    """`--github` / `--no-github` when given, else whether this runs on GitHub Actions."""
    return flag if flag is not None else environ.get("GITHUB_ACTIONS") == "true"


def escape_data(text: str) -> str:
    """A workflow command's message, escaped like `@actions/core`'s `escapeData`, with no workflow
    command inside (`neutralise`: the runner reads `##[` anywhere in the line)."""
    return neutralise(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value, escaped like `@actions/core`'s `escapeProperty`."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _value(text: str) -> str:
    """A property's value before `escape_property`: its CR and LF kept, for the runner's own escapes
    (%0D, %0A) that it unescapes, so a file name with a line break round-trips; every other control
    character escaped (`printable`), which no runner escape could carry."""
    return "".join(part if part in ("\r", "\n") else printable(part) for part in re.split(r"(\r|\n)", text))


def command(kind: str, message: str, **properties: str | int | None) -> str:
    """`::kind key=value,…::message`, every value's control characters escaped (`_value`: its line
    breaks by the runner's escapes, so a value round-trips; no workflow command; the message keeps
    its LF line breaks, which the runner shows) and then escaped for the runner."""
    props = ",".join(f"{k}={escape_property(_value(str(v)))}" for k, v in properties.items() if v is not None)
    text = "\n".join(printable(line) for line in message.split("\n"))
    return f"::{kind}{' ' + props if props else ''}::{escape_data(text)}"


def workspace(environ: Mapping[str, str] = os.environ) -> Path:
    """The repository root annotations and SARIF locations are relative to: `$GITHUB_WORKSPACE`,
    else this folder, absolute."""
    return Path(os.path.abspath(environ.get("GITHUB_WORKSPACE") or os.getcwd()))


def in_workspace(path: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """`path` (relative to this folder, which need not be the workspace) relative to the workspace
    in POSIX form, or None when it lies outside. Tried as written first (a spec reached through a
    link inside the repository is named by the link), then with links resolved on both sides."""
    root = workspace(environ)
    given = Path(os.path.abspath(path))
    try:
        return given.relative_to(root).as_posix()
    except ValueError:
        pass
    try:  # a path no file system can hold (a NUL in it) resolves to nothing: not in the workspace
        return given.resolve().relative_to(root.resolve()).as_posix()
    except (ValueError, OSError):
        return None


def repo_path(path: str, environ: Mapping[str, str] = os.environ) -> str:
    """`path` relative to the workspace, as annotations want it, whatever folder the check runs
    from; a path outside the workspace is given absolute (no file of the repository to point at)."""
    inside = in_workspace(path, environ)
    return inside if inside is not None else Path(os.path.abspath(path)).as_posix()


def _lines(r: InvariantResult) -> str:
    """The message of an unmet expectation with its reproduce command, control characters escaped."""
    parts = [
        r.message,
        r.error and f"error: {r.error}",
        r.reproduce and f"reproduce: {r.reproduce}",
        f"explain: stability explain {r.name}",
    ]
    return "\n".join(printable(p) for p in parts if p)


def workflow_commands(
    results: Iterable[SpecResult],
    *,
    load_errors: Iterable[tuple[str, str]] = (),
    comparison: Comparison | None = None,
    environ: Mapping[str, str] = os.environ,
) -> list[str]:
    """Every workflow command of a run, in the order of the results."""
    out = [
        command("error", printable(message), file=repo_path(file, environ), title="stability: the spec does not load")
        for file, message in load_errors
    ]
    for res in results:
        file = repo_path(res.spec.path, environ)
        for r in res.results:
            line = locate_expectation(res.spec.path, r.name)
            if not r.applicable:
                out.append(
                    command(
                        "warning",
                        printable(r.message),
                        file=file,
                        line=line,
                        title=f"stability: {r.name} not applicable",
                    )
                )
            elif r.skipped:
                out.append(
                    command(
                        "notice",
                        printable(r.message),
                        file=file,
                        line=line,
                        title=f"stability: {r.name} skipped in this profile",
                    )
                )
            elif not r.met:
                out.append(command("error", _lines(r), file=file, line=line, title=f"stability: {r.name} not met"))
    for d in comparison.deltas if comparison is not None else []:
        if d.status in ("drift", "not_comparable") and comparison is not None:
            line = locate_expectation(d.key.file, d.key.invariant)
            text = printable(
                f"{fmt(d.before)} → {fmt(d.after)} ({fmt_change(d)}, drift limit {fmt_limit(d.limit)}) at "
                f"{d.key.case}: {d.why}"
            )
            if d.reproduce:
                text += f"\nreproduce: {printable(d.reproduce)}"
            kind, title = (
                ("error", f"stability: {d.key.invariant} moved past its drift")
                if d.status == "drift"
                else ("warning", f"stability: {d.key.invariant} not comparable with the baseline")
            )
            out.append(
                command(
                    "warning" if comparison.update else kind,
                    text,
                    file=repo_path(d.key.file, environ),
                    line=line,
                    title=title,
                )
            )
    return out


# ----------------------------------------------------------------------------- the job summary

_MARKDOWN = re.compile(r"([\\`*_\[\]<>|~&])")


def cell(text: str) -> str:
    """Text for a Markdown table cell or a line: control characters escaped, Markdown punctuation
    and pipes backslash-escaped (GitHub-flavoured Markdown unescapes them when it renders), and no
    workflow command (`neutralise`: its `:\\:` renders as `::`; a `[` is escaped already)."""
    return neutralise(_MARKDOWN.sub(r"\\\1", escape_controls(text)))


def fence(text: str, lang: str = "") -> str:
    """`text` as a fenced code block whose fence no backtick run inside can close."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _mark(r: InvariantResult) -> str:
    if not r.applicable:
        return "n/a"
    if r.skipped:
        return "skipped"
    return "✓" if r.met else "✗"


def _table(results: list[SpecResult]) -> str:
    rows = [
        "| spec | invariant | expect | verdict | observed | bound | deciding case |",
        "| --- | --- | --- | :-: | --: | --- | --- |",
    ]
    for res in results:
        for r in res.results:
            v = r.verdict
            observed = (
                "—" if v is None else fmt(v.observed) + (f" ({v.extra['growth']})" if v.extra.get("growth") else "")
            )
            bound = v.bound if v is not None else ("not applicable" if not r.applicable else "")
            case = r.case.varying(res.spec) if r.case is not None else ""
            rows.append(
                f"| {cell(res.spec.name)} | {cell(r.name)} | {r.expect} | {_mark(r)} | {cell(observed)} | "
                f"{cell(bound)} | {cell(case)} |"
            )
    return "\n".join(rows)


def _baseline(comparison: Comparison) -> str:
    rows = [f"### Against the baseline\n\n{cell(headline(comparison))}\n"]
    if comparison.deltas:
        rows += [
            "| spec | invariant | verdict | before → after | change | drift limit | case |",
            "| --- | --- | :-: | --- | --: | --: | --- |",
        ]
        for d in comparison.deltas:
            mark = {"drift": "✗", "within": "✓"}.get(d.status, "n/a")
            rows.append(
                f"| {cell(d.key.spec)} | {cell(d.key.invariant)} | {mark} | {fmt(d.before)} → {fmt(d.after)} "
                f"| {fmt_change(d)} | {fmt_limit(d.limit)} | {cell(d.shown)} |"
            )
    for file, changes in comparison.changed.items():
        rows.append(f"\nChanged since the baseline in {cell(file)}: {cell('; '.join(changes))}")
    return "\n".join(rows)


def _failure(res: SpecResult, r: InvariantResult) -> str:
    line = locate_expectation(res.spec.path, r.name)
    parts = [f"**✗ {cell(res.spec.name)} · {cell(r.name)}** ({cell(res.spec.path)}, line {line}): {cell(r.message)}"]
    if r.reproduce:
        parts.append(fence(printable(r.reproduce), "sh"))
    if res.suggestions is not None and (suggestion := suggestion_line(res, r.name)) is not None:
        parts.append(f"**suggest:** {cell(suggestion)}")
        if (best := res.suggestions.best) is not None:
            parts.append(
                "<details><summary>the spec diff of "
                f"{cell(best.remedy)}</summary>\n\n{fence(printable_lines([best.diff]), 'diff')}\n\n</details>"
            )
    detail = [f"error: {r.error}"] if r.error else []
    if r.verdict is not None and r.verdict.detail:
        detail.append(f"detail: {r.verdict.detail}")
    if res.output.strip():
        shown = res.output.rstrip().splitlines()[-OUTPUT_LINES:]
        detail.append(f"output of the spec's code (last {len(shown)} lines):\n" + "\n".join(shown))
    if detail:
        parts.append(f"<details><summary>details</summary>\n\n{fence(printable_lines(detail), 'text')}\n\n</details>")
    return "\n\n".join(parts)


def printable_lines(lines: list[str]) -> str:
    """Lines for a text block: control characters escaped line by line (newlines kept)."""
    return "\n".join(printable(line) for block in lines for line in block.splitlines())


def job_summary(
    results: list[SpecResult], *, seconds: float, errors: Iterable[str] = (), comparison: Comparison | None = None
) -> str:
    """The whole Markdown summary of one run."""
    pairs = [r for res in results for r in res.results]
    failed = sum(not r.met for r in pairs)
    errors = list(errors)
    drift = comparison is not None and comparison.failed
    if failed or errors or drift:
        what = [
            f"{failed} of {len(pairs)} expectation(s) not met" if failed else "",
            f"{len(errors)} error(s)" if errors else "",
            "a number moved past its drift limit" if drift else "",
        ]
        head = "### stability: ✗ " + ", ".join(w for w in what if w)
    else:
        head = f"### stability: ✓ every expectation met ({len(pairs)})"
    sections = [f"{head}\n\n{cell(summary_line(results, seconds))}\n\n{_table(results)}"]
    if comparison is not None:
        sections.append(_baseline(comparison))
    failures = [_failure(res, r) for res in results for r in res.results if r.applicable and not r.met]
    if failures:
        sections.append("### Not met\n\n" + failures[0])
        sections += failures[1:]
    if errors:
        sections.append("### Errors\n\n" + fence(printable_lines(errors), "text"))
    return _bounded(sections)


def _bounded(sections: list[str]) -> str:
    """The sections joined, as many whole ones as fit in SUMMARY_LIMIT bytes."""
    out, size = [], 0
    for i, section in enumerate(sections):
        n = len(section.encode("utf-8")) + 2
        if size + n > SUMMARY_LIMIT - 200:
            out.append(
                f"*{len(sections) - i} more section(s) left out: a step summary holds at most 1 MiB; the HTML "
                "and JSON reports have everything.*"
            )
            break
        out.append(section)
        size += n
    return "\n\n".join(out) + "\n"


def write_summary(text: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """Append `text` to `$GITHUB_STEP_SUMMARY`; a warning line when it cannot, else None (also
    when the variable is unset: outside Actions there is no summary to write)."""
    path = environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return None
    try:  # never blocks: a FIFO, a device or a folder is refused before it is opened
        with os.fdopen(open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        return (
            f"stability: warning: GITHUB_STEP_SUMMARY={printable(path)}: cannot append the job summary "
            f"({exc.strerror or exc}); the verdict is unchanged"
        )
    return None
