"""`stability init TARGET` (stability/run/init.py, init_draft.py, init_survey.py, cli/init.py): the
spec it writes holds on its model under `stability check`; a model breaking its own declared init
exits 1 with the spec written; bad targets and foreign files are refused in one line (exit 2) with
nothing written. The in-process runs measure 2 depths × 3 seeds to stay fast; the worker run is the
one with a factory that crashes and one that hangs."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from stability.cli import main
from stability.run.init_draft import GENERATED, is_generated, parse_target
from stability.spec.load import load_spec

DOCS = Path(__file__).resolve().parents[1] / "docs"
FAST = ["--depths", "1,2", "--seeds", "3", "--in-process", "-q"]

BROKEN = '''
import torch
from transformers import GPT2Config, GPT2Model


def broken_gpt2(depth, width):
    """GPT-2 whose residual projections lost their depth scale: c_proj drawn at 0.02, not 0.02/sqrt(2N)."""
    model = GPT2Model(GPT2Config(n_layer=depth, n_embd=width, n_head=2, vocab_size=64, bos_token_id=0, eos_token_id=1))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("c_proj.weight"):
                p.normal_(0.0, 0.02)
    return model
'''

BAD = """
import time
from torch import nn


def crashes(depth, width):
    raise RuntimeError("the factory  breaks")


def hangs(depth, width):
    while True:
        time.sleep(0.05)


def number(depth, width):
    return 42


def stubborn(depth, width):
    while True:  # swallows the time limit's exception: only the parent can stop it
        try:
            time.sleep(0.05)
        except BaseException:
            pass
"""


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_init_on_a_transformers_model_writes_a_spec_that_check_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("transformers")
    out = tmp_path / "gpt2.toml"
    assert main(["init", "transformers:GPT2Model", "--out", str(out), *FAST]) == 0, capsys.readouterr()
    text = out.read_text()
    assert text.startswith(GENERATED) and is_generated(out)
    data = tomllib.loads(text)
    block = data["block"]
    # only the keys the case fills, never a registered value restated; the registered widths in shipped
    assert block["config"] == {
        "n_layer": "depth",
        "n_embd": "width",
        "n_head": "width/64",
        "vocab_size": 64,
        "bos_token_id": 0,
        "eos_token_id": 1,
    }
    assert block["shipped"] == {"n_embd": 768, "n_head": 12} and block["layer"] == "tokens"
    assert "norms pre; residual; causal; no layer scale" in text
    rs = data["expect"]["residual_stream"]
    assert {"lo", "hi", "entry_lo", "entry_hi", "variance_lo", "variance_hi"} <= set(
        rs
    ) and "max_block_change" not in rs
    assert rs["variance_exponent"] == 0.0  # GPT-2's c_proj scale bounds the output's variance in depth
    assert set(data["expect"]) == {"residual_stream", "rank_collapse", "init_conformance"}
    assert "table" not in data["expect"]["init_conformance"]
    assert "# calibrated: g₁/g_L 1: 1–1, 2: " in text and "over 3 seeds" in text and "transformers " in text
    assert "the ci run of these cases took" in text
    capsys.readouterr()
    assert main(["check", str(out), "--profile", "ci", "--in-process", "-q"]) == 0, capsys.readouterr()
    assert load_spec(out).probe.ci_cases == ["depth=2"]


@pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning")  # vmap over SDPA, in the ensemble
def test_init_on_a_factory_writes_a_spec_beside_it_that_check_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copy(DOCS / "examples" / "nanogpt" / "model.py", tmp_path / "model.py")
    monkeypatch.chdir(tmp_path)
    assert main(["init", "model:gpt", *FAST]) == 0, capsys.readouterr()
    out = tmp_path / "gpt.toml"  # beside the factory: a spec finds its factory in its own folder
    data = tomllib.loads(out.read_text())
    assert data["family"] == "custom" and data["block"]["factory"] == "model:gpt"
    assert data["space"]["width"] == 128  # the factory's own default
    assert "Read off the built model (GPT, block 0 a Block)" in out.read_text()  # the whole model, run as it runs
    assert "token stream (2, 8, 128); norms pre; residual; causal" in data["description"]
    capsys.readouterr()
    assert main(["check", str(out), "--profile", "ci", "--in-process", "-q"]) == 0, capsys.readouterr()
    # a second run replaces its own file
    assert main(["init", "model:gpt", *FAST]) == 0 and not (tmp_path / "gpt_2.toml").exists()
    # the whole model runs from its embedding, so the spec sees the depth-scaled c_proj init go (docs/your-model.md)
    model = tmp_path / "model.py"
    scaled = "std=0.02 / math.sqrt(2 * config.n_layer)"
    assert scaled in model.read_text()
    model.write_text(model.read_text().replace(scaled, "std=0.02"))
    capsys.readouterr()
    assert main(["check", str(out), "--profile", "ci", "-q"]) == 1  # in a worker: this process holds the old module
    assert "output variance Var(x_L)/Var(x₀)" in capsys.readouterr().out


def test_a_model_that_breaks_its_own_declared_init_is_written_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("transformers")
    (tmp_path / "broken.py").write_text(BROKEN)
    out = tmp_path / "broken.toml"
    assert main(["init", f"{tmp_path / 'broken.py'}:broken_gpt2", "--out", str(out), *FAST]) == 1
    err = capsys.readouterr().err
    assert "written, but the model breaks its own declared init" in err and "c_proj" in err
    assert is_generated(out) and "[expect.init_conformance]" in out.read_text()


def test_a_file_init_did_not_write_is_never_replaced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text("# my spec\nname = 'x'\n")
    (tmp_path / "model.py").write_text(BAD)
    assert main(["init", f"{tmp_path / 'model.py'}:crashes", "--out", str(mine), *FAST]) == 2  # before it builds
    line = _one_line(capsys.readouterr().err)
    assert "exists and was not written by stability init" in line and "give another file" in line
    assert mine.read_text() == "# my spec\nname = 'x'\n"
    (tmp_path / "number.toml").write_text("# mine\n")
    target = parse_target(f"{tmp_path / 'model.py'}:number")
    from stability.run.init_draft import spec_path

    path, factory = spec_path(target, None)
    assert path == tmp_path / "number_2.toml" and factory == "model:number"  # numbered past the foreign file
    with pytest.raises(Exception, match="not in the spec's folder or below it"):
        spec_path(target, str(tmp_path / "elsewhere" / "x.toml"))


@pytest.mark.parametrize(
    ("target", "words"),
    [
        ("transformers:NoSuchModel", "is not a transformers model or config class; close names:"),
        ("timm:resnet_9999", "is not a timm registered model or model class; close names:"),
        ("transfomers:GPT2Model", '(did you mean "transformers"?)'),
        ("nothing", "names no model; write transformers:CLASS"),
        ("model:number", "returned int, not an nn.Sequential"),
        ("model:hangs", "ran past the per-case time limit of 1 s"),
    ],
)
def test_bad_targets_are_one_line_exit_2(
    target: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if target.startswith(("timm:", "transformers:")):
        pytest.importorskip(target.partition(":")[0])
    (tmp_path / "model.py").write_text(BAD)
    monkeypatch.chdir(tmp_path)
    assert main(["init", target, *FAST, "--case-timeout", "1"]) == 2
    assert words in _one_line(capsys.readouterr().err)
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".toml") == []
    assert not (tmp_path / "specs").exists()


def test_a_factory_that_crashes_in_its_worker_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "model.py").write_text(BAD)
    monkeypatch.chdir(tmp_path)
    assert main(["init", "model:crashes", "-q", "--jobs", "1"]) == 2
    assert "the factory model:crashes raised RuntimeError: the factory breaks; nothing was written" in _one_line(
        capsys.readouterr().err
    )
    assert not list(tmp_path.glob("*.toml"))


@pytest.mark.slow  # a worker held past its time limit by a factory that swallows the alarm, then killed
def test_a_factory_that_ignores_the_time_limit_is_stopped_by_the_parent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "model.py").write_text(BAD)
    monkeypatch.chdir(tmp_path)
    assert main(["init", "model:stubborn", "-q", "--jobs", "1", "--case-timeout", "1"]) == 2
    assert "nothing was written" in _one_line(capsys.readouterr().err)
    assert not list(tmp_path.glob("*.toml"))


GROWING = '''
import math
from torch import nn


class Grow(nn.Module):
    """Block l multiplies its input by sqrt((l + 2) / (l + 1)): Var(x_L) = (L + 1) Var(x_0) exactly."""

    def __init__(self, index):
        super().__init__()
        self.factor = math.sqrt((index + 2) / (index + 1))

    def forward(self, x):
        return self.factor * x


def growing(depth, width):
    return nn.Sequential(*[Grow(i) for i in range(depth)])
'''


def test_the_variance_exponent_is_the_one_that_spreads_least(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Var(x_L)/Var(x_0) = L + 1 on every network: over depths 1, 2, 4 that is 2..5 with p = 0 (×2.5),
    # and (L + 1)/L = 2..1.25 with p = 1 (×1.6): p = 1 spreads least.
    (tmp_path / "grow.py").write_text(GROWING)
    monkeypatch.chdir(tmp_path)
    assert main(["init", "grow:growing", "--depths", "1,2,4", "--seeds", "2", "--in-process", "-q"]) == 0
    text = (tmp_path / "growing.toml").read_text()
    rs = tomllib.loads(text)["expect"]["residual_stream"]
    words = " ".join(text.replace("#", " ").split())  # the header is wrapped at 100 columns
    assert rs["variance_exponent"] == 1.0 and "p = 0: max/min 2.5; p = 1: max/min 1.6" in words
    assert (rs["variance_lo"], rs["variance_hi"]) == (1.0, 2.5)  # 1.25/1.25 and 2·1.25, exactly
    capsys.readouterr()
