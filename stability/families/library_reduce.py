"""A library model at a reduced size, from the arguments its library builds it with, by one rule
that reads the arguments' names and values, never the model's name (`stability scan`).

The arguments are a transformers config's (its default instance, with every nested config —
`text_config`, `vision_config`, … — reduced by the same rule), or the keyword arguments a timm or
torchvision builder passes to its model class. Each argument plays a role, read from its name:

- **layers** (`num_hidden_layers`, `encoder_layers`, `n_layer`, `depth`, `depths`, `layers`, …): the
  depth asked for (a list of stage depths: each stage at that depth); a list that held one entry
  per layer (`layer_types`, per-layer flags) is cut or repeated to the new count;
- **heads** (`num_attention_heads`, `n_head`, `num_heads`, lists of them): multiplied by the factor f
  below, and **widths** (`hidden_size`, `d_model`, `intermediate_size`, `*_ffn_dim`, `embed_dim`,
  `hidden_sizes`, …) by the same f, so a head keeps its dimension (fewer heads, not smaller ones:
  the attention logits' scale is the shipped one); key/value heads become at most the heads, a
  divisor of them; a head's own dimension (`head_dim`, `d_kv`, `*_head_dim`, low ranks) is kept;
- **vocabulary** (`*vocab_size`) at most `VOCAB`, and every token id (`*_token_id`, `*_token_index`)
  that no longer fits moved to the top of it; **positions** (`max_position_embeddings`, …) at most
  `POSITIONS`; **experts** at most 4, 2 of them per token, one group.

f is one number for the whole tree of configs, so two configs that must agree (a vision tower's
output width and the text model's width) still agree: with every head count of the tree h₁, h₂, …
and G their greatest common divisor, f = 1/G (2/G when that would leave one head at most), so every
head count stays a whole number. A tree without heads takes f = 2⁻ᵏ, the largest that brings its
widest width to at most `WIDTH`. A width that f does not divide becomes the nearest multiple of 8.

Not every model accepts every change (a config whose validation ties two numbers the rule does not
know of), so the rule is a ladder (`LADDER`): every change, then without the position cap, without
the vocabulary's, with wider widths (4f, 16f), with a factor per config, with the layers as shipped
(a config whose validation ties its layer counts together), without the experts', without the
widths', and last the default arguments with the layers alone, then nothing at all.
`stability.families.library_scan` builds each rung on the meta device and takes the first that
builds within its parameter limit, and the row says which rung it took.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "LADDER",
    "VOCAB",
    "POSITIONS",
    "WIDTH",
    "Rung",
    "Plan",
    "role",
    "plan",
    "at_depth",
    "head_factor",
    "cut",
    "template",
]

VOCAB = 512
POSITIONS = 512
WIDTH = 256
EXPERTS = 4
EXPERTS_PER_TOKEN = 2


@dataclass(frozen=True, kw_only=True)
class Rung:
    """One step of the ladder: which roles it changes, and the widths' factor: f times
    `multiplier` (at most 1), f of the whole tree or, with `local`, of each config apart."""

    name: str
    widths: bool = True
    vocab: bool = True
    positions: bool = True
    experts: bool = True
    layers: bool = True
    multiplier: int = 1
    local: bool = False


#: From the smallest model to the default one (the module docstring).
LADDER: tuple[Rung, ...] = (
    Rung(name="reduced"),
    Rung(name="reduced, positions as shipped", positions=False),
    Rung(name="reduced, positions and vocabulary as shipped", positions=False, vocab=False),
    Rung(name="reduced, widths 4f", multiplier=4),
    Rung(name="reduced, widths 4f, positions and vocabulary as shipped", multiplier=4, positions=False, vocab=False),
    Rung(name="reduced, widths 16f", multiplier=16),
    Rung(name="reduced, widths by config", local=True),
    Rung(name="reduced, widths 4f by config", local=True, multiplier=4),
    Rung(name="widths reduced, layers as shipped", layers=False),
    Rung(
        name="widths reduced, layers, positions and vocabulary as shipped", layers=False, positions=False, vocab=False
    ),
    Rung(name="layers and experts reduced", widths=False, vocab=False, positions=False),
    Rung(name="layers reduced", widths=False, vocab=False, positions=False, experts=False),
    Rung(name="default", widths=False, vocab=False, positions=False, experts=False, layers=False),
)

_KV = re.compile(r"(key_value|kv)_heads?$|^n_kv_heads$")
_HEADS = re.compile(r"(^|_)(n_)?heads?$|attention_heads$|^n_head$")
_KEEP = re.compile(
    r"head_dim|head_size|^d_kv$|d_head$|^dim_head$|^kv_channels$|lora_rank|_rank$|^num_channels$|^in_chans$"
    r"|^in_channels$|^out_channels$|input_channels|^audio_channels$|patch|kernel|stride|window|_ratio|groups?$"
    r"|^base_width$|width_per_group|^num_labels$|^num_classes$|rotary|^image_size$|^img_size$"
)
_LAYERS = re.compile(
    r"^(num_)?(hidden_)?layers$|^n_layers?$|^num_[a-z0-9_]*_layers$|^(encoder|decoder|text|vision)_layers$"
    r"|^depths?$|^num_blocks$|^n_blocks$|^num_hidden_blocks$"
)
_WIDTH = re.compile(
    r"(^|_)(hidden_size|hidden_sizes|d_model|n_embd|embed_dim|embed_dims|embedding_size|embedding_dim"
    r"|intermediate_size|ffn_dim|d_ff|n_inner|hidden_dim|mlp_dim|dim_feedforward|ffn_hidden_size|d_inner"
    r"|inner_dim|projection_dim|proj_dim|conv_dim|d_ssm|channels|widths|dims|num_features|stem_width"
    r"|stem_chs|dim)$|_dim$|^d_[a-z]+$"
)
_VOCAB = re.compile(r"vocab_size$|_vocab$")
_POSITIONS = re.compile(
    r"^max_position_embeddings$|^n_positions$|^max_seq_len$|^n_ctx$|^max_(source|target)_positions$"
)
_TOKEN = re.compile(r"_token_ids?$|_token_index$|^pad_token_id$")
_EXPERTS = re.compile(r"^(num_(local_)?experts|n_routed_experts|moe_num_experts)$")
_PER_TOKEN = re.compile(r"^(num_experts_per_(tok|token)|moe_topk|n_activated_experts|moe_k|top_k)$")
_GROUPS = re.compile(r"^(n_group|topk_group)$")
_SCALED_GROUPS = re.compile(r"(^|_)(num|n)_groups$|^groups$|_groups$")
_SHARED = re.compile(r"^(n_shared_experts|num_shared_experts)$")
_REFS = re.compile(r"(layers|indexes|indices|idx)$")
_COUNTS = (
    (_VOCAB, "vocab"),
    (_POSITIONS, "positions"),
    (_EXPERTS, "experts"),
    (_PER_TOKEN, "per_token"),
    (_GROUPS, "groups"),
    (_SHARED, "shared"),
)


def role(key: Any, value: Any) -> str | None:
    """The role of one argument (the module docstring), or None: left as it is."""
    if not isinstance(key, str):
        return None
    k = key.lower()
    if k in ("out_features", "out_indices"):
        return "stages"
    ints = _is_int(value) or (isinstance(value, (list, tuple)) and value and all(_is_int(x) for x in value))
    if not ints:
        return None
    if _TOKEN.search(k):
        return "token"
    if _KV.search(k):
        return "kv_heads"
    for pattern, name in _COUNTS:
        if pattern.search(k):
            return name
    if _SCALED_GROUPS.search(k):
        return "groups_scaled"
    if _KEEP.search(k) and not (k in ("in_channels", "out_channels") and not _is_int(value)):
        return None
    if _HEADS.search(k):
        return "heads"
    if _LAYERS.search(k):
        return "layers"
    if isinstance(value, (list, tuple)) and _REFS.search(k):
        return "layer_refs"
    if _WIDTH.search(k):
        return "width"
    return None


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _ints(value: Any) -> list[int]:
    return [int(value)] if _is_int(value) else [int(x) for x in value]


def head_factor(tree: Mapping[str, Any]) -> float:
    """f of the module docstring for a tree of arguments (nested mappings are sub-configs)."""
    heads = [h for h in _collect(tree, "heads") if h > 0]
    if heads:
        g = math.gcd(*heads)
        f = 1 / g
        return min(1.0, 2 / g) if max(heads) * f < 2 else f
    widths = [w for w in _collect(tree, "width") if w > 0]
    f = 1.0
    while widths and max(widths) * f > WIDTH and f > 1 / 64:
        f /= 2
    return f


def _indexed(v: Any) -> bool:
    """A mapping keyed by layer indices (a per-layer table), not a nested config."""
    return isinstance(v, Mapping) and bool(v) and all(_is_int(x) or (isinstance(x, str) and x.isdigit()) for x in v)


def _sub(v: Any) -> bool:
    """A nested config: a mapping that is no per-layer table."""
    return isinstance(v, Mapping) and not _indexed(v)


def _collect(tree: Mapping[str, Any], wanted: str) -> list[int]:
    out: list[int] = []
    for k, v in tree.items():
        if _sub(v):
            out += _collect(v, wanted)
        elif role(k, v) == wanted:
            out += _ints(v)
    return out


def _scale(x: int, f: float, *, exact: bool) -> int:
    """`x·f`: exactly where it is a whole number and `exact` (a tree with heads, whose widths are
    heads × their dimension), else the nearest multiple of 8, at least 8."""
    y = x * f
    if exact and abs(y - round(y)) < 1e-9 and round(y) >= 1:
        return int(round(y))
    return max(8, int(round(y / 8)) * 8)


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What one rung changes, as data: `changes` maps an argument (a path of keys, nested configs
    first) to its new value; `layers` the arguments that take the depth, with their values as
    shipped; `per_layer` the lists that held one entry per layer, `refs` the lists of layer indices
    and `stages` the lists naming stages, each with its value as shipped. `at_depth` makes the
    arguments of one depth."""

    rung: str
    factor: float
    changes: dict[tuple[str, ...], Any]
    layers: dict[tuple[str, ...], Any]
    per_layer: dict[tuple[str, ...], int]
    refs: dict[tuple[str, ...], Any]
    stages: tuple[tuple[str, ...], ...]
    exact: bool = True


def plan(tree: Mapping[str, Any], rung: Rung) -> Plan:
    """The changes of `rung` to the arguments `tree` (nested mappings are sub-configs)."""
    f = min(1.0, head_factor(tree) * rung.multiplier) if rung.widths and not rung.local else 1.0
    heads = bool([h for h in _collect(tree, "heads") if h > 0])
    out = Plan(rung=rung.name, factor=f, changes={}, layers={}, per_layer={}, refs={}, stages=(), exact=heads)
    stages: list[tuple[str, ...]] = []
    _walk(tree, (), rung, f, out, stages)
    return Plan(
        rung=out.rung,
        factor=f,
        changes=out.changes,
        layers=out.layers,
        per_layer=out.per_layer,
        refs=out.refs,
        stages=tuple(stages),
        exact=heads,
    )


def _walk(
    tree: Mapping[str, Any], path: tuple[str, ...], rung: Rung, f: float, out: Plan, stages: list[tuple[str, ...]]
) -> None:
    if rung.widths and rung.local:
        f = min(1.0, head_factor({k: v for k, v in tree.items() if not _sub(v)}) * rung.multiplier)
    changes = out.changes
    counts: set[int] = set()
    heads = 0
    stage_counts = {len(v) for k, v in tree.items() if isinstance(v, (list, tuple)) and role(k, v) == "layers"}
    for k, v in tree.items():
        if _sub(v):
            _walk(v, (*path, k), rung, f, out, stages)
            continue
        what, at = role(k, v), (*path, k)
        if what == "layers" and rung.layers and not (_is_int(v) and v in stage_counts):  # not a count of stages
            out.layers[at] = v
            if _is_int(v) and v > 1:
                counts.add(v)
        elif what == "heads" and rung.widths and f != 1:
            changes[at] = _apply(v, lambda h: max(1, round(h * f)))
            heads = max([heads, *_ints(changes[at])])
        elif what == "groups_scaled" and rung.widths and f != 1:  # channels per group kept, as a head's dimension
            changes[at] = _apply(v, lambda g: max(1, round(g * f)))
        elif what == "width" and rung.widths and f != 1:
            changes[at] = _apply(v, lambda w: _scale(w, f, exact=out.exact) if w > 8 else w)
        elif what in _LIMITS and getattr(rung, _LIMITS[what][0]):
            cap = _LIMITS[what][1]
            changes[at] = _apply(v, lambda n, cap=cap: min(n, cap))
    for k, v in tree.items():  # key/value heads: a divisor of the heads, at most as many
        if role(k, v) == "kv_heads" and _is_int(v) and rung.widths and f != 1:
            kv = max(1, round(v * f))
            while heads and heads % kv:
                kv -= 1
            changes[(*path, k)] = kv
    vocab = next((changes[(*path, k)] for k, v in tree.items() if role(k, v) == "vocab" and (*path, k) in changes), 0)
    if vocab:  # token ids past the new vocabulary: the top ids, one each
        top = [vocab - 1]

        def move(i: int) -> int:
            if i < vocab:
                return i
            top[0] -= 1
            return top[0] + 1

        for k, v in tree.items():
            if role(k, v) == "token":
                changes[(*path, k)] = _apply(v, move)
    if not counts:
        return
    for k, v in tree.items():
        at, what = (*path, k), role(k, v)
        if what == "stages":
            stages.append(at)
        elif what == "layer_refs" and all(0 <= x < max(counts) for x in v):
            out.refs[at] = v
        elif isinstance(v, (list, tuple)) and len(v) in counts and what != "layers" or _indexed(v) and "layer" in k:
            out.per_layer[at] = len(v)


#: role → (the rung's switch, the cap).
_LIMITS: dict[str, tuple[str, int]] = {
    "vocab": ("vocab", VOCAB),
    "positions": ("positions", POSITIONS),
    "experts": ("experts", EXPERTS),
    "per_token": ("experts", EXPERTS_PER_TOKEN),
    "groups": ("experts", 1),
    "shared": ("experts", 1),
}


def _apply(value: Any, fn: Any) -> Any:
    return fn(value) if _is_int(value) else type(value)(fn(x) for x in value)


def cut(values: list[Any], depth: int) -> list[Any]:
    """A per-layer list at `depth` entries: its first ones, repeated where it is shorter, with one
    entry of each kind it held put back at its end where the cut lost it (as many as fit), so a
    pattern of five sliding-window layers and one full one keeps a full layer at depth 2."""
    if not values:
        return values
    out = [values[i % len(values)] for i in range(depth)]
    kinds = list(dict.fromkeys(repr(v) for v in values))
    lost = [next(v for v in values if repr(v) == k) for k in kinds if k not in {repr(x) for x in out}]
    lost = lost[: max(0, depth - 1)]
    if lost:
        out[len(out) - len(lost) :] = lost
    return out


def at_depth(tree: Mapping[str, Any], p: Plan, depth: int) -> dict[str, Any]:
    """`tree` with the plan's changes at `depth` (the module docstring)."""
    out = _copy(tree)
    for path, value in p.changes.items():
        _put(out, path, value)
    for path, value in p.layers.items():
        _put(out, path, depth if _is_int(value) else type(value)(depth for _ in value))
    for path in p.per_layer:
        value = _get(out, path)
        if isinstance(value, Mapping):
            _put(out, path, {k: v for k, v in value.items() if int(k) < depth})
        else:
            _put(out, path, type(value)(cut(list(value), depth)))
    for path, value in p.refs.items():
        _put(out, path, type(value)(x for x in value if x < depth))
    for path in p.stages:
        _put(out, path, None)
    return out


def template(tree: Mapping[str, Any], p: Plan) -> dict[str, Any] | None:
    """`tree` with the plan's changes and `"depth"` (the library family's placeholder, filled from
    a case) for every layer count: `at_depth` at any depth, as one config; None where the plan cuts
    per-layer lists, which a placeholder cannot."""
    if p.per_layer or p.refs or p.stages or not p.layers:
        return None
    out = _copy(tree)
    for path, value in p.changes.items():
        _put(out, path, value)
    for path, value in p.layers.items():
        _put(out, path, "depth" if _is_int(value) else ["depth"] * len(value))
    return out


def _copy(tree: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _copy(v) if isinstance(v, Mapping) else v for k, v in tree.items()}


def _get(tree: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    for k in path:
        tree = tree[k]
    return tree


def _put(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for k in path[:-1]:
        tree = tree[k]
    tree[path[-1]] = value
