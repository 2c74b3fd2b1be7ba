"""No text from outside the tool forms a CI runner's workflow command (stability/report/text.py).

GitHub's runner runs a line that starts with `::` (after blanks) and the older `##[command]` form
anywhere in a line; Azure Pipelines `##vso[…]` anywhere. Every stream of `stability check`,
`sweep`, `zoo` and the pytest plugin (stdout, stderr, the job summary, the annotations) is checked:
no line holds `##[` or `##vso[`, and no line starts with `::` except the tool's own annotations,
whose values are neutralised and escaped (`%25 %0D %0A`) and read back to the neutralised text.
The rendering functions are fuzzed in-process with Hypothesis; a few end-to-end runs use hostile
names, factory messages and printed output.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from stability.report.formats import print_failures, print_table, spec_line, summary_line
from stability.report.github import cell, command, escape_data, escape_property, job_summary, workflow_commands
from stability.report.text import LogSafe, neutralise, printable
from stability.run.results import InvariantResult, SpecResult
from stability.spec.load import load_spec

#: Every character a reader of the log may split lines on (a superset of the runner's CR and LF).
BREAKS = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
#: The shape of the tool's own annotations: a kind, properties with no raw `:` or `,`, the data.
OWN = re.compile(r"::(error|warning|notice)(?: ((?:[a-z]+=[^:,]*)(?:,[a-z]+=[^:,]*)*))?::(.*)")


def unescape(value: str) -> str:
    """What the runner reads back from a workflow command's value."""
    return value.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")


def check_log(text: str, *, commands: bool = False) -> list[str]:
    """Assert that `text` is safe in a CI log; return the tool's own annotation lines in it."""
    own = []
    for line in BREAKS.split(text):
        assert "##[" not in line, line
        assert "##vso[" not in line.lower(), line
        if line.lstrip().startswith("::"):
            m = OWN.fullmatch(line)
            assert commands and m is not None and line == line.lstrip(), line
            for value in [*(p.split("=", 1)[1] for p in (m.group(2) or "").split(",") if p), m.group(3)]:
                check_log(unescape(value))  # what the runner shows is safe too
            own.append(line)
    return own


def _props(line: str) -> dict[str, str]:
    m = OWN.fullmatch(line)
    assert m is not None, line
    return {k: v for k, _, v in (p.partition("=") for p in (m.group(2) or "").split(",") if p)}


def is_insertion(original: str, result: str) -> bool:
    """`result` is `original` with backslashes inserted, nothing else changed."""
    i = 0
    for ch in result:
        if i < len(original) and ch == original[i]:
            i += 1
        elif ch != "\\":
            return False
    return i == len(original)


FRAGMENTS = [
    "##[",
    "##vso[",
    "##VSO[",
    "#",
    "##",
    "[",
    "]",
    "::",
    ":",
    " ",
    "\t",
    "\u00a0",
    "\u3000",
    "\n",
    "\r",
    "\r\n",
    "\x85",
    "\u2028",
    "\x0b",
]
FRAGMENTS += [
    "add-mask]",
    "stop-commands]tok",
    "error]",
    "group]",
    "add-mask::",
    "%0A",
    "%25",
    ",",
    "=",
    "\\",
    "`",
    "```",
    "|",
    "\x1b[31m",
    "\u200b",
    "x",
]
hostile = st.one_of(st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join), st.text(max_size=30))


# ----------------------------------------------------------------------------- the rule itself


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("gate ##[stop-commands]tok", "gate ##\\[stop-commands]tok"),
        ("##[add-mask]SECRET", "##\\[add-mask]SECRET"),
        ("a ##vso[task.setvariable]x", "a ##vso\\[task.setvariable]x"),
        ("::add-mask::SECRET", ":\\:add-mask::SECRET"),
        ("  \t::stop-commands::tok", "  \t:\\:stop-commands::tok"),
        ("ok\n::error::x", "ok\n:\\:error::x"),
        ("specs/x.toml::gradient_arrival", "specs/x.toml::gradient_arrival"),  # not at a line start: unchanged
        ("###[", "###\\["),
    ],
)
def test_neutralise_breaks_each_command_form_with_a_visible_backslash(text: str, shown: str) -> None:
    assert neutralise(text) == shown
    check_log(neutralise(text))
    check_log(cell(text))  # a Markdown cell or line of the job summary


@given(hostile)
@settings(max_examples=300, deadline=None)
def test_neutralise_leaves_no_command_only_inserts_and_is_idempotent(text: str) -> None:
    out = neutralise(text)
    check_log(out)
    assert is_insertion(text, out)
    assert neutralise(out) == out
    check_log(printable(text))


@given(hostile, st.lists(st.integers(0, 40), max_size=6))
@settings(max_examples=300, deadline=None)
def test_log_safe_neutralises_across_writes_as_in_one_write(text: str, cuts: list[int]) -> None:
    """A `##` ending one write and a `[` starting the next are caught, as a line begun in one write
    and continued with `::` in the next."""
    points = sorted({min(c, len(text)) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    sink = io.StringIO()
    stream = LogSafe(sink)
    for piece in pieces:
        stream.write(piece)
    assert sink.getvalue() == neutralise(text)


def test_the_tools_own_command_passes_the_stream_on_a_line_of_its_own() -> None:
    sink = io.StringIO()
    stream = LogSafe(sink)
    stream.write("half a line ##")
    stream.command("::error file=a.toml::x")
    stream.write("[x]\n")
    assert sink.getvalue() == "half a line ##\n::error file=a.toml::x\n[x]\n"
    assert check_log(sink.getvalue(), commands=True) == ["::error file=a.toml::x"]


@given(hostile, hostile)
@settings(max_examples=300, deadline=None)
def test_annotation_values_are_neutralised_and_round_trip_through_the_runners_unescaping(
    message: str, prop: str
) -> None:
    line = command("error", message, file=prop, title=prop, line=3)
    (own,) = check_log(line, commands=True)
    m = OWN.fullmatch(own)
    assert m is not None
    props = dict(p.split("=", 1) for p in (m.group(2) or "").split(","))
    assert unescape(m.group(3)) == "\n".join(
        printable(part) for part in message.split("\n")
    )  # its lines, control characters shown as escapes
    shown = "".join(part if part in ("\r", "\n") else printable(part) for part in re.split(r"(\r|\n)", prop))
    assert unescape(props["file"]) == shown == unescape(props["title"])  # its line breaks round-trip
    assert unescape(escape_data(message)) == neutralise(message) and unescape(escape_property(prop)) == neutralise(prop)


def test_a_lone_surrogate_is_shown_as_its_escape() -> None:
    """A byte a file name or a message does not decode reaches Python as a lone surrogate, which
    no UTF-8 stream, summary or report can hold: shown as its escape, like a control character."""
    text = os.fsdecode(b"bad \xff ##[add-mask]x") + "\ud800"
    assert printable(text) == "bad \\udcff ##\\[add-mask]x\\ud800"
    assert cell(text) == "bad \\\\udcff ##\\[add-mask\\]x\\\\ud800"
    for shown in (printable(text), cell(text), command("error", text, file=text)):
        shown.encode("utf-8")  # no UnicodeEncodeError


# ----------------------------------------------------------------------------- the rendering, fuzzed in-process

PASSING = """\
name = "relu"
description = "a short plain ReLU stack"
family = "plain"

[space]
depth = [1, 3]
width = 4
batch = 2

[expect.gradient_arrival]
lo = 0.01
hi = 100.0
"""


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> object:
    path = tmp_path_factory.mktemp("log") / "s.toml"
    path.write_text(PASSING)
    return load_spec(path)


def _results(spec: object, name: str, path: str, message: str, error: str, output: str) -> list[SpecResult]:
    hostile_spec = spec.model_copy(update={"name": name, "path": path, "description": message})  # type: ignore[attr-defined]
    results = [
        InvariantResult(
            name="gradient_arrival",
            expect="holds",
            met=False,
            verdict=None,
            case=None,
            examples=1,
            message=message,
            reproduce=f"stability check {path} --case seed=1",
            error=error,
        ),
        InvariantResult(
            name="variance_growth",
            expect="holds",
            met=True,
            verdict=None,
            case=None,
            examples=0,
            message=message,
            applicable=False,
        ),
        InvariantResult(
            name="identity_at_init",
            expect="holds",
            met=True,
            verdict=None,
            case=None,
            examples=0,
            message=message,
            skipped=True,
        ),
    ]
    return [SpecResult(spec=hostile_spec, results=results, output=output)]


@given(name=hostile, path=hostile, message=hostile, error=hostile, output=hostile)
@settings(max_examples=60, deadline=None)
def test_every_rendered_stream_of_a_run_is_safe_in_a_log(
    base: object, name: str, path: str, message: str, error: str, output: str
) -> None:
    results = _results(base, name, path or "x.toml", message, error, output)
    sink = io.StringIO()
    console = Console(
        file=LogSafe(sink),  # type: ignore[arg-type]
        width=100,
        highlight=False,
        color_system=None,
    )  # the command line's streams
    print_table(results, console)
    print_failures(results, console, spec_errors={path: error})
    console.print(summary_line(results, 1.0), soft_wrap=True)
    check_log(sink.getvalue())
    # The lines each path prints without a console, as they are built (before the stream's guard).
    check_log(spec_line(results[0], seconds=1.0))
    check_log(job_summary(results, seconds=1.0, errors=[error, f"{path}: {message}"]))
    own = check_log(
        "\n".join(
            workflow_commands(
                results, load_errors=[(path or "x.toml", message)], environ={"GITHUB_WORKSPACE": "/nowhere"}
            )
        ),
        commands=True,
    )
    assert len(own) == 4  # the load error, the unmet one, the n/a warning, the skipped notice
    check_log(cell(message) + "\n" + cell(name))


def test_a_run_of_backticks_in_the_output_cannot_close_the_summarys_code_fence(base: object) -> None:
    output = "before\n````\n# heading\n`````````` more\nafter"
    (summary_section,) = [
        s for s in job_summary(_results(base, "n", "x.toml", "m", "e", output), seconds=1.0).split("<details>")[1:]
    ]
    fence = re.search(r"^(`{3,})text$", summary_section, re.M)
    assert fence is not None
    ticks = fence.group(1)
    assert len(ticks) == 11  # one longer than the longest run inside
    body = summary_section.split(ticks + "text\n", 1)[1].split("\n" + ticks + "\n", 1)[0]
    assert "`````````` more" in body and "after" in body  # the whole output inside the one block
    assert not any(re.fullmatch(r"`{11,}\s*", line) for line in body.splitlines())  # no line inside closes it


# ----------------------------------------------------------------------------- end to end

FACTORY = """\
import torch.nn as nn
print("::add-mask::PRINTED_AT_IMPORT")

def make(depth, width):
    print("##[add-mask]PRINTED_IN_FACTORY")
    print("  ::stop-commands::tok2")
    raise ValueError("##[add-mask]SECRET\\n::error::injected")
"""

HOSTILE = """\
name = "gate ##[stop-commands]tok"
description = "::add-mask::DESCRIPTION ##vso[task.complete]"
family = "custom"

[block]
factory = "hostile_factory:make"

[space]
depth = [1, 2]
width = 4
batch = 2

[expect.gradient_arrival]
lo = 0.01
hi = 100.0
"""

BROKEN = (
    'name = "b"\ndescription = "d"\nfamily = "plain"\n[space]\ndepth = [1, 2]\nwidth = '
    '4\n[expect.gradient_arrival]\nlo = "##[add-mask]VALUE"\n'
)


def _repo(tmp_path: Path) -> Path:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "hostile_factory.py").write_text(FACTORY)
    (specs / "gate ##[stop-commands]tok.toml").write_text(HOSTILE)
    (specs / "##[add-mask]broken.toml").write_text(BROKEN)
    (specs / "::add-mask::SECRET.toml").write_text(BROKEN)  # a name the error line might start with
    return tmp_path


def _env(tmp_path: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "PYTEST_", "STABILITY_"))}
    return {
        **env,
        "GITHUB_ACTIONS": "true",
        "GITHUB_WORKSPACE": str(tmp_path),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        **more,
    }


def _stability(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stability", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow  # full check subprocesses; the escaping itself is unit-tested
def test_check_on_github_with_hostile_names_messages_and_output(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    proc = _stability("check", "specs", "--profile", "ci", "--json", "r.json", cwd=repo, env=_env(repo))
    assert proc.returncode == 2, proc.stderr  # the broken spec: exit 2, after the other ran
    own = check_log(proc.stdout, commands=True)
    check_log(proc.stderr)
    summary = (repo / "summary.md").read_text()
    check_log(summary)
    assert "gate ##\\[stop-commands]tok" in proc.stdout  # readable: the name, one backslash added
    assert "##\\[add-mask]SECRET" in proc.stdout + proc.stderr
    assert "PRINTED_IN_FACTORY" in proc.stdout and ":\\:stop-commands::tok2" in proc.stdout  # the relayed `| ` lines
    titles = {unescape(_props(line)["title"]) for line in own}
    assert titles == {"stability: the spec does not load", "stability: gradient_arrival not met"} and len(own) == 3


SURROGATE_FACTORY = """\
def make(depth, width):
    raise ValueError("bad \\udcff byte ##[add-mask]SECRET")
"""


@pytest.mark.slow  # full check subprocesses; the escaping itself is unit-tested
def test_check_on_github_with_undecodable_bytes_in_a_file_name_and_a_message(tmp_path: Path) -> None:
    """A spec file whose name holds a byte that is not UTF-8, and a factory whose message holds a
    lone surrogate: the job summary, the annotations and every report are written, with the text
    shown as its escape; no traceback."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "surrogate_factory.py").write_text(SURROGATE_FACTORY)
    name = os.fsdecode(b"\xff##[add-mask]x.toml")
    (specs / name).write_text(HOSTILE.replace("hostile_factory:make", "surrogate_factory:make"))
    reports = ["--json", "r.json", "--junit", "r.xml", "--sarif", "r.sarif", "--html", "html"]
    proc = _stability("check", "specs", "--profile", "ci", *reports, cwd=tmp_path, env=_env(tmp_path))
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    check_log(proc.stdout, commands=True)
    check_log(proc.stderr)
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    check_log(summary)
    assert "bad \\udcff byte ##\\[add-mask]SECRET" in summary and "bad \\udcff byte ##\\[add-mask]SECRET" in proc.stdout
    assert "\\udcff##\\[add-mask]x.toml" in proc.stdout
    assert "bad \\udcff byte" in (tmp_path / "html" / "index.html").read_text(encoding="utf-8")
    assert "specs/%FF%23%23%5Badd-mask%5Dx.toml" in (tmp_path / "r.sarif").read_text(encoding="utf-8")
    assert (tmp_path / "r.json").exists() and (tmp_path / "r.xml").exists()


@pytest.mark.slow
def test_the_pytest_plugin_with_hostile_names_messages_and_output(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (repo / "pytest.ini").write_text("[pytest]\n")
    env = _env(repo)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "specs", "-p", "no:cacheprovider", "-v", "-rA", "-n", "0"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout[-3000:]
    check_log(proc.stdout)
    check_log(proc.stderr)
    assert "##\\[add-mask]SECRET" in proc.stdout and "gradient_arrival" in proc.stdout


@pytest.mark.slow
def test_sweep_and_zoo_with_hostile_names_and_messages(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    env = _env(repo)
    spec = "specs/gate ##[stop-commands]tok.toml"
    sweep = _stability(
        "sweep",
        spec,
        "--over",
        "depth=1",
        "--seeds",
        "1",
        "--no-budget",
        "--serial",
        "--db",
        "s.sqlite",
        cwd=repo,
        env=env,
    )
    check_log(sweep.stdout)
    check_log(sweep.stderr)
    assert "##\\[add-mask]SECRET" in sweep.stdout + sweep.stderr, sweep.stdout + sweep.stderr
    zoo = _stability("zoo", "specs/##[add-mask]broken.toml", "-q", cwd=repo, env=env)
    assert zoo.returncode == 2
    check_log(zoo.stdout)
    check_log(zoo.stderr)
    assert len(zoo.stderr.strip().splitlines()) == 1 and "##\\[add-mask]broken.toml" in zoo.stderr
    parse = _stability("check", "--profile", "##[add-mask]ARGUMENT", cwd=repo, env=env)  # argparse's own message
    assert parse.returncode == 2
    check_log(parse.stderr)
    assert "##\\[add-mask]ARGUMENT" in parse.stderr
