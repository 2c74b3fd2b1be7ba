"""The candidates `stability suggest` runs (`stability.run.suggest`): each applicable remedy's edit
of a spec as an `Attempt`, with its diff and the edited spec; each structural remedy composed with
the initialisations that apply to the network it makes (`compositions`); and the pairs of remedies
tried when no candidate holds. A candidate is refused here, before anything runs, when its edit changes an
`[expect]` table, when the loader refuses the edited spec, or when it changes which cases are
drawn and how they are judged (`judged_changes`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence, Set
from typing import Any

from stability.errors import SpecError
from stability.run.suggestions import Attempt
from stability.spec.edit import edited_text
from stability.spec.load import validate_spec
from stability.spec.remedy import Remedy, apply_edit, changes_of
from stability.spec.schema import Spec

__all__ = [
    "applies",
    "attempt_of",
    "pairs",
    "compositions",
    "same_changes",
    "judged_changes",
    "MAX_PAIRS",
    "JUDGED_SPACE",
    "JUDGED_LIBRARY",
    "JUDGED_TRAIN",
]


def applies(entry: Remedy, spec: Spec, data: Mapping[str, Any]) -> bool:
    try:
        return bool(entry.applies(spec, data))
    except Exception:  # a plugin's rule that raises on this spec: not proposed
        return False


def compositions(
    remedies: Sequence[Remedy], names: Set[str], spec: Spec, data: Mapping[str, Any], text: str, path: str
) -> list[tuple[Attempt, Spec | None]]:
    """Each structural remedy (`kind = "structure"`) meant for one of the unmet invariants `names`
    that applies to `spec`, composed with each initialisation remedy (`kind = "init"`) meant for
    one of them that applies to the network the structural edit makes (not to `spec`: a plain
    stack has no branch to start at zero until the route around gives it one), as one attempt
    named `structure+init`: the structural edit, then the initialisation's edit of its result.
    The composition is checked as a single remedy is (`attempt_of`: the loader, the expectations,
    `judged_changes`, against `spec`). A structural edit that raises or does not load composes
    nothing (its own attempt says why); neither does an initialisation edit that raises."""
    out: list[tuple[Attempt, Spec | None]] = []
    for shape in remedies:
        if shape.kind != "structure" or not shape.fixes & names or not applies(shape, spec, data):
            continue
        try:
            first = dict(shape.edit(spec, data))
            shaped_data = apply_edit(data, first)
            shaped = validate_spec(shaped_data, file=path)
        except Exception:  # a plugin's edit that raises, an edit the loader refuses: listed alone
            continue
        for init in remedies:
            if init.kind != "init" or not init.fixes & names or not applies(init, shaped, shaped_data):
                continue
            try:
                second = dict(init.edit(shaped, shaped_data))
            except Exception:  # a plugin's edit that raises on the shaped spec
                continue
            attempt, edited = attempt_of(
                f"{shape.name}+{init.name}",
                f"{shape.summary}; then {init.summary}",
                shape.references + init.references,
                {**first, **second},
                data,
                text,
                path,
                spec,
            )
            if attempt is not None:
                out.append((attempt, edited))
    return out


def same_changes(a: Attempt, b: Attempt) -> bool:
    """Whether two attempts change the same keys to the same values (a pair that repeats a
    composition: the same remedy under another name)."""

    def key(x: Attempt) -> set[tuple[str, str]]:
        return {(c.key, repr(c.after)) for c in x.changes}

    return key(a) == key(b)


#: The most pairs of remedies tried when no single one holds.
MAX_PAIRS = 15


def pairs(
    edits: Mapping[str, tuple[Remedy, dict[str, Any]]],
    data: Mapping[str, Any],
    text: str,
    path: str,
    spec: Spec | None = None,
) -> list[tuple[Attempt, Spec | None]]:
    """Every two remedies (in registry order) whose edits set different keys, as one attempt
    named `a+b`, at most MAX_PAIRS of them. `spec`: `data` validated (validated here when not given)."""
    spec = spec if spec is not None else validate_spec(data, file=path)
    out: list[tuple[Attempt, Spec | None]] = []
    names = list(edits)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            (ea, da), (eb, db) = edits[a], edits[b]
            if set(da) & set(db) or len(out) >= MAX_PAIRS:
                continue
            attempt, edited = attempt_of(
                f"{a}+{b}",
                f"{ea.summary}; and {eb.summary}",
                ea.references + eb.references,
                {**da, **db},
                data,
                text,
                path,
                spec,
            )
            if attempt is not None:
                out.append((attempt, edited))
    return out


#: What a spec's cases are and how they are judged: the space's sizes, number types, devices, seeds
#: and examples, the whole [probe] table, and the optimizer run's length, data and budget. A remedy
#: changes the network, its init or its training, never these: an edit that narrowed the depth range
#: or judged the spec in another profile would "hold" by no longer drawing the failing cases.
JUDGED_SPACE = ("depth", "width", "batch", "spatial", "input_width", "tokens", "dtype", "device", "seed", "examples")
#: A family's own block keys (a library model's): which model and blocks are probed at which scale,
#: and its shipped config (the init rule judged); a config value filled from the case ("depth",
#: "width/64") is judged too.
JUDGED_LIBRARY = ("model", "blocks", "inputs", "shipped", "scale")
JUDGED_TRAIN = (
    "steps",
    "cases",
    "seconds",
    "profiles",
    "record_every",
    "task",
    "samples",
    "input_dim",
    "outputs",
    "vocab",
    "order",
    "concentration",
    "eval_sequences",
)


def judged_changes(before: Spec, after: Spec) -> list[str]:
    """The keys of `JUDGED_SPACE`, [probe], `JUDGED_LIBRARY` (and a library config's keys filled
    from the case) and `JUDGED_TRAIN` whose validated value differs between the spec and the edited
    spec (a table removed or added counts as its name)."""
    out = [f"space.{k}" for k in JUDGED_SPACE if getattr(before.space, k) != getattr(after.space, k)]
    out += [
        f"probe.{k}" for k in type(before.probe).model_fields if getattr(before.probe, k) != getattr(after.probe, k)
    ]
    b, a = before.options, after.options  # a family's own block keys (None for the built-in ones)
    if b is not None and type(b) is type(a):  # which model each case builds, and its declared init
        out += [f"block.{k}" for k in JUDGED_LIBRARY if hasattr(b, k) and getattr(b, k) != getattr(a, k)]
        config = getattr(b, "config", None)
        if isinstance(config, Mapping):
            out += [
                f"block.config.{k}"
                for k, v in config.items()
                if isinstance(v, str) and getattr(a, "config", {}).get(k) != v
            ]
    if (before.train is None) != (after.train is None):
        out.append("train")
    elif before.train is not None and after.train is not None:
        out += [f"train.{k}" for k in JUDGED_TRAIN if getattr(before.train, k) != getattr(after.train, k)]
    return out


def attempt_of(
    name: str,
    summary: str,
    references: tuple[str, ...],
    edit: dict[str, Any],
    data: Mapping[str, Any],
    text: str,
    path: str,
    spec: Spec,
) -> tuple[Attempt | None, Spec | None]:
    """A remedy's edit of this spec: the attempt (None when it changes nothing) and the edited
    spec (None when the loader refuses it, or when it changes the expectations or which cases are
    drawn and how they are judged: the attempt is then "refused", with why)."""
    touched = [k for k in edit if k == "expect" or k.startswith("expect.")]
    changes = changes_of(data, edit)
    if not changes:
        return None, None
    try:
        new_text = edited_text(text, edit)
    except Exception as exc:  # a value TOML cannot hold, a key under a non-table: never written
        return Attempt(
            remedy=name,
            summary=summary,
            references=references,
            changes=changes,
            diff="",
            text=text,
            status="refused",
            detail=f"its edit cannot be written as TOML: {exc}",
        ), None
    diff = "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True), new_text.splitlines(keepends=True), fromfile=path, tofile=f"{path} ({name})"
        )
    )
    attempt = Attempt(remedy=name, summary=summary, references=references, changes=changes, diff=diff, text=new_text)
    if touched:
        attempt.status, attempt.detail = (
            "refused",
            f"it changes {', '.join(touched)}: a remedy may not change the expectations",
        )
        return attempt, None
    try:
        edited = validate_spec(apply_edit(data, edit), file=path)
    except SpecError as exc:
        attempt.status, attempt.detail = "refused", f"the edited spec does not load: {exc}"
        return attempt, None
    if judged := judged_changes(spec, edited):
        attempt.status = "refused"
        attempt.detail = (
            f"it changes {', '.join(judged)}: a remedy may not change which cases are drawn or "
            "how they are judged, or the failing cases would simply not be run"
        )
        return attempt, None
    return attempt, edited
