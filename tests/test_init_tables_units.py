"""The rule tables, unit-sized (stability/judge/init_tables.py): which table a model's classes
choose, the rows it brings, and the law one row declares, each against its closed form; and two
rows judged on small models (a ResNet's convolutions at fan-out, a row's count under its `when`)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from stability.judge.init_conformance import init_conformance
from stability.judge.init_laws import Law
from stability.judge.init_tables import (
    RuleError,
    choose_table,
    row_applies,
    row_declared,
    row_law,
    row_number,
    rows_of,
    rule_tables,
)
from stability.measure.init_recorder import InitRecorder
from stability.measure.init_stats import declared_config, init_record
from stability.spec.init_expect import InitConformance, InitRule

GPT2 = ("transformers:GPT2Model", "transformers:GPT2PreTrainedModel", "transformers:PreTrainedModel")


def _row(**fields: Any) -> InitRule:
    return InitRule.model_validate({"param": "weight", "source": "the test", **fields})


# ----------------------------------------------------------------------------- choosing a table


def test_a_model_s_classes_choose_the_first_table_whose_class_s_init_it_runs() -> None:
    assert choose_table(GPT2, None)[0] is rule_tables()["gpt2"]
    # GPT2Model defining an init of its own: the gpt2 table describes code it does not run
    table, why = choose_table(GPT2, None, ("transformers:GPT2Model",))
    assert table is None and "whose init transformers:GPT2Model overrides" in why
    # the class the table is written for defining its init is that table's code
    assert choose_table(GPT2, None, ("transformers:GPT2PreTrainedModel",))[0] is rule_tables()["gpt2"]
    assert choose_table(GPT2, False) == (None, "")


def test_a_generic_table_is_chosen_by_default_only_where_no_init_was_recorded() -> None:
    plain = ("transformers:NoSuchModel", "transformers:PreTrainedModel")
    assert choose_table(plain, None)[0] is rule_tables()["transformers"]
    assert choose_table(plain, None, recorded=True) == (None, "")
    # its rows come with a table that extends it only where no init was recorded
    own = rows_of(rule_tables()["gpt2"], recorded=True)
    every = rows_of(rule_tables()["gpt2"])
    assert {t for t, _ in own} == {"gpt2"} and [t for t, _ in every][: len(own)] == ["gpt2"] * len(own)
    assert {t for t, _ in every} == {"gpt2", "transformers"} and len(every) > len(own)


def test_a_named_table_is_applied_only_to_the_classes_it_is_written_for() -> None:
    assert choose_table(GPT2, "gpt2")[0] is rule_tables()["gpt2"]
    table, why = choose_table(GPT2, "resnet")
    assert table is None and "table 'resnet' is written for transformers:ResNetPreTrainedModel" in why


# ----------------------------------------------------------------------------- one row's law


def test_a_row_s_law_is_its_closed_form() -> None:
    env = {"fan_in": 16, "fan_out": 64, "n": 4}
    assert row_law(_row(law="normal", std="sqrt(2 / fan_out)"), env) == Law("normal", mean=0.0, std=math.sqrt(2 / 64))
    assert row_law(_row(law="normal", std=0), env) == Law("constant", value=0.0)  # N(0, 0) is the constant 0
    assert row_law(_row(law="normal", std=0, mean=0.5), env) == Law("constant", value=0.5)
    assert row_law(_row(law="trunc_normal", std=0.02), env) == Law("trunc_normal", mean=0.0, std=0.02, a=-2.0, b=2.0)
    assert row_law(_row(law="trunc_normal", std=0.02, a=3, b=-1), env) == Law(
        "trunc_normal", mean=0.0, std=0.02, a=-1.0, b=3.0
    )
    assert row_law(_row(law="uniform", bound="0 - 1 / sqrt(fan_in)"), env) == Law("uniform", a=-0.25, b=0.25)
    assert row_law(_row(law="uniform", a=0.5, b=0.5), env) == Law("constant", value=0.5)
    with pytest.raises(RuleError, match="a standard deviation is ≥ 0"):
        row_law(_row(law="normal", std="0 - 1 / n"), env)  # -0.25


@pytest.mark.parametrize(("expr", "why"), [("n > 2", "is True for this model"), ("1e308 * 1e308", "is inf")])
def test_a_row_number_that_is_not_a_finite_number_cannot_be_read(expr: str, why: str) -> None:
    with pytest.raises(RuleError, match=why):
        row_number(_row(law="normal", std=expr), "std", {"n": 4})


def test_a_row_without_when_applies_and_one_naming_an_undeclared_key_does_not() -> None:
    assert row_applies(_row(law="any"), {})
    assert not row_applies(_row(law="any", when="zero_init_last"), {})
    assert row_applies(_row(law="any", when="zero_init_last"), {"zero_init_last": True})


def test_a_row_s_declared_law_names_its_expressions_only() -> None:
    row = _row(law="normal", std="initializer_range", mean=0.5)
    assert row_declared(row, Law("normal", mean=0.5, std=0.02)).endswith("(std = initializer_range)")
    assert "=" not in row_declared(_row(law="normal", std=0.02), Law("normal", mean=0.0, std=0.02))


# ----------------------------------------------------------------------------- rows judged on small models


class _M:
    def __init__(self, record: Any) -> None:
        self.extra = {"init_conformance": record}


def test_transformers_resnet_convolutions_hold_kaiming_at_fan_out() -> None:
    """ResNetPreTrainedModel._init_weights: kaiming_normal_(mode="fan_out", nonlinearity="relu"), so
    std = √(2 / fan_out) (He et al. 2015); at fan-in a 3→16 stem's 3·3·3 = 27 against 16·3·3 = 144
    would be 2.3× too wide. The resnet table's row says fan-out, and the model holds it."""
    transformers = pytest.importorskip("transformers")
    (row,) = [r for _, r in rows_of(rule_tables()["resnet"], recorded=True) if r.module == "Conv2d"]
    assert row_law(row, {"fan_in": 27, "fan_out": 144}).std == pytest.approx(math.sqrt(2 / 144), rel=1e-15, abs=0)
    torch.manual_seed(0)
    recorder = InitRecorder()
    config = transformers.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], num_channels=3)
    with recorder.recording():
        model = transformers.ResNetModel(config)
    trace = recorder.trace(model)
    record = init_record(model, declared_config(model, {}, trace.model_args), trace=trace)
    v = init_conformance(_M(record), InitConformance.model_validate({}))
    assert v.passed and "resnet" in v.detail, v.detail


_LINEAR = [
    {"param": "weight", "law": "uniform", "bound": "1 / sqrt(fan_in)", "source": "torch Linear.reset_parameters"},
    {"param": "bias", "law": "uniform", "bound": "1 / sqrt(fan_in)", "source": "torch Linear.reset_parameters"},
]


@pytest.mark.parametrize(("config", "met"), [({}, True), ({"tied": True}, False)])
def test_a_row_s_count_is_checked_where_its_when_applies_only(config: dict[str, Any], met: bool) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    rows = [{**_LINEAR[0], "when": "tied", "count": 5}, *_LINEAR]
    record = init_record(model, declared_config(model, config, None))
    v = init_conformance(_M(record), InitConformance.model_validate({"rules": rows}))
    assert v.passed is met, v.detail
    if not met:
        assert "2 parameters, declared 5 = 5" in v.detail


@pytest.mark.parametrize("layer_scale", [0.0, 1e-6])
def test_transformers_convnext_holds_its_table_with_layer_scale_on_and_off(layer_scale: float) -> None:
    """The convnext row counts one layer scale per layer only where layer scale is on
    (layer_scale_init_value > 0); off, the layers have none and the row covers nothing."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    recorder = InitRecorder()
    config = transformers.ConvNextConfig(
        hidden_sizes=[8, 16], depths=[1, 2], num_stages=2, layer_scale_init_value=layer_scale, num_channels=3
    )
    with recorder.recording():
        model = transformers.ConvNextModel(config)
    trace = recorder.trace(model)
    record = init_record(model, declared_config(model, {}, trace.model_args), trace=trace)
    scales = [n for n, _ in model.named_parameters() if n.endswith("layer_scale_parameter")]
    assert len(scales) == (3 if layer_scale else 0)
    v = init_conformance(_M(record), InitConformance.model_validate({}))
    assert v.passed and "convnext" in v.detail, v.detail
