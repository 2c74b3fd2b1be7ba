"""Docs that run: every Python and shell snippet in README.md and docs/*.md is executed, so a
copied snippet works; and nothing in the repository points outside it.

A fenced block tagged `python` is executed as a module (with the repository root as the working
folder, under the `ci` profile), and every `test_*` function it defines is called, as pytest would.
A block tagged `sh`, `bash`, `shell` or `console` runs under `bash -eu -o pipefail` in a scratch
folder that links the repository's top-level folders (`specs/`, `benchmarks/`, …), with this
environment's `bin/` first on PATH, HOME in the scratch folder and one torch thread, and must
exit 0. A block that installs software or runs for minutes is marked in the Markdown, on the line
before its fence, with `<!-- not-run: REASON -->`; such blocks are not run;
`test_the_docs_have_snippets_and_every_skipped_one_says_why` lists them with that reason
(`pytest -s`). A block that runs but takes tens of seconds is marked `<!-- slow: REASON -->`
instead: it runs under `pytest -m slow` (as .ci/run does). Untagged blocks and blocks tagged `text`,
`toml`, `yaml`, `diff` are shown output or data, not snippets (TOML blocks are loaded by
tests/test_docs.py).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from spec_support import ROOT

DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Fence tag → how the block runs.
KINDS = {"python": "python", "py": "python", "sh": "sh", "bash": "sh", "shell": "sh", "console": "sh"}
FENCE = re.compile(r"^(?P<indent>[ ]*)```(?P<tag>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
NOT_RUN = re.compile(r"^\s*<!--\s*not-run:\s*(?P<reason>.*?)\s*-->\s*$")
SLOW = re.compile(r"^\s*<!--\s*slow:\s*(?P<reason>.*?)\s*-->\s*$")
#: Hypothesis budget for `@given` tests defined by a snippet: the snippet's own settings apply,
#: the number of examples is cut so the docs run in seconds.
SNIPPET_EXAMPLES = 5


@dataclass(frozen=True)
class Snippet:
    path: Path
    line: int
    kind: str  # "python" | "sh"
    body: str
    not_run: str | None  # the reason given by a `<!-- not-run: … -->` marker, or None
    slow: str | None = None  # the reason given by a `<!-- slow: … -->` marker: runs under `-m slow`

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def snippets() -> Iterator[Snippet]:
    for path in DOC_FILES:
        text = path.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            kind = KINDS.get(m.group("tag").lower())
            if kind is None:
                continue
            before = [ln for ln in text[: m.start()].splitlines() if ln.strip()]
            marker = NOT_RUN.match(before[-1]) if before else None
            slow = SLOW.match(before[-1]) if before else None
            body = "\n".join(ln[len(m.group("indent")) :] for ln in m.group("body").splitlines())
            line = text.count("\n", 0, m.start()) + 1
            yield Snippet(
                path,
                line,
                kind,
                body,
                marker.group("reason") if marker else None,
                slow.group("reason") if slow else None,
            )


ALL = list(snippets())


def test_the_docs_have_snippets_and_every_skipped_one_says_why() -> None:
    assert len(ALL) >= 5, [s.id for s in ALL]
    run = [s for s in ALL if s.not_run is None]
    skipped = [s for s in ALL if s.not_run is not None]
    assert run, "no snippet runs"
    for s in skipped:
        assert len(s.not_run or "") >= 10, f"{s.id}: say why the snippet does not run (<!-- not-run: REASON -->)"
    for s in run:
        assert s.slow is None or len(s.slow) >= 10, f"{s.id}: say why the snippet is slow (<!-- slow: REASON -->)"
    print(f"\n{len(run)} snippet(s) run, {len(skipped)} not run:")
    for s in skipped:
        print(f"  {s.id} ({s.kind}): {s.not_run}")


#: Packages of the optional extras (hf, sweep, browser; timm and torchvision where they import): a
#: Python snippet that needs one is skipped, with the reason, where it is not installed.
OPTIONAL = {"transformers", "timm", "torchvision", "dask", "distributed", "playwright"}


def _scratch_folder(tmp_path: Path) -> Path:
    for entry in ROOT.iterdir():
        if entry.name.startswith(".") or entry.name in {"build", "dist"}:
            continue
        (tmp_path / entry.name).symlink_to(entry)
    return tmp_path


#: Only the snippets that run become test items: a not-run block would be a test that always skips;
#: they are listed, with their reasons, by the test above.
RUN = [s for s in ALL if s.not_run is None]


@pytest.mark.parametrize("snippet", [pytest.param(s, id=s.id, marks=[pytest.mark.slow] if s.slow else []) for s in RUN])
def test_snippet_runs(snippet: Snippet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if snippet.kind == "python":
        monkeypatch.chdir(ROOT)
        monkeypatch.setenv(
            "STABILITY_PROFILE", "ci"
        )  # `given_spec` tests take the stability profile's budget: the ci one, 10 examples
        namespace: dict[str, Any] = {"__name__": "docs_snippet"}
        code = compile(snippet.body, snippet.id, "exec")
        try:
            exec(code, namespace)  # the snippet, as a user would paste it into a module
        except ModuleNotFoundError as exc:
            if exc.name not in OPTIONAL:
                raise
            pytest.skip(f"{snippet.id} needs {exc.name}, an optional extra that is not installed here")
        tests = [f for name, f in namespace.items() if name.startswith("test_") and callable(f)]
        settings.register_profile("docs-snippets", settings(max_examples=SNIPPET_EXAMPLES))
        previous = settings._current_profile  # restored below: the suite's own profile stays in force
        settings.load_profile("docs-snippets")
        try:
            for test in tests:
                test()
        finally:
            settings.load_profile(previous or "default")
        return
    home = tmp_path / "home"  # what a snippet writes to ~ (asv's machine file) stays in the scratch folder
    home.mkdir()
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path, "HOME": str(home), "OMP_NUM_THREADS": "1"}
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        ["bash", "-eu", "-o", "pipefail", "-c", snippet.body],
        cwd=_scratch_folder(work),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (
        f"{snippet.id} exited {done.returncode}:\n{snippet.body}\n--- stdout\n{done.stdout[-3000:]}\n--- "
        f"stderr\n{done.stderr[-3000:]}"
    )


def test_nothing_in_the_repository_points_outside_it() -> None:
    """No file refers to a folder beside the repository (the theory is cited from the literature)."""
    outside = "shared" + "/"  # spelled in two parts so this file does not match itself
    try:
        files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: every file but the usual outputs
        files = [
            str(p.relative_to(ROOT))
            for p in ROOT.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)
        ]
    hits = []
    for name in files:
        path = ROOT / name
        if not path.is_file() or path.suffix in {".png", ".jpg", ".gz", ".whl"}:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
            if outside in line:
                hits.append(f"{name}:{number}: {line.strip()[:120]}")
    assert not hits, "these lines point outside the repository; cite the source instead:\n" + "\n".join(hits)


#: The modules a snippet may import from (tests/test_public.py checks what they export); every
#: other module of the package is internal and may change between releases.
PUBLIC = ("stability", "stability.extend", "stability.strategies", "stability.meanfield")
#: A Python program inside a shell snippet: `python - <<'EOF'` … `EOF`.
HEREDOC = re.compile(r"python3? - <<'?(?P<end>\w+)'?\n(?P<body>.*?)\n(?P=end)$", re.M | re.S)


def python_of(snippet: Snippet) -> list[str]:
    """The Python a snippet holds: its body, or each program a shell snippet runs from a heredoc."""
    if snippet.kind == "python":
        return [snippet.body]
    return [m.group("body") for m in HEREDOC.finditer(snippet.body)]


def internal_imports(code: str) -> list[str]:
    """Each import of the package in `code` that is not of a public module's public name:
    `from stability.spec.registry import Invariant`, `import stability.run.engine`, or a name the
    public module's `__all__` does not list."""
    import importlib

    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "stability":
            if node.module not in PUBLIC:
                found.append(f"from {node.module} import {', '.join(a.name for a in node.names)}")
                continue
            listed = importlib.import_module(node.module).__all__
            found += [f"from {node.module} import {a.name}" for a in node.names if a.name not in listed]
        elif isinstance(node, ast.Import):
            found += [
                f"import {a.name}" for a in node.names if a.name.split(".")[0] == "stability" and a.name not in PUBLIC
            ]
    return found


def test_every_snippet_imports_only_public_names() -> None:
    """Every Python snippet of the docs and the README, run or not (a plugin module a user copies
    counts), and every program a shell snippet runs with `python - <<'EOF'`, imports from the public
    modules only (stability/__init__.py says what may change)."""
    found = {s.id: bad for s in ALL for code in python_of(s) if (bad := internal_imports(code))}
    assert found == {}
    assert sum(len(python_of(s)) for s in ALL) >= 10, "the docs' Python was not found"


def test_the_import_check_finds_an_internal_import() -> None:
    code = (
        "import stability\nfrom stability import load_spec, nothing_public\nimport stability.run.engine\n"
        "def f():\n    from stability.spec.registry import Invariant\n    from stability.extend import Invariant\n"
    )
    assert internal_imports(code) == [
        "from stability import nothing_public",
        "import stability.run.engine",
        "from stability.spec.registry import Invariant",
    ]
    shell = Snippet(ROOT / "README.md", 1, "sh", "echo\npython - <<'EOF'\nimport stability.cli\nEOF\n", None)
    assert [internal_imports(code) for code in python_of(shell)] == [["import stability.cli"]]


def test_the_docs_cite_a_public_name_by_its_public_module() -> None:
    """Prose too: `stability.probe_seeds`, not the internal module that defines it (the docs may
    point into internal modules for how a thing works, never for what to call)."""
    import stability
    import stability.extend

    public = set(stability.__all__) | set(stability.extend.__all__)
    cited = re.compile(r"`(stability(?:\.[a-z_]+)+)\.([A-Za-z_]+)")
    found = [
        f"{path.relative_to(ROOT)}:{number}: {m.group(1)}.{m.group(2)}"
        for path in DOC_FILES
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        for m in cited.finditer(line)
        if m.group(2) in public and m.group(1) not in PUBLIC
    ]
    assert found == []
