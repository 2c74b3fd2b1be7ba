"""Every summary, report and store path that is a FIFO, a device or a folder gets one line, never a
hang (stability/report/outputs.py `not_regular` / `open_regular`): the job summary a warning line
and the run's own exit code; `--json`, `--junit`, `--html`, `--sarif`, `sweep --db`, `sweep --html`,
`zoo --md`, `zoo --html` one error line and exit 2, before anything is measured. A report replaces
only a file that is provably its own (its writer's opening: SARIF's driver name and version)."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import Cli, one_error

from stability.errors import UsageError

PASSING = """\
name = "relu"
description = "a short plain ReLU stack"
family = "plain"

[space]
depth = [1, 2]
width = 4
batch = 2

[expect.gradient_arrival]
lo = 0.01
hi = 100.0
"""


#: FIFOs a test made, and whether one had to be opened from outside to free a blocked command.
_FIFOS: list[Path] = []
_FREED: list[Path] = []


@pytest.fixture(autouse=True)
def no_hang() -> Iterator[None]:
    """A test still running after 60 s (each takes a few seconds) is taken to be blocked opening a
    FIFO without a reader: a thread opens the other end of each FIFO the test made, which frees
    the command, and the test fails; a hang is reported, never waited out. (An alarm signal would
    not do: the in-process case timeout owns SIGALRM.)"""
    done = threading.Event()

    def free() -> None:
        if done.wait(60):
            return
        while not done.wait(1):
            for fifo in list(_FIFOS):
                try:
                    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
                except OSError:
                    continue
                _FREED.append(fifo)
                time.sleep(0.5)
                os.close(fd)

    thread = threading.Thread(target=free, daemon=True)
    thread.start()
    try:
        yield
        assert not _FREED, f"the command blocked opening {_FREED[0]}: a FIFO was opened"
    finally:
        done.set()
        thread.join()
        _FIFOS.clear()
        _FREED.clear()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "a.toml").write_text(PASSING)
    monkeypatch.chdir(tmp_path)
    for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def special(folder: Path, kind: str) -> Path:
    """A FIFO, a character device (a copy of the null device, made with mknod) or a folder."""
    path = folder / f"special-{kind}"
    if kind == "fifo":
        os.mkfifo(path)
        _FIFOS.append(path)
    elif kind == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except (PermissionError, OSError) as exc:
            pytest.skip(f"cannot make a device node here ({exc})")
    else:
        path.mkdir()
    return path


KINDS = ["fifo", "device", "folder"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_job_summary_that_is_not_a_regular_file_is_one_warning_and_the_runs_exit_code(
    repo: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    path = special(repo, kind)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(path))
    code, out, err = cli("check", "a.toml", "--profile", "ci", "--in-process", "--github")
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.strip()]
    assert (
        len(warnings) == 1
        and warnings[0].startswith("stability: warning: GITHUB_STEP_SUMMARY=")
        and "the verdict is unchanged" in warnings[0]
    ), err
    assert f"is {'a FIFO' if kind == 'fifo' else 'a device' if kind == 'device' else 'a folder'}" in warnings[0]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("option", ["--json", "--junit", "--sarif", "--html"])
def test_a_check_report_path_that_is_not_a_regular_file_is_refused_before_the_run(
    repo: Path, cli: Cli, option: str, kind: str
) -> None:
    path = special(repo, kind)
    if option == "--html" and kind == "folder":
        path = special(path, "fifo").parent  # a folder whose index.html is a FIFO
        (path / "special-fifo").rename(path / "index.html")
        _FIFOS.append(path / "index.html")
    one_error(cli("check", "a.toml", "--profile", "ci", "--in-process", option, path), option)


@pytest.mark.parametrize("kind", KINDS)
def test_a_sweep_store_or_report_that_is_not_a_regular_file_is_refused(repo: Path, cli: Cli, kind: str) -> None:
    path = special(repo, kind)
    one_error(
        cli("sweep", "a.toml", "--over", "depth=1", "--seeds", "1", "--no-budget", "--serial", "-q", "--db", path),
        "--db",
    )
    if kind != "folder":
        one_error(
            cli(
                "sweep",
                "a.toml",
                "--over",
                "depth=1",
                "--seeds",
                "1",
                "--no-budget",
                "--serial",
                "-q",
                "--db",
                repo / "s.sqlite",
                "--html",
                path,
            ),
            "--html",
        )


@pytest.fixture
def unmeasured(monkeypatch: pytest.MonkeyPatch) -> None:
    """`stability zoo` must refuse its output paths before it measures anything."""

    def measured(*args: object, **kwargs: object) -> None:
        raise AssertionError("the zoo measured before checking its output paths")

    monkeypatch.setattr("stability.run.zoo.zoo_row", measured)


ZOO_SPEC = Path(__file__).resolve().parents[1] / "specs" / "zoo" / "bert.toml"


@pytest.mark.parametrize("kind", KINDS)
def test_zoo_md_that_is_not_a_regular_file_is_refused_before_measuring(
    repo: Path, cli: Cli, unmeasured: None, kind: str
) -> None:
    path = special(repo, kind)
    one_error(cli("zoo", ZOO_SPEC, "-q", "--md", path), "--md", str(path))


def test_zoo_md_without_the_markers_is_refused_before_measuring_and_left_as_it_was(
    repo: Path, cli: Cli, unmeasured: None
) -> None:
    notes = repo / "notes.md"
    notes.write_text("# my notes\n")
    one_error(cli("zoo", ZOO_SPEC, "-q", "--md", notes), "no zoo-table markers")
    assert notes.read_text() == "# my notes\n"


@pytest.fixture
def uninstalled(monkeypatch: pytest.MonkeyPatch) -> None:
    """`stability zoo --compare` must refuse its --md before it installs or runs either release."""

    from stability.run import release_sides, releases  # imported before either is patched: release_sides
    # binds releases.environment when first imported, and would keep the stand-in past this test

    def installed(*args: object, **kwargs: object) -> None:
        raise AssertionError("the comparison installed a release before checking --md")

    monkeypatch.setattr(releases, "environment", installed)
    monkeypatch.setattr(release_sides, "environment", installed)
    monkeypatch.setattr(release_sides, "run_side", installed)


COMPARE = ("zoo", "--compare", "transformers==4.53.3", "transformers==4.54.1", ZOO_SPEC, "-q")


@pytest.mark.parametrize("kind", KINDS)
def test_zoo_compare_md_that_is_not_a_regular_file_is_refused_before_installing(
    repo: Path, cli: Cli, uninstalled: None, kind: str
) -> None:
    path = special(repo, kind)
    one_error(cli(*COMPARE, "--md", path), "--md", str(path))


def test_zoo_compare_md_replaces_only_an_earlier_comparison(repo: Path, cli: Cli, uninstalled: None) -> None:
    from stability.report.outputs import check_report_path
    from stability.report.zoo_compare import markdown

    notes = repo / "notes.md"
    notes.write_text("# my notes\n")
    one_error(cli(*COMPARE, "--md", notes), "is not a stability zoo comparison report")
    assert notes.read_text() == "# my notes\n"
    earlier = repo / "compare.md"
    earlier.write_text(
        markdown(
            "transformers==4.53.3",
            "transformers==4.54.1",
            [],
            {},
            {"transformers==4.53.3": {"transformers": "4.53.3"}},
            compared=0,
        ),
        encoding="utf-8",
    )
    assert (
        check_report_path("--md", str(earlier), "zoo comparison") == earlier.resolve()
    )  # its own earlier report: replaced


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_zoo_html_that_is_not_a_folder_is_refused_before_measuring(
    repo: Path, cli: Cli, unmeasured: None, kind: str
) -> None:
    one_error(cli("zoo", ZOO_SPEC, "-q", "--html", special(repo, kind)), "--html", "give a folder")


def test_zoo_html_never_replaces_a_hand_written_zoo_page_but_replaces_its_own(
    repo: Path, cli: Cli, unmeasured: None
) -> None:
    from stability.report.zoo import check_zoo_html, write_zoo_html

    out = repo / "out"
    out.mkdir()
    (out / "zoo.html").write_text("<!doctype html><html><head><title>my zoo</title></head></html>\n")
    one_error(cli("zoo", ZOO_SPEC, "-q", "--html", out), "is not a stability zoo HTML report")
    with pytest.raises(UsageError, match="is not a stability zoo HTML report"):  # the library function too
        write_zoo_html(out, [], (4,))
    assert "my zoo" in (out / "zoo.html").read_text()
    (out / "zoo.html").unlink()
    write_zoo_html(out, [], (4,))
    assert check_zoo_html(out) == (out / "zoo.html").resolve()  # its own page: replaced
    write_zoo_html(out, [], (4, 16))
    assert "4, 16" in (out / "zoo.html").read_text()
    fifo = special(out, "fifo")
    fifo.rename(out / "zoo.html")
    _FIFOS.append(out / "zoo.html")
    one_error(cli("zoo", ZOO_SPEC, "-q", "--html", out), "is a FIFO")


def test_another_tools_sarif_or_json_is_never_replaced(repo: Path, cli: Cli) -> None:
    ruff = repo / "ruff.sarif"
    ruff.write_text(
        json.dumps(
            {
                "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
                "version": "2.1.0",
                "runs": [{"tool": {"driver": {"name": "ruff"}}, "results": []}],
            },
            indent=2,
        )
    )
    before = ruff.read_text()
    one_error(
        cli("check", "a.toml", "--profile", "ci", "--in-process", "--sarif", ruff),
        "--sarif",
        "is not a stability SARIF report",
    )
    assert ruff.read_text() == before
    other = repo / "other.json"
    other.write_text(json.dumps({"schema_version": 3, "tool": "another"}, indent=2))
    one_error(
        cli("check", "a.toml", "--profile", "ci", "--in-process", "--json", other),
        "--json",
        "is not a stability JSON report",
    )
    assert json.loads(other.read_text())["tool"] == "another"
    # Its own earlier reports are replaced.
    assert cli("check", "a.toml", "--profile", "ci", "--in-process", "--sarif", "s.sarif", "--json", "r.json")[0] == 0
    assert cli("check", "a.toml", "--profile", "ci", "--in-process", "--sarif", "s.sarif", "--json", "r.json")[0] == 0
    assert json.loads((repo / "s.sarif").read_text())["runs"][0]["tool"]["driver"]["name"] == "stability"
