"""`stability scan LIBRARY --compare BUGGY FIXED` on the project's corpus of shipped init bugs
(benchmarks/corpus.toml; benchmarks/corpus.py installs each release into .cache/corpus/): each
comparison names the bug's parameters with their two laws (slow: two scans of one model, under two
releases, each in its own process). A release that cannot be installed here is skipped, saying why."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from spec_support import ROOT

from stability.cli import main

#: Each bug's parameters, as the diff must name them (a part of the parameter group).
EXPECTED = {
    "gpt2-c-proj-depth-scaling": ("attn.c_proj.weight", "mlp.c_proj.weight"),
    "gemma-rmsnorm-offset": ("input_layernorm.weight", "post_attention_layernorm.weight"),
    "gemma2-rmsnorm-offset": ("input_layernorm.weight", "pre_feedforward_layernorm.weight"),
    "timm-layerscale-init-values": ("ls1.gamma", "ls2.gamma"),
    "mamba-missing-linear-init": ("mixer.in_proj.weight", "mixer.x_proj.weight"),
}


def _side(folder: Path, hide: tuple[str, ...], tmp: Path) -> Path:
    """The release's folder, or, where the bug hides a package of this environment (the Mamba
    releases beside this `kernels`), a folder of links to it with the hiding `sitecustomize`."""
    if not hide:
        return folder
    from benchmarks.corpus import hidden_env

    side = tmp / folder.name
    side.mkdir()
    for entry in folder.iterdir():
        (side / entry.name).symlink_to(entry)
    (side / "sitecustomize.py").symlink_to(hidden_env(hide, folder.parent) / "sitecustomize.py")
    return side


@pytest.mark.slow
@pytest.mark.parametrize("bug_id", sorted(EXPECTED))
def test_the_comparison_of_each_corpus_pair_names_the_bugs_parameters(
    bug_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks.corpus import ReleaseUnavailable, install_release, load_bugs

    bug = next(b for b in load_bugs() if b.id == bug_id)
    try:
        buggy, fixed = (install_release(bug.library, bug.release(w), pins=bug.pins) for w in ("buggy", "fixed"))
    except ReleaseUnavailable as exc:
        pytest.skip(f"{bug.library} {bug.buggy} or {bug.fixed} cannot be installed here: {exc}")
    model = tomllib.loads((ROOT / bug.spec).read_text(encoding="utf-8"))["block"]["model"].partition(":")[2]
    out = tmp_path / "compare.json"
    a, b = (_side(f, bug.hide, tmp_path) for f in (buggy, fixed))
    code = main(
        ["scan", bug.library, "--compare", str(a), str(b), "--only", model, "--json", str(out), "-q", "-j", "1"]
    )
    assert code == 1, capsys.readouterr()
    changes = json.loads(out.read_text(encoding="utf-8"))["changes"]
    named = {c["what"] for c in changes if c["kind"] == "init"}
    for part in EXPECTED[bug_id]:
        assert any(part in what for what in named), (part, sorted(named))
