"""`_apply`, `evaluate` and `run_spec` in the engine (stability/run/engine.py) beyond
tests/test_engine_evaluate.py: every key of an invariant's table reaches its judge, the seconds a
failed case took, the stem, the ensembles a spec asks for (and only those), the checkpointing and
time limit a case runs under, what `run_spec` returns and calls back, and a search whose deciding case
could not run. Written from the surviving mutants of the whole-module mutation run and of held-out
sample 3 (docs/mutation.md)."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from spec_support import SPECS, make_case, make_measurements

from stability import parse_spec
from stability.errors import BlockError, CaseError
from stability.families.build import make_input
from stability.judge import invariants as inv
from stability.judge import theory_checks as theory
from stability.judge.invariants import Verdict
from stability.measure.probe import Measurements, probe_network
from stability.run import engine, probing
from stability.run.conclude import judge
from stability.run.engine import CaseRecord, RunOptions, evaluate, run_spec
from stability.spec.case import Case, corner_case
from stability.spec.load import load_spec
from stability.spec.registry import INVARIANTS
from stability.spec.schema import Spec

CASE = make_case(seed=11)
_M = make_measurements(grad_norm=[1.0], act_var=[1.0], act_sq_mean=[1.0])


def _plain(expect: str = "[expect.gradient_arrival]\nlo = 1e-6\nhi = 1e6\n", extra: str = "") -> Spec:
    return parse_spec(
        'name = "e"\ndescription = "d"\nfamily = "plain"\n[block]\nactivation = "tanh"\n'
        '[space]\ndepth = [1, 4]\nwidth = 4\nbatch = 2\ndtype = ["float64"]\ndevice = ["cpu", '
        f'"cuda"]\n{extra}\n{expect}',
        file="specs/e.toml",
    )


@pytest.mark.parametrize(
    ("name", "module", "expectation", "kwargs"),
    [
        (
            "gradient_arrival",
            inv,
            SimpleNamespace(lo=0.3, hi=3.0, include_entry=True),
            dict(lo=0.3, hi=3.0, include_entry=True),
        ),
        (
            "variance_growth",
            inv,
            SimpleNamespace(
                max_growth="linear", max_ratio=7.0, min_ratio=0.2, statistic="second_moment", bounded_ratio=3.0
            ),
            dict(max_growth="linear", max_ratio=7.0, min_ratio=0.2, statistic="second_moment", bounded_ratio=3.0),
        ),
        (
            "jacobian_spectrum",
            theory,
            SimpleNamespace(max_spread=9.0, mean_lo=0.5, mean_hi=2.0),
            dict(max_spread=9.0, mean_lo=0.5, mean_hi=2.0),
        ),
        ("mean_field", theory, SimpleNamespace(k_sigma=2.5), dict(k_sigma=2.5)),
        (
            "lesion",
            theory,
            SimpleNamespace(max_change=0.7, statistic="median"),
            dict(max_change=0.7, statistic="median"),
        ),
        ("mean_shift", inv, SimpleNamespace(max_ratio=0.4), dict(max_ratio=0.4)),
        ("identity_at_init", inv, SimpleNamespace(atol=1e-7), dict(atol=1e-7)),
    ],
)
def test_apply_hands_every_key_of_the_table_to_its_judge(
    monkeypatch: pytest.MonkeyPatch, name: str, module: Any, expectation: Any, kwargs: dict[str, Any]
) -> None:
    calls: list[tuple[Any, dict[str, Any]]] = []
    verdict = Verdict(invariant=name, passed=True, observed=1.0, bound="", block=None, detail="")
    monkeypatch.setattr(module, name, lambda m, **kw: calls.append((m, kw)) or verdict)
    assert INVARIANTS.get(name).judge(_M, expectation) is verdict
    assert calls == [(_M, kwargs)]


def test_apply_refuses_a_training_invariant_and_says_where_it_is_judged() -> None:
    with pytest.raises(
        ValueError,
        match=r"^trainability is judged on an optimizer run \(stability\.run\.training\.evaluate\), not from "
        r"a probe's Measurements$",
    ):
        judge(
            load_spec(SPECS / "warmup_free_residual.toml"),
            "trainability",
            CaseRecord(case=corner_case(load_spec(SPECS / "warmup_free_residual.toml")), measurements=_M),
        )


@pytest.mark.parametrize(
    ("exc", "error"),
    [
        (BlockError("block 1 failed"), "the case does not run: block 1 failed"),
        (CaseError("refused for memory"), "refused for memory"),
        (torch.OutOfMemoryError("no room"), "out of memory on cpu: no room"),
        (ValueError("bad"), "the case does not run: ValueError: bad"),
    ],
)
def test_a_failed_case_records_the_seconds_it_took(
    monkeypatch: pytest.MonkeyPatch, exc: BaseException, error: str
) -> None:
    def slow_failure(*_: Any, **__: Any) -> Measurements:
        time.sleep(0.02)
        raise exc

    monkeypatch.setattr(probing, "probe_network", slow_failure)
    record = evaluate(_plain(), CASE)
    assert record.error == error and 0.02 <= record.seconds < 30.0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_a_cuda_case_without_cuda_is_refused_at_once() -> None:
    case = make_case(device="cuda", seed=11)
    assert evaluate(_plain(), case) == CaseRecord(
        case=case, measurements=None, error="CUDA is not available on this machine; use --device cpu", seconds=0.0
    )


def test_the_case_runs_under_the_options_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    real = probing.build

    def slow_build(spec: Spec, case: Case) -> Any:
        time.sleep(0.3)
        return real(spec, case)

    monkeypatch.setattr(probing, "build", slow_build)
    record = evaluate(_plain(), CASE, RunOptions(case_timeout=0.05))
    assert record.measurements is None and record.error is not None and "0.05" in record.error


def test_a_stem_runs_before_the_blocks(tmp_path: Path) -> None:
    (tmp_path / "stability_engine_stem.py").write_text(
        "import torch\nfrom torch import nn\n\n\nclass Net(nn.Module):\n"
        "    def __init__(self, depth, width):\n        super().__init__()\n"
        "        self.stem = nn.Linear(width, width, bias=False)\n"
        "        with torch.no_grad():\n            self.stem.weight.copy_(3.0 * torch.eye(width))\n"
        "        self.blocks = nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])\n\n\n"
        "def make(depth, width):\n    return Net(depth, width)\n",
        encoding="utf-8",
    )
    spec = parse_spec(
        'name = "s"\ndescription = "d"\nfamily = "custom"\n[block]\nfactory = "stability_engine_stem:make"\n'
        '[space]\ndepth = 2\nwidth = 4\nbatch = 3\ndtype = ["float64"]\n[expect.gradient_arrival]\nlo = '
        "1e-9\nhi = 1e9\n",
        file=str(tmp_path / "s.toml"),
    )
    case = make_case(depth=2, batch=3)
    record = evaluate(spec, case)
    assert record.measurements is not None, record.error
    x = make_input(spec, case)
    assert record.measurements.act_var[0] == pytest.approx(
        9.0 * float(x.var(unbiased=False)), rel=1e-12, abs=0
    )  # boundary 0 is 3·x


def test_the_specs_checkpointing_reaches_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []

    def spy(*args: Any, **kwargs: Any) -> Measurements:
        seen.append(kwargs["checkpoint_every"])
        return probe_network(*args, **kwargs)

    monkeypatch.setattr(probing, "probe_network", spy)
    record = evaluate(_plain(extra="[probe]\ncheckpoint_every = 2\nensemble = 1"), CASE)
    assert record.error is None and seen == [2]


_GROWTH = '[expect.variance_growth]\nmax_growth = "exponential"\n'
_SHIFT = "[expect.mean_shift]\nmax_ratio = 100.0\n"
_LESION = "[expect.lesion]\nmax_change = 100.0\n"


@pytest.mark.parametrize(("size", "present"), [(1, False), (2, True)])
def test_ensembles_are_measured_exactly_when_the_spec_asks_for_more_than_one_seed(size: int, present: bool) -> None:
    record = evaluate(_plain(_GROWTH + _SHIFT + _LESION, f"[probe]\nensemble = {size}"), CASE)
    assert record.measurements is not None, record.error
    extra = record.measurements.extra
    assert ("ensemble" in extra, "channel_ensemble" in extra, "lesion_ensemble" in extra) == (present, present, present)
    assert "channels" in extra and "lesion" in extra


def test_channel_statistics_are_gathered_only_for_a_mean_shift_spec() -> None:
    record = evaluate(_plain(extra="[probe]\nensemble = 1"), CASE)
    assert record.measurements is not None and "channels" not in record.measurements.extra


def _stand_ins(monkeypatch: pytest.MonkeyPatch) -> list[Case]:
    measured: list[Case] = []

    def fake_evaluate(spec: Spec, c: Case, options: Any = None) -> CaseRecord:
        measured.append(c)
        return CaseRecord(case=c, measurements=_M)

    monkeypatch.setattr(engine, "evaluate", fake_evaluate)
    monkeypatch.setattr(
        engine,
        "judge",
        lambda spec, name, record: Verdict(
            invariant=name, passed=True, observed=1.0, bound="", block=None, detail="fine"
        ),
    )
    return measured


def test_run_spec_returns_its_spec_profile_seconds_and_calls_back_each_result(monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_ins(monkeypatch)
    spec = _plain("[expect.gradient_arrival]\n" + _SHIFT)
    got: list[Any] = []
    t0 = time.perf_counter()
    out = run_spec(spec, RunOptions(profile="ci"), on_result=got.append)
    elapsed = time.perf_counter() - t0
    assert out.spec is spec and out.profile == "ci" and 0.0 < out.seconds <= elapsed
    assert [r.name for r in out.results] == ["gradient_arrival", "mean_shift"] and got == out.results


def test_a_replayed_case_string_is_on_the_runs_device(monkeypatch: pytest.MonkeyPatch) -> None:
    measured = _stand_ins(monkeypatch)
    (r,) = run_spec(_plain(), RunOptions(device="cuda"), case="depth=2").results  # stand-ins: no GPU needed
    assert r.case is not None and r.case.device == "cuda" and [c.device for c in measured] == ["cuda"]


def test_invariants_after_a_training_one_are_still_judged_and_training_gets_a_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _stand_ins(monkeypatch)
    caches: list[Any] = []

    def fake_training(spec: Spec, name: str, expectation: Any, options: Any, profile_name: str, **kwargs: Any) -> Any:
        caches.append(kwargs.get("cache"))
        return engine.InvariantResult(
            name=name, expect=expectation.expect, met=True, verdict=None, case=None, examples=0, message="trained"
        )

    monkeypatch.setattr(engine, "run_training", fake_training)
    text = (Path(__file__).resolve().parent.parent / "specs" / "degradation_plain.toml").read_text(encoding="utf-8")
    spec = parse_spec(text + "\n" + _SHIFT, file="specs/t.toml")
    out = run_spec(spec, RunOptions(profile="ci"))
    assert [r.name for r in out.results] == ["trainability", "mean_shift"]
    assert len(caches) == 1 and isinstance(caches[0], dict)


def _growth_spec(extra: str = "") -> object:
    return parse_spec(
        'name = "e"\ndescription = "d"\nfamily = "plain"\n[block]\nactivation = "tanh"\n[space]\ndepth = [1, '
        "3]\nwidth = 4\nbatch = 2\n"
        f'dtype = ["float64"]\n{extra}\n[expect.variance_growth]\nmax_growth = "exponential"\n',
        file="specs/e.toml",
    )


def test_an_ensemble_of_one_is_no_ensemble_and_on_start_gets_the_case() -> None:
    spec = _growth_spec("[probe]\nensemble = 1")
    case = make_case()
    record = evaluate(spec, case)  # type: ignore[arg-type]
    assert record.measurements is not None and "ensemble" not in record.measurements.extra
    started: list[Case] = []
    run_spec(spec, RunOptions(), case=case, on_start=started.append)  # type: ignore[arg-type]
    assert started == [case]


def test_a_search_whose_deciding_case_fails_to_run_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        engine,
        "evaluate",
        lambda spec, c, options=None: CaseRecord(case=c, measurements=None, error="the case does not run: boom"),
    )
    (r,) = run_spec(_growth_spec(), RunOptions(profile="ci")).results  # type: ignore[arg-type]
    assert not r.met and r.case is not None and r.error == "the case does not run: boom"
    assert r.message == f"specs/e.toml::variance_growth: the case could not be measured at {r.case}"
