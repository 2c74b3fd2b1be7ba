"""A spec is data and cannot choose which code runs (stability/families/factory.py): its factory must be a
.py file beside the spec or under a configured source root, found by path before anything is
imported; never the standard library or site-packages."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from cli_support import Cli
from gate_support import custom

from stability.errors import SpecError
from stability.families.factory import load_factory, locate_factory, source_roots
from stability.spec.load import parse_spec


@pytest.mark.parametrize(
    "target",
    [
        "os:system",
        "subprocess:run",
        "builtins:exec",
        "shutil:rmtree",
        "sys:exit",
        "antigravity:geohash",
        "torch:save",
        "stability.cli:main",
    ],
)
def test_callables_that_are_not_your_code_are_refused_before_any_import(tmp_path: Path, target: str) -> None:
    module = target.split(":")[0]
    was_imported = module in sys.modules
    with pytest.raises(SpecError, match=f"module '{module}' was not found as a .py file of your own code"):
        load_factory(str(tmp_path / "s.toml"), target)
    assert (module in sys.modules) == was_imported  # antigravity would open a browser on import


def test_os_system_through_check_runs_nothing(cli: Cli, tmp_path: Path) -> None:
    marker = tmp_path / "owned"
    spec = tmp_path / "evil.toml"
    spec.write_text(custom("evil", "os:system", extra=f'factory_args = {{ command = "touch {marker}" }}'))
    code, out, err = cli("check", spec, "--profile", "ci")
    assert code == 2 and "Traceback" not in err
    assert "block.factory = 'os:system': module 'os' was not found as a .py file of your own code" in err
    assert "Threat model" in err
    assert not marker.exists()


def test_a_stdlib_folder_given_as_a_source_root_is_still_refused(tmp_path: Path) -> None:
    import os

    with source_roots([os.path.dirname(os.__file__)]), pytest.raises(SpecError, match="not found as a .py file"):
        locate_factory(str(tmp_path / "s.toml"), "shutil:rmtree")


def test_a_symlink_out_of_the_root_is_refused(tmp_path: Path) -> None:
    import shutil

    (tmp_path / "blocks.py").symlink_to(shutil.__file__)
    with pytest.raises(SpecError, match="not found as a .py file"):
        locate_factory(str(tmp_path / "s.toml"), "blocks:rmtree")


def test_a_malformed_target(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="is not 'module:function'"):
        locate_factory(str(tmp_path / "s.toml"), "../etc/passwd:x")


def test_a_source_root_allows_a_factory_elsewhere(cli: Cli, tmp_path: Path) -> None:
    code_dir, spec_dir = tmp_path / "src", tmp_path / "specs"
    code_dir.mkdir()
    spec_dir.mkdir()
    (code_dir / "gate_rooted_blocks.py").write_text(
        "from torch import nn\ndef make(depth, width):\n    return nn.Sequential(*[nn.Linear(width, width) "
        "for _ in range(depth)])\n"
    )
    spec = spec_dir / "rooted.toml"
    spec.write_text(custom("rooted", "gate_rooted_blocks:make", depth="1"))
    code, _, err = cli("check", spec, "--profile", "ci")
    assert code == 2 and "gate_rooted_blocks" in err and "--source-root" in err
    code, out, err = cli("check", spec, "--profile", "ci", "--source-root", code_dir)
    assert code == 0, err
    code, _, err = cli("check", spec, "--source-root", tmp_path / "missing")
    assert code == 2 and "--source-root" in err and "is not a folder" in err


def test_a_spec_folder_cannot_shadow_the_standard_library(cli: Cli, tmp_path: Path) -> None:
    """specs/json.py is loaded from its file under a private name; the standard library's json (and
    html, which matplotlib imports for the HTML report) stay the standard library's."""
    (tmp_path / "json.py").write_text(
        "import sys\nfrom torch import nn\n"
        "def make(depth, width):\n"
        "    import json as std, html\n"
        "    assert hasattr(std, 'JSONDecodeError') and hasattr(html, 'escape'), 'stdlib shadowed'\n"
        "    return nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])\n"
    )
    (tmp_path / "html.py").write_text("raise RuntimeError('the spec folder shadowed html')\n")
    spec = tmp_path / "shadow.toml"
    spec.write_text(custom("shadow", "json:make", depth="1"))
    code, out, err = cli("check", spec, "--profile", "ci", "--html", tmp_path / "report")
    assert code == 0, out + err
    assert (tmp_path / "report" / "index.html").is_file()


def test_factory_args_may_not_override_a_drawn_value(tmp_path: Path) -> None:
    text = custom("override", "make", extra="factory_args = { depth = 7 }")
    with pytest.raises(SpecError, match=r"block.factory_args.depth = 7: would override the value drawn from \[space\]"):
        parse_spec(text, file=str(tmp_path / "s.toml"))


@pytest.mark.parametrize("profile", ["ci", "dev"])
def test_a_folder_or_file_name_that_is_not_utf8_runs_as_any_other(cli: Cli, tmp_path: Path, profile: str) -> None:
    """A spec and its factory module in a folder whose name holds a byte that is not UTF-8 (Python
    carries it as a surrogate escape): the factory's private module name (a module named like the
    standard library's json is loaded under one) and the example database's key (dev) are made
    from the path's bytes, not refused with a UnicodeEncodeError (exit 2)."""
    import os

    folder = tmp_path / os.fsdecode(b"odd\xff")
    folder.mkdir()
    (folder / "json.py").write_text(
        "from torch import nn\ndef make(depth, width):\n    return nn.Sequential(*[nn.Linear(width, width) "
        "for _ in range(depth)])\n"
    )
    (folder / os.fsdecode(b"s\xfe.toml")).write_text(custom("odd", "json:make", depth="1"))
    code, out, err = cli("check", folder, "--profile", profile, "-j", "1")
    assert code == 0 and "Traceback" not in err, out + err
