"""One model's init, recorded and judged for `stability scan`, by the harness's own recorder and
judge (`stability.measure.init_stats`, `stability.judge.init_conformance`: one rule, one place;
the scan adds none of its own).

The model is built from the scan's reduced config under a seeded generator, its init recorded as
it is constructed, and judged by `init_conformance` with its defaults (the intent rules, and the
family table of the model's actual class as overrides); a parameter nothing declares is left
undeclared, not counted. What comes back:

- `deviations`: each parameter group (layer indices as `*`) whose recorded init breaks what is
  declared, with the recorded law, the declared law and the declaration's source;
- `laws`: each parameter group's recorded law and the code that wrote it, exactly, where the
  recorder gives laws (what `stability scan --compare` diffs); None where it gives statistics only;
- `judged`: how many parameters a declaration covered; `note`: what was not judged, in words.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

from stability.run.scan_rows import Deviation, RecordedLaw

__all__ = ["InitJudged", "judge_init", "group_of"]


@dataclass(frozen=True, kw_only=True)
class InitJudged:
    """What `judge_init` found (the module docstring)."""

    judged: int
    deviations: tuple[Deviation, ...]
    laws: tuple[RecordedLaw, ...] | None
    note: str | None


def group_of(name: str) -> str:
    """A parameter's group: its layer indices as `*` (`h.3.attn.c_proj.weight` → `h.*.attn.c_proj.weight`)."""
    return re.sub(r"(?<=\.)\d+(?=\.|$|\[)", "*", name)


def judge_init(model_name: str, config: Mapping[str, Any], *, seed: int, file: str) -> InitJudged:
    """Build `model_name` ("LIBRARY:NAME") from `config` under `seed`, record its init and judge it."""
    from stability.families.library import resolve
    from stability.families.library_build import construct
    from stability.judge.init_conformance import init_conformance
    from stability.measure.init_stats import declared_config, init_record
    from stability.spec.init_expect import InitConformance

    target = resolve(model_name, file=file, config=config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = construct(target, dict(config))
    record = init_record(model, declared_config(model, config))
    verdict = init_conformance(
        SimpleNamespace(extra={"init_conformance": record}), InitConformance.model_validate({"uncovered": "allow"})
    )
    extra = verdict.extra or {}
    deviations = _deviations(extra)
    laws = _laws(record)
    judged = int(extra.get("parameters") or 0)
    note = None if verdict.measured else verdict.detail
    return InitJudged(judged=judged, deviations=deviations, laws=laws, note=note)


def _deviations(extra: Mapping[str, Any]) -> tuple[Deviation, ...]:
    """The verdict's deviations, one per parameter group: the judge's own list where it gives one
    (`deviations`: parameter, recorded, declared, source), else each rule row's broken parameters."""
    out: dict[str, Deviation] = {}
    for d in extra.get("deviations") or ():
        group = group_of(str(d["parameter"]))
        out.setdefault(
            group,
            Deviation(
                parameter=group,
                recorded=str(d.get("recorded", "")),
                declared=str(d.get("declared", "")),
                source=str(d.get("source", "")),
                rule=str(d.get("rule", "")),
            ),
        )
    if not out:
        for row in extra.get("rows") or ():
            for name in row.get("broken") or ():
                group = group_of(str(name))
                out.setdefault(
                    group,
                    Deviation(
                        parameter=group,
                        recorded=str(row.get("observed", "off the declared law")),
                        declared=str(row.get("rule", "")),
                        source=str(row.get("source", "")),
                        rule=str(row.get("origin", "")),
                    ),
                )
    return tuple(out.values())


def _laws(record: Any) -> tuple[RecordedLaw, ...] | None:
    """Each parameter group's recorded law, where the record carries laws (`laws`: parameter →
    (law, writer)); None where it holds statistics only. A group whose parameters received different
    laws is listed parameter by parameter."""
    laws = getattr(record, "laws", None)
    if not laws:
        return None
    items = laws.items() if isinstance(laws, Mapping) else ((x.parameter, x) for x in laws)
    by_group: dict[str, list[tuple[str, str, str]]] = {}
    for name, item in items:
        law = item[0] if isinstance(item, tuple) else getattr(item, "law", item)
        writer = item[1] if isinstance(item, tuple) else getattr(item, "writer", "")
        by_group.setdefault(group_of(name), []).append((str(name), str(law), str(writer)))
    out: list[RecordedLaw] = []
    for group, members in sorted(by_group.items()):
        if len({(law, writer) for _, law, writer in members}) == 1:
            out.append(RecordedLaw(parameter=group, law=members[0][1], writer=members[0][2]))
        else:
            out += [RecordedLaw(parameter=n, law=law, writer=writer) for n, law, writer in sorted(members)]
    return tuple(out)
