"""The executors (stability/run/executor.py, stability/run/worker.py): the shipped specs give the same
report, bit for bit, in this process and through worker processes, in any number of jobs."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from shipped_support import require_shipped_libraries
from spec_support import SPECS

from stability.report.formats import to_json
from stability.run.engine import RunOptions
from stability.run.executor import InProcessExecutor, Outcome, Task, run_task
from stability.run.worker import WorkerExecutor
from stability.spec.load import find_specs, load_spec

#: What the comparison leaves out: the times, and a spec's captured output (a worker child's file
#: descriptors 1 and 2, e.g. a library's own warnings; in this process they go to the caller's, as
#: stability/run/executor.py documents).
_NOT_COMPARED = {"seconds", "output"}


def _without_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k not in _NOT_COMPARED}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def _report(outcomes: list[Outcome]) -> str:
    return json.dumps(_without_times(to_json([o.result for o in outcomes])), indent=1)


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    require_shipped_libraries()
    options = RunOptions(profile="ci")
    return [Task(load_spec(f), options) for f in find_specs([SPECS])]


#: One shipped spec of each way its result is made and carried (a built-in family, a custom factory,
#: the channel statistics in `extra`, a mean-field law, a training run, a language-model run), for
#: the default run; every shipped spec, each family included, under `-m slow` (.ci/nightly).
SAMPLE = (
    "plain_mlp",
    "custom_rezero",
    "control_mean_shift_relu",
    "plain_meanfield",
    "warmup_free_residual",
    "lm_early_warning_qk_norm",
)


@pytest.mark.slow  # a sample of the shipped specs' searches, twice; the slow run compares every one
def test_a_sample_of_shipped_specs_gives_bit_identical_json_in_process_and_in_workers(tasks: list[Task]) -> None:
    chosen = [t for t in tasks if Path(t.spec.path).stem in SAMPLE and "zoo" not in t.spec.path]
    assert sorted(Path(t.spec.path).stem for t in chosen) == sorted(SAMPLE)  # a renamed spec is not left out unseen
    _identical(chosen)


#: The shipped specs in this many parts, so pytest -n spreads the comparison over its workers.
PARTS = 4


@pytest.mark.slow
@pytest.mark.parametrize("part", range(PARTS))
def test_the_shipped_specs_give_bit_identical_json_in_process_and_in_workers(
    tasks: list[Task], monkeypatch: pytest.MonkeyPatch, part: int
) -> None:
    """Where `STABILITY_GATE_REPORT` names the JSON report of `stability check specs --profile ci` run
    in workers by the same nightly job (.ci/nightly), the in-process run is compared with it instead of running
    every spec in workers a second time."""
    gate = os.environ.get("STABILITY_GATE_REPORT")
    if not gate:
        _identical(tasks[part::PARTS])
        return
    report = json.loads(Path(gate).read_text(encoding="utf-8"))
    assert report.pop("errors") == []
    monkeypatch.chdir(SPECS.parent)  # the gate names its specs as the command line did, relative to the repository
    files = [s["file"] for s in report["specs"]]
    assert [str(Path(f).resolve()) for f in files] == [
        t.spec.path for t in tasks
    ]  # every shipped spec, in the same order
    report["specs"] = report["specs"][part::PARTS]
    report["met"] = all(s["met"] for s in report["specs"])  # the part's own
    mine = list(zip(files, tasks, strict=True))[part::PARTS]
    here = InProcessExecutor().map([Task(load_spec(Path(f)), t.options) for f, t in mine])
    assert _report(here) == json.dumps(_without_times(report), indent=1)


def _identical(tasks: list[Task]) -> None:
    assert tasks
    seen: list[str] = []
    workers = WorkerExecutor(jobs=2, threads=1).map(tasks, on_done=lambda o: seen.append(o.task.spec.name))
    here = InProcessExecutor().map(tasks)  # the session fixture runs this process on one thread too
    assert [o.error for o in workers] == [None] * len(tasks)
    assert [o.task.spec.name for o in workers] == [
        t.spec.name for t in tasks
    ]  # task order, whatever the finishing order
    assert sorted(seen) == sorted(t.spec.name for t in tasks)
    assert _report(workers) == _report(here)


def test_an_outcome_pickles_whole(tasks: list[Task]) -> None:
    """What a distributed executor would ship back: the outcome as plain data."""
    task = next(t for t in tasks if t.spec.family == "custom")
    outcome = run_task(Task(task.spec, task.options, case="depth=2"))
    again = pickle.loads(pickle.dumps(outcome))
    assert _report([again]) == _report([outcome])
    assert again.result.results[0].verdict == outcome.result.results[0].verdict


def test_the_hypothesis_internal_that_draws_depend_on_is_still_there() -> None:
    """`draws_from_the_spec_alone` replaces these; if Hypothesis renames them, fail here, loudly,
    instead of silently letting imported modules steer the draws again."""
    from hypothesis.internal.cache import LRUCache
    from hypothesis.internal.conjecture import providers

    from stability.run.executor import draws_from_the_spec_alone

    assert callable(providers._get_local_constants) and isinstance(providers.CONSTANTS_CACHE, LRUCache)
    real = providers._get_local_constants
    with draws_from_the_spec_alone():
        pool = providers._get_local_constants()
        assert not (pool.integers or pool.floats or pool.strings or pool.bytes)
    assert providers._get_local_constants is real
