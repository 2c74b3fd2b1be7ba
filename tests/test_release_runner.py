"""The release runner's logic without installing a release: pip, the child processes and the
support matrix are replaced by fakes, so each test is unit-sized (stability/run/releases.py,
stability/run/release_sides.py); and the matrix's `--sample` refused when misspelt, exit 5 when it
names no spec of the release's library. What a real install does is tests/test_releases.py's slow tests."""

from __future__ import annotations

import json
import subprocess
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from spec_support import ZOO

from stability.errors import SpecError, UsageError
from stability.run import release_sides, releases
from stability.run.release_sides import check_sides, imports, run_side
from stability.run.releases import LIBRARIES, Release, install, library_of_spec, matrix, parse_release

# ----------------------------------------------------------------------------- naming and installing


def test_a_release_with_trailing_text_is_refused_not_read_as_its_prefix() -> None:
    for bad in ["transformers==4.53.3 junk", "timm==0.9.16,timm==1.0"]:
        with pytest.raises(UsageError, match="not LIBRARY==VERSION"):
            parse_release(bad)


def _wheel(folder: Path, name: str, version: str, requires: Sequence[str] = ()) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as z:
        z.writestr(
            f"{name}-{version}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + "".join(f"Requires-Dist: {r}\n" for r in requires),
        )


@pytest.fixture
def pip(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every pip command the runner gives, answered without pip: a download finds the cached
    wheel, an install writes one file into its --target."""
    calls: list[list[str]] = []

    def fake(*args: str) -> subprocess.CompletedProcess[str]:
        calls.append(list(args))
        if args[0] == "install":
            target = Path(args[args.index("--target") + 1])
            (target / "installed.txt").write_text(" ".join(args), encoding="utf-8")
        return subprocess.CompletedProcess(list(args), 0, "", "")

    monkeypatch.setattr(releases, "_pip", fake)
    return calls


def test_a_release_installs_without_dependencies_with_the_newest_wheel_s_missing_requirements_and_once(
    tmp_path: Path, pip: list[list[str]]
) -> None:
    wheels = tmp_path / "wheels"
    _wheel(wheels, "transformers", "9.9.9", ["Torch<0.1", "TIMM<0.1", "no-such-a>=1"])  # torch, timm: unmet
    _wheel(wheels, "no_such_a", "1.0")  # older: needs nothing more
    _wheel(wheels, "no_such_a", "2.0", ["no-such-b"])  # the newest, the one pip chose: needs no-such-b
    _wheel(wheels, "no_such_b", "1.0")
    target = install(parse_release("transformers==9.9.9"), cache=tmp_path)
    assert target == tmp_path / "releases" / "transformers-9.9.9"
    (command,) = [c for c in pip if c[0] == "install"]
    assert "--no-deps" in command and "--no-index" in command
    assert command[command.index("--target") + 1] == str(target)
    # torch and the matrix's libraries however spelt never; the newest wheel's requirement in turn
    assert command[-3:] == ["transformers==9.9.9", "no-such-a>=1", "no-such-b"]
    record = json.loads((target / ".stability-release.json").read_text(encoding="utf-8"))
    assert record == {"release": "transformers==9.9.9", "requirements": ["no-such-a>=1", "no-such-b"]}
    pip.clear()
    assert install(parse_release("transformers==9.9.9"), cache=tmp_path) == target
    assert pip == []  # installed once: reused


def test_a_half_installed_release_folder_is_installed_again(tmp_path: Path, pip: list[list[str]]) -> None:
    _wheel(tmp_path / "wheels", "timm", "0.9.16")
    (tmp_path / "releases" / "timm-0.9.16").mkdir(parents=True)  # a run killed before its record was written
    install(parse_release("timm==0.9.16"), cache=tmp_path)
    assert [c[0] for c in pip].count("install") == 1


def test_a_spec_names_a_release_s_library_only_if_it_is_one_of_the_matrix(tmp_path: Path) -> None:
    spec = tmp_path / "s.toml"
    for model, library in [("timm:resnet18", "timm"), ("numpy:ones", None), ("mymodels:net", None)]:
        spec.write_text(f'[block]\nmodel = "{model}"\n', encoding="utf-8")
        assert library_of_spec(spec) == library


# ----------------------------------------------------------------------------- a session under a release


def _specs(folder: Path, *names: str) -> list[Path]:
    out = []
    for name in names:
        path = folder / f"{name}.toml"
        path.write_text('[block]\nmodel = "transformers:BertModel"\n', encoding="utf-8")
        out.append(path)
    return out


class Session:
    """`_inside` with the support matrix, the loader and the child processes replaced."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from stability.families import library_support
        from stability.run import report_model
        from stability.spec import load

        self.refused: set[str] = set()  # the specs this release refuses
        self.expected: dict[str, str] = {}  # the support matrix's expected refusals
        self.differs: dict[str, str] = {}  # the specs built with another init
        self.codes: dict[str, int] = {}  # a check's exit code by the spec it runs
        self.side = 0  # the release side's exit code
        self.side_errors: list[str] = []
        self.commands: list[list[str]] = []
        monkeypatch.setattr(library_support, "expected_refusal", lambda name, lib=None: self.expected.get(name))
        monkeypatch.setattr(library_support, "expected_init_difference", lambda name: self.differs.get(name))
        monkeypatch.setattr(load, "load_spec", self.load)
        monkeypatch.setattr(report_model, "read_report", lambda text: SimpleNamespace(errors=json.loads(text)))
        monkeypatch.setattr(subprocess, "run", self.run)

    def load(self, path: Path) -> None:
        if Path(path).name in self.refused:
            raise SpecError(str(path), "block.model", "needs another release")

    def run(self, command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        self.commands.append(list(command))
        if "stability.report.release_side" in command:
            out = Path(command[command.index("--out") + 1])
            (out / "report.json").write_text(json.dumps(self.side_errors), encoding="utf-8")
            return subprocess.CompletedProcess(command, self.side)
        code = max((c for name, c in self.codes.items() if any(x.endswith(name) for x in command)), default=0)
        return subprocess.CompletedProcess(command, code)

    def checks(self) -> list[list[str]]:
        return [c for c in self.commands if c[2:4] == ["stability", "check"]]


@pytest.fixture
def session(monkeypatch: pytest.MonkeyPatch) -> Session:
    return Session(monkeypatch)


def _inside(paths: list[Path]) -> int:
    return releases.main(["--inside", *map(str, paths), "--profile", "thorough", "--depths", "3"])


def test_a_session_that_agrees_with_the_support_matrix_runs_the_gate_and_the_corner_cases(
    session: Session, tmp_path: Path
) -> None:
    paths = _specs(tmp_path, "a", "b", "c")
    session.expected = {"c.toml": "transformers >= 9"}  # refused, as expected: not run, not wrong
    session.refused = {"c.toml"}
    assert _inside(paths) == 0
    (gate,) = session.checks()
    assert gate[4:] == [str(paths[0]), str(paths[1]), "--profile", "thorough", "-q", "--jobs", "1"]
    (side,) = [c for c in session.commands if "stability.report.release_side" in c]
    assert side[side.index("--depths") + 1] == "3" and side[-2:] == [str(paths[0]), str(paths[1])]


@pytest.mark.parametrize(
    "setup",
    [
        "unexpected refusal",
        "unexpected load",
        "every spec refused",
        "gate fails",
        "must-fail spec errors",
        "corner case error",
        "side crashed",
    ],
)
def test_a_session_that_disagrees_or_fails_is_never_exit_0(setup: str, session: Session, tmp_path: Path) -> None:
    paths = _specs(tmp_path, "a", "b")
    want = 1
    if setup == "unexpected refusal":
        session.refused = {"b.toml"}
    elif setup == "unexpected load":
        session.expected = {"b.toml": "transformers >= 9"}
    elif setup == "every spec refused":
        session.refused = {"a.toml", "b.toml"}
    elif setup == "gate fails":
        session.codes = {"a.toml": 1}
    elif setup == "must-fail spec errors":  # its gate must fail (1); a spec that errors (2) is no such proof
        session.differs = {"b.toml": "another init"}
        session.codes = {"b.toml": 2}
    elif setup == "corner case error":
        session.side_errors, want = ["a.toml: a case did not run"], 2
    else:
        session.side, want = 3, 2
    assert _inside(paths) == want


def test_a_spec_built_with_another_init_runs_alone_and_its_gate_must_fail(session: Session, tmp_path: Path) -> None:
    paths = _specs(tmp_path, "a", "b")
    session.differs = {"b.toml": "transformers 4.54 inits Mamba otherwise"}
    session.codes = {"b.toml": 1}
    assert _inside(paths) == 0
    alone, rest = session.checks()
    assert alone[4] == str(paths[1]) and str(paths[1]) not in rest and str(paths[0]) in rest


def test_the_session_s_child_runs_inside_the_release_with_its_profile(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _specs(tmp_path, "bert")
    got: list[list[str]] = []
    monkeypatch.setattr(releases, "environment", lambda release, cache: ("py", {}))
    monkeypatch.setattr(subprocess, "run", lambda c, **_: got.append(c) or subprocess.CompletedProcess(c, 0))
    assert releases.matrix(parse_release("transformers==9.9.9"), tmp_path, profile="thorough", depths="5") == 0
    assert got == [
        ["py", "-m", "stability.run.releases", "--inside"]
        + ["--profile", "thorough", "--depths", "5", str(tmp_path / "bert.toml")]
    ]


def test_the_matrix_s_command_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    got: list[Any] = []
    monkeypatch.setattr(releases, "matrix", lambda release, folder, **kw: got.append((release, kw)) or 0)
    monkeypatch.setattr(releases, "_inside", lambda paths, **kw: got.append(paths) or 0)
    assert releases.main(["transformers==9.9.9", "--sample", "bert,vit", "--zoo", str(tmp_path)]) == 0
    assert got.pop()[1]["sample"] == ["bert", "vit"]
    assert releases.main(["--inside", "a.toml", "b.toml"]) == 0
    assert got.pop() == [Path("a.toml"), Path("b.toml")]
    assert releases.main([str(tmp_path)]) == 2  # a folder: the matrix installs releases
    assert releases.main(["transformers>=4"]) == 2
    assert got == []


# ----------------------------------------------------------------------------- the two sides of zoo --compare


def _child(monkeypatch: pytest.MonkeyPatch, stdout: str = "", make: Callable[[list[str]], None] | None = None) -> Any:
    seen = SimpleNamespace(command=None, env=None)
    monkeypatch.setattr(release_sides, "environment", lambda release, cache: ("py", {"HOME": "/h"}))

    def run(command: list[str], *, env: dict[str, str], **_: Any) -> subprocess.CompletedProcess[str]:
        seen.command, seen.env = command, env
        if make is not None:
            make(command)
        return subprocess.CompletedProcess(command, 0, stdout, "")

    monkeypatch.setattr(subprocess, "run", run)
    return seen


def test_a_side_is_asked_about_every_library_and_its_last_line_is_its_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = {"timm": {"version": "1.0", "folder": None, "error": None}}
    seen = _child(monkeypatch, "a warning the release prints\n" + json.dumps(answer) + "\n")
    assert imports(parse_release("timm==1.0"), ["timm", "transformers"]) == answer
    assert seen.command[-2:] == ["--imports", "timm,transformers"]
    _child(monkeypatch, "Traceback … not JSON\n")
    with pytest.raises(UsageError, match="stability does not run under it"):
        imports(parse_release("timm==1.0"), ["timm"])


def _lib(version: str | None, folder: str | None = None) -> dict[str, str | None]:
    return {"version": version, "folder": folder, "error": None if version else "ModuleNotFoundError: x"}


def _check(
    monkeypatch: pytest.MonkeyPatch, a: Release, b: Release, paths: list[str], got: dict[str, dict[str, Any]]
) -> list[list[str]]:
    asked: list[list[str]] = []
    monkeypatch.setattr(release_sides, "imports", lambda release, libs, cache: asked.append(libs) or got[release.label])
    check_sides(a, b, paths)
    return asked


def test_sides_are_asked_about_the_libraries_their_specs_name_or_every_library(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    a, b = parse_release("timm==1.0"), parse_release("timm==2.0")
    every = {x: _lib("1") for x in LIBRARIES}
    got = {a.label: every, b.label: {**every, "timm": _lib("2")}}
    plain = tmp_path / "mlp.toml"
    plain.write_text('[block]\nkind = "mlp"\n', encoding="utf-8")
    assert _check(monkeypatch, a, b, [str(plain)], got) == [list(LIBRARIES), list(LIBRARIES)]


def test_one_release_spelt_twice_is_refused_before_either_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[Any] = []
    monkeypatch.setattr(release_sides, "imports", lambda *a, **k: asked.append(a))
    with pytest.raises(UsageError, match="are the same release"):
        check_sides(parse_release("timm==1.0"), parse_release(" timm==1.0 "), [])
    assert asked == []


def test_a_side_where_any_library_does_not_import_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    paths = [str(p) for p in _specs(tmp_path, "bert")]
    (tmp_path / "vit.toml").write_text('[block]\nmodel = "timm:vit"\n', encoding="utf-8")
    paths.append(str(tmp_path / "vit.toml"))
    a, b = parse_release("timm==1.0"), parse_release("timm==2.0")
    got = {a.label: {"timm": _lib("1.0"), "transformers": _lib(None)}, b.label: {"timm": _lib("2.0")}}
    with pytest.raises(UsageError, match="timm==1.0: transformers does not import"):
        _check(monkeypatch, a, b, paths, got)


def test_a_folder_that_holds_one_of_the_libraries_and_a_shared_version_are_compared(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    paths = [str(p) for p in _specs(tmp_path, "bert")]
    (tmp_path / "vit.toml").write_text('[block]\nmodel = "timm:vit"\n', encoding="utf-8")
    paths.append(str(tmp_path / "vit.toml"))
    folder = tmp_path / "site"
    (folder / "transformers").mkdir(parents=True)
    a, b = parse_release("transformers==4.0"), parse_release(str(folder))
    got = {
        a.label: {"timm": _lib("1.0", "/env/timm"), "transformers": _lib("4.0", "/cache/transformers")},
        b.label: {"timm": _lib("1.0", "/env/timm"), "transformers": _lib("5.0", str(folder / "transformers"))},
    }
    assert _check(monkeypatch, a, b, paths, got) == [["timm", "transformers"]] * 2


def _report(command: list[str]) -> None:
    out = Path(command[command.index("--out") + 1])
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text("{}", encoding="utf-8")


def test_a_side_runs_at_every_depth_with_the_plugins_and_side_a_s_report(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen = _child(monkeypatch, make=_report)
    out = run_side(
        parse_release("timm==1.0"),
        ["x.toml"],
        depths=(4, 8),
        out=tmp_path / "b",
        baseline=tmp_path / "a" / "report.json",
        plugins=["my_invariants"],
    )
    assert out == tmp_path / "b"
    assert seen.command[seen.command.index("--depths") + 1] == "4,8"
    assert seen.command[-2:] == ["--baseline", str(tmp_path / "a" / "report.json")]
    assert "my_invariants" in seen.env["STABILITY_PLUGINS"] and seen.env["HOME"] == "/h"


def test_a_side_that_wrote_no_report_did_not_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _child(monkeypatch)
    with pytest.raises(UsageError, match="the zoo did not run under it"):
        run_side(parse_release("timm==1.0"), ["x.toml"], depths=(4,), out=tmp_path / "a")


def test_the_matrix_with_a_misspelt_sample_or_no_spec_judges_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError, match=r"--sample brt: no zoo spec brt.toml in .* \(did you mean \"bert\"\?\)"):
        matrix(parse_release("transformers==4.53.3"), ZOO, sample=["brt"])
    assert matrix(parse_release("timm==1.0.9"), ZOO, sample=["bert"]) == 5  # bert is no timm spec: nothing run
    assert "nothing was judged" in capsys.readouterr().err
