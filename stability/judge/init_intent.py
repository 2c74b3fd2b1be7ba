"""The model's own declared intent, read from the init its parameters received (pure: the record
of `stability.measure.init_trace`, carried by `InitRecord.trace`), and where the recorded init
contradicts it. `deviations(record)` is the one definition every path asks (init_conformance's
verdict; a scan of a library's model classes).

A deviation is one of:

- **left at default** — a parameter left at PyTorch's constructor default (nn.Linear's
  U(±1/√fan_in), nn.Embedding's N(0, 1), …) where the model's own init declares a law for it:
  (a) the model's config declares the std of all weight matrices (transformers documents
  `initializer_range` and `init_std` as "the standard deviation of the truncated_normal_initializer
  for initializing all weight matrices") and the parameter is a weight matrix (two or more
  dimensions); or (b) an init site of the model's code (one line of its init visiting modules — a
  loop over modules, an `apply` — and writing each visited module's own parameter, in two or more
  groups) wrote every other parameter of this module class and name within its scope (the module
  whose code it is) and left this one. A line that writes a named part of each block (timm's
  zero_init_last: `m.conv2[1].weight`) declares nothing for that block's other parts.
  transformers 4.53.3's Mamba left its mixers' nn.Linear weights at U(±1/√fan_in) while its config
  declares initializer_range = 0.1.
- **layer scale** — a layer-scale parameter (a vector) that is not the constant its module was
  given: the owning module's constructor took `init_values` / `ls_init_value` /
  `layer_scale_init_value` / `layerscale_value` / `layer_scale` = v, or the parameter was created as
  v times a constant from the config's value v (Touvron et al. 2021, CaiT). timm 1.0.21's
  LayerScale set gamma to ones, whatever `init_values`.
- **norm offset** — a constant the owning module's own constructor created (Gemma's (1 + w)
  RMSNorm creates w = 0) overwritten with another constant by generic code: a module neither the
  owner's class nor the model's class is defined in (transformers 4.56.2's
  PreTrainedModel._init_weights filled every *RMSNorm* weight with 1) — where the module's forward
  computes something at the created value (its output on an N(0, 1) input is not all zero:
  `ParameterTrace.created_live`; IBert's IntLayerNorm creates a placeholder 0 and multiplies by
  it). The class that computes with the value says what it means; code written beside it or beside
  the model (CLIP-like models set their logit scale from a constant of their own) is the model's
  intent, and a family table judges it where a paper declares otherwise (the gemma table: 4.53.3's
  GemmaPreTrainedModel._init_weights filled its norms with 1 too).
- **frozen at zero** — a table (two or more dimensions longer than 1) with requires_grad = False
  left at zero: no gradient ever moves it, and a zero table adds nothing (transformers 5.x
  ViT-MAE's sin-cos position embeddings). A frozen vector may be moved by a rule of its own (a
  mixture of experts' load-balancing bias starts at zero and is updated outside gradient descent:
  Wang et al. 2024, DeepSeek-AI 2024), and is not judged by this rule.
- **never written** — a parameter created with torch.empty and never written: uninitialised memory.
- **depth scaling** — the config declares the GPT-2 scheme (`rescale_prenorm_residual = True`:
  the residual branches' output weights divided by √N after their draw, N = num_hidden_layers;
  Radford et al. 2019) and no weight of the model was scaled by 1/√N (or 1/√(2N)) after its draw:
  a deviation of the model, not of one parameter (its name is empty).

Laws the model's code wrote on purpose (GPT-2's depth-scaled c_proj, Mamba's dt_proj) are its
intent and are not deviations; a family table (stability/judge/init_rules.toml) states what the
code should have written where that is declared elsewhere (a paper).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from stability.measure.init_stats import InitRecord, ParameterStats
from stability.measure.init_trace import ParameterTrace
from stability.measure.init_trace_law import RecordedLaw

__all__ = [
    "Deviation",
    "deviations",
    "group_of",
    "LAYER_SCALE_KEYS",
    "INIT_RANGE_KEYS",
    "DEPTH_SCALING_KEYS",
    "trace_of",
]

Rule = Literal["left_at_default", "layer_scale", "norm_offset", "frozen_at_zero", "never_written", "depth_scaling"]

#: The constructor arguments and config keys that give a layer scale its value (Touvron et al. 2021).
LAYER_SCALE_KEYS = (
    "init_values",
    "ls_init_value",
    "ls_init_values",
    "layer_scale_init_value",
    "layer_scale_init_values",
    "layerscale_value",
    "layer_scale",
)
#: The config keys that declare the std of every weight matrix (transformers' PretrainedConfig docs).
INIT_RANGE_KEYS = ("initializer_range", "init_std")
_DOC = '"the standard deviation of the truncated_normal_initializer for initializing all weight matrices"'


@dataclass(frozen=True, kw_only=True)
class Deviation:
    """One parameter whose recorded init contradicts the model's declared intent."""

    rule: Rule
    name: str  # "" for a deviation of the model as a whole (depth scaling)
    group: str  # the name with layer indices as *
    recorded: str  # the recorded law and its writer
    declared: str  # the law the intent declares
    source: str  # where the intent is declared


def group_of(name: str) -> str:
    """A parameter's name with its layer indices as `*` (`h.*.mlp.c_proj.weight`)."""
    return re.sub(r"(?:(?<=\.)|^)\d+(?=\.|$|\[)", "*", name)


def trace_of(record: InitRecord, name: str) -> tuple[ParameterTrace, RecordedLaw] | None:
    """The trace of a record's parameter and the law of the elements its statistics are of (an
    embedding's padding row `w[padding_idx=K]`, judged apart: the write over that row, else the
    table's law); None where nothing was recorded. Elements written apart after the last whole
    write, other than a padding row judged apart, make the parameter's law computed: its
    statistics are of a mixture."""
    if record.trace is None:
        return None
    traces = record.trace.by_name()
    base, _, row = name.partition("[padding_idx=")
    t = traces.get(base)
    if t is None or not t.recorded:
        return None
    rows = {p.name: p for p in record.parameters if p.name.startswith(base + "[padding_idx=")}
    apart = {(int(n.partition("[padding_idx=")[2].rstrip("]")) * p.n, p.n) for n, p in rows.items()}
    if row:
        (start, width) = next(iter(apart))
        cover = [w for w in t.partial if (w.start, w.numel) == (start, width)]
        return t, (cover[-1].law if cover else t.law)
    if any((w.start, w.numel) not in apart for w in t.partial):
        return t, RecordedLaw(kind="computed", how=f"{t.law.describe()}, with elements written apart")
    return t, t.law


def _writer(t: ParameterTrace) -> str:
    return t.writer.partition(":")[2] or t.writer or "its constructor"


def _recorded(t: ParameterTrace, law: RecordedLaw | None = None) -> str:
    return f"{(law or t.law).describe()} by {_writer(t)}"


def _module_of(writer: str) -> str:
    return writer.partition(":")[0]


def _vector(p: ParameterStats) -> bool:
    return p.n > 0 and max(p.shape, default=1) == p.n


def _is_constant(law: RecordedLaw, v: float, eps: float) -> bool:
    return law.kind == "constant" and abs(law.value - v) <= max(eps, 1e-12) * abs(v)


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


# ----------------------------------------------------------------------------- the rules


def _left_at_default(record: InitRecord, rows: list[tuple[ParameterStats, ParameterTrace]]) -> Iterable[Deviation]:
    key = next((k for k in INIT_RANGE_KEYS if (_number(record.variables.get(k)) or 0) > 0), None)
    # An init site (one line of the model's init) within one scope (the module whose code it is):
    # the groups of parameters it wrote, and per (module class, name) an example and its law.
    sites: dict[tuple[str, str], dict[str, Any]] = {}
    for p, t in rows:
        if t.phase == "init" and t.site and t.scope is not None and t.visited:
            s = sites.setdefault((t.site, t.scope), {"groups": set(), "kinds": {}, "writer": t.writer})
            s["groups"].add(group_of(p.name))
            s["kinds"].setdefault((p.module[0], p.name.rpartition(".")[2]), (group_of(p.name), t.law))
    blanket = [(scope, s) for (_, scope), s in sites.items() if len(s["groups"]) >= 2]
    for p, t in rows:
        if t.phase != "default":
            continue
        if key is not None and len(p.shape) >= 2:
            sigma = float(record.variables[key])
            yield Deviation(
                rule="left_at_default",
                name=p.name,
                group=group_of(p.name),
                recorded=f"{t.law.describe()}, PyTorch's default ({_writer(t)})",
                declared=f"N(0, {sigma:.4g}²)",
                source=f"the config declares {key} = {sigma:g}, {_DOC} (transformers PretrainedConfig)",
            )
            continue
        kind = (p.module[0], p.name.rpartition(".")[2])
        for scope, s in blanket:
            inside = scope == "" or p.name.startswith(scope + ".")
            if inside and kind in s["kinds"]:
                example, law = s["kinds"][kind]
                yield Deviation(
                    rule="left_at_default",
                    name=p.name,
                    group=group_of(p.name),
                    recorded=f"{t.law.describe()}, PyTorch's default ({_writer(t)})",
                    declared=f"{law.describe()} as {example}",
                    source=f"{s['writer'].partition(':')[2]} initialises every {kind[0]}.{kind[1]} of "
                    f"{scope or 'the model'} and left this one",
                )
                break


def _layer_scale(record: InitRecord, rows: list[tuple[ParameterStats, ParameterTrace]]) -> Iterable[Deviation]:
    configured = [(k, v) for k in LAYER_SCALE_KEYS if (v := _number(record.variables.get(k)))]
    for p, t in rows:
        if not _vector(p):
            continue
        # A layer scale is created from its value (v·ones(d), v·empty(d)) by a module given it, or is
        # the vector of a module that holds nothing else (timm's LayerScale: torch.empty(d), then its own init).
        carries = [(k, v) for k in LAYER_SCALE_KEYS if (v := _number(t.owner_args.get(k)))]
        given = next(((k, v) for k, v in carries if _created_from(t.created, v, empty=t.owner_leaf)), None)
        where = f"{p.module[0]}({given[0]}={given[1]:g})" if given else ""
        if given is None and not t.owner.startswith("torch."):
            given = next(((k, v) for k, v in configured if _created_from(t.created, v, empty=False)), None)
            where = f"the config's {given[0]} = {given[1]:g}, which {p.module[0]} created it from" if given else ""
        if given is None or _is_constant(t.law, given[1], p.eps):
            continue
        yield Deviation(
            rule="layer_scale",
            name=p.name,
            group=group_of(p.name),
            recorded=_recorded(t),
            declared=f"= {given[1]:g}",
            source=f"layer scale from {where} (Touvron et al. 2021, CaiT)",
        )


def _created_from(created: RecordedLaw, v: float, *, empty: bool) -> bool:
    """Whether a parameter was created from the value v (v·ones, v·empty), or (`empty`) as torch.empty."""
    if created.kind == "constant":
        return math.isclose(created.value, v, rel_tol=1e-6)
    return created.kind == "empty" and (empty or (created.gain != 1 and math.isclose(created.gain, v, rel_tol=1e-6)))


def _norm_offset(record: InitRecord, rows: list[tuple[ParameterStats, ParameterTrace]]) -> Iterable[Deviation]:
    for p, t in rows:
        if t.created.kind != "constant" or t.law.kind != "constant" or t.law.value == t.created.value:
            continue
        if t.created_live is not True:
            continue  # the created value is a placeholder its forward computes nothing with (or it cannot tell)
        owner, owner_class = t.owner.partition(":")[::2]
        creator = t.creator.partition(":")[2]
        if not owner or owner.startswith("torch.") or creator not in {f"{c}.__init__" for c in p.module}:
            continue  # not created by the module's own constructor (torch's modules draw their defaults)
        model_module = record.trace.model_module if record.trace is not None else ""
        if _module_of(t.writer) in (owner, model_module, ""):
            continue  # code beside the module's class or the model's: the model's intent
        yield Deviation(
            rule="norm_offset",
            name=p.name,
            group=group_of(p.name),
            recorded=_recorded(t),
            declared=f"= {t.created.value:g}",
            source=f"{owner_class}.__init__ creates it = {t.created.value:g}; {_writer(t)}, generic code "
            f"(of neither {owner_class}'s module nor the model's), overwrote it",
        )


def _frozen_at_zero(record: InitRecord, rows: list[tuple[ParameterStats, ParameterTrace]]) -> Iterable[Deviation]:
    for p, t in rows:
        table = sum(d > 1 for d in p.shape) >= 2
        if not t.requires_grad and table and t.law.kind == "constant" and t.law.value == 0:
            yield Deviation(
                rule="frozen_at_zero",
                name=p.name,
                group=group_of(p.name),
                recorded=_recorded(t),
                declared="not all zero",
                source="requires_grad = False: no gradient moves it, and a table of zeros carries nothing",
            )


def _never_written(record: InitRecord, rows: list[tuple[ParameterStats, ParameterTrace]]) -> Iterable[Deviation]:
    for p, t in rows:
        if t.law.kind == "empty":
            yield Deviation(
                rule="never_written",
                name=p.name,
                group=group_of(p.name),
                recorded=_recorded(t),
                declared="any init",
                source="torch.empty leaves memory uninitialised",
            )


#: The config keys that declare the GPT-2 scheme, and those that give its N.
DEPTH_SCALING_KEYS = ("rescale_prenorm_residual",)
_DEPTH_KEYS = ("num_hidden_layers", "n_layer", "num_layers")


def _depth_scaling(record: InitRecord, rows: list[tuple[ParameterStats, ParameterTrace]]) -> Iterable[Deviation]:
    key = next((k for k in DEPTH_SCALING_KEYS if record.variables.get(k) is True), None)
    depth = next((int(v) for k in _DEPTH_KEYS if (v := _number(record.variables.get(k)))), 0)
    if key is None or depth < 2 or not rows:
        return
    factors = (1 / math.sqrt(depth), 1 / math.sqrt(2 * depth))
    if any(math.isclose(abs(t.scale), f, rel_tol=1e-6) for _, t in rows for f in factors):
        return
    yield Deviation(
        rule="depth_scaling",
        name="",
        group="the model",
        recorded="no weight scaled after its draw",
        declared=f"the residual branches' output weights scaled by 1/√{depth} (or 1/√{2 * depth})",
        source=f"the config declares {key} = True (Radford et al. 2019, GPT-2's scheme)",
    )


_RULES = (_left_at_default, _layer_scale, _norm_offset, _frozen_at_zero, _never_written, _depth_scaling)


def deviations(record: InitRecord) -> list[Deviation]:
    """Every parameter whose recorded init contradicts the model's declared intent (the module
    docstring), one deviation per parameter (the first rule's), in the record's order."""
    if record.trace is None:
        return []
    traces = record.trace.by_name()
    rows = [(p, traces[p.name]) for p in record.parameters if p.name in traces and traces[p.name].recorded]
    found: dict[str, Deviation] = {}
    for rule in _RULES:
        for d in rule(record, rows):
            found.setdefault(d.name, d)
    order = {p.name: i for i, p in enumerate(record.parameters)}
    return sorted(found.values(), key=lambda d: order.get(d.name, len(order)))
