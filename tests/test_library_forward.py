"""Library models probed through their own forward (stability/measure/forward.py), one test per
zoo family (specs/zoo/*.toml, read from the specs) and check: (1) fidelity, the hidden states the
probe saw at its boundaries are the model's own, bit for bit; (2) the per-boundary input-gradient
norms are plain autograd's on the same blocks, input and loss, to 1e-5. Tiny configs from data
(stability/families/library.py), random init, nothing downloaded. The reference below shares no code
with the driver: its own hooks, its own argument lookup, `torch.autograd.grad` on every boundary at
once."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
from spec_support import ZOO
from torch import nn

from stability.families.adapters import set_modes
from stability.families.library import LibraryModel
from stability.families.library_build import Built, build_model
from stability.families.library_family import library_model
from stability.measure.forward import probe_model
from stability.measure.probe_pass import projection_vector
from stability.spec.load import load_spec

pytest.importorskip("transformers", reason="Hugging Face transformers is not installed (pip install -e '.[hf]')")
warnings.filterwarnings("ignore", message="Failed to load image Python extension")

CASE = {"depth": 3, "batch": 2, "tokens": 8, "seed": 0}


def _vision_importable() -> str | None:
    try:
        import timm  # noqa: F401
        import torchvision  # noqa: F401
    except (
        Exception
    ) as exc:  # torchvision's PyPI build for this torch may not import (docs/library-models.md, section 7)
        return f"timm/torchvision do not import here ({type(exc).__name__}: {exc})"
    return None


def _zoo_param(path: Path) -> Any:
    vision = not path.read_text(encoding="utf-8").count('model = "transformers:')
    skip = pytest.mark.skipif(vision and _vision_importable() is not None, reason=str(_vision_importable()))
    return pytest.param(path.stem, id=path.stem, marks=[skip] if vision else [])


#: Every zoo spec (specs/zoo/*.toml): the families these tests check are the zoo's, read from its specs.
FAMILIES = [_zoo_param(p) for p in sorted(ZOO.glob("*.toml"))]
_BUILT: dict[tuple[str, int], Built] = {}
#: The families whose `output_hidden_states` listed the probed boundaries (filled as the fidelity test runs).
LISTED: set[str] = set()


def library(name: str) -> LibraryModel:
    """The zoo spec's model, without its init rule (what the blocks see does not depend on the init)."""
    spec = load_spec(ZOO / f"{name}.toml")
    return dataclasses.replace(library_model(spec), shipped={})


def built(name: str, *, depth: int = 3) -> Built:
    """The zoo family's model at `depth` and the spec's own width (seed 0, eval mode), built once per test session."""
    if (name, depth) not in _BUILT:
        spec = load_spec(ZOO / f"{name}.toml")
        torch.manual_seed(0)
        values = {
            **CASE,
            "depth": depth,
            "width": spec.space.width[0],
            "spatial": spec.space.spatial[0] if spec.space.spatial else None,
        }
        b = build_model(library(name), values, input_seed=1)
        set_modes(b.model, norm_train=False, dropout_train=False)
        _BUILT[name, depth] = b
    return _BUILT[name, depth]


class Keep:
    """An observer that keeps a copy of every boundary (a test may; the harness's must not)."""

    name = "keep"

    def start(self, blocks: Any) -> None:
        self.states: list[torch.Tensor] = []

    def observe(self, index: int, h: torch.Tensor) -> None:
        self.states.append(h.clone())

    def finish(self) -> None:
        return None


def _call(model: nn.Module, inputs: Any, **extra: Any) -> Any:
    return model(**inputs, **extra) if isinstance(inputs, Mapping) else model(inputs)


def _hidden(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[torch.Tensor, bool]:
    """(the hidden state of a block call, whether it was positional), the reference's own rule."""
    if args and isinstance(args[0], torch.Tensor):
        return args[0], True
    return kwargs["hidden_states"], False


def reference(b: Built, *, seed: int = 0) -> tuple[list[float], list[torch.Tensor]]:
    """Plain autograd on the model's own forward: block 0's input made a leaf by a hook, the other
    boundaries kept, ∂(Σ y⊙r)/∂(every boundary) in one `torch.autograd.grad`; (norms, states)."""
    blocks = b.blocks.modules
    states: list[torch.Tensor] = []

    def pre(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        h, positional = _hidden(args, kwargs)
        if module is blocks[0]:
            leaf = h.detach().clone().requires_grad_(True)
            states.append(leaf)
            return ((leaf, *args[1:]), kwargs) if positional else (args, {**kwargs, "hidden_states": leaf})
        states.append(h)
        return None

    def post(module: nn.Module, args: Any, out: Any) -> None:
        states.append(out if isinstance(out, torch.Tensor) else out[0])

    handles = [m.register_forward_pre_hook(pre, with_kwargs=True) for m in blocks] + [
        blocks[-1].register_forward_hook(post)
    ]
    try:
        _call(b.model, b.inputs)
    finally:
        for h in handles:
            h.remove()
    states = states[: len(blocks) + 1]
    y = states[-1]
    r = projection_vector(y.shape, seed, dtype=y.dtype, device=y.device)
    grads = torch.autograd.grad((y * r).sum(), states)
    return [float(g.norm()) for g in grads], [s.detach() for s in states]


def own_states(name: str, b: Built) -> list[torch.Tensor]:
    """The model's own hidden states at the blocks' boundaries, from a plain forward with gradient
    on (the forward a gradient is taken of: without it some kernels differ in the last bits, torch's
    fused MultiheadAttention fast path, SDPA's inference paths), by forward hooks; where
    transformers' `output_hidden_states` lists states of the blocks' shape, they must agree with
    the hooks (as block i's input at place i, or as its output)."""
    blocks = b.blocks.modules
    seen: list[torch.Tensor] = []
    handles = [
        m.register_forward_pre_hook(lambda m, a, k: seen.append(_hidden(a, k)[0].detach().clone()), with_kwargs=True)
        for m in blocks
    ]
    handles.append(
        blocks[-1].register_forward_hook(
            lambda m, a, out: seen.append((out if isinstance(out, torch.Tensor) else out[0]).detach().clone())
        )
    )
    hf = hasattr(
        getattr(b.model, "config", None), "output_hidden_states"
    )  # a transformers model (its forward may take it through **kwargs)
    try:
        with torch.enable_grad():
            out = _call(b.model, b.inputs, **({"output_hidden_states": True} if hf else {}))
    finally:
        for h in handles:
            h.remove()
    listed = [
        h
        for h in (getattr(out, "hidden_states", None) or ())
        if isinstance(h, torch.Tensor) and h.shape == seen[0].shape
    ]
    n = len(blocks)
    if len(listed) >= n:
        as_inputs = all(torch.equal(listed[i], seen[i]) for i in range(n))
        as_outputs = all(torch.equal(listed[i], seen[i + 1]) for i in range(n))
        assert as_inputs or as_outputs, f"{name}: the hooks and output_hidden_states disagree"
        LISTED.add(name)
    return seen


@pytest.mark.parametrize("name", FAMILIES)
def test_the_probe_sees_the_models_own_hidden_states_bit_for_bit(name: str) -> None:
    b = built(name)
    keep = Keep()
    probe_model(b.model, b.inputs, blocks=b.blocks, observers=[keep])
    own = own_states(name, b)
    assert len(keep.states) == len(own) == len(b.blocks.modules) + 1
    for i, (probed, shipped) in enumerate(zip(keep.states, own, strict=True)):
        assert torch.equal(probed, shipped), f"{name}: boundary {i} differs from the model's own forward"


@pytest.mark.parametrize("name", FAMILIES)
def test_per_boundary_gradient_norms_are_plain_autograds(name: str) -> None:
    b = built(name)
    for seed in (0, 1):
        m = probe_model(b.model, b.inputs, blocks=b.blocks, seed=seed)
        norms, _ = reference(b, seed=seed)
        assert len(m.grad_norm) == len(norms) == len(b.blocks.modules) + 1
        assert m.grad_norm == pytest.approx(norms, rel=1e-5, abs=0.0), name


def _boundaries(b: Built, inputs: Any) -> list[torch.Tensor]:
    keep = Keep()
    probe_model(b.model, inputs, blocks=b.blocks, observers=[keep])
    return keep.states


def test_the_models_own_hidden_states_were_cross_checked_on_most_transformers_families() -> None:
    for name in ("gpt2", "llama", "gemma2", "bert", "t5", "vit", "mamba"):
        own_states(name, built(name))
    assert {"gpt2", "llama", "gemma2", "bert", "t5", "vit", "mamba"} <= LISTED


def test_gemma2_with_eager_attention_stays_causal_where_its_blocks_called_alone_would_not() -> None:
    b = built("gemma2")
    ids = b.inputs["input_ids"]
    changed = ids.clone()
    changed[:, -1] = (changed[:, -1] + 7) % 60 + 3  # another last token (never the padding token 0)
    before, after = _boundaries(b, {**b.inputs, "input_ids": ids}), _boundaries(b, {**b.inputs, "input_ids": changed})
    for i, (h, g) in enumerate(zip(before, after, strict=True)):
        assert torch.equal(h[:, :-1], g[:, :-1]), f"boundary {i}: an earlier position saw the last token"
        assert not torch.equal(h[:, -1], g[:, -1])
    # The same block called on its own, as a factory's Stack would call it (rotary embeddings, no mask): bidirectional.
    layer, h0, h1 = b.model.layers[0], before[0], after[0]
    position = torch.arange(h0.shape[1])[None]
    with torch.no_grad():
        alone = [layer(h, position_embeddings=b.model.rotary_emb(h, position))[:, :-1] for h in (h0, h1)]
    assert not torch.equal(alone[0], alone[1])


def test_t5_keeps_its_relative_bias_in_every_block_which_its_blocks_called_alone_lose() -> None:
    b = built("t5")
    probed = _boundaries(b, b.inputs)
    h, alone = probed[0], [probed[0]]
    for block in b.blocks.modules:  # (with gradient on, as the probe runs them: the same kernels)
        h = block(h)[0].detach()  # no position_bias passed: block 0 computes its own, blocks 1.. get none
        alone.append(h)
    assert torch.equal(alone[1], probed[1])  # block 0 has the relative-attention table itself
    for i in range(2, len(probed)):
        assert float((alone[i] - probed[i]).norm() / probed[i].norm()) > 1e-2, (
            f"boundary {i}: blocks 1.. got the bias without being given it"
        )


def test_a_padding_mask_in_the_inputs_reaches_every_block_with_eager_attention() -> None:
    lib = library("bert")
    torch.manual_seed(0)
    b = build_model(
        dataclasses.replace(lib, config={**lib.config, "attn_implementation": "eager"}),
        {**CASE, "width": 64},
        input_seed=1,
    )
    set_modes(b.model, norm_train=False, dropout_train=False)
    mask = torch.ones_like(b.inputs["input_ids"])
    mask[:, -3:] = 0  # the last 3 tokens are padding
    other = b.inputs["input_ids"].clone()
    other[:, -3:] = (other[:, -3:] + 5) % 60 + 1  # other padding tokens
    masked = _boundaries(b, {**b.inputs, "attention_mask": mask})
    for i, (h, g) in enumerate(
        zip(masked, _boundaries(b, {**b.inputs, "input_ids": other, "attention_mask": mask}), strict=True)
    ):
        if i > 0:
            assert torch.equal(h[:, :-3], g[:, :-3]), f"boundary {i}: a real token attended to padding"
    unmasked = _boundaries(b, b.inputs)
    assert all(
        not torch.equal(h[:, :-3], u[:, :-3]) for h, u in zip(masked[1:], unmasked[1:], strict=True)
    )  # the mask changed every block's attention
