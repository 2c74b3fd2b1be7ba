"""The docs cannot drift from the code: every spec key is documented with its real default, the
TOML examples load, and the CI workflow only uses options `stability check` accepts."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from cli_support import Cli
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from stability.cli import main
from stability.spec.init_expect import InitConformance
from stability.spec.lm_expect import AttentionLogits, EarlyWarning, LossSpike, LRSensitivity, OutputLogits
from stability.spec.load import parse_spec
from stability.spec.schema import (
    AttentionEntropy,
    Block,
    Expect,
    GradientArrival,
    GradientBalance,
    IdentityAtInit,
    JacobianSpread,
    Lesion,
    MeanFieldRate,
    MeanShift,
    Probe,
    RankCollapse,
    ResidualSize,
    Space,
    Spec,
    Train,
    Trainability,
    UpdateSize,
    VarianceGrowth,
)

DOCS = Path(__file__).resolve().parent.parent / "docs"
MODELS: list[type[BaseModel]] = [
    Spec,
    Block,
    Space,
    Expect,
    GradientArrival,
    VarianceGrowth,
    IdentityAtInit,
    Probe,
    RankCollapse,
    AttentionEntropy,
    GradientBalance,
]
MODELS += [JacobianSpread, MeanFieldRate, Lesion]
MODELS += [Train, UpdateSize, Trainability, ResidualSize]  # the training checks (docs/training.md)
MODELS += [MeanShift, InitConformance]
MODELS += [AttentionLogits, OutputLogits, LossSpike, EarlyWarning, LRSensitivity]  # the language-model run's


def _read(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def _section(text: str, model: type[BaseModel]) -> str:
    """The text under the heading that names the model, e.g. "## `[block]` (`Block`)"."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("#") and f"(`{model.__name__}`)" in line), None)
    assert start is not None, f"docs/specs.md has no heading naming `{model.__name__}`"
    end = next((i for i in range(start + 1, len(lines)) if re.match(r"#{2,3} ", lines[i])), len(lines))
    return "\n".join(lines[start:end])


def _rows(section: str) -> dict[str, list[str]]:
    """Table rows keyed by their first cell's `key`."""
    rows = {}
    for line in section.splitlines():
        m = re.match(r"\| `(\w+)` \|", line)
        if m:
            rows[m.group(1)] = [cell.strip() for cell in line.strip().strip("|").split("|")]
    return rows


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


# ----------------------------------------------------------------------------- README.md

ROOT = DOCS.parent
QUICKSTART = ROOT / "stability" / "examples" / "quickstart"
#: The lines a run whose output is not a terminal adds as each spec finishes (a terminal shows a
#: progress bar instead, which the README's pasted output leaves out).
PROGRESS = re.compile(r"^[✓✗] \S+: .*; \d+ case\(s\) probed in ")


def test_the_readme_shows_the_quickstart_spec_as_shipped() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = next(b for b in _blocks(readme, "toml") if b.startswith("# stability/examples/quickstart/residual.toml"))
    assert shown.partition("\n")[2] == (QUICKSTART / "residual.toml").read_text(encoding="utf-8")
    plain, residual = ((QUICKSTART / f"{n}.toml").read_text(encoding="utf-8") for n in ("plain", "residual"))

    def claim(text: str) -> str:  # what the README says the two share: everything from [block] on
        return text[text.index("[block]") :].replace('branch_init = ["default"]\n', "")

    assert claim(plain) == claim(residual) and 'family = "plain"' in plain and 'family = "preact"' in residual


def test_the_readme_first_example_prints_what_the_readme_shows(monkeypatch: pytest.MonkeyPatch, cli: Cli) -> None:
    """The README's first example, pasted from a terminal: every line the command prints today
    matches it, but the times ("… s") and the number of workers the summary names. (The command
    stands in the prose, not in a block: the README's first two commands are the set-up's.) It runs
    as `stability`'s entry point runs it, `main(argv)` from the repository's root, output not a
    terminal; the installed command itself is run by tests/test_package.py."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    pasted = re.search(
        r"`(stability check stability/examples/quickstart[^`]*)` prints.*?^```text\n(.*?)^```$", readme, re.S | re.M
    )
    assert pasted, "README.md shows no output of `stability check stability/examples/quickstart`"
    command, shown = pasted.groups()
    for name in ("CI", "STABILITY_PROFILE", "GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY"):  # no job summary or annotations
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(ROOT)
    code, out, err = cli(*shlex.split(command)[1:])
    assert code == 1, out + err  # the control fails

    def untimed(lines: list[str]) -> list[str]:
        lines = [re.sub(r"(?:[0-9.]+|…) s\b", "T s", ln).rstrip() for ln in lines if not PROGRESS.match(ln)]
        return [re.sub(r"\(summed over \d+ workers: ", "(", ln) for ln in lines]

    assert untimed(out.splitlines()) == untimed(shown.splitlines())
    assert err == ""


# ----------------------------------------------------------------------------- docs/specs.md


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_field_is_documented_in_its_section(model: type[BaseModel]) -> None:
    section = _section(_read("specs.md"), model)
    missing = [name for name in model.model_fields if f"`{name}`" not in section]
    assert not missing, f"docs/specs.md, section {model.__name__}: document {missing}"


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_documented_defaults_match_the_models(model: type[BaseModel]) -> None:
    rows = _rows(_section(_read("specs.md"), model))
    for name, field in model.model_fields.items():
        if name in ("path", "options"):  # set by the loader, not by a spec (both are documented as such)
            continue
        assert name in rows, f"docs/specs.md, section {model.__name__}: add a table row for `{name}`"
        default_cell = rows[name][2]
        default: Any = field.default
        if default is PydanticUndefined and field.default_factory is None:
            assert "required" in default_cell, f"`{name}` is required; its default cell says {default_cell!r}"
        elif isinstance(default, bool):
            assert str(default).lower() in default_cell
        elif isinstance(default, str):
            assert f'"{default}"' in default_cell, (
                f"`{name}` defaults to {default!r}; its default cell says {default_cell!r}"
            )
        elif isinstance(default, (int, float)):
            assert re.search(rf"`{re.escape(repr(default))}`", default_cell), (
                f"`{name}` defaults to {default!r}; its default cell says {default_cell!r}"
            )


def test_every_family_and_choice_is_named() -> None:
    text = _read("specs.md")
    schema_defs = Spec.model_json_schema()["$defs"]
    for model_name in ("Block", "Space", "GradientArrival", "VarianceGrowth", "Probe"):
        for name, prop in schema_defs[model_name]["properties"].items():
            enum = prop.get("enum") or prop.get("items", {}).get("enum") or []
            for choice in enum:
                assert f'"{choice}"' in text, f"docs/specs.md: `{name}` choice {choice!r} is not mentioned"
    for family in Spec.model_json_schema()["properties"]["family"]["enum"]:
        assert f"`{family}`" in text


def test_the_spec_examples_load() -> None:
    full = [b for b in _blocks(_read("specs.md"), "toml") if "family =" in b]
    assert full, "docs/specs.md should show a complete spec"
    for block in full:
        parse_spec(block, file="docs/specs.md")


def test_schema_wiring_is_documented() -> None:
    text = _read("specs.md")
    assert "stability schema > stability-spec.schema.json" in text
    assert "#:schema " in text and "[[rule]]" in text and "[rule.schema]" in text


# ----------------------------------------------------------------------------- docs/custom-architectures.md


def test_tutorial_files_are_valid() -> None:
    text = _read("custom-architectures.md")
    specs = [b for b in _blocks(text, "toml") if 'family = "custom"' in b]
    assert specs
    for block in specs:
        spec = parse_spec(block, file="specs/my_arch.toml")
        assert spec.block.factory == "my_blocks:make_blocks"
    for block in _blocks(text, "python"):
        compile(block, "my_blocks.py", "exec")
    assert "def make_blocks(" in text and "torch==2.13.0" in text
    assert "only code a spec can run" in text and "exit code 1" in text and "exit code 0" in text


@pytest.mark.slow  # two check subprocesses; nightly
def test_the_tutorials_pasted_replay_is_what_the_replay_prints(tmp_path: Path) -> None:
    """§5 of custom-architectures.md shows a `--case` replay "pasted unedited": it must match what
    that replay prints today, every line but the time taken."""
    import os
    import subprocess
    import sys

    text = _read("custom-architectures.md")
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "my_blocks.py").write_text(_blocks(text, "python")[0])
    (tmp_path / "specs" / "my_arch.toml").write_text(next(b for b in _blocks(text, "toml") if 'family = "custom"' in b))
    shown = next(b for b in _blocks(text, "text") if "--case depth=1" in b.splitlines()[0])
    command = shown.splitlines()[0].removeprefix("$ ").split(";")[0]
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "STABILITY_PROFILE")} | {
        "COLUMNS": "200",
        "OMP_NUM_THREADS": "1",
    }
    argv = [sys.executable, "-m", "stability", *shlex.split(command)[1:]]
    run = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    printed = (run.stdout + run.stderr).splitlines() + [f"exit code {run.returncode}"]

    def untimed(lines: list[str]) -> list[str]:  # the docs leave times out ("… s")
        return [re.sub(r"(?:[0-9.]+|…) s\b", "T s", ln).rstrip() for ln in lines]

    assert untimed(printed) == untimed(shown.splitlines()[1:])


# ----------------------------------------------------------------------------- docs/ci.md


def _check_options(capsys: pytest.CaptureFixture[str]) -> set[str]:
    with pytest.raises(SystemExit) as exc:
        main(["check", "--help"])
    assert exc.value.code == 0
    return set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", capsys.readouterr().out))


def test_ci_workflow_uses_only_real_options(capsys: pytest.CaptureFixture[str]) -> None:
    yaml = pytest.importorskip("yaml")
    block = _blocks(_read("ci.md"), "yaml")[0]  # the workflow; the other examples: tests/test_ci_files.py
    workflow = yaml.safe_load(block)
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    runs = [line.strip() for step in steps for line in str(step.get("run", "")).splitlines()]
    checks = [shlex.split(line) for line in runs if line.startswith("stability check")]
    assert checks, "docs/ci.md: the workflow should run `stability check`"
    known = _check_options(capsys)
    for argv in checks:
        used = {arg.split("=", 1)[0] for arg in argv if arg.startswith("-")}
        assert used <= known, f"docs/ci.md: `stability check` has no option {sorted(used - known)}"
        assert {"--junit", "--html", "--json", "--profile"} <= used
        assert argv[argv.index("--profile") + 1] in ("ci", "thorough")
    assert any("torch==2.13.0" in line and "download.pytorch.org/whl/cpu" in line for line in runs)
    assert "pip install ." in runs
    uses = [step.get("uses", "") for step in steps]
    assert any(u.startswith("actions/upload-artifact@") for u in uses)
    cache = next(step for step in steps if str(step.get("uses", "")).startswith("actions/cache@"))
    paths = cache["with"]["path"].split()
    assert ".hypothesis/" in paths and ".asv/results" in paths
    upload = next(step for step in steps if str(step.get("uses", "")).startswith("actions/upload-artifact@"))
    assert (
        upload.get("if") == "always()"
        and "stability.xml" in upload["with"]["path"]
        and "stability-report/" in upload["with"]["path"]
    )


def test_ci_doc_explains_replay() -> None:
    text = _read("ci.md")
    assert "derandomized" in text and "--case" in text and "space.examples" in text
