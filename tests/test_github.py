"""stability/report/github.py: the job summary ($GITHUB_STEP_SUMMARY) and the workflow commands
(`::error file=…,line=…::`) of a run on GitHub Actions, in a scratch repository; a command's `file=`
property round-trips a newline."""

from __future__ import annotations

import html.parser
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from stability.cli import main
from stability.report.github import SUMMARY_LIMIT, command, escape_data, escape_property, job_summary, workflow_commands
from stability.run.results import InvariantResult, SpecResult
from stability.spec.load import load_spec

#: Two unmet expectations (a vanishing gradient; a variance that decays), one met; three ways of
#: writing an expectation.
FAILING = """\
name = "sigmoid | *stack* <b>"
description = "a plain sigmoid stack: the gradient vanishes"
family = "plain"

[block]
activation = "sigmoid"

[space]
depth = [20, 30]
width = 4
batch = 2
weight_init = ["xavier_normal"]

[expect.gradient_arrival]
lo = 0.01
hi = 100.0

[expect]
variance_growth = { max_growth = "exponential", min_ratio = 0.99 }
gradient_balance.max_spread = 1e30
"""

PASSING = """\
name = "relu"
description = "a short plain ReLU stack"
family = "plain"

[space]
depth = [1, 3]
width = 4
batch = 2
weight_init = ["xavier_normal"]

[expect.gradient_arrival]
lo = 0.01
hi = 100.0
"""


def unescape(value: str) -> str:
    """What the runner reads back from a workflow-command value (the inverse of the escapes)."""
    return value.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")


def parse_command(line: str) -> tuple[str, dict[str, str], str]:
    m = re.fullmatch(r"::(\w+)(?: (.*?))?::(.*)", line)
    assert m, line
    props = dict(p.split("=", 1) for p in (m.group(2) or "").split(",") if p)
    return m.group(1), {k: unescape(v) for k, v in props.items()}, unescape(m.group(3))


class Cells(html.parser.HTMLParser):
    """The text of every table cell of rendered HTML, row by row."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append("".join(self.cell))
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def tables(markdown: str) -> list[list[list[str]]]:
    """Every table of a Markdown text, as GitHub-flavoured Markdown renders it."""
    rendered = MarkdownIt("commonmark").enable("table").render(markdown)
    out = []
    for chunk in rendered.split("<table>")[1:]:
        cells = Cells()
        cells.feed(chunk.split("</table>")[0])
        out.append(cells.rows)
    return out


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch repository on a runner: specs/, the workspace, a summary file."""
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "failing.toml").write_text(FAILING)
    (tmp_path / "specs" / "passing.toml").write_text(PASSING)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    return tmp_path


def test_a_failing_run_writes_a_summary_table_and_one_error_per_unmet_expectation(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "specs", "--profile", "ci", "--in-process", "--sarif", "s.sarif"]) == 1
    out = capsys.readouterr().out
    errors = [parse_command(line) for line in out.splitlines() if line.startswith("::error")]
    assert [(props["file"], props["title"]) for _, props, _ in errors] == [
        ("specs/failing.toml", "stability: gradient_arrival not met"),
        ("specs/failing.toml", "stability: variance_growth not met"),
    ]
    lines = (repo / "specs" / "failing.toml").read_text().splitlines()
    assert [lines[int(props["line"]) - 1] for _, props, _ in errors] == [
        "[expect.gradient_arrival]",
        'variance_growth = { max_growth = "exponential", min_ratio = 0.99 }',
    ]
    message = errors[0][2].splitlines()
    assert message[0].startswith(
        "specs/failing.toml::gradient_arrival: expected to hold, but it fails at smallest failing case depth="
    )
    assert (
        message[1].startswith("reproduce: stability check specs/failing.toml --case depth=")
        and message[2] == "explain: stability explain gradient_arrival"
    )

    summary = (repo / "summary.md").read_text()
    assert summary.startswith("### stability: ✗ 2 of 4 expectation(s) not met\n")
    (verdicts,) = tables(summary)
    assert verdicts[0] == ["spec", "invariant", "expect", "verdict", "observed", "bound", "deciding case"]
    assert [(row[0], row[1], row[3]) for row in verdicts[1:]] == [
        ("sigmoid | *stack* <b>", "gradient_arrival", "✗"),  # the name's pipe, stars and tag are text, not markup
        ("sigmoid | *stack* <b>", "variance_growth", "✗"),
        ("sigmoid | *stack* <b>", "gradient_balance", "✓"),
        ("relu", "gradient_arrival", "✓"),
    ]
    assert verdicts[1][5] == "[0.01, 100]" and all(len(row) == 7 for row in verdicts)
    assert "### Not met" in summary and "<details><summary>details</summary>" in summary
    assert "```sh\nstability check specs/failing.toml --case depth=" in summary


def test_without_failures_the_summary_says_so_and_no_error_is_printed(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "specs/passing.toml", "--profile", "ci", "--in-process"]) == 0
    assert "::error" not in capsys.readouterr().out
    assert (repo / "summary.md").read_text().startswith("### stability: ✓ every expectation met (1)\n")
    assert main(["check", "specs/passing.toml", "--profile", "ci", "--in-process"]) == 0
    assert (repo / "summary.md").read_text().count("### stability: ✓") == 2  # appended, as GitHub expects


def test_no_github_turns_it_off_and_a_bad_summary_path_only_warns(
    repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["check", "specs/failing.toml", "--profile", "ci", "--in-process", "--no-github"]) == 1
    assert "::error" not in capsys.readouterr().out and not (repo / "summary.md").exists()
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(repo / "specs"))  # a folder: cannot be appended to
    assert main(["check", "specs/passing.toml", "--profile", "ci", "--in-process"]) == 0
    err = capsys.readouterr().err
    assert "stability: warning: GITHUB_STEP_SUMMARY=" in err and "the verdict is unchanged" in err
    monkeypatch.delenv("GITHUB_ACTIONS")
    assert main(["check", "specs/failing.toml", "--profile", "ci", "--in-process", "--only", "variance_growth"]) == 1
    assert "::error" not in capsys.readouterr().out  # not on Actions, not asked for
    assert (
        main(
            ["check", "specs/failing.toml", "--profile", "ci", "--in-process", "--only", "variance_growth", "--github"]
        )
        == 1
    )
    assert capsys.readouterr().out.count("::error file=specs/failing.toml,line=") == 1


def test_escapes_are_githubs() -> None:
    assert escape_data("50% a\r\nb: c, d") == "50%25 a%0D%0Ab: c, d"
    assert escape_property("50% a\r\nb: c, d") == "50%25 a%0D%0Ab%3A c%2C d"
    line = command("error", "100%\nsure", file="specs/a,b:c.toml", line=3, title="t: x")
    assert line == "::error file=specs/a%2Cb%3Ac.toml,line=3,title=t%3A x::100%25%0Asure"
    assert parse_command(line) == ("error", {"file": "specs/a,b:c.toml", "line": "3", "title": "t: x"}, "100%\nsure")


def test_not_applicable_warns_and_skipped_in_a_profile_is_a_notice(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(PASSING)
    spec = load_spec(path)
    results = [
        InvariantResult(
            name="gradient_arrival",
            expect="holds",
            met=True,
            verdict=None,
            case=None,
            examples=0,
            message="s.toml::gradient_arrival: not applicable at …",
            applicable=False,
        ),
        InvariantResult(
            name="gradient_arrival",
            expect="holds",
            met=True,
            verdict=None,
            case=None,
            examples=0,
            message="s.toml::gradient_arrival: skipped in profile ci",
            skipped=True,
        ),
    ]
    kinds = [
        parse_command(c)[0]
        for c in workflow_commands(
            [SpecResult(spec=spec, results=results)], environ={"GITHUB_WORKSPACE": str(tmp_path)}
        )
    ]
    assert kinds == ["warning", "notice"]
    loads = workflow_commands([], load_errors=[("specs/bad.toml", "specs/bad.toml: bad key")], environ={})
    assert [parse_command(c)[:2] for c in loads] == [
        ("error", {"file": "specs/bad.toml", "title": "stability: the spec does not load"})
    ]


def test_the_summary_stays_under_githubs_limit(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(PASSING)
    spec = load_spec(path)
    failing = [
        InvariantResult(
            name="gradient_arrival",
            expect="holds",
            met=False,
            verdict=None,
            case=None,
            examples=1,
            message="x" * 20_000,
            reproduce="stability check s.toml --case seed=1",
        )
        for _ in range(100)
    ]
    text = job_summary([SpecResult(spec=spec, results=failing)], seconds=1.0)
    assert len(text.encode()) <= SUMMARY_LIMIT
    assert "more section(s) left out: a step summary holds at most 1 MiB" in text
    assert text.count("<details>") == text.count("</details>") and text.count("```") % 2 == 0  # only whole sections


def test_a_code_blocks_fence_is_longer_than_any_backtick_run_inside() -> None:
    from stability.report.github import fence

    assert fence("x = 1", "sh") == "```sh\nx = 1\n```"
    assert fence("a ``` b") == "````\na ``` b\n````"
    assert fence("`````\nclosing?") == "``````\n`````\nclosing?\n``````"
    rendered = MarkdownIt().parse(fence("before\n```\n# not a heading\n```\nafter"))
    assert [t.type for t in rendered] == ["fence"]  # one block: the text inside cannot end it


def test_an_annotations_file_property_round_trips_a_newline() -> None:
    """The newline was shown as `\\x0a`, which the runner reads as four characters: the annotation
    landed on no file."""
    line = command("error", "m", file="specs/a\nb\r.toml", title="t", line=3)
    props = dict(p.split("=", 1) for p in line.split("::")[1].split(" ", 1)[1].split(","))
    runner = props["file"].replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",")
    assert runner.replace("%25", "%") == "specs/a\nb\r.toml"
    # a command after the break is still neutralised (":\:error"), before the runner's escapes
    assert "file=a%0A%3A\\%3Aerror" in command("error", "m", file="a\n::error::x")
