"""docs/extending.md's toy invariant and toy family, registered from a plugin file alone (no edit to
the package), seen by every path: `stability list`, `explain`, `schema`, `--only`, `check` in
workers and in this process, `stability sweep`, the pytest plugin and the HTML and JSON reports.
The toy family's closed forms decide the numbers: E[y²]/E[x²] = g^(2L) and the gradient ratio g^L."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from approx_support import approx
from spec_support import ROOT

from stability.cli import main
from stability.run import plugins
from stability.spec.registry import FAMILIES, INVARIANTS

DOC = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")


def _block(tag: str, after: str) -> str:
    start = DOC.index(after)
    m = re.search(rf"```{tag}\n(.*?)```", DOC[start:], flags=re.S)
    assert m is not None, f"docs/extending.md: no {tag} block after {after!r}"
    return m.group(1)


PLUGIN = _block("python", "## A plugin")
SPEC = _block("toml", "A spec that uses both")
COMMANDS = [line.split("#", 1)[0].strip() for line in _block("sh", "Every path sees them").splitlines() if line.strip()]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The plugin and the spec in a folder; whatever the plugin registers in this process is
    unregistered afterwards, so no other test sees the toy entries."""
    (tmp_path / "toy_plugin.py").write_text(PLUGIN, encoding="utf-8")
    (tmp_path / "toy.toml").write_text(SPEC, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(plugins.PLUGINS_ENV, raising=False)
    before = (INVARIANTS.names(), FAMILIES.names(), dict(plugins._loaded), set(sys.modules))
    yield tmp_path
    for name in INVARIANTS.names():
        if name not in before[0]:
            INVARIANTS.unregister(name)
    for name in FAMILIES.names():
        if name not in before[1]:
            FAMILIES.unregister(name)
    plugins._loaded.clear()
    plugins._loaded.update(before[2])
    for name in set(sys.modules) - before[3]:
        if name.startswith("_stability_plugin_"):
            del sys.modules[name]


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def _args(command: str) -> list[str]:
    words = command.split()
    assert words[0] == "stability"
    return [w for w in words[1:] if w != ">"][: words.index(">") - 1 if ">" in words else None]


def test_the_docs_commands_are_the_ones_tested() -> None:
    assert [c.split()[1] for c in COMMANDS] == ["list", "explain", "schema", "check", "check", "sweep"]


def test_list_explain_and_schema_show_the_plugins_entries(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(_args(COMMANDS[0]), capsys)
    assert code == 0 and "scaled" in out and "output_growth" in out and "a closed form for every ratio" in out
    code, out, _ = _run(_args(COMMANDS[1]), capsys)
    assert (
        code == 0
        and out.startswith("output_growth: the output's second moment stays within max_ratio")
        and "Glorot, Bengio (2010)" in out
    )
    code, out, _ = _run(_args(COMMANDS[2]), capsys)
    schema = json.loads(out)
    assert code == 0 and "output_growth" in schema["$defs"]["Expect"]["properties"]
    assert "scaled" in json.dumps(schema["properties"]["family"]) and "gain" in schema["$defs"]["Block"]["properties"]


def test_check_in_workers_finds_the_closed_form_failure_and_the_html_shows_it(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run([*_args(COMMANDS[3]), "--json", "r.json", "-q"], capsys)
    report = json.loads((project / "r.json").read_text())
    results = {r["name"]: r for r in report["specs"][0]["invariants"]}
    assert code == 1, out + err
    growth, arrival = results["output_growth"], results["gradient_arrival"]
    assert not growth["met"] and growth["case"]["depth"] == 4  # 1.44^4 = 4.30 > 4 > 1.44^3 = 2.99
    assert growth["observed"] == approx(1.2**8, rel=1e-5)
    assert arrival["met"] and arrival["observed"] == approx(1.2 ** arrival["case"]["depth"], rel=1e-5)
    html = (project / "report" / "index.html").read_text()
    assert "output_growth" in html and "a closed form for every ratio" in html


def test_only_and_an_in_process_replay_judge_alike(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run([*_args(COMMANDS[4]), "--json", "here.json"], capsys)
    here = json.loads((project / "here.json").read_text())["specs"][0]["invariants"]
    assert (
        code == 0
        and [r["name"] for r in here] == ["output_growth"]
        and here[0]["observed"] == approx(1.44**3, rel=1e-5)
    )
    workers = [a for a in _args(COMMANDS[4]) if a != "--in-process"]
    code, _, _ = _run([*workers, "--json", "workers.json"], capsys)
    there = json.loads((project / "workers.json").read_text())["specs"][0]["invariants"]
    assert code == 0 and there[0]["observed"] == here[0]["observed"] and there[0]["met"] == here[0]["met"]
    code, _, err = _run(["check", "toy.toml", "--plugin", "toy_plugin.py", "--only", "output_grwth"], capsys)
    assert code == 2 and 'did you mean "output_growth"' in err


def test_a_sweep_finds_the_closed_form_budget(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run([*_args(COMMANDS[5]), "--db", "s.sqlite", "-q"], capsys)
    assert code == 0, out + err
    rows = [line for line in out.splitlines() if "output_growth" in line]
    assert rows and re.search(r"output_growth\s*│\s*3\s*│", rows[0]), out  # holds at depth 3, fails at 4


@pytest.mark.slow  # a pytest run in a subprocess
def test_pytest_collects_the_toy_spec_with_the_ini_option(project: Path) -> None:
    (project / "specs").mkdir()
    (project / "toy.toml").rename(project / "specs" / "toy.toml")
    (project / "pytest.ini").write_text("[pytest]\nstability_plugins = toy_plugin.py\n")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--stability-profile", "ci", "-rA"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "PASSED specs/toy.toml::gradient_arrival" in run.stdout, run.stdout + run.stderr
    assert "FAILED specs/toy.toml::output_growth" in run.stdout and "E[y²]/E[x²] = 4.3" in run.stdout, run.stdout


def test_a_plugin_file_in_a_folder_whose_name_is_not_utf8_loads(tmp_path: Path) -> None:
    """Its private module name is made from the path's bytes (a surrogate escape to Python), not
    refused with a UnicodeEncodeError."""
    import os

    folder = tmp_path / os.fsdecode(b"pl\xff")
    folder.mkdir()
    (folder / "quiet_plugin.py").write_text("LOADED = True\n", encoding="utf-8")
    module = plugins._load_file(folder / "quiet_plugin.py")
    assert module.LOADED is True


def test_a_plugin_and_a_factory_module_are_imported_by_one_routine_under_names_of_their_own(tmp_path: Path) -> None:
    """`stability.families.factory.import_file` imports both (plugins.py calls it): the same file
    as a plugin and as a factory's module gets two private names, each the same in every process;
    an import that fails leaves nothing in `sys.modules`, so the file can be fixed and loaded."""
    from stability.families.factory import import_file

    path = tmp_path / "blocks.py"
    path.write_text("COUNT = [0]\nCOUNT[0] += 1\n", encoding="utf-8")
    plugin = plugins._load_file(path)
    factory = import_file(path, kind="factory", label="blocks")
    assert plugin is not factory and plugin.COUNT == factory.COUNT == [1]
    assert plugin.__name__.startswith("_stability_plugin_") and plugin.__name__.endswith("_blocks")
    assert factory.__name__ == plugin.__name__.replace("_plugin_", "_factory_")
    assert import_file(path, kind="factory", label="blocks") is factory  # once per process
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('not yet')\n", encoding="utf-8")
    with pytest.raises(RuntimeError, match="not yet"):
        import_file(broken, kind="plugin", label="broken")
    assert not [n for n in sys.modules if n.startswith("_stability_") and n.endswith("_broken")]  # its own names
    broken.write_text("FIXED = True\n", encoding="utf-8")
    assert import_file(broken, kind="plugin", label="broken").FIXED is True
