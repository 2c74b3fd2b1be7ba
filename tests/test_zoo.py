"""stability/run/zoo.py and stability/report/zoo.py: the zoo's parameterisation read off toy
models whose answer is known by construction, the table in docs/zoo.md regenerated for a few
families and compared with the file cell for cell, every zoo spec in the table, and the Markdown
and HTML writers."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from shipped_support import require_shipped_libraries
from spec_support import ROOT
from torch import nn

from stability.errors import UsageError
from stability.report.zoo import BEGIN, END, markdown_table, render_zoo_html, update_markdown
from stability.run.zoo import DEPTHS, ZOO, ZooRow, parameterisation, zoo_row
from stability.spec.load import load_spec

DOC = ROOT / "docs" / "zoo.md"
warnings.filterwarnings("ignore", message="Failed to load image Python extension")


class Pre(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.lin = nn.LayerNorm(4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.lin(self.norm(x))


class Post(Pre):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + self.lin(x))  # type: ignore[no-any-return]


class InBranch(Pre):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.lin(x))
        y += x  # in place: the norm's output object is returned, but holds another value
        return y.relu_()


class RotaryEmbedding(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class Toy(nn.Module):
    def __init__(self, block: type[nn.Module], *, rotary: bool = False) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([block() for _ in range(2)])
        self.rotary = RotaryEmbedding() if rotary else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return x


@pytest.mark.parametrize(("block", "where"), [(Pre, "pre"), (Post, "post"), (InBranch, "in branch")])
def test_the_norm_position_is_read_off_the_blocks_tensors(block: type[nn.Module], where: str) -> None:
    model = Toy(block)
    position, norms, positions = parameterisation(model, torch.randn(2, 3, 4), model.blocks[0])
    assert (position, norms, positions) == (where, "LayerNorm ×1", "none")


def test_a_rotary_module_names_the_positional_scheme() -> None:
    model = Toy(Pre, rotary=True)
    assert parameterisation(model, torch.randn(2, 3, 4), model.blocks[0])[2] == "rotary"


def _rows(text: str) -> dict[str, str]:
    table = text.split(BEGIN, 1)[1].split(END, 1)[0]
    return {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| [")}


def test_every_zoo_spec_has_a_row_in_docs_zoo_md_and_every_row_a_spec() -> None:
    require_shipped_libraries()
    rows = _rows(DOC.read_text(encoding="utf-8"))
    specs = {f"[{load_spec(p).name}](../specs/zoo/{p.name})" for p in sorted(ZOO.glob("*.toml"))}
    assert set(rows) == specs
    assert len(specs) >= 25


@pytest.mark.parametrize(
    "name", ["bert", pytest.param("gpt2", marks=pytest.mark.slow), pytest.param("swin", marks=pytest.mark.slow)]
)  # one by default, three under -m slow
def test_the_table_regenerated_for_a_family_matches_docs_zoo_md(name: str) -> None:
    pytest.importorskip("transformers", reason="Hugging Face transformers is not installed (pip install -e '.[hf]')")
    spec = load_spec(ZOO / f"{name}.toml")
    row = zoo_row(spec)
    line = markdown_table([row], DEPTHS).splitlines()[-1]
    assert _rows(DOC.read_text(encoding="utf-8"))[line.split("|")[1].strip()] == line


def _row(name: str, **verdicts: dict[int, bool | None]) -> ZooRow:
    return ZooRow(
        name=name,
        path=f"specs/zoo/{name}.toml",
        library="transformers",
        model="M",
        block="B",
        norm_position="pre",
        norms="LayerNorm ×2",
        positions="rotary",
        init="σ 0.02",
        expects={k: "holds" for k in verdicts},
        verdicts=dict(verdicts),
        ratios={4: 1.5, 16: None},
        budget="≥ 16",
    )


def test_a_verdict_cell_lists_the_failing_depths_and_marks_a_negative_control() -> None:
    row = _row("a", gradient_arrival={4: True, 16: False}, rank_collapse={4: None, 16: None})
    row.expects["gradient_arrival"] = "violated"
    line = markdown_table([row], (4, 16)).splitlines()[-1]
    assert line.endswith("| 1.5 | — | ≥ 16 | gradient_arrival (violated) ✗ 16 · rank_collapse n/a |")


def test_the_markdown_table_replaces_only_its_own_rows_and_needs_its_markers(tmp_path: Path) -> None:
    doc = tmp_path / "zoo.md"
    doc.write_text(f"# Zoo\n\nprose before\n\n{BEGIN}\n{END}\n\nprose after\n", encoding="utf-8")
    update_markdown(doc, [_row("a", gradient_arrival={4: True}), _row("b", gradient_arrival={4: True})], (4, 16))
    update_markdown(doc, [_row("a", gradient_arrival={4: False})], (4, 16))
    text = doc.read_text(encoding="utf-8")
    assert "prose before" in text and "prose after" in text
    rows = _rows(text)
    assert list(rows) == ["[a](../specs/zoo/a.toml)", "[b](../specs/zoo/b.toml)"]
    assert rows["[a](../specs/zoo/a.toml)"].endswith("gradient_arrival ✗ 4 |") and rows[
        "[b](../specs/zoo/b.toml)"
    ].endswith("gradient_arrival ✓ |")
    (tmp_path / "bare.md").write_text("no markers\n", encoding="utf-8")
    with pytest.raises(UsageError, match="has no zoo-table markers"):
        update_markdown(tmp_path / "bare.md", [], (4,))


def test_the_html_page_escapes_every_cell() -> None:
    page = render_zoo_html([_row("<script>x</script>", gradient_arrival={4: True})], (4, 16))
    assert "<script>x" not in page and "&lt;script&gt;x&lt;/script&gt;" in page
