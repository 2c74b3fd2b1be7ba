"""What each built-in invariant has measured beyond the probe's one forward and one backward pass
(its registry entry's `observers`, `after_probe` and `ensemble`), and the optimizer runs a
training invariant's case takes (`train_cases`, `memory`, the runs shared by trainability and
residual_size). The measurements import torch only when called (stability.judge.catalog).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stability.spec import schema as s

__all__ = [
    "rank_observers",
    "form_observers",
    "entry_after",
    "attention_observers",
    "channel_observers",
    "jacobian_after",
    "mean_field_after",
    "lesion_after",
    "init_construction",
    "init_after",
    "variance_ensemble",
    "mean_field_ensemble",
    "stream_ensemble",
    "lesion_ensemble",
    "channel_ensemble",
    "training_runs",
    "depth_variants",
    "width_variants",
    "train_memory",
]


def rank_observers(spec: s.Spec) -> list[Any]:
    from stability.judge.token_invariants import RankCollapseObserver

    return [RankCollapseObserver()] if spec.block.layer == "tokens" else []


def form_observers(spec: s.Spec) -> list[Any]:
    """Whether the stack is pre-norm (stability.measure.block_form), for a family whose x₀ may be a
    model's own token embedding (a factory's or a library's model)."""
    from stability.measure.block_form import BlockFormObserver

    return [BlockFormObserver()] if spec.family in ("custom", "library") else []


def entry_after(ctx: Any) -> Mapping[str, Any]:
    """Whether x₀ is the model's own embedding of token ids (`Network.embedded`), beside the block form."""
    return {"embedded": bool(ctx.net is not None and ctx.net.embedded)}


def attention_observers(spec: s.Spec) -> list[Any]:
    from stability.judge.token_invariants import AttentionEntropyObserver

    return [AttentionEntropyObserver()] if spec.block.layer == "tokens" else []


def channel_observers(spec: s.Spec) -> list[Any]:
    from stability.measure.channels import ChannelStats

    return [ChannelStats()]


def jacobian_after(ctx: Any) -> Mapping[str, Any]:
    from stability.families.build import derive_seed
    from stability.measure.jacobian import jacobian_spectrum

    js = ctx.spec.expect.jacobian_spectrum
    return {
        "jacobian_spectrum": jacobian_spectrum(
            ctx.blocks,
            ctx.x,
            probes=js.probes,
            iterations=js.iterations,
            seed=derive_seed(ctx.case.seed, 3),
            exact=js.exact,
        )
    }


def mean_field_after(ctx: Any) -> Mapping[str, Any]:
    from stability.judge.theory_checks import predict

    return {"mean_field": predict(ctx.spec, ctx.case)}


def lesion_after(ctx: Any) -> Mapping[str, Any]:
    from stability.measure.lesion import network_lesion

    return {"lesion": network_lesion(ctx.net, ctx.x)}


def init_construction(spec: s.Spec) -> Any:
    """init_conformance's watcher of the construction: the recorder of the init each parameter receives."""
    from stability.measure.init_recorder import InitRecorder

    return InitRecorder()


def init_after(ctx: Any) -> Mapping[str, Any]:
    """The statistics of every parameter at init, of the model as the library built it (a library
    model's whole model, the shipped-width factors divided out; else the blocks), with the init
    each received as it was constructed and the init keys the spec sets against the registered
    model's values."""
    from stability.families.library_stream import streamer_of
    from stability.measure.init_stats import declared_config, init_record

    run = ctx.net.model if ctx.net is not None else None
    model, rescaled = (run.model, run.rescaled) if run is not None else (ctx.blocks, {})
    config: dict[str, Any] = {}
    overrides: tuple[Any, ...] = ()
    if ctx.spec.family == "library":
        from stability.families.library_family import library_model
        from stability.families.library_values import fill
        from stability.measure.init_registered import overrides as config_overrides

        lib = library_model(ctx.spec)
        config = fill(lib.config, ctx.case.as_dict())
        overrides = config_overrides(lib.target, config)
    recorder = ctx.watchers.get("init_conformance")
    trace = recorder.trace(model) if recorder is not None and recorder.recorded else None
    why = ""
    if trace is None:
        why = (
            f"the recording stopped: {recorder.failure}"
            if recorder is not None and recorder.failure
            else 'scale = "shipped" streams the model: its blocks are made and initialised as the probe runs them, '
            "outside a recorded construction"
            if streamer_of(model) is not None
            else "the model was not constructed under the recording"
        )
    declared = declared_config(model, config, trace.model_args if trace is not None else None)
    record = init_record(model, declared, rescaled, trace=trace, unrecorded=why, overrides=overrides)
    return {"init_conformance": record}


def variance_ensemble(ctx: Any) -> Mapping[str, Any]:
    """The growth law is judged on the case's seed ensemble, grown until it is decided
    (stability.judge.growth); the members are shared with mean_field."""
    from stability.judge.growth import enough_members
    from stability.measure.ensemble import probe_ensemble_until_decided

    if ctx.size <= 1:
        return {}
    vg = ctx.spec.expect.variance_growth
    ens = probe_ensemble_until_decided(
        ctx.spec, ctx.case, ctx.m, size=ctx.size, enough=enough_members(ctx.case.depth, bounded_ratio=vg.bounded_ratio)
    )
    ctx.shared["probe_ensemble"] = ens
    return {"ensemble": ens}


def mean_field_ensemble(ctx: Any) -> Mapping[str, Any]:
    from stability.measure.ensemble import probe_ensemble

    if ctx.size <= 1:
        return {}
    ens = ctx.shared.get("probe_ensemble") or probe_ensemble(ctx.spec, ctx.case, ctx.m, size=ctx.size)
    ctx.shared["probe_ensemble"] = ens
    return {"mean_field_ensemble": [(g[0], g[-1]) for g in ens.grad_norm]}


def stream_ensemble(ctx: Any) -> Mapping[str, Any]:
    """residual_stream judges the ensemble's medians: variance_growth's members where it measured
    them (they carry each member's gradient norms), else an ensemble of its own, shared."""
    from stability.measure.ensemble import probe_ensemble

    if ctx.size <= 1 or "ensemble" in ctx.m.extra:
        return {}
    ens = ctx.shared.get("probe_ensemble") or probe_ensemble(ctx.spec, ctx.case, ctx.m, size=ctx.size)
    ctx.shared["probe_ensemble"] = ens
    return {"stream_ensemble": ens}


def lesion_ensemble(ctx: Any) -> Mapping[str, Any]:
    from stability.measure import ensemble

    if ctx.size <= 1 or "lesion" not in ctx.m.extra:
        return {}
    return {"lesion_ensemble": ensemble.lesion_ensemble(ctx.spec, ctx.case, ctx.m.extra["lesion"], size=ctx.size)}


def channel_ensemble(ctx: Any) -> Mapping[str, Any]:
    from stability.measure.ensemble import probe_channel_ensemble

    if ctx.size <= 1:
        return {}
    return {"channel_ensemble": probe_channel_ensemble(ctx.spec, ctx.case, ctx.m, size=ctx.size)}


def training_runs(spec: s.Spec, e: Any, case: Any, cache: dict[Any, Any]) -> list[Any]:
    """One optimizer run per compared depth, shared by trainability and residual_size (`cache`)."""
    import dataclasses

    from stability.measure.train import train_case

    runs = []
    for v in depth_variants(e, case):
        key = (dataclasses.replace(v, depth=0), v.depth)
        if key not in cache:
            cache[key] = train_case(spec, v)
        runs.append(cache[key])
    return runs


def depth_variants(e: Any, case: Any) -> list[Any]:
    import dataclasses

    depths = list(e.compare_depths) if e.compare_depths is not None else [case.depth]
    return [dataclasses.replace(case, depth=d) for d in depths]


def width_variants(e: s.UpdateSize, case: Any) -> list[Any]:
    import dataclasses

    return [dataclasses.replace(case, width=w) for w in e.widths]


def train_memory(variants: Any) -> Any:
    """The largest of the runs one case trains one after another (stability.measure.train_memory)."""

    def memory(spec: s.Spec, e: Any, case: Any) -> int | None:
        from stability.measure.train_memory import train_bytes

        sizes = [train_bytes(spec, v) for v in variants(e, case)]
        return None if any(n is None for n in sizes) else max(n for n in sizes if n is not None)

    return memory
