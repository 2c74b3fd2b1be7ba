"""What `stability init` reads off a built model (stability/run/init_survey.py), on factories whose
structure is known by construction: where the norms sit, residual or not, causal or not, a layer
scale, and the layer a factory's blocks take (tried as vector, image, then token input)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stability.run.executor import InProcessExecutor
from stability.run.init_survey import Survey, SurveyJob, survey
from stability.spec.case import parse_case_string
from stability.spec.load import validate_spec

DOCS = Path(__file__).resolve().parents[1] / "docs"

BLOCKS = """
import torch
from torch import nn


class PostNorm(nn.Module):  # y = LN(x + W2 relu(W1 x)): the norm is what the block returns
    def __init__(self, width):
        super().__init__()
        self.branch = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return self.norm(x + self.branch(x))


class Plain(nn.Module):  # y = relu(W x + b): no identity path
    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return torch.relu(self.linear(x))


class Scaled(nn.Module):  # y = x + gamma * W x, gamma = 1e-6 in every channel (Touvron et al. 2021)
    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.gamma = nn.Parameter(torch.full((width,), 1e-6))

    def forward(self, x):
        return x + self.gamma * self.linear(x)


class Mix(nn.Module):  # y = x + W mean_t(x): every token reads every other (not causal)
    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return x + self.linear(x.mean(dim=1, keepdim=True))


def mix(depth, width):
    return nn.Sequential(*[Mix(width) for _ in range(depth)])


def post_norm(depth, width):
    return nn.Sequential(*[PostNorm(width) for _ in range(depth)])


def plain(depth, width):
    return nn.Sequential(*[Plain(width) for _ in range(depth)])


def scaled(depth, width):
    return nn.Sequential(*[Scaled(width) for _ in range(depth)])
"""


def _spec(folder: Path, factory: str, layer: str) -> object:
    space = {"depth": [1, 4], "width": 16, "batch": 4, **({"tokens": 6} if layer == "tokens" else {})}
    data = {
        "name": "survey",
        "description": "survey",
        "family": "custom",
        "block": {"factory": factory, "layer": layer},
        "space": space,
        "expect": {"residual_stream": {}},
    }
    return validate_spec(data, file=str(folder / "survey.toml"))


def _survey(folder: Path, factory: str, layer: str = "linear") -> Survey:
    spec = _spec(folder, factory, layer)
    return survey(spec, parse_case_string("depth=2", spec))  # type: ignore[arg-type]


def test_the_structure_of_known_blocks(tmp_path: Path) -> None:
    (tmp_path / "blocks.py").write_text(BLOCKS)
    post = _survey(tmp_path, "blocks:post_norm")
    assert (post.norm, post.residual, post.causal, post.layer_scale) == ("post", True, None, ())
    assert (post.layer, post.width, post.blocks, post.block) == ("linear", 16, 2, "PostNorm")
    plain = _survey(tmp_path, "blocks:plain")
    assert (plain.norm, plain.residual, plain.layer_scale) == ("none", False, ())
    scaled = _survey(tmp_path, "blocks:scaled")
    assert scaled.residual and scaled.layer_scale == (pytest.approx(1e-6, rel=1e-6, abs=0.0),)
    tokens = _survey(tmp_path, "blocks:post_norm", "tokens")
    assert tokens.layer == "tokens" and tokens.hidden == (4, 6, 16) and tokens.causal is None  # each token alone
    both_ways = _survey(tmp_path, "blocks:mix", "tokens")
    assert both_ways.causal is False and both_ways.residual and both_ways.norm == "none"


def test_a_nanogpt_block_is_pre_norm_residual_and_causal(tmp_path: Path) -> None:
    blocks = "\n\ndef blocks(depth: int, width: int = 128) -> nn.Module:\n    return gpt(depth, width).transformer\n"
    (tmp_path / "model.py").write_text((DOCS / "examples" / "nanogpt" / "model.py").read_text() + blocks)
    specs = tuple(_spec(tmp_path, "model:blocks", layer) for layer in ("linear", "conv2d", "tokens"))
    job = SurveyJob(specs, ("depth=2",) * 3)  # type: ignore[arg-type]
    (outcome,) = InProcessExecutor().map([job])
    found, index = outcome.result
    assert index == 2  # its attention takes (B, T, C): the vector and image inputs fail, and say why
    assert (found.layer, found.norm, found.residual, found.causal) == ("tokens", "pre", True, True)
    assert (found.width, found.blocks, found.block, found.layer_scale) == (16, 2, "Block", ())
