"""stability/run/changed.py and `stability check --changed`: the specs a commit's files affect (the
pre-commit hook), directly or through a custom spec's factory module."""

from __future__ import annotations

from pathlib import Path

import pytest

from stability.cli import main
from stability.run.changed import affected_specs

PLAIN = (
    'name = "{name}"\ndescription = "d"\nfamily = "plain"\n[space]\ndepth = 2\nwidth = 4\nbatch = '
    '2\nweight_init = ["xavier_normal"]\n[expect.gradient_arrival]\nlo = 0.01\nhi = '
    "100.0\n"
)
CUSTOM = (
    'name = "{name}"\ndescription = "d"\nfamily = "custom"\n[block]\nfactory = '
    '"{factory}"\n[space]\ndepth = 2\nwidth = 4\nbatch = '
    "2\n[expect.gradient_arrival]\nlo = 0.01\nhi = 100.0\n"
)
BLOCKS = (
    "from torch import nn\n\n\ndef make(depth, width):\n    return nn.Sequential(*[nn.Identity() for _ "
    "in range(depth)])\n"
)


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """specs/ with a plain spec, two custom specs on two modules of one name, a helper module and
    a broken spec; a pyproject.toml, an example spec outside specs/ and a factory under lib/."""
    s = tmp_path / "specs"
    (s / "sub").mkdir(parents=True)
    (s / "a.toml").write_text(PLAIN.format(name="a"))
    (s / "b.toml").write_text(CUSTOM.format(name="b", factory="blocks_changed:make"))
    (s / "blocks_changed.py").write_text(BLOCKS)
    (s / "sub" / "c.toml").write_text(CUSTOM.format(name="c", factory="blocks_changed:make"))
    (s / "sub" / "blocks_changed.py").write_text(BLOCKS)
    (s / "helpers.py").write_text("X = 1\n")
    (s / "broken.toml").write_text("name = \n")
    (s / "lib_spec.toml").write_text(CUSTOM.format(name="d", factory="lib_blocks:make"))
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "lib_blocks.py").write_text(BLOCKS)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "example.toml").write_text(PLAIN.format(name="example"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    "changed, affected",
    [
        (["specs/blocks_changed.py"], ["specs/b.toml"]),  # its own module only, not sub/'s module of the same name
        (["specs/sub/blocks_changed.py", "specs/a.toml"], ["specs/a.toml", "specs/sub/c.toml"]),
        (
            ["pyproject.toml", "docs/example.toml", "specs/helpers.py"],
            [],
        ),  # not specs of the check; a module no factory is
        (["specs/broken.toml"], ["specs/broken.toml"]),  # a changed spec that does not load is checked (and fails)
        (["lib/lib_blocks.py"], []),  # outside every source root: that spec's factory is not found
    ],
)
def test_changed_files_to_specs(tree: Path, changed: list[str], affected: list[str]) -> None:
    assert affected_specs(changed) == affected


def test_folders_among_the_paths_replace_specs_and_source_roots_are_followed(tree: Path) -> None:
    assert affected_specs(["lib/lib_blocks.py"], roots=["lib"]) == ["specs/lib_spec.toml"]
    assert affected_specs(["specs/sub", "specs/blocks_changed.py", "specs/sub/c.toml"]) == ["specs/sub/c.toml"]


def test_the_cli_checks_only_the_affected_specs(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--changed", "pyproject.toml", "specs/helpers.py"]) == 0
    assert "the changed files affect no spec; nothing to check" in capsys.readouterr().err
    assert main(["check", "--changed", "--profile", "ci", "--in-process", "specs/blocks_changed.py"]) == 0
    out = capsys.readouterr().out
    assert "1 spec(s), 1 expectation(s): 1 met" in out and "│ b " in out
