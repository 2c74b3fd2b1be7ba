"""The CI integration files and examples: `.pre-commit-hooks.yaml`, `action.yml` and every YAML
example in docs/ci.md parse, and every `stability check` command in them is one the CLI's own
parser accepts; `pre-commit try-repo` runs the hook on this repository."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from spec_support import ROOT

from stability.cli.grammar import parser

yaml = pytest.importorskip("yaml")

#: What the examples' variables stand for when their commands are parsed.
VALUES = {"$PATHS": "specs", '"$PROFILE"': "ci", "$ARGS": "--sarif stability.sarif"}
COMMAND = re.compile(r"(?:^|[\s/])stability check(?P<args>.*?)(?:\|\||&&|;|$)")


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _doc_blocks() -> list[Any]:
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    return [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, flags=re.S)]


def _commands(text: str) -> list[list[str]]:
    """The argument lists of every `stability check` in shell text (variables substituted)."""
    for name, value in VALUES.items():
        text = text.replace(name, value)
    text = re.sub(r"\$\{\{.*?\}\}", "X", text)
    return [shlex.split(m.group("args")) for line in text.splitlines() for m in COMMAND.finditer(line)]


def _parses(argv: list[str]) -> Any:
    """The CLI parser's reading of `stability check ARGV` (an unknown option raises UsageError)."""
    return parser().parse_args(["check", *argv])


def _steps(block: Any) -> list[dict[str, Any]]:
    if "jobs" in block:
        return [step for job in block["jobs"].values() for step in job.get("steps", [])]
    return list(block.get("steps", []))


def test_the_hook_definition() -> None:
    (hook,) = _load(ROOT / ".pre-commit-hooks.yaml")
    assert hook["id"] == "stability-check" and hook["language"] == "system"
    entry = shlex.split(hook["entry"])
    assert entry[:2] == ["stability", "check"]
    args = _parses([*entry[2:], "specs/a.toml", "specs/blocks.py"])  # pre-commit appends the changed files
    assert args.changed and args.profile == "ci" and args.paths == ["specs/a.toml", "specs/blocks.py"]
    assert all(re.search(hook["files"], f) for f in ("specs/a.toml", "model/blocks.py")) and not re.search(
        hook["files"], "README.md"
    )


def test_the_composite_action() -> None:
    action = _load(ROOT / "action.yml")
    steps = action["runs"]["steps"]
    assert action["runs"]["using"] == "composite"
    assert all("shell" in step for step in steps if "run" in step)  # a composite step must name its shell
    (check,) = [c for step in steps for c in _commands(str(step.get("run", "")))]
    args = _parses(check)
    assert (
        args.github and args.junit and args.json and args.html == "stability-report" and args.sarif == "stability.sarif"
    )
    ids = {step.get("id") for step in steps}
    assert "check" in ids and "steps.check.outputs.exit-code" in action["outputs"]["exit-code"]["value"]
    upload = next(step for step in steps if str(step.get("uses", "")).startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()" and args.html + "/" in upload["with"]["path"]
    assert steps[-1]["run"].strip() == 'exit "${{ steps.check.outputs.exit-code }}"'
    uses = [b for b in _doc_blocks() for step in _steps(b) if str(step.get("uses", "")).startswith("OWNER/stability@")]
    assert uses, "docs/ci.md shows the action in use"
    for block in uses:
        for step in _steps(block):
            if str(step.get("uses", "")).startswith("OWNER/stability@"):
                assert set(step["with"]) <= set(action["inputs"]), "docs/ci.md passes an input the action does not have"
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    assert all(f"`{name}`" in text for name in action["inputs"]), "docs/ci.md lists every input of the action"


def test_every_example_in_the_ci_docs_parses_and_its_commands_are_real() -> None:
    blocks = _doc_blocks()
    assert len(blocks) >= 6
    commands = []
    for block in blocks:
        if "repos" in block:  # .pre-commit-config.yaml
            ids = {h["id"] for h in _load(ROOT / ".pre-commit-hooks.yaml")}
            assert {h["id"] for repo in block["repos"] for h in repo["hooks"]} <= ids
            continue
        if "stability" in block and "script" in block["stability"]:  # .gitlab-ci.yml
            job = block["stability"]
            (argv,) = [c for line in job["script"] for c in _commands(line)]
            assert job["artifacts"]["reports"]["junit"] == _parses(argv).junit and job["artifacts"]["when"] == "always"
            commands.append(argv)
            continue
        steps = _steps(block)
        assert steps, block
        commands += [c for step in steps for c in _commands(str(step.get("run", "")))]
    assert len(commands) >= 6
    parsed = [_parses(argv) for argv in commands]
    assert (
        any(a.baseline == "../base.json" for a in parsed)
        and any(a.sarif for a in parsed)
        and any(a.github is False for a in parsed)
    )


def test_the_command_finder_sees_every_form() -> None:
    assert _commands("cd base && ../env/bin/stability check specs --json ../b.json || test $? = 1") == [
        ["specs", "--json", "../b.json"]
    ]
    assert _commands('stability check $PATHS --profile "$PROFILE" $ARGS') == [
        ["specs", "--profile", "ci", "--sarif", "stability.sarif"]
    ]
    with pytest.raises(Exception, match="unrecognized arguments: --no-such-option"):
        _parses(["specs", "--no-such-option"])


@pytest.mark.slow  # pre-commit clones this repository and installs it into a fresh environment
def test_pre_commit_try_repo_runs_the_hook_on_this_repository(tmp_path: Path) -> None:
    pytest.importorskip("pre_commit")
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: try-repo clones the repository")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "STABILITY_PROFILE", "GITHUB_ACTIONS")}
    env |= {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "PRE_COMMIT_HOME": str(tmp_path / "cache"),
    }
    env |= {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@localhost",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@localhost",
    }

    def try_repo(*files: str) -> subprocess.CompletedProcess[str]:
        argv = [
            sys.executable,
            "-m",
            "pre_commit",
            "try-repo",
            str(ROOT),
            "stability-check",
            "--verbose",
            "--files",
            *files,
        ]
        return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)

    run = try_repo("specs/custom_blocks.py")  # a factory module: its spec is checked
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"stability check \(changed specs and the specs of changed factories\)\.+Passed", run.stdout)
    assert "custom-rezero-mlp" in run.stdout and "1 spec(s), 2 expectation(s): 2 met" in run.stdout
    run = try_repo("pyproject.toml")
    assert run.returncode == 0 and "the changed files affect no spec; nothing to check" in run.stdout, (
        run.stdout + run.stderr
    )


def test_the_workflow_runs_ci_on_every_push_and_pull_request() -> None:
    """.github/workflows/ci.yml: a fork's CI is the project's own script, with the CPU build of
    torch where .ci/install's pinned torch==2.13.0 finds it."""
    workflow = _load(ROOT / ".github" / "workflows" / "ci.yml")
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert set(triggers) == {"push", "pull_request"}
    (job,) = workflow["jobs"].values()
    runs = [step for step in job["steps"] if "run" in step]
    assert runs[-1]["run"].strip() == "bash .ci/run"
    download = next(step["run"] for step in runs if "pip download" in step["run"])
    assert "torch==2.13.0" in download and "https://download.pytorch.org/whl/cpu" in download
    assert "$RUNNER_TEMP/wheels" in download and runs[-1]["env"]["PIP_FIND_LINKS"] == "${{ runner.temp }}/wheels"
    assert "torch==2.13.0" in (ROOT / ".ci" / "install").read_text(encoding="utf-8")
    setup = next(step for step in job["steps"] if str(step.get("uses", "")).startswith("actions/setup-python@"))
    assert setup["with"]["python-version"] == "3.11"


def _pip_installs(text: str) -> list[list[str]]:
    """Each `pip install` command of a shell text, as its arguments (`python -m` and `--quiet` left out)."""
    joined = re.sub(r"\\\n\s*", " ", text)
    found = []
    for line in joined.splitlines():
        line = line.split(" #")[0].strip()
        if line.startswith("#") or "pip install" not in line:
            continue
        words = shlex.split(line.split("pip install", 1)[1])
        found.append([w for w in words if w not in ("--quiet", "-q")])
    return found


def test_the_documented_timm_and_torchvision_install_is_ci_s_and_comes_last() -> None:
    """torchvision 0.16.2 declares torch==2.1.2: a `pip install` after it that touches torch, numpy,
    pillow or requests prints pip's resolver ERROR (docs/library-models.md, section 7). So the
    documented lines are .ci/install's, in its order, and nothing is installed after them."""
    install = _pip_installs((ROOT / ".ci" / "install").read_text(encoding="utf-8"))
    no_deps = ["--no-deps", "torchvision==0.16.2", "timm==1.0.31"]
    assert install[-1] == no_deps, "timm and torchvision are .ci/install's last install"
    assert all("--no-deps" not in words for words in install[:-1])
    for script in ("run", "nightly"):  # both source .ci/install and install nothing more
        assert _pip_installs((ROOT / ".ci" / script).read_text(encoding="utf-8")) == [], script
    doc = (ROOT / "docs" / "library-models.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```sh\n(.*?)```", doc, re.S) if "torchvision==0.16.2" in b)
    *before, last = _pip_installs(block)
    assert last == no_deps, "docs/library-models.md installs timm and torchvision last"
    (deps,) = before
    assert set(deps) <= {w for words in install[:-1] for w in words}, "the same dependencies as .ci/install"
    # The README's set-up installs torch pinned and the test extra, as .ci/install does first.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = next(b for b in re.findall(r"```bash\n(.*?)```", readme, re.S) if "pip install" in b)
    (first,) = _pip_installs(setup.split("&&")[0])
    assert first == ["torch==2.13.0", "-e", ".[test]"]
    assert install[0] == ["torch==2.13.0"] and install[1][:2] == ["-e", ".[test,hf,sweep,browser,matrix]"]
