"""init_conformance (stability.judge.init_conformance, stability.measure.init_stats,
stability.spec.init_expect): the rule rows and their arithmetic, the record's serialisation, real
transformers / timm / torchvision models that hold their declared init, and planted init bugs of
the kinds that shipped (a missing depth scaling, Gemma's norms at 1, an embedding at std 1, biases
not zeroed, a token left at zero, a layer scale missing or at 1) caught with the parameters named."""

from __future__ import annotations

import math
import textwrap
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import torch
from approx_support import approx
from spec_support import ZOO, make_measurements

from stability.errors import SpecError
from stability.families.library import quiet_imports
from stability.judge.init_conformance import init_conformance, rows_of, rule_tables, table_for
from stability.measure.init_recorder import InitRecorder
from stability.measure.init_stats import InitRecord, Override, declared_config, init_record
from stability.measure.measurements import Measurements
from stability.spec.init_expect import InitConformance, InitRule, Undefined, evaluate
from stability.spec.load import parse_spec

transformers = pytest.importorskip("transformers")


class _M:
    """What the judge reads of a Measurements: its extra."""

    def __init__(self, record: InitRecord) -> None:
        self.extra = {"init_conformance": record}


#: The recorder each model `_hf` built was constructed under, by id (its init recorded, as a case's is).
_RECORDERS: dict[int, InitRecorder] = {}


def _judge(model: torch.nn.Module, config: dict[str, Any] | None = None, **expect: Any) -> Any:
    recorder = _RECORDERS.get(id(model))
    trace = recorder.trace(model) if recorder is not None else None
    record = init_record(model, declared_config(model, config or {}, trace.model_args if trace else None), trace=trace)
    return init_conformance(_M(record), InitConformance.model_validate(expect))


def _hf(name: str, **config: Any) -> Any:
    torch.manual_seed(0)
    cls = getattr(transformers, name)
    recorder = InitRecorder()
    with recorder.recording():
        model = cls(cls.config_class(**config))
    _RECORDERS[id(model)] = recorder
    return model


SMALL = {
    "hidden_size": 64,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "vocab_size": 64,
    "pad_token_id": 0,
}


# ----------------------------------------------------------------------------- rows and their arithmetic


def test_expressions_compute_from_the_config() -> None:
    env = {"initializer_range": 0.02, "n_layer": 8, "depths": [2, 3], "init_values": None}
    assert evaluate("initializer_range / sqrt(2 * n_layer)", env) == pytest.approx(0.02 / 4)
    assert evaluate("sum(depths) if 1e-6 > 0 else 0", env) == 5
    assert evaluate("init_std or initializer_range or 0.02", env) == 0.02  # the first that is set
    assert evaluate(0.5, env) == 0.5
    with pytest.raises(Undefined, match="d_model"):
        evaluate("d_model ** -0.5", env)
    with pytest.raises(Undefined):
        evaluate("init_values * 2", env)  # None is not set


@pytest.mark.parametrize(
    "text", ["__import__('os')", "config.initializer_range", "lambda: 1", "[x for x in y]", "open('f')", "1 +"]
)
def test_expressions_refuse_anything_but_arithmetic(text: str) -> None:
    with pytest.raises(ValueError):
        InitRule.model_validate({"law": "normal", "std": text, "source": "s"})


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"law": "normal", "source": "s"}, "needs std"),
        ({"law": "uniform", "a": -1, "bound": 1, "source": "s"}, "not both"),
        ({"law": "constant", "value": 0, "std": 1, "source": "s"}, "not std"),
        ({"law": "normal", "std": 0.02}, "source"),
        ({"law": "laplace", "std": 0.02, "source": "s"}, "law"),
    ],
)
def test_a_row_that_does_not_declare_a_law_is_refused(row: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        InitRule.model_validate(row)


def test_patterns_match_names_classes_and_enclosing_modules() -> None:
    row = InitRule.model_validate(
        {"name": "*.c_proj.weight", "within": ["GPT2MLP"], "law": "normal", "std": 0.01, "source": "s"}
    )
    assert row.covers("h.3.mlp.c_proj.weight", ("Conv1D",), ("GPT2MLP", "GPT2Block"))
    assert not row.covers("h.3.attn.c_proj.weight", ("Conv1D",), ("GPT2Attention", "GPT2Block"))
    pad = InitRule.model_validate({"name": "*[padding_idx=*]", "law": "constant", "value": 0, "source": "s"})
    assert pad.covers("wte.weight[padding_idx=0]", ("Embedding",), ()) and not pad.covers(
        "wte.weight", ("Embedding",), ()
    )
    by_leaf = InitRule.model_validate(
        {"module": "Linear", "param": "bias", "law": "constant", "value": 0, "source": "s"}
    )
    assert by_leaf.covers("a.b.bias", ("FalconLinear", "Linear"), ()) and not by_leaf.covers(
        "a.b.weight", ("Linear",), ()
    )


def test_every_shipped_table_validates_and_its_chain_ends_in_a_base() -> None:
    tables = rule_tables()
    assert {"transformers", "torch", "gpt2", "gemma", "t5", "timm_vit", "tv_vit"} <= set(tables)
    for t in tables.values():
        assert all(r.source.strip() for r in t.rows)
        assert rows_of(t)[-1][0] in ("transformers", "torch", t.name)
    assert (
        table_for(("transformers:GPT2Model", "transformers:GPT2PreTrainedModel", "transformers:PreTrainedModel")).name
        == "gpt2"
    )  # type: ignore[union-attr]
    assert table_for(("transformers:LlamaModel", "transformers:PreTrainedModel")).name == "transformers"  # type: ignore[union-attr]
    assert table_for(("mypkg:Net",)) is None


# ----------------------------------------------------------------------------- the record


def test_the_record_round_trips_through_the_one_serialisation() -> None:
    model = _hf("GPT2Model", n_embd=64, n_layer=2, n_head=2, vocab_size=64)
    m = make_measurements(
        grad_norm=[1.0],
        act_var=[1.0],
        act_sq_mean=[1.0],
        extra={
            "init_conformance": init_record(
                model,
                declared_config(model, {}),
                {"h.0.attn.c_attn.weight": 2.0},
                trace=_RECORDERS[id(model)].trace(model),
                overrides=(Override(key="initializer_range", given=0.01, registered=0.02, target="transformers:X"),),
            )
        },
    )
    back = Measurements.from_json(m.to_json())
    assert back.extra["init_conformance"] == m.extra["init_conformance"]
    assert back.extra["init_conformance"].trace.parameters[0].law.kind == "normal"
    assert Measurements.from_dict(m.to_dict()).extra == m.extra


def test_the_record_holds_the_librarys_init_with_the_harness_factor_divided_out() -> None:
    model = _hf("GPT2Model", n_embd=64, n_layer=2, n_head=2, vocab_size=64)
    w = model.h[0].attn.c_attn.weight.detach().double()
    with torch.no_grad():
        model.h[0].attn.c_attn.weight.mul_(2.5)
    (p,) = [
        q
        for q in init_record(model, {}, {"h.0.attn.c_attn.weight": 2.5}).parameters
        if q.name == "h.0.attn.c_attn.weight"
    ]
    assert p.rescaled == 2.5 and p.n == w.numel() and (p.fan_in, p.fan_out) == (64, 192)
    assert p.mean == pytest.approx(float(w.mean()), rel=1e-6, abs=1e-12)
    assert math.sqrt(p.var) == approx(float(w.std()), rel=1e-6)
    assert (p.min, p.max) == approx((float(w.min()), float(w.max())), rel=1e-6)


def test_an_embeddings_padding_row_is_judged_apart() -> None:
    model = _hf("LlamaModel", **SMALL)
    names = {p.name: p for p in init_record(model, {}).parameters}
    row, rest = names["embed_tokens.weight[padding_idx=0]"], names["embed_tokens.weight"]
    assert (row.n, row.min, row.max) == (64, 0.0, 0.0) and rest.n == 63 * 64


def test_a_bias_gets_its_layers_fans() -> None:
    model = torch.nn.Linear(12, 5)
    (w, b) = init_record(model, {}).parameters
    assert (w.fan_in, w.fan_out) == (12, 5) and (b.fan_in, b.fan_out) == (12, 5)


# ----------------------------------------------------------------------------- real models hold


@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("GPT2Model", {"n_embd": 64, "n_layer": 3, "n_head": 2, "vocab_size": 64}),
        ("LlamaModel", SMALL),
        ("GemmaModel", {**SMALL, "head_dim": 32}),
        ("BertModel", SMALL),
        (
            "ViTModel",
            {
                **{k: v for k, v in SMALL.items() if k not in ("vocab_size", "pad_token_id")},
                "image_size": 32,
                "patch_size": 8,
            },
        ),
        ("T5EncoderModel", {"d_model": 64, "d_ff": 256, "d_kv": 32, "num_layers": 2, "num_heads": 2, "vocab_size": 64}),
        ("ConvNextModel", {"hidden_sizes": [32, 64], "depths": [2, 1], "num_stages": 2, "image_size": 32}),
    ],
)
def test_a_healthy_transformers_model_holds_its_declared_init(name: str, config: dict[str, Any]) -> None:
    v = _judge(_hf(name, **config))
    assert v.passed and v.measured, v.detail
    assert v.extra["parameters"] > 10 and not v.extra["uncovered"]


def test_timm_and_torchvision_models_hold_their_declared_init() -> None:
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    vit = timm.create_model(
        "vit_small_patch16_224",
        pretrained=False,
        img_size=32,
        patch_size=8,
        embed_dim=64,
        depth=2,
        num_heads=2,
        init_values=1e-5,
    )
    v = _judge(vit, {"img_size": 32, "patch_size": 8, "embed_dim": 64, "depth": 2, "num_heads": 2, "init_values": 1e-5})
    assert v.passed, v.detail
    assert any(r["rule"].startswith("module LayerScale") and r["covered"] == 4 for r in v.extra["rows"])
    with quiet_imports():
        tv = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    tvit = tv.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=256
    )
    assert _judge(tvit).passed


# ----------------------------------------------------------------------------- planted bugs are caught


def test_gpt2_without_its_depth_scaled_projections_fails_naming_them(monkeypatch: pytest.MonkeyPatch) -> None:
    gpt2 = pytest.importorskip("transformers.models.gpt2.modeling_gpt2")
    shipped = gpt2.GPT2PreTrainedModel._init_weights

    def forgets_the_scaling(self: Any, module: Any) -> None:  # a release whose _init_weights loses the GPT-2 scheme
        shipped(self, module)
        if isinstance(module, (gpt2.GPT2Attention, gpt2.GPT2MLP)):
            torch.nn.init.normal_(module.c_proj.weight, std=self.config.initializer_range)

    monkeypatch.setattr(gpt2.GPT2PreTrainedModel, "_init_weights", forgets_the_scaling)
    v = _judge(_hf("GPT2Model", n_embd=64, n_layer=4, n_head=2, vocab_size=64))
    assert not v.passed and v.observed == 8
    assert "h.*.attn.c_proj.weight: std 0.0" in v.detail and "h.*.mlp.c_proj.weight" in v.detail
    assert (
        "initializer_range / sqrt(2 * n_layer)" in v.detail
        and "Radford et al. 2019" in v.detail
        and "8 of 8 parameters" in v.detail
    )


def test_gemma_norms_at_one_instead_of_zero_fail() -> None:
    model = _hf("GemmaModel", **SMALL, head_dim=32)
    with torch.no_grad():
        for m in model.modules():
            if "RMSNorm" in type(m).__name__:
                m.weight.fill_(1.0)
    v = _judge(model)
    assert (
        not v.passed
        and "layers.*.input_layernorm.weight: value 1" in v.detail
        and "(1 + w)" in v.detail
        and "5 of 5" in v.detail
    )


def test_an_embedding_at_std_one_and_biases_not_zeroed_fail() -> None:
    model = _hf("BertModel", **SMALL)
    with torch.no_grad():
        model.embeddings.word_embeddings.weight.normal_(0.0, 1.0)
        model.encoder.layer[1].intermediate.dense.bias.uniform_(-0.1, 0.1)
    v = _judge(model, table="transformers")  # (BertPreTrainedModel has an init of its own: named, not chosen)
    assert not v.passed and v.observed == 3  # the padding row, drawn over, is no longer 0 either
    assert "embeddings.word_embeddings.weight: std 1" in v.detail and "initializer_range" in v.detail
    assert "embeddings.word_embeddings.weight[padding_idx=0]: value" in v.detail
    assert "encoder.layer.*.intermediate.dense.bias: value" in v.detail


def test_a_vit_cls_token_left_at_zero_and_layernorm_not_ones_fail() -> None:
    model = _hf(
        "ViTModel",
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=32,
        patch_size=8,
    )
    with torch.no_grad():
        model.embeddings.cls_token.zero_()
        model.layernorm.weight.normal_(1.0, 0.02)
    v = _judge(model)
    assert (
        not v.passed
        and "embeddings.cls_token" in v.detail
        and "truncated" in v.detail
        and "layernorm.weight: value" in v.detail
    )


def test_a_layer_scale_at_one_or_missing_fails() -> None:
    timm = pytest.importorskip("timm")
    args = {"img_size": 32, "patch_size": 8, "embed_dim": 64, "depth": 2, "num_heads": 2}
    torch.manual_seed(0)
    vit = timm.create_model("vit_small_patch16_224", pretrained=False, **args, init_values=1e-5)
    with torch.no_grad():
        vit.blocks[1].ls2.gamma.fill_(1.0)
    v = _judge(vit, {**args, "init_values": 1e-5})
    assert not v.passed and "blocks.*.ls2.gamma: value 1" in v.detail and "CaiT" in v.detail
    torch.manual_seed(0)
    skipped = timm.create_model("vit_small_patch16_224", pretrained=False, **args)  # a release that ignores init_values
    v = _judge(skipped, {**args, "init_values": 1e-5})
    assert not v.passed and "0 parameters, declared 4 = 2 * depth" in v.detail


def test_a_spec_row_comes_first_and_an_uncovered_parameter_fails_unless_allowed() -> None:
    model = _hf("LlamaModel", **SMALL)
    wrong = {
        "name": "*.o_proj.weight",
        "law": "normal",
        "std": "initializer_range / 10",
        "source": "a rule the model does not follow",
    }
    v = _judge(model, rules=[wrong])
    assert (
        not v.passed
        and "layers.*.self_attn.o_proj.weight: std 0.02" in v.detail
        and "a rule the model does not follow" in v.detail
    )
    model.extra_scale = torch.nn.Parameter(torch.ones(3))  # (after the construction: its init is not recorded)
    v = _judge(model, uncovered="fail")
    assert not v.passed and "no rule declares the init of 1 parameters: extra_scale" in v.detail
    v = _judge(model)  # undeclared is reported, not failed, by default
    assert v.passed and "1 undeclared (not judged): extra_scale" in v.detail and v.extra["uncovered"] == ["extra_scale"]


def test_a_non_finite_parameter_fails() -> None:
    model = _hf("LlamaModel", **SMALL)
    with torch.no_grad():
        model.layers[0].mlp.up_proj.weight[3, 5] = float("nan")
        model.norm.weight[0] = float("inf")
    v = _judge(model)
    assert (
        not v.passed
        and v.observed == 2
        and "layers.*.mlp.up_proj.weight" in v.detail
        and "norm.weight: value" in v.detail
    )


def test_a_rule_that_names_an_undeclared_key_is_no_verdict() -> None:
    v = _judge(
        _hf("LlamaModel", **SMALL), rules=[{"param": "weight", "law": "normal", "std": "n_embd ** -0.5", "source": "s"}]
    )
    assert not v.measured and "'n_embd'" in v.detail and "config" in v.detail


# ----------------------------------------------------------------------------- specs


def test_every_zoo_spec_declares_init_conformance() -> None:
    specs = sorted(ZOO.glob("*.toml"))
    assert len(specs) >= 30
    for path in specs:
        spec = parse_spec(path.read_text(encoding="utf-8"), file=str(path))
        assert spec.expect.init_conformance is not None, path.name


_TOML = """
name = "t"
description = "t"
family = "{family}"
[block]
{block}
[space]
depth = 2
width = 8
batch = 2
[expect.init_conformance]
{expect}
"""


def test_a_bad_table_name_and_a_built_in_family_without_rows_are_refused() -> None:
    block = (
        'layer = "tokens"\nmodel = "transformers:LlamaModel"\nconfig = { hidden_size = "width", '
        'num_hidden_layers = "depth", num_attention_heads = 2 }'
    )
    with pytest.raises(SpecError, match=r"expect.init_conformance.table.*close|did you mean.*gpt2"):
        parse_spec(textwrap.dedent(_TOML.format(family="library", block=block, expect='table = "gtp2"')), file="t.toml")
    with pytest.raises(SpecError, match="own .space. keys"):
        parse_spec(textwrap.dedent(_TOML.format(family="plain", block='layer = "linear"', expect="")), file="t.toml")
    with pytest.raises(SpecError, match="source"):
        parse_spec(
            textwrap.dedent(
                _TOML.format(family="library", block=block, expect='rules = [{ law = "normal", std = 0.02 }]')
            ),
            file="t.toml",
        )


@pytest.mark.slow  # every zoo family built and probed at two depths (about 5 minutes on 2 cores)
@pytest.mark.parametrize("path", sorted(ZOO.glob("*.toml")), ids=lambda p: p.stem)
def test_every_zoo_spec_holds_its_declared_init_on_the_current_release(path: Path) -> None:
    from stability.run.probing import measure_case
    from stability.spec.case import parse_case_string
    from stability.spec.load import load_spec
    from stability.spec.registry import invariant

    spec = load_spec(path)
    # The two shallowest depths the spec draws, one apart (Swin's blocks come in pairs, so its space starts at 2).
    low = spec.space.depth[0]
    for case in (f"depth={low}", f"depth={low + 2}"):
        m = measure_case(spec, parse_case_string(case, spec))
        v = invariant("init_conformance").judge(m, spec.expect.init_conformance)
        assert v.passed and v.measured and not v.extra["uncovered"], f"{path.name} {case}: {v.detail}"


def test_fewer_parameters_off_the_declared_init_is_further_from_failing() -> None:
    """The baseline rule's direction (stability/report/baseline.py `toward_bound`) reads the severity:
    12 parameters off the init → none is away from the bound (transformers 4.53 → 4.54 for Mamba),
    the reverse toward it, and any failing case is further gone than any passing one."""
    import math

    from stability.judge.verdict import Verdict
    from stability.spec.registry import invariant

    inv = invariant("init_conformance")

    def verdict(off: float, worst: float = 0.0) -> Verdict:
        return Verdict(
            invariant="init_conformance",
            passed=off == 0,
            observed=off,
            bound="",
            block=None,
            detail="",
            extra={"worst_excess": worst},
        )

    severity = [
        inv.severity_of(verdict(off, worst), None) for off, worst in ((0, 0.2), (0, 0.9), (1, 0.0), (3, 0.0), (12, 0.0))
    ]
    assert severity == sorted(severity) and len(set(severity)) == len(severity)
    assert severity[1] <= 1 < severity[2]
    assert inv.severity_of(verdict(math.nan), None) == math.inf


def test_parameter_statistics_in_chunks_are_the_float64_statistics_of_the_whole() -> None:
    """`init_stats._stats` reads a parameter a chunk at a time (never a float64 copy of it): its
    mean, variance, min and max are those of the whole tensor in float64, padding row left out."""
    from stability.measure import init_stats

    gen = torch.Generator().manual_seed(0)
    table = torch.nn.Embedding(2600, 1000, padding_idx=7)  # 2.6M entries: three chunks
    with torch.no_grad():
        table.weight.copy_(torch.randn(2600, 1000, generator=gen) * 0.02 + 0.003)
    record = init_record(table, {}, {"weight": 2.0})
    rows = torch.cat([table.weight[:7], table.weight[8:]]).detach().double().reshape(-1) / 2.0
    stats = {s.name: s for s in record.parameters}
    main, pad = stats["weight"], stats["weight[padding_idx=7]"]
    assert main.n == rows.numel() and main.shape == (2599, 1000)
    assert main.mean == pytest.approx(float(rows.mean()), rel=1e-12, abs=0.0)
    assert main.var == pytest.approx(float(rows.var(correction=1)), rel=1e-12, abs=0.0)
    assert (main.min, main.max) == (float(rows.min()), float(rows.max()))
    assert pad.n == 1000 and math.isclose(
        pad.mean, float(table.weight[7].detach().double().mean() / 2.0), rel_tol=1e-12
    )
    assert init_stats._CHUNK < rows.numel() // 2


def test_parameter_moments_are_exact_where_the_answer_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    """`init_stats._moments`, a chunk at a time (the chunk made small): a constant parameter has
    variance exactly 0 at any offset, a large offset loses no digits of a small spread, a
    non-finite entry makes the statistics non-finite, and half precision is read exactly."""
    from stability.measure import init_stats

    monkeypatch.setattr(init_stats, "_CHUNK", 1000)
    ones = torch.full((37, 101), 1.0)
    m = init_stats._moments([ones])
    assert (m.n, m.mean, m.m2, m.lo, m.hi) == (3737, 1.0, 0.0, 1.0, 1.0)
    spread = torch.arange(3000, dtype=torch.float64) * 1e-6 + 1e4  # an offset 10 orders above the spread
    m = init_stats._moments([spread])
    values = [Fraction(v) for v in spread.tolist()]  # the float64 entries, exactly
    mean = sum(values) / len(values)
    assert m.mean == pytest.approx(float(mean), rel=1e-15, abs=0.0) and m.m2 == pytest.approx(
        float(sum((v - mean) ** 2 for v in values)), rel=1e-12, abs=0.0
    )
    for bad in (math.inf, math.nan):
        t = torch.zeros(2500)
        t[1700] = bad
        assert not math.isfinite(init_stats._moments([t]).m2)
    half = (torch.randn(2100) * 0.02).half()
    m = init_stats._moments([half])
    assert m.mean == pytest.approx(float(half.double().mean()), rel=1e-12, abs=0.0) and m.m2 == pytest.approx(
        float(half.double().var(correction=0)) * 2100, rel=1e-12, abs=0.0
    )


# ----------------------------------------------------------------------------- the case's level and the rows' counts

_TORCH_LINEAR = [
    {"param": "weight", "law": "uniform", "bound": "1 / sqrt(fan_in)", "source": "torch Linear.reset_parameters"},
    {"param": "bias", "law": "uniform", "bound": "1 / sqrt(fan_in)", "source": "torch Linear.reset_parameters"},
]


def test_the_level_is_alpha_over_every_test_the_case_makes() -> None:
    # a Linear(2, 1): its weight (2 elements) gets mean, variance, max and min, its bias (1 element)
    # mean, max and min: 7 tests, each at alpha / 7 (Bonferroni)
    torch.manual_seed(0)
    v = _judge(torch.nn.Linear(2, 1), rules=_TORCH_LINEAR, alpha=1e-3)
    assert v.passed, v.detail
    assert v.extra["tests"] == 7 and v.extra["level"] == pytest.approx(1e-3 / 7, rel=1e-15, abs=0.0)
    assert "7 tests at level 0.00014 each" in v.detail


@pytest.mark.parametrize(("count", "observed"), [(1, 1), (2, 0), (5, 3)])
def test_a_row_that_covers_another_number_of_parameters_than_it_declares_fails(count: int, observed: int) -> None:
    # two Linear weights under a row declaring `count`: more than declared fails as fewer does, and
    # the verdict's number counts the parameters missing or extra
    torch.manual_seed(0)
    rows = [{**_TORCH_LINEAR[0], "count": count}, _TORCH_LINEAR[1]]
    v = _judge(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)), rules=rows)
    assert v.passed == (observed == 0) and v.observed == observed, v.detail
    if observed:
        assert f"param weight: 2 parameters, declared {count} = {count}" in v.detail


@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("MixtralModel", {**SMALL, "num_local_experts": 4, "num_experts_per_tok": 2}),
        (
            "MambaModel",
            {
                "hidden_size": 64,
                "state_size": 8,
                "num_hidden_layers": 4,
                "vocab_size": 64,
                "rescale_prenorm_residual": True,
            },
        ),
    ],
)
def test_a_healthy_mixture_of_experts_and_a_depth_rescaled_mamba_hold_their_declared_init(
    name: str, config: dict[str, Any]
) -> None:
    # the experts' weights are 3-d parameters of MixtralExperts, covered by the mixtral table's own
    # row; Mamba's out_proj bound is divided by √num_hidden_layers (√4 = 2: a missing square root is a 2× off bound)
    v = _judge(_hf(name, **config))
    assert v.passed and v.measured, v.detail
    assert not v.extra["uncovered"]
    if name == "MambaModel":
        assert any(
            r["rule"] == "name *.out_proj.weight, within MambaMixer" and r["covered"] == 4 for r in v.extra["rows"]
        ), v.extra["rows"]


def test_a_value_the_spec_declares_is_the_intent_over_the_models_config() -> None:
    """`[expect.init_conformance] config` states the init the model should have: where the model's
    own config holds another value, the spec's is judged (a config that drifted from the intent is
    what the check exists to catch), and the model's is used where the spec says nothing."""
    model = _hf("LlamaModel", **SMALL, initializer_range=0.02)
    assert _judge(model).passed

    def declared(m: torch.nn.Module, value: float) -> Any:
        record = init_record(m, declared_config(m, {}))
        assert record.variables["initializer_range"] == pytest.approx(m.config.initializer_range)
        return init_conformance(_M(record), InitConformance.model_validate({"config": {"initializer_range": value}}))

    v = declared(model, 0.04)
    assert v.measured and not v.passed and "0.04" in v.detail, v.detail
    assert declared(_hf("LlamaModel", **SMALL, initializer_range=0.04), 0.04).passed
