"""Stage 6: SpecResults → the terminal table, the JSON report and JUnit XML.

Files are written atomically (`stability.report.outputs.write_atomic`), so an interrupted run
never leaves a truncated report and never destroys the previous one.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from stability.numbers import number_text
from stability.report.outputs import write_atomic
from stability.report.provenance import provenance as provenance_of
from stability.report.text import printable
from stability.run.report_model import CaseEntry, ComparisonEntry, InvariantEntry, Provenance, Report, SpecEntry
from stability.run.results import OUTPUT_LINES, InvariantResult, SpecResult
from stability.spec.registry import INVARIANTS

__all__ = [
    "judged_count",
    "print_table",
    "print_failures",
    "report",
    "to_json",
    "write_json",
    "write_junit",
    "summary_line",
    "spec_line",
    "phase_seconds",
    "count_text",
]


def _mark(r: InvariantResult) -> str:
    if not r.applicable:
        return "[dim]n/a[/dim]"
    if r.skipped:
        return "[dim]skipped[/dim]"
    if r.met:
        return "[green]✓[/green]"
    return "[red]✗ error[/red]" if r.error else "[red]✗[/red]"


def print_table(results: Iterable[SpecResult], console: Console) -> None:
    """One row per (spec, invariant): verdict, expectation, observed, bound, deciding case."""
    table = Table(show_lines=False, header_style="bold", title=None)
    table.add_column("spec")
    table.add_column("invariant")
    table.add_column("expect")
    table.add_column("", justify="center")
    table.add_column("observed", justify="right")
    table.add_column("bound")
    table.add_column("deciding case", overflow="fold")
    for res in results:
        for r in res.results:
            v = r.verdict
            detail = ""
            if v is not None and v.extra.get("growth"):
                detail = f" ({v.extra['growth']})"
            table.add_row(
                escape(printable(res.spec.name)),
                r.name,
                r.expect,
                _mark(r),
                (number_text(v.observed) if v is not None else "—") + detail,
                escape(printable(v.bound)) if v is not None else ("not applicable" if not r.applicable else ""),
                escape(printable(r.case.varying(res.spec))) if r.case is not None else "",
            )
    console.print(table)


def print_notes(results: Iterable[SpecResult], console: Console) -> None:
    """The one-line notes a met expectation's verdict carries (`extra["notes"]`: init_conformance's
    table not applied, rows that cover nothing, a config value against the registered model's); an
    unmet one's are in its message."""
    for res in results:
        for r in res.results:
            notes = r.verdict.extra.get("notes") if r.met and r.verdict is not None else None
            for note in notes or ():
                line = f"note {printable(res.spec.name)}: {r.name}: {printable(str(note))}"
                console.print(f"[dim]{escape(line)}[/dim]", highlight=False, soft_wrap=True)


def print_failures(
    results: Iterable[SpecResult], console: Console, *, spec_errors: Mapping[str, str] | None = None
) -> None:
    """For every unmet expectation: what happened, how to reproduce it, where to read more; then,
    for a spec with an unmet expectation, the last lines its own code printed. An error is
    printed once: not again on its own line when the message holds it, and not at all for an
    expectation left unjudged by its spec's error (`spec_errors`: spec file → the error line the
    caller prints after the summary)."""
    for res in results:
        spec_error = (spec_errors or {}).get(res.spec.path)
        for r in res.results:
            if not r.applicable:  # why nothing was judged: never a pass, never a failure
                console.print(f"[dim]n/a {escape(printable(r.message))}[/dim]", highlight=False, soft_wrap=True)
                continue
            if r.met:
                continue
            text, error = r.message, r.error
            if error and spec_error and error in spec_error:
                if text.endswith(f": {error}"):
                    text = text[: -len(error) - 2]
                text, error = f"{text}: the spec could not run (its error is printed below)", None
            console.print(f"[red]✗[/red] {escape(printable(text))}", highlight=False, soft_wrap=True)
            if error and error not in text:
                console.print(f"    error: {escape(printable(error))}", highlight=False, soft_wrap=True)
            if r.reproduce:
                console.print(f"    reproduce: {escape(printable(r.reproduce))}", highlight=False, soft_wrap=True)
            console.print(f"    explain:   stability explain {r.name}", highlight=False)
            if res.suggestions is not None:
                from stability.report.suggest import suggestion_line

                if (line := suggestion_line(res, r.name)) is not None:
                    console.print(f"    suggest:   {escape(printable(line))}", highlight=False, soft_wrap=True)
        if res.output.strip() and not res.met:
            lines = res.output.rstrip().splitlines()
            shown = lines[-OUTPUT_LINES:]
            more = f"last {len(shown)} of {len(lines)} lines" if len(shown) < len(lines) else f"{len(lines)} line(s)"
            console.print(
                f"    output of {escape(printable(res.spec.path))}'s code ({more}; all of it in --json):",
                highlight=False,
                soft_wrap=True,
            )
            for line in shown:
                console.print(f"[dim]    | {escape(printable(line))}[/dim]", highlight=False, soft_wrap=True)


def phase_seconds(results: Iterable[SpecResult]) -> dict[str, float]:
    """Seconds per phase, summed over the specs (each as its own process measured it): probing
    (the search's probes and the replays), shrinking (from each failure found to the smallest
    failing case) and training (the optimizer runs of the training invariants)."""
    shrinking = training = total = 0.0
    for res in results:
        total += res.seconds
        for r in res.results:
            shrinking += r.shrink_seconds
            if r.name in INVARIANTS and INVARIANTS.get(r.name).training:
                training += r.seconds
    return {"probing": max(0.0, total - shrinking - training), "shrinking": shrinking, "training": training}


def trained_count(res: SpecResult) -> int:
    """The cases a spec's training invariants trained (each case once, however many of its
    invariants shared the optimizer runs)."""
    return len(
        {
            c
            for r in res.results
            if r.name in INVARIANTS and INVARIANTS.get(r.name).training and not r.skipped
            for c in r.judged
        }
    )


def count_text(results: Iterable[SpecResult]) -> str:
    """What ran, each counted as what it is: "8 case(s) probed", "3 case(s) trained", or both; the
    cases over the memory budget that their family built another way (a library model streamed)
    are named with how."""
    results = list(results)
    probed = sum(len(res.cases) for res in results)
    trained = sum(trained_count(res) for res in results)
    other = [
        r.measurements.extra["within_budget"]
        for res in results
        for r in res.cases.values()
        if r.measurements is not None and isinstance(r.measurements.extra.get("within_budget"), dict)
    ]
    built = f" ({len(other)} over the memory budget, built {other[0]['how']})" if other else ""
    parts = [f"{probed} case(s) probed{built}"] if probed or not trained else []
    if trained:
        parts.append(f"{trained} case(s) trained")
    return ", ".join(parts)


def summary_line(
    results: list[SpecResult],
    seconds: float,
    *,
    interrupted: bool = False,
    reports: float | None = None,
    workers: int = 1,
) -> str:
    """The last line of a run: the expectations' outcomes, what ran, and how long each phase
    took (`phase_seconds`; `reports`: the seconds writing the reports, when the caller measured
    them; with `workers` > 1 the phases of the specs overlap, so they are summed over the workers)."""
    pairs = [r for res in results for r in res.results]
    failed = sum(not r.met for r in pairs)
    skipped = sum(not r.applicable for r in pairs)
    off = sum(r.skipped for r in pairs)  # training invariants outside their spec's train.profiles
    head = "interrupted: " if interrupted else ""
    phases = phase_seconds(results)
    shown = [f"{name} {phases[name]:.1f} s" for name in ("probing", "shrinking") if name in phases]
    if phases["training"] or any(r.name in INVARIANTS and INVARIANTS.get(r.name).training for r in pairs):
        shown.append(f"training {phases['training']:.1f} s")
    if reports is not None:
        shown.append(f"reports {reports:.1f} s")
    workers = min(workers, len(results))  # one spec runs on one worker: no more than that ran at once
    over = f"summed over {workers} workers: " if workers > 1 else ""
    return (
        f"{head}{len(results)} spec(s), {len(pairs)} expectation(s): {len(pairs) - failed - skipped - off} met, "
        f"{failed} not met, "
        f"{f'{skipped} not applicable, ' if skipped else ''}{f'{off} skipped in this profile, ' if off else ''}"
        f"{count_text(results)} in {seconds:.1f} s ({over}{', '.join(shown)})"
    )


def spec_line(res: SpecResult, seconds: float | None = None) -> str:
    """One line for a spec that has finished (the progress of a run whose output is not a
    terminal, e.g. a CI log): its name, each expectation's verdict, what ran, and how long it took."""
    marks = []
    for r in res.results:
        mark = "n/a" if not r.applicable else "skipped" if r.skipped else "✓" if r.met else "✗"
        marks.append(f"{r.name} {mark}")
    took = res.seconds if seconds is None else seconds
    return (
        f"{'✓' if res.met else '✗'} {printable(res.spec.name)}: {', '.join(marks) or 'no expectation'}; "
        f"{count_text([res])} in {took:.1f} s"
    )


def judged_count(results: Iterable[SpecResult]) -> int:
    """How many expectations were actually judged on a measured case ("not applicable" replays
    and specs skipped for their device judge nothing)."""
    return sum(r.verdict is not None for res in results for r in res.results)


def to_json(
    results: list[SpecResult],
    *,
    seconds: float = 0.0,
    interrupted: bool = False,
    errors: list[str] | None = None,
    provenance: Mapping[str, dict[str, Any]] | None = None,
    baseline: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The machine-readable report: per spec, per invariant, per case, as plain data (`report`'s)."""
    return report(
        results, seconds=seconds, interrupted=interrupted, errors=errors, provenance=provenance, baseline=baseline
    ).to_data()


def report(
    results: list[SpecResult],
    *,
    seconds: float = 0.0,
    interrupted: bool = False,
    errors: list[str] | None = None,
    provenance: Mapping[str, dict[str, Any]] | None = None,
    baseline: dict[str, Any] | None = None,
) -> Report:
    """The JSON report as its model (`stability.run.report_model.Report`). Each spec records its
    provenance (`stability.report.provenance.provenance`, or `provenance[spec path]`), so the report
    can serve as a baseline; `baseline` is the comparison with one (`Comparison.to_json`)."""
    return Report(
        # a run that judged nothing is not a pass (the CLI exits 5 for it)
        met=all(res.met for res in results) and not interrupted and not errors and judged_count(results) > 0,
        interrupted=interrupted,
        seconds=seconds,
        specs=[_spec_entry(res, (provenance or {}).get(res.spec.path)) for res in results],
        errors=None if errors is None else list(errors),
        baseline=None if baseline is None else ComparisonEntry.model_validate(baseline),
    )


def _spec_entry(res: SpecResult, provenance: dict[str, Any] | None) -> SpecEntry:
    return SpecEntry(
        name=res.spec.name,
        file=res.spec.path,
        family=res.spec.family,
        description=res.spec.description,
        met=res.met,
        verdict="pass" if res.met else "fail",
        profile=res.profile,
        seconds=res.seconds,
        output=res.output,
        provenance=Provenance.model_validate(provenance or provenance_of(res.spec)),
        invariants=[_invariant_entry(r) for r in res.results],
        cases=[
            CaseEntry(
                case=record.case.as_dict(),
                error=record.error,
                seconds=record.seconds,
                measurements=None if record.measurements is None else record.measurements.to_dict(),
            )
            for record in res.cases.values()
        ],
        # `stability check --suggest`: the remedies tried for its unmet expectations (stability/run/suggest.py)
        suggestions=None if res.suggestions is None else res.suggestions.to_dict(),
    )


def _invariant_entry(r: InvariantResult) -> InvariantEntry:
    v = r.verdict
    return InvariantEntry(
        name=r.name,
        expect=r.expect,
        met=r.met,
        status=r.status,
        verdict=None if v is None else ("holds" if v.passed else "violated"),
        observed=None if v is None else v.observed,
        bound=None if v is None else v.bound,
        block=None if v is None else v.block,
        detail=None if v is None else v.detail,
        extra={} if v is None else v.to_dict()["extra"],
        measured=None if v is None else v.measured,
        case=None if r.case is None else r.case.as_dict(),
        examples=r.examples,
        message=r.message,
        reproduce=r.reproduce,
        error=r.error,
    )


def write_json(
    path: str | Path,
    results: list[SpecResult],
    *,
    seconds: float = 0.0,
    interrupted: bool = False,
    errors: list[str] | None = None,
    provenance: Mapping[str, dict[str, Any]] | None = None,
    baseline: dict[str, Any] | None = None,
) -> None:
    made = report(
        results, seconds=seconds, interrupted=interrupted, errors=errors, provenance=provenance, baseline=baseline
    )
    write_atomic(path, made.text())


# Characters XML 1.0 cannot hold at all, escaped or not (ElementTree writes them raw, and the file
# no longer parses): control characters other than tab, newline and carriage return, surrogates.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml(text: str) -> str:
    """`text` with characters XML cannot hold written as \\xNN (a file name may contain ESC)."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def write_junit(
    path: str | Path, results: list[SpecResult], *, seconds: float = 0.0, load_errors: Iterable[tuple[str, str]] = ()
) -> None:
    """JUnit XML: one testcase per (spec, invariant), named like the pytest item, plus one `load`
    testcase with an error per spec file that could not be used (`load_errors`: (file, message)).
    ElementTree escapes markup (<, &, quotes); characters XML cannot hold at all are written as
    \\xNN."""
    pairs = [(res, r) for res in results for r in res.results]
    unloaded = list(load_errors)
    suite = ET.Element(
        "testsuite",
        name="stability",
        tests=str(len(pairs) + len(unloaded)),
        failures=str(sum(not r.met and not r.error for _, r in pairs)),
        errors=str(sum(bool(r.error) and not r.met for _, r in pairs) + len(unloaded)),
        skipped=str(sum(not r.applicable or r.skipped for _, r in pairs)),
        time=f"{seconds:.3f}",
    )
    for file, message in unloaded:
        tc = ET.SubElement(suite, "testcase", classname=_xml(file), name="load", time="0.000")
        ET.SubElement(tc, "error", message=_xml(message)).text = _xml(message)
    for res, r in pairs:
        tc = ET.SubElement(
            suite,
            "testcase",
            classname=_xml(res.spec.path),
            name=r.name,
            time=f"{res.seconds / max(len(res.results), 1):.3f}",
        )
        if not r.applicable or r.skipped:
            ET.SubElement(tc, "skipped", message=_xml(r.message))
        if not r.met:
            tag = "error" if r.error else "failure"
            el = ET.SubElement(tc, tag, message=_xml(r.message))
            el.text = _xml(
                "\n".join(
                    filter(
                        None, [r.message, r.error and f"error: {r.error}", r.reproduce and f"reproduce: {r.reproduce}"]
                    )
                )
            )
            if res.output:
                ET.SubElement(tc, "system-out").text = _xml(res.output)
    write_atomic(path, ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n")
