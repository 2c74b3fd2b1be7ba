"""The `custom` family: a user's factory, called with a case's values, and what it returned made
into a `Network`.

The factory is found under the factory rule (`stability.families.factory`: the spec's folder or a
configured source root, never the standard library or site-packages) and called by name with the
case's values (`call_factory`). What it returns becomes a network by the rules of
`stability.families.adapters` (`_network_from`): an `nn.Sequential`, an `nn.ModuleList`, a
`stability.Stack`, a module with `.blocks`/`.layers`/`.layer`/`.h`/`.block`; a whole transformers,
timm or torchvision model is probed through its own forward (`_whole_model`), and so is a whole
token model of the user's own class (`_own_token_model`: blocks of its own class and an
`nn.Embedding` that reads what its forward is called with), from token ids. A `Stack` may declare
the model's token `embedding`: the probe's input is then that embedding of token ids
(`stability.families.embedding`). A factory that raises fails the case; one that exits, or returns
what holds no blocks, is a spec error.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from stability.errors import CaseError, SpecError
from stability.families.adapters import Stack, find_blocks
from stability.families.build import Network, derive_seed, torch_dtype
from stability.families.construction import constructing
from stability.families.discover import ModelRun, discover, holds_blocks
from stability.families.embedding import TokenEmbedding, reading_embedding, token_ids
from stability.families.factory import EXTRA_NAMES, Parameter, load_factory, signature_error
from stability.families.library_build import make_inputs
from stability.families.library_lookup import library_of
from stability.spec.case import Case
from stability.spec.schema import DEFAULT_SIZE, Spec

__all__ = ["build_custom", "call_factory"]


def _resolve_factory(spec: Spec) -> Any:
    """The factory function, found under the rule of `stability.families.factory` (the spec's folder or a
    configured source root; never the standard library or site-packages)."""
    return load_factory(spec.path, spec.block.factory or "")


def build_custom(spec: Spec, case: Case) -> Network:
    """The `custom` family: the spec's factory, found under the factory rule, called with the case's values by name."""
    out = call_factory(spec, case)
    if isinstance(out, nn.Module) and library_of(out) is not None and holds_blocks(out, min_run=1):
        return _whole_model(spec, case, out)
    own = _own_token_model(spec, case, out)
    if own is not None:
        return own
    return _nonempty(spec, case, _network_from(spec, out, case=case))


def call_factory(spec: Spec, case: Case, **extra: Any) -> Any:
    """The spec's factory (found under the factory rule) called by name with the case's values,
    `EXTRA_NAMES`, `extra` (the language-model run's `vocab`) and `block.factory_args`; what it
    returns. A factory that raises fails the case (CaseError); one that exits is a SpecError."""
    fn = _resolve_factory(spec)
    values: dict[str, Any] = {
        **case.as_dict(),
        **dict(zip(EXTRA_NAMES, (case.weight_init, spec.block.layer, torch_dtype(case.dtype)), strict=True)),
        **extra,
        **spec.block.factory_args,
    }
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C function without a signature: call it with nothing
        params = {}  # type: ignore[assignment]
    declared = [Parameter(p.name, p.kind.name, p.default is not inspect.Parameter.empty) for p in params.values()]  # type: ignore[arg-type]
    error = signature_error(spec, declared)
    if error is not None:  # the rule the parent checked on the source, now on the imported function
        raise error
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = values if takes_all else {k: v for k, v in values.items() if k in params}
    try:
        with constructing():  # (a watcher, e.g. init_conformance's recorder, sees the construction and init)
            out = fn(**kwargs)
    except CaseError:  # the per-case time limit or memory refusal
        raise
    except SystemExit as exc:  # a factory may not decide the gate's exit code
        raise SpecError(
            spec.path,
            "block.factory",
            f"called sys.exit({exc.code!r}) (case {case})",
            value=spec.block.factory,
            fix="a factory must return blocks, not exit",
        ) from None
    except Exception as exc:  # the factory's own check on this case (e.g. heads not dividing width): this case fails
        what = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise CaseError(f"the factory {spec.block.factory} raised {what}") from None
    return out


def _whole_model(spec: Spec, case: Case, model: nn.Module) -> Network:
    """A whole transformers, timm or torchvision model from a factory: probed through its own
    forward, on inputs by its modality (`library_build.make_inputs`), its blocks discovered. What
    the harness cannot make (a model that takes neither token ids nor images) is a SpecError."""
    target = library_of(model)
    assert target is not None
    try:
        inputs = make_inputs(
            model,
            target,
            {},
            case.as_dict(),
            modality=None,
            seed=derive_seed(case.seed, 1),
            device=torch.device("cpu"),
            dtype=torch.float32,
        )
    except CaseError as exc:
        raise SpecError(
            spec.path,
            "block.factory",
            f"returned the whole model {type(model).__name__}, whose inputs the harness cannot make: {exc}",
            value=spec.block.factory,
            fix='use family = "library" with inputs = "embeddings", or return its blocks in a stability.Stack',
        ) from None
    found = discover(model, inputs).blocks
    return Network(blocks=nn.Sequential(*found.modules), model=ModelRun(model=model, inputs=inputs, blocks=found))


def _own_token_model(spec: Spec, case: Case, out: Any) -> Network | None:
    """A whole token model of the user's own class (no library's): a module, not a plain container,
    holding a run of blocks of a class of its own and an `nn.Embedding` that reads what its forward
    is called with. It is probed through its own forward from token ids drawn from that embedding's
    vocabulary, hooks at its blocks' boundaries, as a library model is, so its blocks see the stream
    at its embedding's scale (and its positions, masks and biases) exactly as the model runs it.
    None for anything else (probed by the rules of `_network_from`)."""
    if (
        not isinstance(out, nn.Module)
        or isinstance(out, (nn.Sequential, nn.ModuleList, nn.ModuleDict))
        or not any(isinstance(m, nn.Embedding) for m in out.modules())
        or not holds_blocks(out, min_run=1)
    ):
        return None
    shape = (case.batch, case.tokens or DEFAULT_SIZE)
    found = reading_embedding(out, shape)
    if found is None:
        return None
    gen = torch.Generator().manual_seed(derive_seed(case.seed, 1))
    ids = token_ids(found.vocab, found.padding, shape, generator=gen)  # (B, T)
    blocks = discover(out, ids).blocks
    return Network(
        blocks=nn.Sequential(*blocks.modules), model=ModelRun(model=out, inputs=ids, blocks=blocks), tokens=found
    )


def _declared_embedding(spec: Spec, case: Case | None, stack: Stack) -> TokenEmbedding | None:
    """The `nn.Embedding` that reads the token ids a `Stack.embedding` is called with (None without
    one); a SpecError when none does."""
    if stack.embedding is None:
        return None
    shape = (case.batch, case.tokens or DEFAULT_SIZE) if case is not None else (2, DEFAULT_SIZE)
    found = reading_embedding(stack.embedding, shape)
    if found is None:
        raise SpecError(
            spec.path,
            "block.factory",
            "returned a stability.Stack whose embedding reads the token ids with no nn.Embedding "
            f"(or raised on ids of shape (batch, tokens)) for case {case}",
            value=spec.block.factory,
            fix="pass the model's token embedding: embedding=model.wte, or a function of the ids that calls it",
        )
    return found


def _nested_blocks(model: nn.Module, depth: int = 3) -> list[str]:
    """Paths below `model` (up to `depth` levels) of modules `find_blocks` would take: where a whole
    model (a Hugging Face *Model or *ForCausalLM: encoder.layer, transformer.h, model.layers) keeps
    its blocks. Only a hint: the model's own forward passes masks and position embeddings that
    its blocks alone would not get, so the harness does not pick one itself."""
    found: list[str] = []
    level = [(name, child) for name, child in model.named_children()]
    for _ in range(depth):
        below: list[tuple[str, nn.Module]] = []
        for path, module in level:
            if find_blocks(module) is not None and not isinstance(module, (nn.Sequential, nn.ModuleList)):
                found.append(path)
            else:
                below += [(f"{path}.{name}", child) for name, child in module.named_children()]
        if found:
            return found[:3]
        level = below
    return []


def _network_from(spec: Spec, out: Any, *, case: Case | None = None) -> Network:
    """What a factory returned → a `Network`, by the rules of `stability.families.adapters`."""
    if isinstance(out, nn.Sequential):
        return Network(blocks=out)
    found = find_blocks(out) if isinstance(out, (nn.Module, Stack)) else None
    if found is None:
        inner = _nested_blocks(out) if isinstance(out, nn.Module) else []
        hint = (
            f"; it holds blocks deeper, at {' and '.join('.' + p for p in inner)}: return that module (with a "
            "stability.Stack carrying "
            "the attention mask or position embeddings its blocks need, as the whole model would pass them)"
            if inner
            else ""
        )
        raise SpecError(
            spec.path,
            "block.factory",
            f"returned {type(out).__name__}, not an nn.Sequential, an nn.ModuleList, a stability.Stack or a "
            f"module with one of .blocks/.layers/.layer/.h/.block{hint}",
            value=spec.block.factory,
            fix="return nn.Sequential(*blocks), the library's ModuleList, or stability.Stack(blocks=...)",
        )
    blocks = nn.Sequential(*found)
    if isinstance(out, Stack):
        embedding = out.embedding
        return Network(
            blocks=blocks,
            stem=out.stem,
            head=out.head,
            call_kwargs=out.call_kwargs,
            embedding=embedding,
            tokens=_declared_embedding(spec, case, out),
        )
    if isinstance(getattr(out, "blocks", None), nn.Module):  # a module with .blocks may carry .stem and .head
        return Network(blocks=blocks, stem=getattr(out, "stem", None), head=getattr(out, "head", None))
    return Network(blocks=blocks)


def _nonempty(spec: Spec, case: Case, net: Network) -> Network:
    """A stack with no blocks measures nothing, and nothing measured is not a pass."""
    if len(net.blocks) == 0:
        raise SpecError(
            spec.path,
            "block.factory",
            f"returned an empty stack (no blocks) for case {case}",
            value=spec.block.factory,
            fix="return one module per block, e.g. nn.Sequential(*[Block(width) for _ in range(depth)])",
        )
    return net
