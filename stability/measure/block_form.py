"""Where a block's norms sit, read off one call of the block: the rule the zoo's table and the
probe's entry rule both ask (one place).

- `pre`: the first norm the block calls reads the block's input itself (Xiong et al. 2020: GPT-2,
  Llama, Mistral, nanoGPT, T5, Mamba, ViT: `x + F(norm(x))`, the norm inside the branch before the
  sub-layer);
- `post`: the block returns a norm's output (BERT, BART's encoder, DeepNet: `norm(x + F(x))`);
- `pre + post` both; `in branch` neither (a ResNet's BatchNorms with the activation after the sum,
  ConvNeXt's LayerNorm after its depthwise conv); `none`: the block has no norm.

A norm is a module whose class name holds "Norm" (`LayerNorm`, `LlamaRMSNorm`, `T5LayerNorm`,
`BatchNormAct2d`, a user's own `LayerNorm`). Tensors are compared by their storage, shape and version
counter, so the detached view of block 0's input the probe hands its observers is the input, and
an in-place operation on a norm's output after it (timm's `x += shortcut`) makes it another value.
"Pre" with the stream the bare sum (`pre` and not `post`) is what sets a token model's embedding
boundary apart (`stability.judge.stream.entry_apart`).

`NormPosition` hooks one block and reads its first call; `BlockFormObserver` is the probe's
observer (`boundaries.BoundaryObserver`) that runs it on block 0 during the probe's own forward
pass, the input being the tensor the probe hands block 0 (`observe(0, h)`, just before block 0
runs); its result, `{"position": …, "pre_norm": bool, "norms": [class names]}`, is stored in
`Measurements.extra["block_form"]`. Only the first call counts, so a checkpointed recomputation
in the backward pass (a streamed model) changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import nn

from stability.families.adapters import hidden_state
from stability.families.discover import hidden_argument

__all__ = ["NormPosition", "BlockFormObserver", "Position", "norms_of"]

Position = Literal["pre", "post", "pre + post", "in branch", "none"]

_Key = tuple[int, tuple[int, ...], int]


def _key(t: torch.Tensor) -> _Key:
    """What identifies a tensor's value here: its storage, shape and version counter (a detached
    view shares all three with the tensor)."""
    return (t.data_ptr(), tuple(t.shape), t._version)


def norms_of(block: nn.Module) -> list[nn.Module]:
    """The block's norms: modules inside it whose class name holds "Norm" (not the block itself, whose
    own class name may hold it: a `…NormBlock`)."""
    return [m for m in block.modules() if m is not block and "Norm" in type(m).__name__]


class NormPosition:
    """Hooks on `block` that read its first call (the module docstring). With `hook_input`, the
    block's input is taken from its own forward pre-hook; else the caller names it (`given`)
    before the block runs. `position()` after the call; `close()` removes the hooks."""

    def __init__(self, block: nn.Module, *, hook_input: bool = True) -> None:
        self.norms = norms_of(block)
        self._input: _Key | None = None
        self._first: _Key | None = None
        self._outputs: list[tuple[torch.Tensor, int]] = []
        self._position: Position | None = None
        self._handles: list[Any] = []
        if hook_input:
            self._handles.append(block.register_forward_pre_hook(self._block_pre, with_kwargs=True))
        for n in self.norms:
            self._handles += [n.register_forward_pre_hook(self._norm_pre), n.register_forward_hook(self._norm_post)]
        self._handles.append(block.register_forward_hook(self._block_post))

    def given(self, h: torch.Tensor) -> None:
        """The block's input (a view of it), before its first call."""
        if self._input is None and self._position is None:
            self._input = _key(h)

    def position(self) -> Position | None:
        """Where the norms sit, or None when the block has not run on a tensor input."""
        return self._position

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles, self._outputs = [], []

    # -- the hooks ------------------------------------------------------------------------------

    def _block_pre(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        where = hidden_argument(module, args, kwargs)
        h = None if where is None else (args[where] if isinstance(where, int) else kwargs[where])
        if isinstance(h, torch.Tensor):
            self.given(h)

    def _norm_pre(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        if self._position is None and self._first is None and args and isinstance(args[0], torch.Tensor):
            self._first = _key(args[0])

    def _norm_post(self, module: nn.Module, args: tuple[Any, ...], out: Any) -> None:
        if self._position is None and isinstance(out, torch.Tensor):
            self._outputs.append((out, out._version))

    def _block_post(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if self._position is not None or self._input is None:
            return
        out = hidden_state(output)
        pre = self._first is not None and self._first == self._input
        post = out is not None and any(o is out and v == out._version for o, v in self._outputs)
        self._outputs = []
        self._position = (
            "pre + post"
            if pre and post
            else "pre"
            if pre
            else "post"
            if post
            else "in branch"
            if self.norms
            else "none"
        )


class BlockFormObserver:
    """`NormPosition` of block 0 during the probe's pass (the module docstring)."""

    name = "block_form"

    def __init__(self) -> None:
        self._reader: NormPosition | None = None

    def start(self, blocks: Sequence[nn.Module]) -> None:
        if self._reader is not None:
            self._reader.close()
        self._reader = NormPosition(blocks[0], hook_input=False) if blocks else None

    def observe(self, index: int, h: torch.Tensor) -> None:
        if index == 0 and self._reader is not None:
            self._reader.given(h)

    def finish(self) -> dict[str, Any] | None:
        reader, self._reader = self._reader, None
        if reader is None:
            return None
        reader.close()
        position = reader.position()
        if position is None:
            return None
        return {
            "position": position,
            "pre_norm": position == "pre",
            "norms": sorted({type(n).__name__ for n in reader.norms}),
        }
