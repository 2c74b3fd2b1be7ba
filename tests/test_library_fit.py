"""A library case over the memory budget (stability/families/library_fit.py, `fit_budget` in
stability/run/guard.py): streamed block by block where that builds the same model within the
budget, said so in the report; else refused, naming `scale = "shipped"` where that would fit.
Tiny GPT-2 configs and budgets set between the two estimates, not a real 7B."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spec_support import make_case

pytest.importorskip("transformers")

from stability import Case, load_spec  # noqa: E402
from stability.errors import CaseError, SpecError  # noqa: E402
from stability.families import library_memory  # noqa: E402
from stability.families.library import parse_library  # noqa: E402
from stability.run.guard import fit_budget  # noqa: E402
from stability.spec.registry import FAMILIES  # noqa: E402

SPEC = """\
name = "{name}"
description = "a GPT-2 over the memory budget"
family = "library"
[block]
layer = "tokens"
model = "transformers:GPT2Model"
config = {{ n_embd = "width", n_layer = "depth", n_head = "width/64", vocab_size = 64 }}
{shipped}
[space]
depth = {depth}
width = {width}
batch = 1
tokens = 4
[probe]
ensemble = 1
[expect.gradient_arrival]
"""


@pytest.fixture(autouse=True)
def _no_resident_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Estimates without the process's resident set, which other tests move: the comparisons are
    between the models' own bytes."""
    monkeypatch.setattr(library_memory, "resident_bytes", lambda: 0)


def _write(tmp_path: Path, name: str, *, depth: int, width: int, shipped: str = "") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(SPEC.format(name=name, depth=depth, width=width, shipped=shipped), encoding="utf-8")
    return path


def _case(depth: int, width: int) -> Case:
    return make_case(depth=depth, width=width, batch=1, dtype="float32", tokens=4)


def _scaled(spec: Any, scale: str, **shipped: Any) -> Any:
    return spec.model_copy(update={"options": spec.options.model_copy(update={"scale": scale, **shipped})})


def test_a_model_over_the_budget_is_streamed_and_the_report_says_so(
    tmp_path: Path, cli: Callable[..., tuple[int, str, str]]
) -> None:
    """6 blocks of 0.79M parameters whole, two at a time streamed: a budget between the two
    estimates streams the case, and the run says how in its line and in the case's measurements."""
    path = _write(tmp_path, "over", depth=6, width=128, shipped="shipped = { n_embd = 128, n_head = 2 }")
    spec, case = load_spec(path), _case(6, 128)
    estimate = FAMILIES.get("library").estimate
    whole, streamed = estimate(spec, case), estimate(_scaled(spec, "streamed", shipped={}), case)
    assert whole is not None and streamed is not None and whole - streamed > 2 * 786_432  # 4 blocks of 12·128² floats
    budget = (whole + streamed) // 2
    built, why = fit_budget(spec, case, budget)
    assert built.options.scale == "streamed" and built.options.shipped == {} and why is not None
    assert why["how"].startswith("with its blocks streamed one at a time") and why["need"] <= budget < why["estimate"]
    report = tmp_path / "report.json"
    argv = ["check", path, "--in-process", "--case", "depth=6,seed=0", "--memory-budget", str(budget), "--json", report]
    code, out, _ = cli(*argv)
    assert code == 0, out
    assert "1 case(s) probed (1 over the memory budget, built with its blocks streamed one at a time" in out
    (record,) = json.loads(report.read_text(encoding="utf-8"))["specs"][0]["cases"]
    assert record["measurements"]["extra"]["within_budget"]["text"].startswith("built with its blocks streamed")
    with pytest.raises(
        CaseError, match=r"^refused: this case needs about .* raise --memory-budget \(STABILITY_MEMORY_BUDGET\)$"
    ):
        fit_budget(spec, case, streamed // 2)  # neither fits: the refusal as before


def test_where_the_init_rule_rescales_the_refusal_names_scale_shipped(tmp_path: Path) -> None:
    """Width 256 with the init rule of a 384-wide model: streaming would drop the rule, so the case is
    refused, and the model at its shipped width streamed (two of its blocks at a time) fits, so the
    refusal names the key."""
    path = _write(tmp_path, "rule", depth=8, width=256, shipped="shipped = { n_embd = 384, n_head = 6 }")
    spec, case = load_spec(path), _case(8, 256)
    estimate = FAMILIES.get("library").estimate
    whole, shipped = estimate(spec, case), estimate(_scaled(spec, "shipped"), case)
    assert whole is not None and shipped is not None and shipped < whole
    with pytest.raises(CaseError) as info:
        fit_budget(spec, case, (whole + shipped) // 2)
    line = str(info.value)
    assert "\n" not in line and line.endswith(
        'raise --memory-budget (STABILITY_MEMORY_BUDGET); or set block.scale = "shipped" to probe the model at its '
        f"shipped config with its blocks streamed one at a time (about {line.rsplit('(about ', 1)[1]}"
    )


@pytest.mark.parametrize(
    ("model", "shipped", "message"),
    [
        ("transformers:GPT2Model", {"n_embd": 768}, "block.shipped is set"),
        ("timm:resnet18", {}, "timm:resnet18 has another library"),
    ],
)
def test_scale_streamed_is_refused_where_it_would_drop_the_init_rule_or_cannot_stream(
    model: str, shipped: dict[str, Any], message: str
) -> None:
    config = {"n_embd": "width", "n_layer": "depth", "n_head": 2} if model.startswith("transformers") else {}
    with pytest.raises(SpecError, match=message):
        parse_library(model, config=config, shipped=shipped, scale="streamed", file="s.toml", prefix="block.")
