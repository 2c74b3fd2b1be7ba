"""The two registries every path asks: invariants and families.

An invariant or a family is one registered object that declares everything about it; nothing
else in the package names it. `stability check`, the pytest plugin, `stability sweep`, the
reports, `stability list`, `explain`, `schema` and `--only` all read these entries:

- an `Invariant` declares its `[expect.NAME]` model, what it needs measured (observers during
  the probe, measurements after it, seed ensembles, or an optimizer run), its judge, the label of
  its observed number, how close a passing verdict came to failing (the search's severity and
  `target`s), which cases it applies to, its spec-level checks, its explanation, and whether a
  sweep can measure it;
- a `Family` declares its builder, the `[block]` keys it accepts (and any of its own), the
  layers it supports, its memory model for the guard, its description, its branch inits, and
  where it has one, its mean-field law.

The built-in entries are registered by `stability.judge.catalog` and `stability.families.catalog`
(the package imports both first); a project registers its own the same way, from a module that
`stability check --plugin MODULE` (or `$STABILITY_PLUGINS`, or the pytest ini option
`stability_plugins`) imports in every process. Registering an entry rebuilds the spec models
(`stability.spec.schema`), so a spec may name it at once. A second entry under a registered name
is refused (as torchvision's `register_model` does), an incomplete one fails when it is
registered, and a name that is not registered gets the closest registered names, never another
entry's behaviour.

This module belongs to the first stage: the entries' callables are typed loosely (`Any`) where
they take later stages' types (measurements, verdicts, modules), so the spec stage imports
nothing after it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel

from stability.errors import StabilityError, did_you_mean

__all__ = [
    "Explanation",
    "Band",
    "Invariant",
    "Family",
    "OtherBuild",
    "Registry",
    "INVARIANTS",
    "FAMILIES",
    "invariant",
    "family",
    "register_invariant",
    "register_family",
    "batch",
    "RegistryError",
]


class RegistryError(StabilityError, LookupError):
    """A name that is not registered (with the closest registered names), or an entry that cannot be."""


@dataclass(frozen=True, kw_only=True)
class Explanation:
    """What `stability explain NAME` prints: a summary line, then what it computes, why it fails,
    the usual fixes and the references. `computes` may be a function, called when shown (a text
    with a computed table)."""

    summary: str
    computes: str | Callable[[], str]
    fails: str
    fixes: str
    references: tuple[str, ...] = ()

    def computes_text(self) -> str:
        return self.computes() if callable(self.computes) else self.computes


Phase = Literal["probe", "training"]


@dataclass(frozen=True, kw_only=True)
class Band:
    """One number an invariant bounds by a band that a measurement of the family sets, not the
    literature (`stability calibrate` measures it over seeds and depths and proposes the band;
    `stability init` writes it). `values(verdict)` is the number on each network the verdict
    judged (one per member of a seed ensemble, else the case's own network; nan where it is
    undefined); `lo` and `hi` are the keys of the invariant's `[expect]` table that bound it
    (None: that side is not bounded). The number must be positive: a band is widened by a factor.
    A threshold a paper or the arithmetic sets (a cosine of 0.9, a mean-field band in standard
    deviations) is no band: a measurement must not move it."""

    number: str
    label: str
    values: Callable[[Any], Sequence[float]]
    lo: str | None = None
    hi: str | None = None

    def __post_init__(self) -> None:
        if self.lo is None and self.hi is None:
            raise RegistryError(f"band {self.number!r} bounds neither side: give lo or hi (its [expect] keys)")


@dataclass(frozen=True, kw_only=True)
class Invariant:
    """One invariant, declared whole (see the module docstring).

    The callables, by what they receive:

    - `judge(measurements, expectation) -> Verdict`: pure; for `phase = "probe"`.
    - `train(spec, expectation, case, cache) -> Verdict`: runs the optimizer run(s) one case needs
      and judges them; for `phase = "training"` (`train_cases(expectation, case)` lists the
      networks it trains).
    - `memory(spec, expectation, case) -> bytes | None`: the most memory the runs of one case hold
      at once (networks, optimizer state, data, outputs), which the guard checks before anything is
      built (None: unknown, e.g. a user's factory). Without it the guard checks the family's
      estimate for each network `train_cases` lists, at the training set's size.
    - `applies(spec) -> {case key: values} | None`: the cases it applies to, beyond the spec's own
      `applies_when` (identity_at_init: the family's zero-branch inits); `applies_reason` words it.
    - `check(spec) -> None`: spec-level checks, raising `SpecError` (run when a spec is loaded).
    - `observers(spec) -> [BoundaryObserver]`: opt-in measurements during the probe's pass.
    - `after_probe(context) -> {key: value}` and `ensemble(context) -> {key: value}`: what it needs
      measured after the probe (e.g. the Jacobian spectrum) and on the case's seed ensemble; the
      values land in `Measurements.extra` (registered with `stability.measure.measurements.serializable`
      when they are not plain data). `context` is `stability.run.probing.MeasureContext`.
    - `construction(spec) -> watcher`: a watcher of the case's model being constructed (a
      function returning a context manager, entered around the construction and the library's
      own init: `stability.families.construction`); `after_probe` finds it as
      `context.watchers[name]` (init_conformance records the init each parameter receives).
    - `severity(verdict, expectation) -> float`: for a passing verdict, how close it came to
      failing (bigger is closer); the reported case of a search that found no failure is the one
      of largest severity. Default: the observed number.
    - `targets(verdict) -> [(value, label)]`: what the thorough profile steers the search toward
      (Hypothesis's `target`). Default: none.
    """

    name: str
    expectation: type[BaseModel]
    summary: str
    label: str
    explanation: Explanation
    phase: Phase = "probe"
    judge: Callable[[Any, Any], Any] | None = None
    train: Callable[[Any, Any, Any, dict[Any, Any]], Any] | None = None
    train_cases: Callable[[Any, Any], list[Any]] | None = None
    memory: Callable[[Any, Any, Any], int | None] | None = None
    applies: Callable[[Any], Mapping[str, Sequence[Any]] | None] | None = None
    applies_reason: str | None = None
    check: Callable[[Any], None] | None = None
    observers: Callable[[Any], list[Any]] | None = None
    after_probe: Callable[[Any], Mapping[str, Any]] | None = None
    ensemble: Callable[[Any], Mapping[str, Any]] | None = None
    construction: Callable[[Any], Any] | None = None
    severity: Callable[[Any, Any], float] | None = None
    targets: Callable[[Any], Sequence[tuple[float, str]]] | None = None
    #: None: a sweep measures it at every point as `check` measures a case. Otherwise why a sweep
    #: refuses it (exit 2 before anything runs).
    sweep_refusal: str | None = None
    #: The capabilities of a family it needs (`Family.lacks`): a spec whose family lacks one is
    #: refused when it is loaded, with the family's reason; `stability explain` lists those families.
    needs: frozenset[str] = frozenset()
    #: The numbers it bounds by bands a measurement sets (`Band`; `stability calibrate` asks these).
    bands: tuple[Band, ...] = ()

    def __post_init__(self) -> None:
        problems = []
        if not self.name.isidentifier():
            problems.append(f"name {self.name!r} is not an identifier (it is a TOML key and a --only value)")
        if not (isinstance(self.expectation, type) and issubclass(self.expectation, BaseModel)):
            problems.append("expectation must be a pydantic model class (the [expect.NAME] table)")
        else:
            for key in ("expect", "applies_when"):
                if key not in self.expectation.model_fields:
                    problems.append(
                        f"expectation {self.expectation.__name__} lacks the field {key!r}: derive it from "
                        "stability.spec.schema.Expectation"
                    )
        if self.phase == "probe" and self.judge is None:
            problems.append("a probe invariant needs judge(measurements, expectation) -> Verdict")
        if self.phase == "training" and (self.train is None or self.train_cases is None):
            problems.append(
                "a training invariant needs train(spec, expectation, case, cache) -> Verdict and "
                "train_cases(expectation, case)"
            )
        if self.phase not in ("probe", "training"):
            problems.append(f"phase {self.phase!r} is not 'probe' or 'training'")
        if self.applies is not None and not self.applies_reason:
            problems.append("an applies rule needs applies_reason (the words a not-applicable case is reported with)")
        for key in ("summary", "label"):
            if not getattr(self, key).strip():
                problems.append(f"{key} is empty")
        if not isinstance(self.explanation, Explanation):
            problems.append("explanation must be a stability.spec.registry.Explanation")
        fields = getattr(self.expectation, "model_fields", {})
        for b in self.bands:
            if not isinstance(b, Band):
                problems.append(f"bands must hold stability.spec.registry.Band entries, not {type(b).__name__}")
                continue
            unknown = [k for k in (b.lo, b.hi) if k is not None and k not in fields]
            if unknown:
                problems.append(f"band {b.number!r} names {', '.join(unknown)}, not keys of its [expect] table")
        if self.bands and self.phase != "probe":
            problems.append("bands are measured on the probe's networks: a training invariant has none")
        if problems:
            raise RegistryError(f"invariant {self.name!r} cannot be registered: " + "; ".join(problems))

    @property
    def training(self) -> bool:
        return self.phase == "training"

    def severity_of(self, verdict: Any, expectation: Any) -> float:
        if self.severity is not None:
            return self.severity(verdict, expectation)
        observed = verdict.observed
        return observed if math.isfinite(observed) else math.inf


@dataclass(frozen=True, kw_only=True)
class OtherBuild:
    """Another way to build a case that is over the memory budget (`Family.over_budget`)."""

    #: The spec to build the case with (it fits the budget); None: the refusal only names `how`.
    spec: Any | None
    #: Its estimate, in bytes.
    need: int
    #: Words: how it is built ("with its blocks streamed one at a time (…)"), or the change to make.
    how: str


@dataclass(frozen=True, kw_only=True)
class Family:
    """One family of networks, declared whole (see the module docstring).

    - `build(spec, case, generator) -> nn.Sequential | Network`: the blocks of one case (weights
      drawn from `generator`, on the CPU); a family that runs a user's code (`user_code`) is built
      under the factory rule and gets the case's values by name.
    - `block_keys`: the shared `[block]` keys it reads (others set in a spec are refused, naming the
      families that read them); `options`: a pydantic model of keys of its own in `[block]`.
    - `layers`: the `block.layer` values it builds.
    - `estimate(spec, case) -> bytes | None`: parameters, saved activations and per-block overhead
      (None: unknown, e.g. a user's factory); `block_bytes`: a lower bound per block from the
      depth alone, checked first (so depth 10**9 is refused before anything is allocated).
    - `zero_branch_inits`: the branch inits under which every block is the identity at
      initialisation (identity_at_init applies to these cases); None when the family decides
      what its `branch_init` means (a user's factory); `branch_inits`: the inits it accepts (None: any).
    - `mean_field(spec, case) -> (branch scale α, residual)`: its mean-field law (Schoenholz et al.
      2017 for plain stacks; Yang & Schoenholz 2017 for residual ones), where it has one; the
      weight and bias variances follow from the init (`stability.judge.theory_checks`).
      `mean_field_refusal(spec)` says why a spec of the family is outside the law (None: inside).
    - `check(spec, data)`: its own cross-key checks (raising `SpecError`).
    """

    name: str
    description: str
    build: Callable[[Any, Any, Any], Any]
    block_keys: frozenset[str]
    layers: tuple[str, ...]
    estimate: Callable[[Any, Any], int | None]
    block_bytes: int
    options: type[BaseModel] | None = None
    zero_branch_inits: frozenset[str] | None = frozenset()
    branch_inits: frozenset[str] | None = None
    mean_field: Callable[[Any, Any], tuple[float, bool]] | None = None
    mean_field_refusal: Callable[[Any], str | None] | None = None
    check: Callable[[Any, Mapping[str, Any]], None] | None = None
    #: Its own checks of a language-model spec (train.task = "markov"), raising `SpecError`.
    lm_check: Callable[[Any, Mapping[str, Any]], None] | None = None
    #: What its blocks cannot do, capability → why, for the invariants that need it (their
    #: `Invariant.needs`; the why follows "family NAME: " in messages): "attention" (no attention
    #: probabilities to observe), "same_shape_blocks" (a block cannot be replaced by the identity),
    #: "blocks_alone" (its blocks run only inside a model's own forward, never on a tensor the
    #: harness draws: the Jacobian's torch.func transforms and the optimizer runs need that),
    #: "language_model" (it makes no language model for the language-model run, train.task =
    #: "markov": stability.families.lm_models builds the transformer family's, a library causal
    #: LM and a factory's).
    lacks: Mapping[str, str] = field(default_factory=dict)
    #: The family runs code the spec names (a factory): the pytest plugin runs it in a worker
    #: process, the probe seeds Python's and NumPy's generators around it.
    user_code: bool = False
    #: `preload(block) -> [module]`: the modules a worker process imports once per run for a spec of
    #: the family, from the spec's raw `[block]` table (read before the spec is validated, so it
    #: must not raise): the worker forkserver imports them before it forks any child.
    preload: Callable[[Mapping[str, Any]], Sequence[str]] | None = None
    #: `least_depth(spec) -> LeastDepth` (stability.families.library_depth): the smallest depth the
    #: spec's model builds at (`.depth`, and `.why` the depths below fail); the search draws no
    #: depth below it. None: every depth builds.
    least_depth: Callable[[Any], Any] | None = None
    #: `over_budget(spec, case, budget) -> OtherBuild | None`: how a case whose estimate is over the
    #: memory budget is built within it instead (a library model streamed block by block), or what
    #: the refusal names as fitting (stability.run.guard.fit_budget). None: refused as it is.
    over_budget: Callable[[Any, Any, int], OtherBuild | None] | None = None

    def __post_init__(self) -> None:
        problems = []
        if not self.name.isidentifier():
            problems.append(f"name {self.name!r} is not an identifier")
        if not self.description.strip():
            problems.append("description is empty")
        if not self.layers:
            problems.append("layers is empty (which block.layer values does it build?)")
        if self.block_bytes <= 0:
            problems.append("block_bytes must be positive (a lower bound of the memory one block takes)")
        if self.options is not None and not (isinstance(self.options, type) and issubclass(self.options, BaseModel)):
            problems.append("options must be a pydantic model class")
        for name in ("build", "estimate"):
            if not callable(getattr(self, name)):
                problems.append(f"{name} must be callable")
        if problems:
            raise RegistryError(f"family {self.name!r} cannot be registered: " + "; ".join(problems))


class Named(Protocol):
    """What a registry holds: an entry with a name (an invariant, a family, a remedy)."""

    @property
    def name(self) -> str: ...


E = TypeVar("E", bound=Named)


class Registry(Generic[E]):
    """Entries by name, in the order they were registered."""

    def __init__(self, kind: str, on_change: Callable[[], None]) -> None:
        self.kind = kind
        self._entries: dict[str, E] = {}
        self._on_change = on_change

    def register(self, entry: E) -> E:
        if entry.name in self._entries:
            raise RegistryError(
                f"{self.kind} {entry.name!r} is already registered ({_where(self._entries[entry.name])}); "
                "choose another name"
            )
        self._entries[entry.name] = entry
        try:
            self._on_change()
        except Exception:
            del self._entries[entry.name]
            self._on_change()
            raise
        return entry

    def unregister(self, name: str) -> None:
        """Remove an entry (for tests that register a toy one)."""
        self.get(name)
        del self._entries[name]
        self._on_change()

    def get(self, name: str) -> E:
        try:
            return self._entries[name]
        except KeyError:
            raise RegistryError(
                f"unknown {self.kind} {name!r}{did_you_mean(name, self._entries)}; known: "
                f"{', '.join(self._entries) or 'none'}"
            ) from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[E]:
        return iter(list(self._entries.values()))

    def __len__(self) -> int:
        return len(self._entries)


def _where(entry: Any) -> str:
    fn = getattr(entry, "judge", None) or getattr(entry, "train", None) or getattr(entry, "build", None)
    module = getattr(fn, "__module__", None)
    return f"by {module}" if module else "earlier"


_deferred = [0]


def _changed() -> None:
    if _deferred[0]:
        return
    from stability.spec import schema

    schema.rebuild(INVARIANTS, FAMILIES)


INVARIANTS: Registry[Invariant] = Registry("invariant", _changed)
FAMILIES: Registry[Family] = Registry("family", _changed)


@contextlib.contextmanager
def batch() -> Iterator[None]:
    """Register several entries and rebuild the spec models once, at the end. When that rebuild
    fails, every entry the batch registered is removed again and the models are rebuilt without
    them (the error is raised): a registration is whole or absent, as `Registry.register` makes
    a single one."""
    before = {id(r): set(r.names()) for r in (INVARIANTS, FAMILIES)}
    _deferred[0] += 1
    try:
        yield
    finally:
        _deferred[0] -= 1
        if not _deferred[0]:
            try:
                _changed()
            except Exception:
                for registry in (INVARIANTS, FAMILIES):
                    for name in [n for n in registry.names() if n not in before[id(registry)]]:
                        del registry._entries[name]
                _changed()
                raise


def register_invariant(entry: Invariant) -> Invariant:
    return INVARIANTS.register(entry)


def register_family(entry: Family) -> Family:
    return FAMILIES.register(entry)


def invariant(name: str) -> Invariant:
    return INVARIANTS.get(name)


def family(name: str) -> Family:
    return FAMILIES.get(name)


D = TypeVar("D", Invariant, Family)


def replace(entry: D, **changes: Any) -> D:
    """A copy of an entry with some fields changed (a project adapting a built-in under a new name)."""
    return dataclasses.replace(entry, **changes)
