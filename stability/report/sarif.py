"""`--sarif FILE`: SARIF 2.1.0 for code-scanning views (GitHub's `github/codeql-action/upload-sarif`,
GitLab and IDE SARIF viewers).

One run of the tool `stability`; one rule per invariant that has a result (its id is the
invariant's name, its description and help are `stability explain NAME`'s), plus
`baseline_drift` for a number that moved past its drift limit, in either direction (toward its
bound or away from it: both are drift). One result per
unmet expectation (level `error`), per drift (`error`; `warning` while updating the baseline)
and per spec that does not load (`error`, rule `spec_load`), located at the line of the
expectation's `[expect.NAME]` table in the spec (`stability.spec.locate`), relative to the
repository root (`%SRCROOT%`, given in `originalUriBaseIds`) as RFC 3986 references, percent-encoded
(`artifact_location`). `partialFingerprints` key an alert by spec file and invariant, so
a code-scanning alert stays the same alert while the deciding case moves between runs.
Met, not-applicable and skipped expectations produce no result: code scanning lists problems.
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from stability._version import __version__
from stability.report.baseline import Comparison, fmt, fmt_change, fmt_limit
from stability.report.explain import explain_text
from stability.report.github import in_workspace, workspace
from stability.report.outputs import write_atomic
from stability.report.text import printable
from stability.run.results import SpecResult
from stability.spec.locate import locate_expectation

__all__ = ["SARIF_SCHEMA", "artifact_location", "to_sarif", "write_sarif"]

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"

_EXTRA_RULES = {
    "baseline_drift": (
        "an observed number moved by more than its drift limit against the baseline, toward its bound or away from it",
        "Compared on the baseline's own case; see docs/ci.md, numbers against a baseline.",
    ),
    "spec_load": ("the spec file does not load", "The message names the file, the key, the value and the fix."),
}


def _fingerprint(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def artifact_location(path: str, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """SARIF's `artifactLocation` of a spec file: an RFC 3986 relative reference to the repository
    root (`uriBaseId` %SRCROOT%, what code scanning resolves against the checkout), every byte
    outside the unreserved characters and `/` percent-encoded as UTF-8 (a space, `%`, `#`, `?`,
    `:`, non-ASCII), so `odd dir/100% a#b?.toml` stays one path; a name's byte that is not UTF-8
    is encoded as the byte it is (as `file:` URIs are); a file outside the repository gets its
    absolute `file:` URI."""
    inside = in_workspace(path, environ)
    if inside is None:
        return {"uri": Path(os.path.abspath(path)).as_uri()}
    return {"uri": urllib.parse.quote(os.fsencode(inside), safe="/"), "uriBaseId": "%SRCROOT%"}


def _result(
    level: str, text: str, file: str, line: int, kind: str, *key: str, environ: Mapping[str, str]
) -> dict[str, Any]:
    """One result at `file`:`line`; `kind` and `key` name its fingerprint (what keeps it one alert)."""
    artifact = artifact_location(file, environ)
    uri = artifact["uri"]
    location = {"physicalLocation": {"artifactLocation": artifact, "region": {"startLine": line}}}
    return {
        "level": level,
        "message": {"text": text},
        "locations": [location],
        "partialFingerprints": {f"{kind}/v1": _fingerprint(uri, *key)},
    }


def _rule(rule_id: str) -> dict[str, Any]:
    if rule_id in _EXTRA_RULES:
        short, full = _EXTRA_RULES[rule_id]
    else:
        text = explain_text(rule_id)
        short, full = text.splitlines()[0], text
    return {
        "id": rule_id,
        "name": rule_id,
        "shortDescription": {"text": short},
        "fullDescription": {"text": full},
        "help": {"text": full},
        "defaultConfiguration": {"level": "error"},
    }


def to_sarif(
    results: Iterable[SpecResult],
    *,
    load_errors: Iterable[tuple[str, str]] = (),
    comparison: Comparison | None = None,
    environ: Mapping[str, str] = os.environ,
) -> dict[str, Any]:
    """The SARIF log of one run (a JSON-ready dict)."""
    found = [
        ("spec_load", _result("error", printable(message), file, 1, "stabilitySpec", environ=environ))
        for file, message in load_errors
    ]
    for res in results:
        for r in res.results:
            if not r.applicable or r.skipped or r.met:
                continue
            text = "\n".join(
                printable(p)
                for p in (r.message, r.error and f"error: {r.error}", r.reproduce and f"reproduce: {r.reproduce}")
                if p
            )
            line = locate_expectation(res.spec.path, r.name)
            found.append(
                (r.name, _result("error", text, res.spec.path, line, "stabilityExpectation", r.name, environ=environ))
            )
    if comparison is not None:
        for d in comparison.drifted:
            numbers = f"{fmt(d.before)} → {fmt(d.after)} ({fmt_change(d)}, drift limit {fmt_limit(d.limit)})"
            text = printable(f"{d.key}: {numbers} at {d.key.case}: {d.why}") + (
                f"\nreproduce: {printable(d.reproduce)}" if d.reproduce else ""
            )
            line = locate_expectation(d.key.file, d.key.invariant)
            found.append(
                (
                    "baseline_drift",
                    _result(
                        "warning" if comparison.update else "error",
                        text,
                        d.key.file,
                        line,
                        "stabilityDrift",
                        d.key.invariant,
                        environ=environ,
                    ),
                )
            )
    rule_ids = list(dict.fromkeys(rule_id for rule_id, _ in found))
    out = [{"ruleId": rule_id, "ruleIndex": rule_ids.index(rule_id), **result} for rule_id, result in found]
    driver = {
        "name": "stability",
        "version": __version__,
        "semanticVersion": __version__,
        "rules": [_rule(r) for r in rule_ids],
    }
    base = {
        "%SRCROOT%": {"uri": workspace(environ).as_uri().rstrip("/") + "/"}
    }  # SARIF 3.14.14: an absolute URI ending in "/"
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {"tool": {"driver": driver}, "originalUriBaseIds": base, "results": out, "columnKind": "unicodeCodePoints"}
        ],
    }


def write_sarif(
    path: str | Path,
    results: Iterable[SpecResult],
    *,
    load_errors: Iterable[tuple[str, str]] = (),
    comparison: Comparison | None = None,
) -> None:
    write_atomic(
        path,
        json.dumps(to_sarif(results, load_errors=load_errors, comparison=comparison), indent=2, ensure_ascii=False)
        + "\n",
    )
