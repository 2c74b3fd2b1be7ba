"""Report paths are checked before anything runs (stability/report/outputs.py): a path that would lose
the results or destroy something is refused with exit 2 and one line, and nothing is written."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_support import Cli


def refused(result: tuple[int, str, str], *fragments: str) -> str:
    code, out, err = result
    assert code == 2, (code, out, err)
    assert "Traceback" not in out + err and out == ""  # nothing ran: no table
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("stability: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def spec(write_spec: Callable[..., Path], base_spec: str) -> Path:
    return write_spec(base_spec, "a.toml")


def test_an_empty_json_path(cli: Cli, spec: Path) -> None:
    refused(cli("check", spec, "--json", ""), "--json '': an empty value")


@pytest.mark.parametrize("option", ["--json", "--junit", "--html"])
def test_a_dash_is_not_standard_output_and_writes_no_file_named_dash(
    cli: Cli, spec: Path, tmp_path: Path, option: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    refused(cli("check", spec, option, "-"), f"{option} -: reports are written to files, not to standard output")
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("option", ["--json", "--junit"])
def test_a_folder_where_a_file_is_expected(cli: Cli, spec: Path, tmp_path: Path, option: str) -> None:
    refused(cli("check", spec, option, tmp_path), f"{option} {tmp_path}: is a folder; give a file path")


def test_html_to_a_file(cli: Cli, spec: Path, tmp_path: Path) -> None:
    f = tmp_path / "report.html"
    f.write_text("old")
    refused(cli("check", spec, "--html", f), "is a file; give a folder")
    assert f.read_text() == "old"


def test_a_device_is_never_replaced(cli: Cli, spec: Path) -> None:
    before = os.stat("/dev/null")
    refused(cli("check", spec, "--json", "/dev/null"), "--json /dev/null: is a device, not a regular file")
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev


def test_a_fifo_is_never_replaced_nor_opened(cli: Cli, spec: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "report.xml"
    os.mkfifo(fifo)
    refused(cli("check", spec, "--junit", fifo), "is a FIFO, not a regular file")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_two_reports_on_one_path(cli: Cli, spec: Path, tmp_path: Path) -> None:
    r = tmp_path / "r.json"
    refused(
        cli("check", spec, "--json", r, "--junit", tmp_path / "." / "r.json"), "--junit", "is also the path of --json"
    )
    assert not r.exists()


def test_a_report_over_the_input_spec(cli: Cli, spec: Path) -> None:
    text = spec.read_text()
    relative = Path(os.path.relpath(spec))
    refused(cli("check", spec, "--json", relative), f"is the input spec {spec}")
    assert spec.read_text() == text


def test_a_path_under_a_file(cli: Cli, spec: Path, tmp_path: Path) -> None:
    f = tmp_path / "plain-file"
    f.write_text("x")
    refused(cli("check", spec, "--json", f / "r.json"), f"{f} is not a folder")


def test_a_folder_that_cannot_be_written(cli: Cli, spec: Path) -> None:
    refused(cli("check", spec, "--json", "/proc/stability-report.json"), "cannot write in /proc")
    assert not os.path.exists("/proc/stability-report.json")


def test_a_missing_parent_is_created_when_the_report_is_written(cli: Cli, spec: Path, tmp_path: Path) -> None:
    r = tmp_path / "new" / "deeper" / "r.json"
    code, _, err = cli("check", spec, "--case", "depth=1", "--json", r, "--in-process")
    assert code == 0, err
    assert r.is_file() and sorted(p.name for p in r.parent.iterdir()) == ["r.json"]


def test_write_atomic_refuses_a_non_regular_file(tmp_path: Path) -> None:
    from stability.errors import UsageError
    from stability.report.outputs import write_atomic

    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="is a FIFO"):
        write_atomic(fifo, "x")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["f"]


@pytest.mark.parametrize("option", ["--json", "--junit", "--html"])
def test_a_file_the_user_wrote_is_never_replaced_by_a_report(
    cli: Cli, write_spec: Callable[..., Path], tmp_path: Path, option: str
) -> None:
    # The spec's own factory module, a hand-written page, any file that is not a stability report.
    factory = tmp_path / "stability_outputs_factory.py"
    factory.write_text(
        "from torch import nn\n\ndef make(depth, width):\n    return nn.Sequential(*[nn.Linear(width, width) "
        "for _ in range(depth)])\n"
    )
    text = 'name = "c"\ndescription = "c"\nfamily = "custom"\n[block]\nfactory = "stability_outputs_factory:make"\n'
    custom = write_spec(
        text + "[space]\ndepth = 2\nwidth = 4\nbatch = 2\n[expect.gradient_arrival]\nlo = 1e-3\nhi = 1e3\n", "c.toml"
    )
    if option == "--html":
        folder = tmp_path / "site"
        folder.mkdir()
        (folder / "index.html").write_text("<!DOCTYPE html>\n<html><head><title>my project</title></head></html>\n")
        target, written = folder, folder / "index.html"
    else:
        target = written = factory
    before = written.read_bytes()
    refused(
        cli("check", custom, option, target),
        f"{option} {target}: ",
        "exists and is not a stability",
        "a report never replaces a file it did not write",
    )
    assert written.read_bytes() == before


@pytest.mark.parametrize("option", ["--json", "--junit", "--html"])
def test_a_report_replaces_its_own_earlier_self_and_an_empty_file(
    cli: Cli, spec: Path, tmp_path: Path, option: str
) -> None:
    target = tmp_path / ("site" if option == "--html" else "report")
    if option != "--html":
        target.write_text("")  # an empty file (mktemp): nothing of the user's to lose
    for _ in range(2):
        code, _, err = cli("check", spec, option, target, "--profile", "ci")
        assert code in (0, 1) and "stability: error" not in err, err  # judged (met or not), never refused
    written = target / "index.html" if option == "--html" else target
    assert written.stat().st_size > 0


def test_a_sweeps_html_never_replaces_a_page_the_user_wrote(cli: Cli, tmp_path: Path) -> None:
    spec = Path(__file__).resolve().parent.parent / "specs" / "plain_tanh_mlp.toml"
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "index.html").write_text("<html>mine</html>")
    args = [
        "sweep",
        spec,
        "--over",
        "depth=2,4",
        "--seeds",
        "1",
        "--serial",
        "-q",
        "--db",
        tmp_path / "r.sqlite",
        "--html",
        folder,
    ]
    refused(cli(*args), f"--html {folder}: ", "is not a stability HTML report")
    assert (folder / "index.html").read_text() == "<html>mine</html>"
    (folder / "index.html").unlink()
    assert cli(*args)[0] == 0
    assert cli(*args)[0] == 0  # its own earlier page is replaced
