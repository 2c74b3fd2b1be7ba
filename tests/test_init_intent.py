"""The model's own declared intent (stability.judge.init_intent) and init_conformance's precedence
(stability.judge.init_conformance, init_tables): each rule on a tiny nn.Module with the defect
planted and absent, with its exact message; tables chosen by the model's class; a row that covers
nothing, an undeclared parameter, a config value against the registered model's, reported."""

from __future__ import annotations

import math
import types
from typing import Any

import pytest
import torch
from torch import nn

from stability.judge.init_conformance import init_conformance
from stability.judge.init_intent import deviations
from stability.judge.init_tables import choose_table
from stability.measure.init_recorder import InitRecorder
from stability.measure.init_stats import InitRecord, Override, declared_config, init_record
from stability.spec.init_expect import InitConformance


class _M:
    def __init__(self, record: InitRecord) -> None:
        self.extra = {"init_conformance": record}


def _record(make: Any, variables: dict[str, Any] | None = None) -> InitRecord:
    torch.manual_seed(0)
    recorder = InitRecorder()
    with recorder.recording():
        model = make()
    trace = recorder.trace(model)
    return init_record(model, {**declared_config(model, {}, trace.model_args), **(variables or {})}, trace=trace)


def _judge(record: InitRecord, **expect: Any) -> Any:
    return init_conformance(_M(record), InitConformance.model_validate({"table": False, **expect}))


# ----------------------------------------------------------------------------- left at PyTorch's default


class _Mixer(nn.Module):
    """Mamba's mixer as transformers 4.53.3 initialised it: its own init writes dt_proj only."""

    def __init__(self, forget: bool) -> None:
        super().__init__()
        self.in_proj = nn.Linear(16, 32, bias=False)
        self.dt_proj = nn.Linear(4, 32)
        nn.init.uniform_(self.dt_proj.weight, -0.5, 0.5)
        nn.init.zeros_(self.dt_proj.bias)
        if not forget:
            nn.init.normal_(self.in_proj.weight, std=0.1)


def test_a_weight_matrix_left_at_the_default_where_the_config_declares_its_std_fails() -> None:
    bad = _record(lambda: _Mixer(forget=True), {"initializer_range": 0.1})
    (d,) = deviations(bad)
    assert (d.rule, d.name) == ("left_at_default", "in_proj.weight")
    v = _judge(bad)
    assert not v.passed and v.observed == 1
    assert v.detail == (
        "in_proj.weight: recorded U(-0.25, 0.25), PyTorch's default (Linear.reset_parameters), declared N(0, 0.1²) "
        '[the config declares initializer_range = 0.1, "the standard deviation of the truncated_normal_initializer '
        'for initializing all weight matrices" (transformers PretrainedConfig)] — 1 parameter'
    )
    assert _judge(_record(lambda: _Mixer(forget=False), {"initializer_range": 0.1})).passed
    assert _judge(_record(lambda: _Mixer(forget=True))).passed  # no std declared: the default is the model's choice


class _Looped(nn.Module):
    """An init loop over the model's Linears (torchvision's style), and a Linear added after it."""

    def __init__(self, late: bool) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
        self.head = nn.Linear(8, 8)
        if not late:
            nn.init.normal_(self.head.weight, std=0.02)


def test_a_parameter_an_init_loop_left_at_the_default_fails() -> None:
    v = _judge(_record(lambda: _Looped(late=True)))
    assert not v.passed and v.detail == (
        "head.weight: recorded U(-0.3536, 0.3536), PyTorch's default (Linear.reset_parameters), declared "
        "N(0, 0.02²) as a.weight [_Looped.__init__ initialises every Linear.weight of the model and left this one] "
        "— 1 parameter"
    )
    assert _judge(_record(lambda: _Looped(late=False))).passed


class _Zeroed(nn.Module):
    """One named parameter per block written (timm's zero_init_last): not a loop over a class."""

    def __init__(self) -> None:
        super().__init__()
        self.bn1, self.bn2 = nn.BatchNorm1d(4), nn.BatchNorm1d(4)
        nn.init.zeros_(self.bn2.weight)


def test_a_named_parameter_written_per_block_declares_nothing_for_its_siblings() -> None:
    v = _judge(_record(lambda: nn.Sequential(_Zeroed(), _Zeroed())))
    assert v.passed and not deviations(_record(lambda: nn.Sequential(_Zeroed(), _Zeroed()))), v.detail


# ----------------------------------------------------------------------------- layer scale


class _LayerScale(nn.Module):
    """timm's LayerScale; `bug`: 1.0.21's reset_parameters (ones, whatever init_values)."""

    def __init__(self, dim: int, init_values: float = 1e-5, bug: bool = False) -> None:
        super().__init__()
        self.init_values, self.bug = init_values, bug
        self.gamma = nn.Parameter(init_values * torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.ones_(self.gamma) if self.bug else nn.init.constant_(self.gamma, self.init_values)


class _Block(nn.Module):
    def __init__(self, init_values: float, bug: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.ls = _LayerScale(4, init_values=init_values, bug=bug)
        self.token = nn.Parameter(torch.zeros(4))  # a vector of a module given init_values: not its layer scale


def test_a_layer_scale_not_at_the_value_its_module_was_given_fails() -> None:
    v = _judge(_record(lambda: _Block(1e-6, bug=True)))
    assert not v.passed and v.detail == (
        "ls.gamma: recorded = 1 by _LayerScale.reset_parameters, declared = 1e-06 [layer scale from "
        "_LayerScale(init_values=1e-06) (Touvron et al. 2021, CaiT)] — 1 parameter"
    )
    assert _judge(_record(lambda: _Block(1e-6, bug=False))).passed


class _ConfigScale(nn.Module):
    """transformers' ConvNext layer: the layer scale created from the config's value."""

    def __init__(self, value: float, later: float | None) -> None:
        super().__init__()
        self.layer_scale_parameter = nn.Parameter(value * torch.ones(4))
        if later is not None:
            nn.init.constant_(self.layer_scale_parameter, later)


def test_a_layer_scale_created_from_the_configs_value_and_overwritten_fails() -> None:
    config = {"layer_scale_init_value": 1e-6}
    v = _judge(_record(lambda: _ConfigScale(1e-6, later=1.0), config))
    assert not v.passed and "declared = 1e-06 [layer scale from the config's layer_scale_init_value = 1e-06" in v.detail
    assert _judge(_record(lambda: _ConfigScale(1e-6, later=None), config)).passed


# ----------------------------------------------------------------------------- norm offsets

_GENERIC = types.ModuleType("generic_init")  # a library's generic init, in a module of its own
exec(  # noqa: S102 -- a fixed source: a function whose frames belong to another module
    "def init_norms(model, value):\n"
    "    for m in model.modules():\n"
    "        if 'RMSNorm' in type(m).__name__:\n"
    "            m.weight.data.fill_(value)\n",
    _GENERIC.__dict__,
)


class _OffsetRMSNorm(nn.Module):
    """Gemma's (1 + w) RMSNorm: w = 0 is the unit scale."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1 + self.weight)


class _PlaceholderRMSNorm(_OffsetRMSNorm):
    """IBert's IntLayerNorm: a placeholder 0 its forward multiplies by (1 is its unit scale)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class _Gemma(nn.Module):
    def __init__(self, fill: float, norm: type[nn.Module] = _OffsetRMSNorm) -> None:
        super().__init__()
        self.norm = norm(4)
        _GENERIC.init_norms(self, fill)


def test_a_norm_offset_overwritten_by_a_generic_init_fails() -> None:
    v = _judge(_record(lambda: _Gemma(1.0)))
    assert not v.passed and v.detail == (
        "norm.weight: recorded = 1 by init_norms, declared = 0 [_OffsetRMSNorm.__init__ creates it = 0; "
        "init_norms, generic code (of neither _OffsetRMSNorm's module nor the model's), overwrote it] — 1 parameter"
    )
    assert _judge(_record(lambda: _Gemma(0.0))).passed
    # The model's own init, beside the module (transformers 4.53.3's GemmaPreTrainedModel): its intent.
    assert _judge(_record(_Gemma453)).passed
    placeholder = _record(lambda: _Gemma(1.0, norm=_PlaceholderRMSNorm))  # its 0 computes nothing: not a meaning
    assert not deviations(placeholder)
    assert placeholder.trace is not None and placeholder.trace.by_name()["norm.weight"].created_live is False


class _Gemma453(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = _OffsetRMSNorm(4)
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, _OffsetRMSNorm):
            module.weight.data.fill_(1.0)


# ----------------------------------------------------------------------------- frozen at zero, never written


class _Frozen(nn.Module):
    def __init__(self, table: bool, frozen: bool = True) -> None:
        super().__init__()
        self.pos = nn.Parameter(torch.zeros(1, 5, 4), requires_grad=not frozen)
        if table:
            with torch.no_grad():
                self.pos.copy_(torch.sin(torch.arange(20.0)).reshape(1, 5, 4))


def test_a_frozen_parameter_left_at_zero_fails() -> None:
    v = _judge(_record(lambda: _Frozen(table=False)))
    assert not v.passed and v.detail == (
        "pos: recorded = 0 by _Frozen.__init__, declared not all zero [requires_grad = False: no gradient moves "
        "it, and a table of zeros carries nothing] — 1 parameter"
    )
    sincos = _judge(_record(lambda: _Frozen(table=True)))
    assert not sincos.measured and "1 undeclared (not judged): pos" in sincos.detail  # computed: not judged
    assert _judge(_record(lambda: _Frozen(table=False, frozen=False))).passed  # trained: it may start at 0
    balancing = _record(lambda: nn.ParameterDict({"bias": nn.Parameter(torch.zeros(8), requires_grad=False)}))
    assert not deviations(balancing)  # a frozen vector: a load-balancing bias, moved by a rule of its own


class _Unset(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.empty(4))
        self.fc = nn.Linear(4, 4)


def test_a_parameter_never_written_fails() -> None:
    v = _judge(_record(_Unset))
    assert not v.passed and v.detail == (
        "w: recorded torch.empty (never written) by _Unset.__init__, declared any init [torch.empty leaves memory "
        "uninitialised] — 1 parameter"
    )


class _Rescaled(nn.Module):
    """Mamba's out_proj under rescale_prenorm_residual: kaiming_uniform_(a=√5), then ÷ √N."""

    def __init__(self, layers: int, rescale: bool) -> None:
        super().__init__()
        self.out = nn.ModuleList(nn.Linear(8, 8) for _ in range(layers))
        for m in self.out:
            nn.init.kaiming_uniform_(m.weight, a=math.sqrt(5))
            if rescale:
                with torch.no_grad():
                    m.weight /= math.sqrt(layers)


def test_a_depth_scaling_the_config_declares_and_no_weight_received_fails() -> None:
    config = {"rescale_prenorm_residual": True, "num_hidden_layers": 4}
    v = _judge(_record(lambda: _Rescaled(4, rescale=False), config))
    assert not v.passed and v.detail == (
        "the model: recorded no weight scaled after its draw, declared the residual branches' output weights "
        "scaled by 1/√4 (or 1/√8) [the config declares rescale_prenorm_residual = True (Radford et al. 2019, "
        "GPT-2's scheme)]"
    )
    scaled = _record(lambda: _Rescaled(4, rescale=True), config)
    assert _judge(scaled).passed
    assert scaled.trace is not None and scaled.trace.by_name()["out.0.weight"].scale == pytest.approx(0.5, abs=0.0)
    assert _judge(_record(lambda: _Rescaled(4, rescale=False), {**config, "rescale_prenorm_residual": False})).passed


# ----------------------------------------------------------------------------- precedence and reporting


def test_a_row_comes_before_the_intent_and_the_recorded_law_judges_the_rest() -> None:
    record = _record(lambda: _Mixer(forget=True), {"initializer_range": 0.1})
    row = {"name": "in_proj.weight", "law": "uniform", "bound": "1 / sqrt(fan_in)", "source": "kept on purpose"}
    v = _judge(record, rules=[row])
    assert v.passed and v.extra["by_rows"] == 1 and v.extra["by_intent"] == 2, v.detail
    wrong = {**row, "bound": "2 / sqrt(fan_in)"}
    assert not _judge(record, rules=[wrong]).passed


def test_values_that_are_not_the_recorded_init_fail() -> None:
    torch.manual_seed(0)
    recorder = InitRecorder()
    with recorder.recording():
        model = nn.Linear(64, 64)
    with torch.no_grad():
        model.weight.mul_(3.0)  # after the construction
    record = init_record(model, {}, trace=recorder.trace(model))
    v = _judge(record)
    assert (
        not v.passed
        and v.detail.startswith("weight: std 0.2155 (allowed 0.06952..0.07485), ")
        and (
            "recorded U(-0.125, 0.125) by Linear.reset_parameters [the values are not the init recorded as the model "
            "was constructed] — 1 of 2 parameters"
        )
        in v.detail
    )


def test_a_spec_row_that_covers_nothing_and_an_undeclared_parameter_are_reported_not_failed() -> None:
    record = _record(lambda: _Frozen(table=True, frozen=False))
    row = {"name": "pos_embed", "law": "normal", "std": 0.02, "source": "a typo"}
    v = _judge(record, rules=[row])
    assert not v.measured and "1 rule covers no parameter: name pos_embed (spec)" in v.detail
    v = _judge(record, uncovered="fail")
    assert not v.passed and "no rule declares the init of 1 parameters: pos" in v.detail


def test_a_model_with_nothing_declared_is_not_met() -> None:
    v = _judge(_record(lambda: nn.Sequential()))
    assert not v.passed and not v.measured and v.detail.startswith("nothing was judged")


def test_a_config_value_against_the_registered_models_is_reported_with_both() -> None:
    record = _record(lambda: nn.Linear(4, 4))
    override = Override(key="init_values", given=1e-6, registered=1e-5, target="timm:deit3_small_patch16_224")
    record = InitRecord(record.model, record.variables, record.parameters, record.trace, overrides=(override,))
    v = _judge(record)
    assert v.passed and "config sets init_values = 1e-06; timm:deit3_small_patch16_224 registers 1e-05" in v.detail
    assert v.extra["notes"] == ["config sets init_values = 1e-06; timm:deit3_small_patch16_224 registers 1e-05"]


def test_a_table_is_chosen_by_the_models_class() -> None:
    gpt2 = ("transformers:GPT2Model", "transformers:GPT2PreTrainedModel", "transformers:PreTrainedModel")
    table, note = choose_table(gpt2, None, ("transformers:GPT2PreTrainedModel", "transformers:PreTrainedModel"))
    assert table is not None and table.name == "gpt2" and not note
    llama = ("transformers:LlamaModel", "transformers:LlamaPreTrainedModel", "transformers:PreTrainedModel")
    table, note = choose_table(llama, "gpt2")
    assert table is None and note == (
        "table 'gpt2' is written for transformers:GPT2PreTrainedModel, and transformers:LlamaModel is none of them "
        "(its classes: LlamaModel, LlamaPreTrainedModel, PreTrainedModel): not applied"
    )
    bert = ("transformers:BertModel", "transformers:BertPreTrainedModel", "transformers:PreTrainedModel")
    table, note = choose_table(bert, None, ("transformers:BertPreTrainedModel", "transformers:PreTrainedModel"))
    assert table is None and note == (
        "table 'transformers' is written for transformers:PreTrainedModel, whose init "
        "transformers:BertPreTrainedModel overrides: not applied (the model's own init is judged)"
    )
    assert choose_table(bert, "transformers")[0] is not None  # named: applied, the class matches
    assert choose_table(gpt2, False) == (None, "")


def test_a_table_named_for_another_class_says_so_instead_of_failing_healthy_parameters() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.ConvNextV2Config(hidden_sizes=[16, 32], depths=[2, 1], num_stages=2, image_size=32)
    record = _record(lambda: transformers.ConvNextV2Model(config))
    v = init_conformance(_M(record), InitConformance.model_validate({"table": "convnext"}))
    assert v.passed, v.detail
    assert "table 'convnext' is written for transformers:ConvNextPreTrainedModel" in v.detail


@pytest.mark.slow  # every zoo family's model built with its init recorded (about a minute on 2 cores)
def test_no_zoo_family_deviates_from_its_own_intent() -> None:
    from benchmarks.intent_scan import judge_model, zoo_targets

    for target, config, stem in zoo_targets():
        r = judge_model(target, config)
        assert r["intent"]["passed"] and r["class"]["passed"], (stem, r["intent"]["detail"], r["class"]["detail"])
        assert math.isfinite(r["seconds"])


def test_a_model_whose_init_was_not_recorded_says_so_and_rows_alone_judge_it() -> None:
    record = _record(lambda: nn.Linear(4, 4))
    streamed = InitRecord(record.model, record.variables, record.parameters, None, unrecorded="streamed")
    row = {"module": "Linear", "law": "uniform", "bound": "1 / sqrt(fan_in)", "source": "torch's default"}
    v = _judge(streamed, rules=[row])
    assert v.passed and "the init was not recorded (streamed): only rows judge" in v.detail
    assert not _judge(streamed).measured  # nothing declares anything then


def test_table_false_is_intent_alone_and_true_is_refused() -> None:
    from stability.errors import SpecError
    from stability.spec.load import parse_spec

    text = (
        'name = "t"\ndescription = "t"\nfamily = "library"\n[block]\nlayer = "tokens"\n'
        'model = "transformers:GPT2Model"\nconfig = { n_embd = "width", n_layer = "depth", n_head = 2 }\n'
        "[space]\ndepth = 2\nwidth = 8\nbatch = 2\n[expect.init_conformance]\ntable = TABLE\n"
    )
    pytest.importorskip("transformers")
    assert parse_spec(text.replace("TABLE", "false"), file="t.toml").expect.init_conformance.table is False
    with pytest.raises(SpecError, match="is true: name a table of stability/judge/init_rules.toml, or false for none"):
        parse_spec(text.replace("TABLE", "true"), file="t.toml")
