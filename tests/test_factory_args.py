"""`block.factory_args` checked against the factory's signature before anything runs
(stability/families/factory.py): read from the module's source with `ast` in the parent, which
never imports a spec's code, and again with `inspect` in the worker where the source cannot say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import Cli
from spec_support import factory_block, spec_text, write_spec

from stability.families.factory import Parameter, check_factory, signature_error, source_parameters
from stability.spec.load import parse_spec

#: The module writes a marker when it is imported: the parent must never import it.
BLOCKS = """\
from pathlib import Path
Path(__file__).with_name("imported").write_text("yes")
import functools
import torch.nn as nn

def make(depth: int, width: int, heads: int = 2):
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])

def open_ended(depth, width, **options):
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])

def _keep(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper

@_keep
def decorated(depth, width, heads=2):
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])
"""


def _spec(folder: Path, factory: str, args: dict[str, object]) -> Path:
    text = spec_text(
        "custom",
        block=factory_block(f"blocks:{factory}", args),
        space="depth = [1, 2]\nwidth = 4\nbatch = 2",
        expect="[expect.gradient_arrival]\nlo = 1e-6\nhi = 1e6\n",
        name=factory,
        description="a factory and its arguments",
    )
    return write_spec(folder, factory, text, modules={"blocks": BLOCKS})


def test_a_typo_in_factory_args_exits_2_naming_it_before_anything_runs(cli: Cli, tmp_path: Path) -> None:
    code, out, err = cli("check", _spec(tmp_path, "make", {"hedas": 4}), "--profile", "ci")
    assert code == 2
    assert err.strip().splitlines() == [
        f"stability: error: {tmp_path / 'make.toml'}: block.factory_args.hedas = 4: is not a parameter of "
        "blocks:make(depth, width, heads) "
        '(did you mean "heads"?); rename it to one of the factory\'s parameters, add a `hedas` parameter, or '
        "let the factory take **kwargs"
    ]
    assert not (tmp_path / "imported").exists()  # read from the source: neither the parent nor a worker imported it
    assert "spec(s)" not in out and "1 met" not in out  # nothing ran: the error alone, no summary


def test_a_factory_taking_kwargs_takes_any_argument(cli: Cli, tmp_path: Path) -> None:
    code, out, err = cli("check", _spec(tmp_path, "open_ended", {"hedas": 4, "anything": 1}), "--profile", "ci")
    assert code == 0, out + err


def test_a_decorated_factory_is_checked_in_the_worker_under_the_same_rule(cli: Cli, tmp_path: Path) -> None:
    """A decorator may change a signature, so the source does not decide; the worker's
    `inspect.signature` (which follows functools.wraps) does, with the same message, once."""
    code, out, err = cli("check", _spec(tmp_path, "decorated", {"hedas": 4}), "--profile", "ci")
    assert code == 2, out + err
    message = (
        "block.factory_args.hedas = 4: is not a parameter of blocks:decorated(depth, width, heads) "
        '(did you mean "heads"?)'
    )
    assert (out + err).count(message) == 1, out + err
    assert (tmp_path / "imported").exists()  # the worker imported it; the parent did not (it never does)


@pytest.mark.slow  # a pytest subprocess (tests/test_plugin.py's shared run covers a load item)
def test_pytest_collects_it_as_one_failed_load_item(tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    _spec(specs, "make", {"hedas": 4})
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "--stability-profile", "ci", str(specs)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "specs/make.toml::load FAILED" in run.stdout and 'did you mean "heads"?' in run.stdout
    assert not (specs / "imported").exists()


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "def f(a, b=1, *c, d, e=2, **f): pass",
            [
                ("a", "POSITIONAL_OR_KEYWORD", False),
                ("b", "POSITIONAL_OR_KEYWORD", True),
                ("c", "VAR_POSITIONAL", True),
                ("d", "KEYWORD_ONLY", False),
                ("e", "KEYWORD_ONLY", True),
                ("f", "VAR_KEYWORD", True),
            ],
        ),
        ("def f(a, /, b): pass", [("a", "POSITIONAL_ONLY", False), ("b", "POSITIONAL_OR_KEYWORD", False)]),
        ("async def f(depth): pass", [("depth", "POSITIONAL_OR_KEYWORD", False)]),
        (
            "class f:\n    def __init__(self, depth, width=3): pass",
            [("depth", "POSITIONAL_OR_KEYWORD", False), ("width", "POSITIONAL_OR_KEYWORD", True)],
        ),
        ("class f(Base): pass", None),  # its __init__ is elsewhere
        ("f = make_factory()", None),
        ("from elsewhere import f", None),
        ("@cache\ndef f(depth): pass", None),
        ("def f(depth): pass\ndef f(width): pass", None),  # bound twice: which one runs is not the source's to say
        ("if FAST:\n    def f(depth): pass\nelse:\n    def f(width): pass", None),
        ("def f(:", None),  # does not parse: left to the worker
    ],
)
def test_the_source_says_the_parameters_or_says_nothing(
    tmp_path: Path, source: str, expected: list[tuple[str, str, bool]] | None
) -> None:
    (tmp_path / "m.py").write_text(source + "\n")
    found = source_parameters(tmp_path / "m.py", "f")
    assert found == (None if expected is None else [Parameter(*p) for p in expected])  # type: ignore[arg-type]


def test_one_rule_for_unknown_arguments_and_unfilled_parameters(tmp_path: Path) -> None:
    spec = parse_spec(_spec(tmp_path, "make", {"heads": 4}).read_text(), file=str(tmp_path / "make.toml"))
    named = [Parameter("depth", "POSITIONAL_OR_KEYWORD", False), Parameter("heads", "KEYWORD_ONLY", False)]
    assert signature_error(spec, named) is None
    assert "asks for 'hidden', which nothing fills" in str(
        signature_error(spec, [*named, Parameter("hidden", "POSITIONAL_OR_KEYWORD", False)])
    )
    assert "asks for 'depth'" in str(
        signature_error(spec, [Parameter("depth", "POSITIONAL_ONLY", False), Parameter("heads", "KEYWORD_ONLY", True)])
    )
    assert "block.factory_args.heads = 4: is not a parameter" in str(
        signature_error(spec, [Parameter("depth", "POSITIONAL_OR_KEYWORD", False)])
    )
    assert (
        signature_error(
            spec, [Parameter("depth", "POSITIONAL_OR_KEYWORD", False), Parameter("kw", "VAR_KEYWORD", True)]
        )
        is None
    )
    check_factory(spec)  # the source agrees: make takes heads
    assert not (tmp_path / "imported").exists()
