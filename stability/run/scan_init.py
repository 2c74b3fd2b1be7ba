"""One model's init, recorded and judged for `stability scan`, by the harness's own recorder and
judge (one rule, one place: the scan adds none of its own):

- the model is built from the scan's reduced config under a seeded generator, inside
  `stability.measure.init_recorder.InitRecorder.recording()`, so every parameter's init is recorded
  exactly as it is constructed, with the code that wrote it (`stability.measure.init_trace`);
- `init_conformance` (`stability.judge.init_conformance`) judges it with its defaults: the model's
  own declared intent (`stability.judge.init_intent.deviations`) and the family table its actual
  class chooses, as overrides; a parameter nothing declares is undeclared, not counted.

What comes back (`InitJudged`):

- `deviations`: each parameter group (layer indices as `*`) whose recorded init breaks what is
  declared — an intent rule's deviation as the judge words it, or a table row's: the recorded law
  and its writer against the row's declared law (`stability.judge.init_tables.row_declared`);
- `laws`: each parameter group's recorded law, its exact parameters and the code that wrote it
  (what `stability scan --compare` diffs); a group whose parameters received different laws is
  listed parameter by parameter;
- `judged`: how many parameters a declaration covered; `note`: what the judge could not judge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import SimpleNamespace
from typing import Any

import torch

from stability.run.scan_rows import Deviation, RecordedLaw

__all__ = ["InitJudged", "judge_init", "exact_law"]


@dataclass(frozen=True, kw_only=True)
class InitJudged:
    """What `judge_init` found (the module docstring)."""

    judged: int
    deviations: tuple[Deviation, ...]
    laws: tuple[RecordedLaw, ...] | None
    note: str | None


def exact_law(law: Any, stats: Any = None) -> str:
    """A recorded law with every parameter at full precision (`normal(std=0.007071067811865475)`):
    what two releases' laws are compared by; `describe()` is what a reader sees. A computed law
    (a table copied in, a value set at creation) says nothing of its values but how they came, so
    it is compared by the values' statistics (`stats`: the parameter's `ParameterStats`) to float32's
    precision instead: the same table written two ways is the same init."""
    if law.kind == "computed" and stats is not None:
        numbers = {"mean": stats.mean, "var": stats.var, "min": stats.min, "max": stats.max}
        return "computed(" + ", ".join(f"{k}={v:.7g}" for k, v in numbers.items()) + ")"
    defaults = {f.name: f.default for f in fields(law)}
    parts = [f"{k}={getattr(law, k)!r}" for k in defaults if k != "kind" and getattr(law, k) != defaults[k]]
    return f"{law.kind}({', '.join(parts)})"


def judge_init(model_name: str, config: Mapping[str, Any], *, seed: int, file: str) -> InitJudged:
    """Build `model_name` ("LIBRARY:NAME") from `config` under `seed`, record its init and judge it."""
    from stability.families.library import resolve
    from stability.families.library_build import construct
    from stability.judge.init_conformance import init_conformance
    from stability.measure.init_recorder import InitRecorder
    from stability.measure.init_stats import declared_config, init_record
    from stability.spec.init_expect import InitConformance

    target = resolve(model_name, file=file, config=config)
    recorder = InitRecorder()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with recorder.recording():
            model = construct(target, dict(config))
    trace = recorder.trace(model)
    record = init_record(model, declared_config(model, config, trace.model_args), trace=trace)
    verdict = init_conformance(SimpleNamespace(extra={"init_conformance": record}), InitConformance.model_validate({}))
    extra = verdict.extra or {}
    return InitJudged(
        judged=int(extra.get("parameters") or 0),
        deviations=_deviations(record, extra),
        laws=_laws(trace, {p.name: p for p in record.parameters}),
        note=None if verdict.measured else verdict.detail,
    )


def _deviations(record: Any, extra: Mapping[str, Any]) -> tuple[Deviation, ...]:
    """One deviation per (parameter group, rule): the intent's (`extra["deviations"]`) and each
    table row's broken parameters (`extra["rows"]`), the row's declared law computed as the judge
    computes it."""
    from stability.judge.init_intent import group_of, trace_of

    out: dict[tuple[str, str], Deviation] = {}
    for d in extra.get("deviations") or ():
        key = (str(d["group"]), str(d["rule"]))
        out.setdefault(
            key,
            Deviation(
                parameter=key[0],
                recorded=str(d["recorded"]),
                declared=str(d["declared"]),
                source=str(d["source"]),
                rule=key[1],
            ),
        )
    declared = _row_laws(record)
    for row in extra.get("rows") or ():
        for name in row.get("broken") or ():
            key = (group_of(str(name)), str(row["rule"]))
            if key in out:
                continue
            found = trace_of(record, str(name))
            recorded = "its values (no law was recorded)"
            if found is not None:
                t, law = found
                recorded = f"{law.describe()} by {t.writer.partition(':')[2] or 'its constructor'}"
            origin = "" if row.get("origin") in ("spec", None) else f"; rule table {row['origin']}"
            out[key] = Deviation(
                parameter=key[0],
                recorded=recorded,
                declared=declared.get((str(name), str(row["rule"])), str(row["rule"])),
                source=f"{row.get('source', '')}{origin}",
                rule=str(row["rule"]),
            )
    return tuple(out.values())


def _row_laws(record: Any) -> dict[tuple[str, str], str]:
    """(parameter, row pattern) → the row's declared law for it, for every row of the table the
    model's class chooses that covers a parameter (as init_conformance assigns them: the first)."""
    from stability.judge.init_tables import RuleError, choose_table, row_applies, row_declared, row_law, rows_of

    table, _ = choose_table(tuple(record.model), None, tuple(record.init_defined_by))
    env = dict(record.variables)
    out: dict[tuple[str, str], str] = {}
    try:
        rows = [r for _, r in rows_of(table) if row_applies(r, env)]
        for p in record.parameters:
            row = next((r for r in rows if r.covers(p.name, tuple(p.module), tuple(p.within))), None)
            if row is not None:
                law = row_law(row, {**env, "fan_in": p.fan_in, "fan_out": p.fan_out, "numel": p.n})
                out[(p.name, row.pattern())] = row_declared(row, law)
    except RuleError:  # the judge's verdict says why the table cannot be read
        return out
    return out


def _laws(trace: Any, stats: Mapping[str, Any]) -> tuple[RecordedLaw, ...]:
    """Each parameter group's recorded law (the module docstring); `stats`: each parameter's
    statistics, by name (`exact_law`)."""
    from stability.judge.init_intent import group_of

    by_group: dict[str, list[tuple[str, str, str, str]]] = {}
    for t in trace.parameters:
        writer = t.writer.partition(":")[2] or t.writer or "its constructor"
        law = t.law.describe() if t.recorded else "not recorded (created before the recording)"
        exact = exact_law(t.law, stats.get(t.name))
        by_group.setdefault(group_of(t.name), []).append((t.name, law, exact, writer))
    out: list[RecordedLaw] = []
    for group, members in by_group.items():
        if len({m[1:] for m in members}) == 1:
            _, law, exact, writer = members[0]
            out.append(RecordedLaw(parameter=group, law=law, exact=exact, writer=writer))
        else:
            out += [RecordedLaw(parameter=n, law=law, exact=exact, writer=w) for n, law, exact, w in members]
    return tuple(out)
