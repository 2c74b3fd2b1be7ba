"""The harness fuzzed with Hypothesis.

(a) Arbitrary documents (garbage text, random TOML values, valid specs with keys deleted, replaced
    or added) go through the loader: the only exception that may escape is `SpecError`, and it is
    one line that names the file.
(b) Arbitrary *valid* specs (every family and option, small sizes) go through build, probe, every
    invariant and the JSON report: each ends in a `Verdict`, never an internal error.
(c) Arbitrary `stability sweep` command lines (every option, valid, boundary and garbage values)
    end in exit 0, 1 or 2 with one line on stderr, never a traceback.

The budget is small in the normal run; with STABILITY_PROFILE=thorough
it is ≥ 1000 examples (500 command lines for (c)).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
import os
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from stability.errors import SpecError
from stability.judge.invariants import Verdict
from stability.report.formats import to_json
from stability.run.engine import RunOptions, run_spec
from stability.run.executor import Executor, Outcome
from stability.run.strategies import cases
from stability.spec.load import parse_spec, validate_spec
from stability.spec.registry import FAMILIES
from stability.spec.schema import GROWTH_CLASSES, Spec

SPECS_DIR = Path(__file__).resolve().parent.parent / "specs"
FILE = str(SPECS_DIR / "fuzzed.toml")  # beside specs/custom_blocks.py, so custom specs resolve

THOROUGH = os.environ.get("STABILITY_PROFILE") == "thorough"
LOADER = settings(max_examples=2000 if THOROUGH else 150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PIPELINE = settings(
    max_examples=1000 if THOROUGH else 40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

SHIPPED = [tomllib.loads(p.read_text(encoding="utf-8")) for p in sorted(SPECS_DIR.glob("*.toml"))]

# ----------------------------------------------------------------------------- TOML values and text

KNOWN_WORDS = [
    "plain",
    "postnorm",
    "preact",
    "highway",
    "dense",
    "custom",
    "linear",
    "conv2d",
    "relu",
    "gelu",
    "batch",
    "group",
    "identity",
    "projection",
    "scaled",
    "zero",
    "rezero",
    "skipinit",
    "normal",
    "orthogonal",
    "float32",
    "bfloat16",
    "cpu",
    "cuda",
    "holds",
    "violated",
    "1/sqrt(depth)",
    "1/depth",
    "default",
    "custom_blocks:residual_mlp",
    "depth=1",
    "depth=2,width=4",
    "nope:nope",
    "",
]
KNOWN_KEYS = [
    "name",
    "description",
    "family",
    "block",
    "space",
    "expect",
    "probe",
    "path",
    "layer",
    "activation",
    "norm",
    "skip",
    "skip_scale",
    "gate_bias",
    "growth",
    "kernel_size",
    "factory",
    "factory_args",
    "depth",
    "width",
    "batch",
    "spatial",
    "input_width",
    "weight_init",
    "branch_init",
    "dtype",
    "device",
    "seed",
    "examples",
    "gradient_arrival",
    "variance_growth",
    "identity_at_init",
    "lo",
    "hi",
    "expect",
    "atol",
    "max_growth",
    "projection_spectrum",
    "branch_scale",
    "bias_init",
    "init_std",
    "checkpoint_every",
    "norm_groups",
]

scalars = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-3, 10),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e-320, 1e308, math.nan, math.inf, -math.inf]),
    st.booleans(),
    st.text(max_size=20),
    st.sampled_from(KNOWN_WORDS),
    st.datetimes(),
    st.dates(),
    st.times(),
)
keys = st.one_of(st.sampled_from(KNOWN_KEYS), st.text(min_size=1, max_size=12))
toml_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=10,
)


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _str(k)


def _str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return _str(v)
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"


def to_toml(doc: dict[str, Any], prefix: tuple[str, ...] = ()) -> str:
    """A small TOML writer for the fuzzer (the standard library only reads TOML)."""
    lines = [f"{_key(k)} = {_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for k, v in doc.items():
        if isinstance(v, dict):
            path = (*prefix, k)
            lines += ["", "[" + ".".join(_key(p) for p in path) + "]", to_toml(v, path)]
    return "\n".join(lines)


def _slots(doc: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) in a document, to mutate one."""
    out: list[tuple[Any, Any]] = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else []
    for k, v in items:
        out.append((doc, k))
        out += _slots(v)
    return out


@st.composite
def mutated(draw: st.DrawFn, base: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    """A valid document with 1–4 random mutations: a key deleted, a value replaced, a key added."""
    doc = copy.deepcopy(draw(base))
    for _ in range(draw(st.integers(1, 4))):
        slots = _slots(doc)
        kind = draw(st.sampled_from(["delete", "replace", "add"]))
        if not slots:
            doc[draw(keys)] = draw(toml_values)
            continue
        container, key = draw(st.sampled_from(slots))
        if kind == "delete":
            del container[key]
        elif kind == "replace":
            container[key] = draw(toml_values)
        elif isinstance(container, dict):
            container[draw(keys)] = draw(toml_values)
        else:
            container.insert(key, draw(toml_values))
    return doc


def _only_spec_errors(call: Any, *args: Any) -> Spec | None:
    try:
        spec = call(*args, file=FILE)
    except SpecError as exc:
        text = str(exc)
        assert "\n" not in text and "\r" not in text, text
        assert text.startswith(FILE), text
        return None
    assert isinstance(spec, Spec) and spec.path == FILE
    return spec


@LOADER
@given(st.text())
def test_garbage_text_only_ever_raises_spec_error(text: str) -> None:
    _only_spec_errors(parse_spec, text)


@LOADER
@given(st.dictionaries(keys, toml_values, max_size=8))
def test_random_documents_only_ever_raise_spec_error(doc: dict[str, Any]) -> None:
    _only_spec_errors(validate_spec, doc)
    _only_spec_errors(parse_spec, to_toml(doc))


# ----------------------------------------------------------------------------- valid specs

ACTIVATIONS = ["relu", "gelu", "tanh", "sigmoid", "identity"]
NORMS = ["batch", "layer", "rms", "group", "none"]
SKIPS = ["identity", "projection", "scaled", "norm", "none"]
WEIGHT_INITS = [
    "default",
    "kaiming_normal",
    "kaiming_uniform",
    "xavier_normal",
    "xavier_uniform",
    "orthogonal",
    "normal",
    "identity",
]
DTYPES = ["float32", "float64", "bfloat16", "float16"]
BRANCH_INITS = {
    "plain": ["default"],
    "postnorm": ["default", "zero", "rezero", "skipinit"],
    "preact": ["default", "zero", "rezero", "skipinit"],
    "highway": ["default", "zero"],
    "dense": ["default", "zero"],
    "custom": ["default", "zero", "rezero", "skipinit"],
}
small_floats = st.floats(0.01, 4.0)


def _range(draw: st.DrawFn, lo: int, hi: int) -> int | list[int]:
    a = draw(st.integers(lo, hi))
    b = draw(st.integers(a, hi))
    return a if a == b and draw(st.booleans()) else [a, b]


@st.composite
def valid_documents(draw: st.DrawFn) -> dict[str, Any]:
    """A document the loader should accept: every family and option, depth ≤ 6, width ≤ 8,
    batch ≤ 4, spatial ≤ 4. (If the loader still refuses one, the test skips it, but only for a
    SpecError.)"""
    # every registered family this strategy writes documents for (a library spec names a real model:
    # tests/test_library_family.py)
    family = draw(st.sampled_from([f for f in FAMILIES.names() if f in BRANCH_INITS or f == "transformer"]))
    if family == "transformer":
        return draw(_transformer_documents())
    layer = "linear" if family == "custom" else draw(st.sampled_from(["linear", "conv2d", "tokens"]))
    block: dict[str, Any] = {"layer": layer}
    space: dict[str, Any] = {"depth": _range(draw, 1, 6), "width": _range(draw, 1, 8), "batch": _range(draw, 1, 4)}
    if layer == "tokens" and draw(st.booleans()):
        space["tokens"] = _range(draw, 2, 4)
    if family == "custom":
        block["factory"] = "custom_blocks:residual_mlp"
    else:
        block["activation"] = draw(st.sampled_from(ACTIVATIONS))
        block["norm"] = draw(st.sampled_from(NORMS))
        if block["norm"] == "group" and draw(st.booleans()):
            block["norm_groups"] = draw(st.integers(1, 8))
    if layer == "conv2d":
        if draw(st.booleans()):
            block["kernel_size"] = draw(st.sampled_from([1, 3, 5]))
        if draw(st.booleans()):
            space["spatial"] = _range(draw, 1, 4)
    spatial_lo = space.get("spatial", 8) if isinstance(space.get("spatial", 8), int) else space["spatial"][0]
    if block.get("norm") == "batch" and (layer == "linear" or spatial_lo == 1):
        space["batch"] = _range(draw, 2, 4)  # batch norm in train mode needs two values per channel
    if block.get("norm") == "group" and (layer == "linear" or spatial_lo == 1):
        space["width"] = _range(draw, 2, 8)  # group norm needs two values per group
    skip = draw(st.sampled_from(SKIPS)) if family in ("postnorm", "preact") else None
    # a first block from input_width to width: no identity skip, no square-only option
    mixed_width = (family == "plain" or skip in ("projection", "none")) and draw(st.booleans())
    if family in ("postnorm", "preact"):
        block["skip"] = skip
        if skip == "scaled":
            block["skip_scale"] = draw(st.floats(0.0, 2.0))
        if skip == "projection" and not mixed_width and draw(st.booleans()):
            lo = draw(small_floats)
            block["projection_spectrum"] = [lo, lo * draw(st.floats(1.0, 4.0))]
        block["branch_layers"] = draw(st.sampled_from([1, 2]))
        block["branch_scale"] = draw(st.one_of(st.floats(0.0, 2.0), st.sampled_from(["1/sqrt(depth)", "1/depth"])))
    if family == "highway":
        block["gate_bias"] = draw(st.floats(-5.0, 5.0))
    if family == "dense":
        block["growth"] = draw(st.integers(1, 8))
        block["transition_every"] = draw(st.integers(0, 3))
        block["compression"] = draw(st.floats(0.1, 1.0))
    if mixed_width:
        space["input_width"] = _range(draw, 2 if block.get("norm") == "group" else 1, 8)
    inits = WEIGHT_INITS if not mixed_width else [w for w in WEIGHT_INITS if w != "identity"]
    space["weight_init"] = draw(st.lists(st.sampled_from(inits), min_size=1, max_size=3, unique=True))
    space["init_std"] = draw(small_floats)
    space["init_gain"] = draw(st.floats(-2.0, 2.0))
    space["bias_init"] = draw(st.one_of(st.just("default"), st.floats(-1.0, 1.0)))
    space["branch_init"] = draw(st.lists(st.sampled_from(BRANCH_INITS[family]), min_size=1, max_size=4, unique=True))
    space["dtype"] = draw(st.lists(st.sampled_from(DTYPES), min_size=1, max_size=4, unique=True))
    space["device"] = ["cpu"]
    space["seed"] = [0, 2**16]

    expect: dict[str, Any] = {}
    if draw(st.booleans()):
        lo = draw(st.floats(1e-3, 1.0))
        expect["gradient_arrival"] = {
            "lo": lo,
            "hi": lo * draw(st.floats(1.0, 1e3)),
            "expect": draw(st.sampled_from(["holds", "violated"])),
        }
    if draw(st.booleans()):
        vg: dict[str, Any] = {
            "max_growth": draw(st.sampled_from(GROWTH_CLASSES)),
            "statistic": draw(st.sampled_from(["variance", "second_moment"])),
        }
        if draw(st.booleans()):
            vg["max_ratio"] = draw(st.floats(1.0, 100.0))
            vg["min_ratio"] = draw(st.floats(1e-3, 1.0))
        expect["variance_growth"] = vg
    zero_branch = family == "custom" or (
        family in ("postnorm", "preact", "highway") and set(space["branch_init"]) - {"default"}
    )
    if zero_branch and draw(st.booleans()):
        expect["identity_at_init"] = {"atol": draw(st.sampled_from([0.0, 1e-6, 0.5]))}
    if not expect:
        expect["gradient_arrival"] = {}
    probe = {
        "loss": draw(st.sampled_from(["projection", "sum"])),
        "mode": draw(st.sampled_from(["train", "eval"])),
        "checkpoint_every": draw(st.integers(0, 3)),
    }
    return {
        "name": "fuzzed",
        "description": "drawn by the fuzzer",
        "family": family,
        "block": block,
        "space": space,
        "expect": expect,
        "probe": probe,
    }


@st.composite
def _transformer_documents(draw: st.DrawFn) -> dict[str, Any]:
    """A valid transformer spec: the width a multiple of head_dim by construction, every option."""
    head_dim = draw(st.integers(1, 4))
    k_lo = draw(st.integers(1, 3))
    k_hi = draw(st.integers(k_lo, 3))
    position = draw(st.sampled_from(["pre", "post", "sandwich"]))
    skip = draw(st.sampled_from(["identity", "none"]))
    block: dict[str, Any] = {
        "layer": "tokens",
        "norm": draw(st.sampled_from(["layer", "rms", "none"])),
        "norm_position": position,
        "causal": draw(st.booleans()),
        "head_dim": head_dim,
        "mlp": draw(st.booleans()),
        "activation": draw(st.sampled_from(ACTIVATIONS)),
        "skip": skip,
    }
    residuals = ["none", "gpt2"] + (
        ["rezero", "skipinit", "layerscale"] + (["deepnorm"] if position == "post" else [])
        if skip == "identity"
        else []
    )
    block["residual"] = draw(st.sampled_from(residuals))
    if block["residual"] == "layerscale" and draw(st.booleans()):
        block["layerscale_init"] = draw(small_floats)
    if block["mlp"] and draw(st.booleans()):
        block["mlp_ratio"] = draw(st.floats(0.25, 4.0))
    width: Any = (
        {"range": [k_lo * head_dim, k_hi * head_dim], "multiple_of": head_dim}
        if draw(st.booleans())
        else {"values": sorted({k_lo * head_dim, k_hi * head_dim})}
    )
    space: dict[str, Any] = {
        "depth": _range(draw, 1, 4),
        "width": width,
        "batch": _range(draw, 1, 3),
        "tokens": _range(draw, 2, 5),
        "weight_init": draw(st.lists(st.sampled_from(WEIGHT_INITS), min_size=1, max_size=3, unique=True)),
        "branch_init": draw(st.lists(st.sampled_from(["default", "zero"]), min_size=1, max_size=2, unique=True)),
        "dtype": draw(st.lists(st.sampled_from(DTYPES), min_size=1, max_size=2, unique=True)),
        "device": ["cpu"],
        "seed": [0, 2**16],
    }
    expect: dict[str, Any] = {}
    for name, table in (
        ("rank_collapse", {"max_similarity": 0.9}),
        ("attention_entropy", {"min_entropy": 0.5}),
        ("gradient_balance", {"max_spread": 10.0}),
    ):
        if draw(st.booleans()):
            expect[name] = {**table, "expect": draw(st.sampled_from(["holds", "violated"]))}
    identity_ok = (
        skip == "identity" and "zero" in space["branch_init"] and (position != "post" or block["norm"] == "none")
    )
    if identity_ok and draw(st.booleans()):
        expect["identity_at_init"] = {"atol": 0.0}
    if not expect:
        expect["gradient_arrival"] = {}
    probe = {
        "loss": draw(st.sampled_from(["projection", "sum"])),
        "mode": draw(st.sampled_from(["train", "eval"])),
        "checkpoint_every": draw(st.integers(0, 3)),
    }
    return {
        "name": "fuzzed",
        "description": "drawn by the fuzzer",
        "family": "transformer",
        "block": block,
        "space": space,
        "expect": expect,
        "probe": probe,
    }


@LOADER
@given(mutated(st.one_of(st.sampled_from(SHIPPED), valid_documents())))
def test_mutated_valid_specs_only_ever_raise_spec_error(doc: dict[str, Any]) -> None:
    _only_spec_errors(validate_spec, doc)
    _only_spec_errors(parse_spec, to_toml(doc))


@LOADER
@given(st.one_of(st.sampled_from(SHIPPED), valid_documents()), st.data())
def test_mutated_spec_text_only_ever_raises_spec_error(doc: dict[str, Any], data: st.DataObject) -> None:
    text = to_toml(doc)
    i = data.draw(st.integers(0, len(text)))
    j = data.draw(st.integers(i, min(len(text), i + 8)))
    _only_spec_errors(parse_spec, text[:i] + data.draw(st.text(max_size=8)) + text[j:])


def test_the_toml_writer_round_trips_every_shipped_spec() -> None:
    """The fuzzer's own writer, so the text tests are not just testing TOML syntax errors."""
    for doc in SHIPPED:
        assert tomllib.loads(to_toml(doc)) == doc
        validate_spec(tomllib.loads(to_toml(doc)), file=FILE)


#: Case errors on valid specs that are reported, not crashed on. Batch norm in train mode with one
#: value per channel (batch 1 on a linear layer or a 1×1 image) is now refused by the loader, so
#: this should never match; it stays so that a regression shows as that error, not a traceback.
KNOWN_CASE_ERRORS = re.compile(
    r"^the case does not run: ValueError: Expected more than 1 value per channel when training"
)


@PIPELINE
@given(valid_documents(), st.data())
def test_every_valid_spec_ends_in_verdicts(doc: dict[str, Any], data: st.DataObject) -> None:
    try:
        spec = validate_spec(doc, file=FILE)
    except SpecError:
        reject()  # only a SpecError may turn a drawn spec away (and the strategy test keeps it rare)
    case = data.draw(cases(spec, device="cpu"), label="case")
    result = run_spec(spec, RunOptions(profile="ci", case_timeout=60), case=case)
    assert [r.name for r in result.results] == [n for n, _ in spec.invariants()]
    for r in result.results:
        if r.verdict is None:  # identity_at_init on a case without a zero branch
            assert (
                r.name == "identity_at_init" and r.status == "not_applicable" and ": not applicable at " in r.message
            ), r
            continue
        assert isinstance(r.verdict, Verdict)
        v = r.verdict
        assert v.invariant == r.name and "\n" not in v.detail
        assert v.block is None or 0 <= v.block <= case.depth, v
        if v.passed:
            assert math.isfinite(v.observed), v
        if r.error is not None:
            assert KNOWN_CASE_ERRORS.search(r.error), f"internal error on a valid spec: {r.error}"
    record = result.cases.get(case)  # absent when no declared invariant applies to the case
    if record is not None and record.measurements is not None:
        m = record.measurements
        assert len(m.grad_norm) == len(m.act_var) == len(m.act_sq_mean) == m.n_blocks + 1
    json.dumps(to_json([result]), allow_nan=False)  # the report holds no bare NaN/inf


def test_the_valid_spec_strategy_is_accepted_by_the_loader() -> None:
    """The generator must not lean on the loader's rejections: it is built to produce valid specs."""
    rejected: list[str] = []

    @settings(max_examples=2000 if THOROUGH else 200, deadline=None, database=None)
    @given(valid_documents())
    def check(doc: dict[str, Any]) -> None:
        try:
            validate_spec(doc, file=FILE)
        except SpecError as exc:
            rejected.append(str(exc))

    check()
    assert rejected == []


# ----------------------------------------------------------------------------- the sweep CLI

SWEEP = settings(
    max_examples=500 if THOROUGH else 30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
SWEEP_SPECS = [
    str(SPECS_DIR / name)
    for name in ("plain_tanh_mlp.toml", "preact_mlp.toml", "custom_rezero.toml", "highway_mlp.toml")
]

garbage_numbers = st.one_of(
    st.sampled_from(["0", "1e300", "-1", "nan", "inf", "1e-9", "9223372036854775807", "99999999999999999999", "x", ""]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(2**70), 2**70).map(str),
)


def _mostly(valid: st.SearchStrategy[str], garbage: st.SearchStrategy[str] = garbage_numbers) -> st.SearchStrategy[str]:
    """`valid` four times in five, else `garbage` (Hypothesis draws the first choice of a pair
    most, so the rare branch is the one it must reach on purpose)."""
    return st.tuples(st.integers(0, 4), valid, garbage).map(lambda t: t[2] if t[0] == 3 else t[1])


def _rarely(draw: st.DrawFn) -> bool:
    return draw(st.integers(0, 9)) == 7


@st.composite
def axis_texts(draw: st.DrawFn) -> str:
    from stability.run.grid import KEYS

    usual = st.sampled_from(
        [
            "depth",
            "width",
            "batch",
            "init_gain",
            "sigma_w2",
            "weight_init",
            "branch_init",
            "dtype",
            "gate_bias",
            "branch_scale",
        ]
    )
    key = draw(_mostly(usual, st.sampled_from([*KEYS, "init", "σ_w²", "", "dpeth"])))
    small = st.one_of(st.integers(1, 6).map(str), st.sampled_from(["0.5", "1.5", "2", "0.9"]))
    kind = draw(st.sampled_from(["list", "log", "lin", "choices", "garbage"]))
    if kind == "list":
        values = ",".join(draw(st.lists(_mostly(small), min_size=0, max_size=3)))
    elif kind in ("log", "lin"):
        values = f"{kind}:{draw(_mostly(small))}:{draw(_mostly(small))}:{draw(_mostly(st.integers(1, 3).map(str)))}"
    elif kind == "choices":
        values = ",".join(
            draw(st.lists(st.sampled_from([*WEIGHT_INITS, "zero", "rezero", "float64", "bogus", ""]), max_size=3))
        )
    else:
        values = draw(st.text(max_size=12))
    return key + values if _rarely(draw) else f"{key}={values}"


@st.composite
def sweep_argvs(draw: st.DrawFn) -> list[str]:
    """A `stability sweep` command line: mostly small sweeps that run, with every option drawn
    from valid, boundary and garbage values."""
    argv = ["sweep"]
    if not _rarely(draw):
        argv.append(draw(st.sampled_from(SWEEP_SPECS)))
    argv += ["--over", f"depth={','.join(map(str, draw(st.lists(st.integers(1, 6), min_size=1, max_size=3))))}"]
    for text in draw(st.lists(axis_texts(), max_size=2)):
        argv += ["--over", text]
    options = {
        "--seeds": _mostly(st.integers(1, 3).map(str)),
        "--first-seed": _mostly(st.sampled_from(["0", "7", str(2**63 - 3), str(2**63 - 1)])),
        "--depth-range": _mostly(
            st.tuples(st.integers(1, 4), st.integers(4, 40)).map(lambda t: f"{t[0]}:{t[1]}"), st.text(max_size=8)
        ),
        "--workers": garbage_numbers,
        "--scheduler": st.sampled_from(
            [
                "garbage",
                "tcp://",
                "http://example.com:80",
                "tcp://127.0.0.1:notaport",
                "tcp://[::1]:x",
                "tls://:1",
                "tcp://h:0",
                "",
            ]
        ),
        "--only": st.sampled_from(["gradient_arrival", "variance_growth", "identity_at_init", "update_size", "nope"]),
        "--case-timeout": _mostly(st.sampled_from(["60", "0", "30.5"])),
        "--device": _mostly(st.just("cpu"), st.sampled_from(["cuda", "tpu"])),
        "--db": _mostly(st.sampled_from(["r.sqlite", "sub/r.sqlite"]), st.sampled_from(["", ".", "dir/", "sub"])),
        "--html": _mostly(st.sampled_from(["report", "a/b"]), st.sampled_from(["", "r.sqlite", "-"])),
    }
    for option in draw(st.lists(st.sampled_from(sorted(options)), max_size=3, unique=True)):
        argv += [option, draw(options[option])]
    argv += draw(st.lists(st.sampled_from(["--no-budget", "--serial", "-q", "--resume"]), max_size=2, unique=True))
    if _rarely(draw):
        argv += [
            "--compare",
            draw(_mostly(st.sampled_from(["HEAD", "0.1.0"]))),
            draw(_mostly(st.sampled_from(["HEAD~1", "0.1.0+g"]))),
        ]
    if "--seeds" not in argv:
        argv += ["--seeds", "2"]
    if "--db" not in argv:
        argv += ["--db", "r.sqlite"]
    return argv


class _SmallPoints(Executor):
    """The sweep's executor under the fuzzer: a small point is probed in this process, a big one
    (which only costs time) comes back unmeasured, as a refused point would."""

    def map(self, jobs: Any, *, on_done: Any = None) -> list[Outcome]:
        from stability.run.executor import InProcessExecutor

        out = []
        for job in jobs:
            point = job.point
            small = (
                int(point.get("depth", 1)) <= 8
                and int(point.get("width", 8)) <= 32
                and int(point.get("batch", 4)) <= 8
                and len(job.seeds) <= 3
            )
            if small:
                (outcome,) = InProcessExecutor().map([job])
            else:
                outcome = Outcome(
                    task=job,
                    result=[{"seed": s, "case": "", "m": None, "error": "not probed by the fuzzer"} for s in job.seeds],
                )
            if on_done is not None:
                on_done(outcome)
            out.append(outcome)
        return out


@pytest.mark.slow  # many sweep CLI runs; nightly
@SWEEP
@given(sweep_argvs())
def test_the_sweep_cli_only_ever_exits_0_1_or_2_in_one_line(argv: list[str]) -> None:
    """Whatever its arguments, `stability sweep` ends in exit 0 (done), 1 (`--compare` found a
    budget that went down) or 2 with one line on stderr: never a traceback, never another code."""
    import contextlib
    import io
    import tempfile
    from unittest import mock

    from stability.cli import main

    out, err = io.StringIO(), io.StringIO()
    with (
        tempfile.TemporaryDirectory() as folder,
        contextlib.chdir(folder),
        mock.patch("stability.run.executors.executor_for", lambda *a, **k: _SmallPoints()),
    ):
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # --help and --version only
                code = 0 if exc.code in (0, None) else 99
        created = sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*"))
    text = out.getvalue() + err.getvalue()
    assert "Traceback" not in text, text
    assert code in (0, 1, 2), (code, text)
    if code == 2:
        lines = err.getvalue().splitlines()
        assert len(lines) == 1 and lines[0].startswith("stability: error: "), err.getvalue()
        assert all(p.startswith(("r.sqlite", "sub")) for p in created), created  # at most the store: no report
    else:
        assert err.getvalue() == "", err.getvalue()
