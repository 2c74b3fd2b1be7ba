"""stability/run/suggest.py and `stability suggest` (stability/suggest_cli.py): remedies tried on a
failing spec's deciding cases with the same seeds, survivors confirmed by their own search,
ranked; `--out` writes a spec that `stability check` passes with its expectations unchanged; the
exit codes; a remedy a plugin registers from a test file alone. The specs here are written fresh
for these tests (not copies of the shipped controls: tests/test_suggest_controls.py has those)."""

from __future__ import annotations

import json
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from stability.cli import main
from stability.run import plugins
from stability.run.engine import RunOptions
from stability.run.executor import InProcessExecutor
from stability.run.suggest import map_case, suggest
from stability.spec.case import parse_case_string
from stability.spec.load import load_spec
from stability.spec.remedy import REMEDIES

# A plain ReLU stack with Glorot's init: σ_w² = 1 halves the second moment per layer (He et al.
# 2015), so the gradient reaching the input shrinks by about 2^(-L/2): below 0.1 from depth 7.
PLAIN = """# a plain ReLU stack, Glorot-initialised
name = "plain-relu-glorot"
description = "plain ReLU MLP under Glorot init"
family = "plain"

[block]
layer = "linear"
activation = "relu"   # the nonlinearity
norm = "none"

[space]
depth = [2, 12]
width = [16, 32]
batch = [4, 8]
weight_init = ["xavier_normal"]  # not critical for ReLU
bias_init = 0.0
dtype = ["float32"]

[expect.gradient_arrival]
lo = 0.1   # at most a decade lost
hi = 10.0
"""

# A bound no remedy meets: the gradient must shrink by 10-50%, which Glorot's init (2^(-L/2):
# far below), He's (about 1), a route around (more than 1: each block adds to the gradient) and a
# route around with its branches at zero (exactly 1) all miss.
IMPOSSIBLE = PLAIN.replace("depth = [2, 12]", "depth = [8, 12]").replace(
    "lo = 0.1   # at most a decade lost\nhi = 10.0", "lo = 0.5\nhi = 0.9"
)
# What is tried on PLAIN: the critical init, the route around, and the route around composed with
# each initialisation that applies to the residual stack it makes.
TRIED = {
    "critical_init",
    "residual_route",
    "residual_route+zero_branch",
    "residual_route+shrink_branch",
    "residual_route+rezero",
    "residual_route+skipinit",
    "residual_route+critical_init",
}

PASSING = (
    PLAIN.replace('weight_init = ["xavier_normal"]  # not critical for ReLU', 'weight_init = ["kaiming_normal"]')
    .replace("lo = 0.1", "lo = 0.01")
    .replace("hi = 10.0", "hi = 100.0")
)


def _write(tmp_path: Path, text: str, name: str = "mine.toml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _suggest(path: Path, **kw: object) -> object:
    return suggest(str(path), options=RunOptions(profile="ci"), executor=InProcessExecutor(), **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def plain_suggested(tmp_path_factory: pytest.TempPathFactory) -> object:
    """What suggest finds for PLAIN, once for the tests that only read it."""
    return _suggest(_write(tmp_path_factory.mktemp("plain"), PLAIN))


def test_a_plain_stack_gets_its_critical_init_with_the_numbers_before_and_after(
    tmp_path: Path, plain_suggested: object
) -> None:
    s = plain_suggested
    assert [r.name for r in s.failing] == ["gradient_arrival"]  # type: ignore[attr-defined]
    tried = {a.remedy: a for a in s.attempts}  # type: ignore[attr-defined]
    assert set(tried) == TRIED  # no branch remedy alone for a stack without branches: composed with the route
    best = s.best  # type: ignore[attr-defined]
    assert best is not None and best.held
    critical = tried["critical_init"]
    assert critical.held and critical.changed() == 'space.weight_init = ["kaiming_normal"]'
    (n,) = critical.numbers
    before = s.failing[0]  # type: ignore[attr-defined]
    assert n.before == before.verdict.observed < 0.1 and n.case == str(before.case)
    assert n.after is not None and 0.1 <= n.after <= 10.0  # the same case, the same seed, the remedy applied
    assert n.after_case == str(map_case(before.case, load_spec_text(critical.text, tmp_path)))
    assert n.closest is not None and n.examples >= 1
    assert (
        '+weight_init = ["kaiming_normal"]  # not critical for ReLU' in critical.diff and "-family" not in critical.diff
    )


def load_spec_text(text: str, tmp_path: Path) -> object:
    return load_spec(_write(tmp_path, text, "edited.toml"))


def test_a_case_keeps_its_seed_and_takes_the_edited_choice(tmp_path: Path) -> None:
    spec = load_spec(_write(tmp_path, PLAIN))
    case = parse_case_string("depth=9,width=17,batch=5,seed=12345", spec)
    edited = load_spec(_write(tmp_path, PLAIN.replace('["xavier_normal"]', '["kaiming_normal"]'), "k.toml"))
    mapped = map_case(case, edited)
    assert (mapped.depth, mapped.width, mapped.batch, mapped.seed, mapped.weight_init) == (
        9,
        17,
        5,
        12345,
        "kaiming_normal",
    )
    assert map_case(case, spec) == case


def test_ranked_fewest_changes_first(plain_suggested: object) -> None:
    ranked = plain_suggested.ranked  # type: ignore[attr-defined]
    assert [len(a.changes) for a in ranked] == sorted(len(a.changes) for a in ranked)
    # one key (He's init: its closest case nearer the bound) before the route around with its
    # branches at zero (three keys; the identity, ratio 1 at every case)
    assert ranked[0].remedy == "critical_init" and ranked[1].remedy == "residual_route+zero_branch"
    assert ranked[0].margin > ranked[1].margin


def test_only_the_remedies_for_what_failed_are_tried(plain_suggested: object) -> None:
    lm_only = {
        r.name
        for r in REMEDIES
        if r.fixes
        <= {"attention_logits", "output_logits", "loss_spike", "early_warning", "lr_sensitivity", "attention_entropy"}
    }
    assert not lm_only & {a.remedy for a in plain_suggested.attempts}  # type: ignore[attr-defined]


def test_nothing_to_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, PASSING)
    assert main(["suggest", str(path), "--in-process", "--out", str(tmp_path / "fixed.toml")]) == 0
    out, err = capsys.readouterr()
    assert "nothing to fix" in out
    assert not (tmp_path / "fixed.toml").exists()
    assert "fixed.toml not written: nothing to fix" in err  # the --out asked for is accounted for


def test_none_holds_exit_1_listing_what_each_did(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, IMPOSSIBLE)
    assert main(["suggest", str(path), "--in-process", "--out", str(tmp_path / "fixed.toml")]) == 1
    out, err = capsys.readouterr()
    assert "no registered remedy makes every expectation hold" in out
    assert 'residual_route: family = "preact", block.branch_layers = 1' in out and "fails: at the failing case" in out
    assert "not written" in err and not (tmp_path / "fixed.toml").exists()


def test_out_writes_a_spec_that_check_passes_with_the_expectations_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, fixed = _write(tmp_path, PLAIN), tmp_path / "fixed.toml"
    report = tmp_path / "suggest.json"
    assert (
        main(["suggest", str(path), "--out", str(fixed), "--json", str(report)]) == 0
    )  # in worker processes, as a user runs it
    assert path.read_text(encoding="utf-8") == PLAIN  # the spec itself is never touched
    written = fixed.read_text(encoding="utf-8")
    assert tomllib.loads(written)["expect"] == tomllib.loads(PLAIN)["expect"]
    assert "# a plain ReLU stack, Glorot-initialised" in written and "lo = 0.1   # at most a decade lost" in written
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["ranked"][0] == "critical_init" and data["failing"] == ["gradient_arrival"]
    assert {a["remedy"] for a in data["attempts"]} == TRIED
    capsys.readouterr()
    assert main(["check", str(fixed), "--profile", "ci", "-q"]) == 0
    assert main(["check", str(path), "--profile", "ci", "-q"]) == 1  # and the original still fails


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, PLAIN)
    (tmp_path / "taken.toml").write_text("mine\n", encoding="utf-8")
    cases = [
        (["suggest", str(tmp_path / "nope.toml")], "no such file"),
        (["suggest", str(path), "--out", str(path)], "is the spec itself"),
        (["suggest", str(path), "--out", str(tmp_path / "." / "mine.toml")], "is the spec itself"),
        (["suggest", str(path), "--out", str(tmp_path / "taken.toml")], "exists; add --force"),
        (["suggest", str(path), "--out", str(tmp_path)], "folder"),
        (
            ["suggest", str(path), "--out", str(tmp_path / "taken.toml" / "fixed.toml")],
            "taken.toml is not a folder",
        ),  # before the remedies run, not after
        (["suggest", str(path), "--out", "/proc/fixed.toml"], "cannot write in /proc"),
        (["suggest", str(path), "--out", "-"], "written to files"),
        (["suggest", str(path), "--only", "gradient_arival"], 'did you mean "gradient_arrival"'),
        (["suggest", str(path), "--only", "variance_growth"], "declares no [expect.variance_growth]"),
        (["suggest", str(path), "--holds", "--out", str(tmp_path / "x.toml")], "--out with --holds"),
        (["suggest", str(tmp_path)], "is a folder"),
        (["suggest"], "give one spec file"),
        (
            ["suggest", str(_write(tmp_path, PLAIN.replace("activation", "activaton"), "typo.toml"))],
            "block.activaton = 'relu': unknown key",
        ),
    ]
    for argv, why in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert why in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (argv, err)
    assert (tmp_path / "taken.toml").read_text(encoding="utf-8") == "mine\n"


def test_an_out_path_that_cannot_be_written_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What `--out` names is checked as every report path is: a folder meant by a trailing slash,
    standard output, a path under a file, a name the file system refuses; and `--json` naming the
    same file as `--out`. One line, exit 2, before the run (not a traceback after it, nor a file
    written where the user meant a folder)."""
    path = _write(tmp_path, PLAIN)
    cases = [
        (["suggest", str(path), "--out", str(tmp_path / "fixed") + "/"], "is a folder"),
        (["suggest", str(path), "--out", "-"], "standard output"),
        (["suggest", str(path), "--out", str(path / "fixed.toml")], "is not a folder"),
        (["suggest", str(path), "--out", str(tmp_path / ("a" * 300 + ".toml"))], "choose a shorter name"),
        (["suggest", str(path), "--out", str(tmp_path / "o.toml"), "--json", str(tmp_path / "o.toml")], "--json"),
    ]
    for argv, why in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert why in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (argv, err)
        assert "input spec" not in err, (argv, err)  # --out is not the spec
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.toml"]


@pytest.mark.slow  # several suggest runs; nightly
def test_json_replaces_its_own_earlier_report_and_never_a_users_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Running `stability suggest --json r.json` again replaces r.json (the report is provably
    suggest's own); a file the user wrote, and the JSON report of `stability check`, stay."""
    path = _write(tmp_path, PLAIN)
    report = tmp_path / "r.json"
    for _ in range(2):
        assert main(["suggest", str(path), "--in-process", "--no-diff", "--json", str(report)]) == 0
        assert json.loads(report.read_text(encoding="utf-8"))["ranked"][0] == "critical_init"
    capsys.readouterr()
    mine = _write(tmp_path, '{"mine": 1}\n', "mine.json")
    assert main(["suggest", str(path), "--in-process", "--json", str(mine)]) == 2
    assert "is not a stability suggest JSON report" in capsys.readouterr().err
    assert mine.read_text(encoding="utf-8") == '{"mine": 1}\n'


@pytest.mark.slow  # several suggest runs; nightly
def test_force_replaces_an_existing_file_but_never_a_fifo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import os

    path = _write(tmp_path, PLAIN)
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    assert main(["suggest", str(path), "--out", str(fifo), "--force"]) == 2
    assert "FIFO" in capsys.readouterr().err
    (tmp_path / "old.toml").write_text("old\n", encoding="utf-8")
    assert (
        main(["suggest", str(path), "--in-process", "--no-diff", "--out", str(tmp_path / "old.toml"), "--force"]) == 0
    )
    assert tomllib.loads((tmp_path / "old.toml").read_text(encoding="utf-8"))["space"]["weight_init"] == [
        "kaiming_normal"
    ]


# ----------------------------------------------------------------------------- a plugin's remedy

TOY = """
from stability.spec.remedy import Remedy, register_remedy

register_remedy(
    Remedy(
        name="toy_he_gain",
        summary="a toy: He's init with its gain written out",
        fixes=frozenset({"gradient_arrival"}),
        applies=lambda spec, data: spec.family == "plain",
        edit=lambda spec, data: {
            "block.norm": "none",
            "space.weight_init": ["kaiming_normal"],
            "space.bias_init": 0.0,
            "space.init_gain": 1.0,
            "description": "under He init",
        },
        references=("A. Toy (2026). Remedies from a plugin.",),
    )
)
"""


@pytest.fixture
def toy_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "toy_remedy.py").write_text(TOY, encoding="utf-8")
    monkeypatch.delenv(plugins.PLUGINS_ENV, raising=False)
    before = (REMEDIES.names(), dict(plugins._loaded), set(sys.modules))
    yield tmp_path / "toy_remedy.py"
    for name in REMEDIES.names():
        if name not in before[0]:
            REMEDIES.unregister(name)
    plugins._loaded.clear()
    plugins._loaded.update(before[1])
    for name in set(sys.modules) - before[2]:
        if name.startswith("_stability_plugin_"):
            del sys.modules[name]


def test_a_remedy_registered_from_a_plugin_file_shows_up_in_suggest(
    toy_plugin: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, PLAIN)
    assert main(["suggest", "--list", "--plugin", str(toy_plugin)]) == 0
    listed = capsys.readouterr().out
    assert "toy_he_gain" in listed and "structure" in listed and "init" in listed  # each remedy's kind
    report = tmp_path / "s.json"
    assert main(["suggest", str(path), "--plugin", str(toy_plugin), "--in-process", "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert (
        'toy_he_gain: space.weight_init = ["kaiming_normal"], space.init_gain = 1, description = "under He init"' in out
    )
    toy = next(a for a in json.loads(report.read_text(encoding="utf-8"))["attempts"] if a["remedy"] == "toy_he_gain")
    assert toy["status"] == "holds" and toy["references"] == ["A. Toy (2026). Remedies from a plugin."]
    # five keys, two of them (norm, bias_init) unchanged: three changes, so it ranks after critical_init's one
    assert [c["key"] for c in toy["changes"]] == ["space.weight_init", "space.init_gain", "description"]
    assert json.loads(report.read_text(encoding="utf-8"))["ranked"][0] == "critical_init"


def test_a_remedy_that_changes_an_expectation_is_refused(tmp_path: Path) -> None:
    from stability.spec.remedy import Remedy, register_remedy

    register_remedy(
        Remedy(
            name="toy_widen_bound",
            summary="a toy that cheats",
            fixes=frozenset({"gradient_arrival"}),
            applies=lambda spec, data: True,
            edit=lambda spec, data: {"expect.gradient_arrival.lo": 1e-9},
            references=("None.",),
        )
    )

    def boom(spec: object, data: object) -> dict[str, object]:
        raise RuntimeError("no")

    register_remedy(
        Remedy(
            name="toy_raises",
            summary="a toy that raises",
            fixes=frozenset({"gradient_arrival"}),
            applies=lambda spec, data: True,
            edit=boom,
            references=("None.",),
        )
    )
    try:
        s = _suggest(_write(tmp_path, PLAIN))
        toy = next(a for a in s.attempts if a.remedy == "toy_widen_bound")  # type: ignore[attr-defined]
        assert toy.status == "refused" and "may not change the expectations" in toy.detail
        raised = next(a for a in s.attempts if a.remedy == "toy_raises")  # type: ignore[attr-defined]
        assert raised.status == "refused" and "its edit raised RuntimeError: no" in raised.detail
        assert s.best.remedy == "critical_init"  # type: ignore[attr-defined]  # the others are still tried
    finally:
        REMEDIES.unregister("toy_widen_bound")
        REMEDIES.unregister("toy_raises")


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        ({"space.depth": [2, 4]}, "space.depth"),  # the failing depths no longer drawn
        ({"space.width": 32, "space.weight_init": ["kaiming_normal"]}, "space.width"),  # even beside a real fix
        ({"probe.profiles": ["thorough"]}, "probe.profiles"),  # skipped in ci: nothing judged
    ]
    + [  # the other keys of the same rule: nightly
        pytest.param(edit, key, marks=pytest.mark.slow)
        for edit, key in [
            ({"space.batch": 4}, "space.batch"),
            ({"space.seed": [0, 3]}, "space.seed"),
            ({"space.dtype": ["float64"]}, "space.dtype"),
            ({"probe.ensemble": 1}, "probe.ensemble"),
        ]
    ],
)
def test_a_remedy_that_changes_which_cases_are_drawn_is_refused(
    tmp_path: Path, edit: dict[str, object], key: str
) -> None:
    """A remedy that 'holds' because the failing cases are no longer drawn, or no longer judged,
    is refused before it runs, whatever else it changes."""
    from stability.spec.remedy import Remedy, register_remedy

    register_remedy(
        Remedy(
            name="toy_narrow",
            summary="a toy that cheats",
            fixes=frozenset({"gradient_arrival"}),
            applies=lambda spec, data: True,
            edit=lambda spec, data: edit,
            references=("None.",),
        )
    )
    try:
        s = _suggest(_write(tmp_path, PLAIN))
        toy = next(a for a in s.attempts if a.remedy == "toy_narrow")  # type: ignore[attr-defined]
        assert (
            toy.status == "refused" and f"it changes {key}:" in toy.detail and "which cases are drawn" in toy.detail
        ), toy.detail
        assert s.best.remedy == "critical_init" and "toy_narrow" not in [a.remedy for a in s.ranked]  # type: ignore[attr-defined]
    finally:
        REMEDIES.unregister("toy_narrow")


def test_a_training_remedy_may_not_shorten_the_run() -> None:
    from stability.run.suggest_candidates import judged_changes
    from stability.spec.load import validate_spec

    data = tomllib.loads(
        (Path(__file__).resolve().parent.parent / "specs" / "control_lm_output_logit_drift.toml").read_text(
            encoding="utf-8"
        )
    )
    spec = validate_spec(data, file="x.toml")
    from stability.spec.remedy import apply_edit

    assert judged_changes(spec, validate_spec(apply_edit(data, {"train.z_loss": 1e-4}), file="x.toml")) == []
    assert judged_changes(
        spec, validate_spec(apply_edit(data, {"train.steps": 50, "train.cases": 1}), file="x.toml")
    ) == ["train.steps", "train.cases"]
    assert judged_changes(spec, spec.model_copy(update={"train": None})) == ["train"]


def test_check_suggest_adds_the_remedy_to_the_failing_line_and_the_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path, PLAIN)
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    report = tmp_path / "report.json"
    assert (
        main(
            [
                "check",
                str(path),
                "--profile",
                "ci",
                "--suggest",
                "--in-process",
                "--html",
                str(tmp_path / "html"),
                "--github",
                "--json",
                str(report),
            ]
        )
        == 1
    )
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.strip().startswith("suggest:"))
    assert (
        'critical_init: space.weight_init = ["kaiming_normal"]: gradient_arrival' in line and "--out FIXED.toml" in line
    )
    html = (tmp_path / "html" / "index.html").read_text(encoding="utf-8")
    assert 'class="suggest"' in html and "critical_init" in html and "the spec diff of critical_init" in html
    md = summary.read_text(encoding="utf-8")
    assert "**suggest:** critical\\_init" in md and "```diff" in md  # (Markdown-escaped)
    (spec,) = json.loads(report.read_text(encoding="utf-8"))["specs"]
    assert spec["suggestions"]["ranked"][0] == "critical_init" and spec["suggestions"]["failing"] == [
        "gradient_arrival"
    ]
    capsys.readouterr()
    assert main(["check", str(path), "--profile", "ci", "--in-process", "-q"]) == 1
    assert "suggest:" not in capsys.readouterr().out  # only when asked: it runs the remedies


def test_two_remedies_together_when_none_holds_alone(tmp_path: Path) -> None:
    """Pairs are tried only when no single remedy holds, never two that set the same key."""
    from stability.run.suggest_candidates import pairs

    data = tomllib.loads(PLAIN)
    entry = REMEDIES.get("critical_init")
    edits = {
        "critical_init": (entry, {"space.weight_init": ["kaiming_normal"]}),
        "residual_route": (REMEDIES.get("residual_route"), {"family": "preact", "block.branch_layers": 1}),
        "toy_same_key": (entry, {"space.weight_init": ["orthogonal"]}),
    }
    tried = pairs(edits, data, PLAIN, str(tmp_path / "mine.toml"))
    assert [a.remedy for a, _ in tried] == ["critical_init+residual_route", "residual_route+toy_same_key"]
    combined, edited = tried[0]
    assert edited is not None and edited.family == "preact" and edited.space.weight_init == ["kaiming_normal"]
    assert [c.key for c in combined.changes] == ["space.weight_init", "family", "block.branch_layers"]
    assert combined.references == entry.references + REMEDIES.get("residual_route").references
    s = _suggest(_write(tmp_path, IMPOSSIBLE))
    tried = [a.remedy for a in s.attempts]  # type: ignore[attr-defined]
    assert s.best is None and set(tried) == TRIED  # type: ignore[attr-defined]
    # the pair critical_init+residual_route is the composition residual_route+critical_init: not run twice
    assert "critical_init+residual_route" not in tried and "residual_route+critical_init" in tried


def test_a_library_remedy_may_not_change_which_model_a_case_builds() -> None:
    """A library config value filled from the case ("depth", "width/64") and the model, blocks and
    shipped config are part of which network each case is: a remedy that edits them is refused; a
    config constant (initializer_range) is the init, and may change."""
    from stability.run.suggest_candidates import judged_changes
    from stability.spec.load import validate_spec
    from stability.spec.remedy import apply_edit

    pytest.importorskip("transformers")
    data = tomllib.loads(
        (Path(__file__).resolve().parent.parent / "specs" / "zoo" / "gpt2.toml").read_text(encoding="utf-8")
    )
    spec = validate_spec(data, file="x.toml")
    assert spec.options.config["n_layer"] == "depth"
    assert (
        judged_changes(spec, validate_spec(apply_edit(data, {"block.config.initializer_range": 0.01}), file="x.toml"))
        == []
    )
    assert judged_changes(
        spec, validate_spec(apply_edit(data, {"block.config.n_layer": "2*depth"}), file="x.toml")
    ) == ["block.config.n_layer"]
    assert judged_changes(
        spec, validate_spec(apply_edit(data, {"block.shipped": {"n_embd": 1024, "n_head": 16}}), file="x.toml")
    ) == ["block.shipped"]


# ----------------------------------------------------------------------------- what counts as fixed


class _Unjudged(InProcessExecutor):
    """Runs every job as the in-process executor does, then reports the expectations of the
    remedied specs (family `preact`, `when`: "replay" or "search") as judging nothing, as a
    remedy that moved the failing case out of what the invariant applies to would."""

    def __init__(self, when: str) -> None:
        self.when = when

    def map(self, jobs, *, on_done=None):  # type: ignore[no-untyped-def]  # (results shaped as `not_applicable`'s)
        from stability.run.results import InvariantResult

        outcomes = super().map(jobs, on_done=on_done)
        for job, outcome in zip(jobs, outcomes, strict=True):
            replay = job.case is not None
            if job.spec.family != "preact" or replay != (self.when == "replay"):
                continue
            outcome.result.results = [
                InvariantResult(
                    name=r.name,
                    expect=r.expect,
                    met=True,
                    verdict=None,
                    case=r.case,
                    examples=0,
                    message=f"{r.name}: not applicable at {r.case}: (a remedy moved it)",
                    applicable=False,
                )
                if replay
                else InvariantResult(
                    name=r.name,
                    expect=r.expect,
                    met=True,
                    verdict=None,
                    case=None,
                    examples=0,
                    message=f"{r.name}: skipped",
                    skipped=True,
                )
                for r in outcome.result.results
            ]
        return outcomes


@pytest.mark.parametrize("when", ["replay", "search"])
def test_an_expectation_the_remedied_spec_no_longer_judges_is_not_fixed(tmp_path: Path, when: str) -> None:
    """A remedy is proven by judging the failing expectation again: where its replay of the
    failing case comes back "not applicable" (met, judging nothing), or its whole search judges
    no case (skipped), it is out, saying so, and never ranked. The residual route and its
    compositions (the remedies that make PLAIN a `preact` stack) are reported so here; the
    critical init, which keeps the plain family, still holds."""
    path = _write(tmp_path, PLAIN)
    s = suggest(str(path), options=RunOptions(profile="ci"), executor=_Unjudged(when))
    routed = [a for a in s.attempts if a.remedy.startswith("residual_route")]
    assert len(routed) == 6
    for a in routed:
        assert a.status == "fails" and not a.margin, (a.remedy, a.detail)
        if when == "replay":
            assert a.detail.startswith("at the failing case: gradient_arrival: not applicable at"), a.detail
        else:
            assert a.detail == "over the whole case set: gradient_arrival judged no case (not applicable or skipped)"
    assert [a.remedy for a in s.ranked] == ["critical_init"]
