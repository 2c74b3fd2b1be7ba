"""The recorded init (stability.measure.init_recorder, init_trace, init_trace_law, init_trace_ops):
each law against its closed form — nn.Linear's default U(±1/√fan_in), GPT-2's c_proj
N(0, (0.02/√(2·n_layer))²), a weight scaled and shifted after its init, trunc_normal's arguments
(torch's, timm's `_tf`, a library's own inverse-CDF sampler), a `.data` write, a padding row, a
parameter created as `init_values * torch.ones(d)` — and the values the model holds agreeing with
every recorded law."""

from __future__ import annotations

import math
import types
from typing import Any

import pytest
import torch
from torch import nn

from stability.judge.init_conformance import judged_law
from stability.judge.init_intent import trace_of
from stability.judge.init_laws import check_parameter
from stability.measure.init_recorder import InitRecorder
from stability.measure.init_stats import init_record
from stability.measure.init_trace import InitTrace, ParameterTrace
from stability.measure.init_trace_law import RecordedLaw, fold


def _built(make: Any) -> tuple[nn.Module, InitTrace]:
    torch.manual_seed(0)
    recorder = InitRecorder()
    with recorder.recording():
        model = make()
    assert not recorder.failure, recorder.failure
    return model, recorder.trace(model)


def _law(trace: InitTrace, name: str) -> RecordedLaw:
    return trace.by_name()[name].law


def _holds(model: nn.Module, trace: InitTrace) -> None:
    """Every parameter's values are a sample of its recorded law (the recorder saw every write)."""
    record = init_record(model, {}, trace=trace)
    for p in record.parameters:
        found = trace_of(record, p.name)
        law = judged_law(found[1]) if found is not None else None
        if law is None:
            continue
        checks = check_parameter(law, n=p.n, mean=p.mean, var=p.var, lo=p.min, hi=p.max, eps=p.eps, level=1e-6)
        assert all(c.passed for c in checks), (p.name, found[1].describe(), [c for c in checks if not c.passed])


def test_a_linear_left_at_its_default_is_exactly_uniform_over_one_over_root_fan_in() -> None:
    model, trace = _built(lambda: nn.Linear(48, 16))
    bound = 1 / math.sqrt(48)
    for name in ("weight", "bias"):
        t = trace.by_name()[name]
        assert t.law.kind == "uniform" and t.law.a == pytest.approx(-bound, rel=1e-15, abs=0.0)
        assert t.law.b == pytest.approx(bound, rel=1e-15, abs=0.0)
        assert t.phase == "default" and t.writer == "torch.nn.modules.linear:Linear.reset_parameters"
        assert t.scope == ""
    assert trace.by_name()["weight"].function == "torch.nn.init.kaiming_uniform_"
    args = {"in_features": 48, "out_features": 16, "bias": True, "device": None, "dtype": None}
    assert trace.by_name()["weight"].owner_args == args
    _holds(model, trace)


def test_gpt2s_residual_projections_are_recorded_at_initializer_range_over_root_two_n_layer() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_embd=64, n_layer=4, n_head=2, vocab_size=64)
    model, trace = _built(lambda: transformers.GPT2Model(config))
    for name in ("h.0.attn.c_proj.weight", "h.3.mlp.c_proj.weight"):
        t = trace.by_name()[name]
        assert t.law == RecordedLaw(kind="normal", std=0.02 / math.sqrt(2 * 4))
        assert t.phase == "init" and t.writer.endswith(":GPT2PreTrainedModel._init_weights")
        assert t.function == "transformers.initialization.normal_"
    assert _law(trace, "h.0.attn.c_attn.weight") == RecordedLaw(kind="normal", std=0.02)
    assert _law(trace, "h.0.ln_1.weight") == RecordedLaw(kind="constant", value=1.0)
    wte = trace.by_name()["wte.weight"]
    assert wte.writer.endswith(":PreTrainedModel._init_weights") and wte.scope == ""
    _holds(model, trace)


class _Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 32)
        nn.init.normal_(self.a.weight, std=0.02)
        with torch.no_grad():
            self.a.weight.mul_(0.5)  # → N(0, 0.01²)
            self.a.bias.fill_(0.25).add_(0.5)  # → 0.75
            self.b.weight /= math.sqrt(8)  # the default, then depth-scaled
            self.c.weight.uniform_(-1.0, 3.0).sub_(1.0).neg_()  # → U(-2, 2)


def test_a_weight_scaled_and_shifted_after_its_init_is_its_law_scaled_and_shifted() -> None:
    model, trace = _built(_Scaled)
    a = trace.by_name()["a.weight"]
    assert a.law == RecordedLaw(kind="normal", std=0.01) and a.function == "torch.nn.init.normal_"
    assert a.writer.endswith(":_Scaled.__init__") and a.phase == "init"
    assert _law(trace, "a.bias") == RecordedLaw(kind="constant", value=0.75)
    b = _law(trace, "b.weight")
    assert b.kind == "uniform" and b.b == pytest.approx(1 / math.sqrt(32) / math.sqrt(8), rel=1e-15, abs=0.0)
    assert trace.by_name()["b.weight"].phase == "init"  # the model's own code changed the default
    assert _law(trace, "c.weight") == RecordedLaw(kind="uniform", a=-2.0, b=2.0)
    _holds(model, trace)


def test_trunc_normal_is_recorded_with_its_arguments_whichever_library_draws_it() -> None:
    def library_own(t: torch.Tensor, mean: float, std: float, a: float, b: float) -> None:
        # the inverse-CDF sampler a library writes for itself (timm's _trunc_normal_, older transformers)
        lo, hi = ((1 + math.erf((x - mean) / std / math.sqrt(2))) / 2 for x in (a, b))
        with torch.no_grad():
            t.uniform_(2 * lo - 1, 2 * hi - 1).erfinv_().mul_(std * math.sqrt(2)).add_(mean).clamp_(min=a, max=b)

    def make() -> nn.Module:
        m = nn.ParameterDict({k: nn.Parameter(torch.empty(4096)) for k in ("torch", "tf", "own")})
        nn.init.trunc_normal_(m["torch"], mean=0.1, std=0.02, a=0.06, b=0.3)
        library_own(m["own"], 0.1, 0.02, 0.06, 0.3)
        timm = pytest.importorskip("timm")
        timm.layers.weight_init.trunc_normal_tf_(m["tf"], mean=0.1, std=0.02, a=-2.0, b=5.0)
        return m

    model, trace = _built(make)
    assert _law(trace, "torch") == RecordedLaw(kind="trunc_normal", mean=0.1, std=0.02, a=0.06, b=0.3)
    assert _law(trace, "tf") == RecordedLaw(kind="trunc_normal", mean=0.1, std=0.02, a=0.1 - 0.04, b=0.1 + 0.1)
    own = _law(trace, "own")
    assert own.kind == "trunc_normal" and own.mean == pytest.approx(0.1, rel=1e-12, abs=0.0)
    assert (own.std, own.a, own.b) == pytest.approx((0.02, 0.06, 0.3), rel=1e-9, abs=0.0)
    assert trace.by_name()["tf"].function == "timm.layers.weight_init.trunc_normal_tf_"
    _holds(model, trace)


def test_a_data_write_and_a_data_assignment_are_the_parameters_law() -> None:
    def make() -> nn.Module:
        m = nn.Linear(64, 64)
        m.weight.data.normal_(0.0, 0.5)
        m.bias.data = torch.full((64,), 0.125)
        return m

    model, trace = _built(make)
    assert _law(trace, "weight") == RecordedLaw(kind="normal", std=0.5)
    assert _law(trace, "bias") == RecordedLaw(kind="constant", value=0.125)
    assert trace.by_name()["bias"].phase == "init"
    _holds(model, trace)


def test_an_embeddings_padding_row_is_a_partial_write_of_its_own() -> None:
    model, trace = _built(lambda: nn.Embedding(10, 8, padding_idx=2))
    t = trace.by_name()["weight"]
    assert t.law == RecordedLaw(kind="normal", std=1.0) and t.phase == "default"
    ((part,),) = [t.partial]
    assert (part.start, part.numel, part.law) == (16, 8, RecordedLaw(kind="constant", value=0.0))
    record = init_record(model, {}, trace=trace)
    found = trace_of(record, "weight[padding_idx=2]")
    assert found is not None and found[1] == RecordedLaw(kind="constant", value=0.0)
    _holds(model, trace)


class _LayerScale(nn.Module):
    def __init__(self, dim: int, init_values: float = 1e-5) -> None:
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim))


class _Tokens(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ls = _LayerScale(8, init_values=1e-6)
        w = torch.empty(8, 8)
        nn.init.normal_(w, std=0.1)  # drawn before it is a parameter
        self.w = nn.Parameter(w)
        self.pos = nn.Parameter(torch.randn(1, 4, 8) * 0.02)
        self.unset = nn.Parameter(torch.empty(8))


def test_a_parameter_created_from_a_value_carries_its_law() -> None:
    model, trace = _built(_Tokens)
    g = trace.by_name()["ls.gamma"]
    assert g.law == g.created == RecordedLaw(kind="constant", value=1e-6) and g.phase == "created"
    assert g.owner_args == {"dim": 8, "init_values": 1e-6} and g.owner.endswith(":_LayerScale")
    assert g.creator.endswith(":_LayerScale.__init__") and g.owner_leaf
    assert _law(trace, "w") == RecordedLaw(kind="normal", std=0.1)
    assert trace.by_name()["w"].function == "torch.nn.init.normal_"
    assert _law(trace, "pos") == RecordedLaw(kind="normal", std=0.02)
    assert _law(trace, "unset").kind == "empty"
    assert trace.model_args == {} and trace.model_module == __name__
    _holds(model, trace)


def test_the_recording_sees_only_its_own_construction() -> None:
    outside = nn.Linear(4, 4)
    recorder = InitRecorder()
    with recorder.recording():
        inside = nn.Linear(4, 4)
    model = nn.Sequential(outside, inside)
    traces = recorder.trace(model).by_name()
    assert not traces["0.weight"].recorded and traces["1.weight"].recorded
    assert traces["1.weight"].scope == "1"
    torch.nn.init.zeros_(inside.weight)  # after the recording: not seen
    assert recorder.trace(model).by_name()["1.weight"].law.kind == "uniform"


def test_a_step_the_recorder_cannot_follow_stops_the_recording_not_the_construction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder = InitRecorder()

    def broken(*_: Any) -> None:
        raise RuntimeError("an operation the recorder does not know")

    monkeypatch.setattr(recorder, "_event", broken)
    with recorder.recording():
        m = nn.Linear(4, 4)
    assert isinstance(m, nn.Linear) and "an operation the recorder does not know" in recorder.failure
    assert not recorder.recorded


def test_folding_keeps_the_law_exact_and_gives_up_on_what_it_cannot_follow() -> None:
    n = RecordedLaw(kind="normal", mean=1.0, std=2.0)
    assert fold("mul_", n, (None, -0.5), {}) == RecordedLaw(kind="normal", mean=-0.5, std=1.0)
    assert fold("add_", n, (None, 3.0), {"alpha": 2.0}) == RecordedLaw(kind="normal", mean=7.0, std=2.0)
    assert fold("mul_", n, (None, torch.ones(3)), {}).kind == "computed"  # type: ignore[union-attr]
    assert fold("exponential_", n, (None,), {}) is None  # (recorded as computed)
    u = RecordedLaw(kind="uniform", a=-0.5, b=0.5)
    assert fold("clamp_", u, (None, -1.0, 1.0), {}) == u  # a clamp that cuts nothing
    assert fold("clamp_", u, (None, -0.1, 1.0), {}).kind == "computed"  # type: ignore[union-attr]
    e = fold("erfinv_", u, (None,), {})
    assert e is not None and e.kind == "trunc_normal" and e.std == pytest.approx(1 / math.sqrt(2))
    assert e.b == pytest.approx(float(torch.special.erfinv(torch.tensor(0.5, dtype=torch.float64))), rel=1e-12, abs=0.0)


def test_the_trace_is_plain_data() -> None:
    _, trace = _built(_Tokens)
    assert all(isinstance(p, ParameterTrace) for p in trace.parameters)
    assert isinstance(types.SimpleNamespace(**vars(trace.parameters[0])).history, tuple)
