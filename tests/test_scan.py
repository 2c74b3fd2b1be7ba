"""`stability scan` (stability/run/scan.py, report/scan.py, report/scan_compare.py, cli/scan.py):
a model that crashes, hangs or is too large is a row, not the end of the scan; `--resume` skips the
stored rows; `--compare`'s exact diff text, Markdown table and exit codes on fabricated sides; the
rows round-trip through JSON and the store."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
from scan_support import PlantedJob

from stability.cli import main
from stability.judge.scan_triage import Known, load_triage
from stability.report.scan import headline, markdown, untriaged
from stability.report.scan_compare import compare_rows
from stability.report.scan_compare import markdown as compare_markdown
from stability.run.scan import ScanOptions, select
from stability.run.scan_rows import Deviation, RecordedLaw, ScanRow, StreamAt


def _row(name: str, *, laws: dict[str, str] | None = None, stream: float = 1.5, **kw: Any) -> ScanRow:
    return ScanRow(
        library="transformers",
        name=name,
        status=kw.pop("status", "judged"),
        model=f"transformers:{name}",
        rung="reduced",
        parameters=1000,
        laws=None if laws is None else tuple(RecordedLaw(parameter=p, law=x, writer="w") for p, x in laws.items()),
        stream=(StreamAt(depth=2, numbers={"entry": 1.0, "stream": stream, "variance": 3.0, "change": 0.5}),),
        **kw,
    )


def test_a_row_round_trips_through_json_with_every_field() -> None:
    row = _row(
        "GPT2Model",
        laws={"h.*.attn.c_proj.weight": "normal(std=0.02)"},
        also=("gpt2-alias",),
        deviations=(
            Deviation(parameter="h.*.ln_1.weight", recorded="constant(2)", declared="constant(1)", source="s"),
        ),
        init_note="n",
        config='{"n_layer": 2}',
        judged=7,
        seconds=1.25,
    )
    row = ScanRow.from_dict(json.loads(json.dumps(row.to_dict())))
    assert row == ScanRow.from_dict(row.to_dict())
    assert row.also == ("gpt2-alias",) and row.deviations[0].recorded == "constant(2)" and row.judged == 7
    assert row.stream[0].numbers["stream"] == 1.5


def test_the_exact_init_diff_names_the_parameter_and_both_laws() -> None:
    a = [
        _row("GPT2Model", laws={"h.*.attn.c_proj.weight": "normal(std=0.0071)", "wte.weight": "normal(std=0.02)"}),
        _row("BertModel", laws={"x.weight": "normal(std=0.02)"}),
    ]
    b = [
        _row("GPT2Model", laws={"h.*.attn.c_proj.weight": "normal(std=0.02)", "wte.weight": "normal(std=0.02)"}),
        _row("BertModel", laws={"x.weight": "normal(std=0.02)"}, stream=1.5 * 1.05),  # within the 10% drift
    ]
    c = compare_rows(a, b)
    from stability.report.scan_compare import change_text

    assert [change_text(x) for x in c.changes] == [
        "GPT2Model: h.*.attn.c_proj.weight: normal(std=0.0071) → normal(std=0.02)"
    ]
    assert c.compared == 2 and not c.not_compared


def test_a_stream_number_past_its_drift_a_law_that_appears_and_a_model_built_on_one_side_only() -> None:
    a = [_row("M", laws={"w": "normal(std=1)"}, stream=1.0), _row("N", laws={}, status="not built", reason="r")]
    b = [_row("M", laws={"w": "normal(std=1)", "v": "constant(0)"}, stream=2.0), _row("N", laws={})]
    c = compare_rows(a, b)
    from stability.report.scan_compare import change_text

    assert [change_text(x) for x in c.changes] == ["M: v: absent → constant(0)", "M: stream stream @2: 1 → 2"]
    assert [(n.model, n.a, n.b) for n in c.not_compared] == [("N", "not built (r)", "judged")]
    md = compare_markdown("transformers==1", "transformers==2", c, {"transformers==1": {"transformers": "1"}})
    assert md.splitlines()[0] == "### stability scan --compare: `transformers==1` → `transformers==2`"
    assert "| M | `v` | absent | constant(0) |" in md
    assert "| M | stream stream @2 | 1 | 2 |" in md
    assert "- N: A not built (r); B judged" in md


def test_without_laws_the_deviations_are_compared() -> None:
    dev = Deviation(parameter="bn.weight", recorded="normal(std=0.02)", declared="constant(1)", source="s")
    c = compare_rows([_row("E")], [_row("E", deviations=(dev,))])
    assert [(x.kind, x.what, x.before, x.after) for x in c.changes] == [
        ("deviation", "bn.weight", "as declared", "normal(std=0.02), declared constant(1)")
    ]


def _fake_sides(monkeypatch: pytest.MonkeyPatch, a: list[ScanRow], b: list[ScanRow]) -> None:
    from stability.run import scan_compare

    sides = iter([a, b])
    monkeypatch.setattr(scan_compare, "check_sides", lambda *args: ("1", "2"))
    monkeypatch.setattr(
        scan_compare,
        "scan_side",
        lambda release, *args, **kw: scan_compare.Side(label=release.label, rows=tuple(next(sides)), versions={}),
    )


def test_compare_exits_1_when_anything_moved_0_when_nothing_did_5_when_nothing_was_compared(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["scan", "transformers", "--compare", "transformers==1.0", "transformers==2.0", "-q"]
    moved = [_row("G", laws={"w": "normal(std=0.0071)"})], [_row("G", laws={"w": "normal(std=0.02)"})]
    _fake_sides(monkeypatch, *moved)
    md = tmp_path / "compare.md"
    assert main([*argv, "--md", str(md)]) == 1
    assert "G: w" not in capsys.readouterr().err
    assert "| G | `w` | normal(std=0.0071) | normal(std=0.02) |" in md.read_text(encoding="utf-8")
    _fake_sides(monkeypatch, [_row("G", laws={"w": "n"})], [_row("G", laws={"w": "n"})])
    assert main([*argv, "--md", str(md)]) == 0  # replaces its own earlier comparison
    _fake_sides(monkeypatch, [_row("G", status="failed", reason="x")], [_row("G")])
    assert main(argv) == 5


def test_compare_refuses_a_side_whose_library_does_not_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken"
    (broken / "timm").mkdir(parents=True)
    (broken / "timm" / "__init__.py").write_text("raise ImportError('planted')\n", encoding="utf-8")
    assert main(["scan", "timm", "--compare", str(broken), str(tmp_path), "-q"]) == 2
    assert f"release {broken}: timm does not import here (ImportError: planted)" in capsys.readouterr().err


def test_compare_refuses_two_sides_of_one_release_and_a_release_of_another_library(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from stability.run import scan_compare

    monkeypatch.setattr(scan_compare, "side_version", lambda release, library: "1.0.31")
    assert main(["scan", "timm", "--compare", str(tmp_path), "timm==1.0.31", "-q"]) == 2
    assert (
        f"--compare {tmp_path} timm==1.0.31: both sides import timm 1.0.31, so nothing could move; "
        "give two different releases" in capsys.readouterr().err
    )
    assert main(["scan", "timm", "--compare", "transformers==5.0.0", str(tmp_path), "-q"]) == 2
    assert "is a release of transformers, and this scan is of timm" in capsys.readouterr().err


def test_a_crash_a_hang_and_an_exit_are_rows_and_the_other_models_are_scanned() -> None:
    from stability.run.worker import WorkerExecutor

    options = ScanOptions(case_timeout=1.0)  # the hang waits it out; the crash and the exit end at once
    jobs = [
        PlantedJob("transformers", "Crashing", options=options, how="segfault"),
        PlantedJob("transformers", "Hanging", options=options, how="hang"),
        PlantedJob("transformers", "Exiting", options=options, how="exit"),
    ]
    rows = {o.result.name: o.result for o in WorkerExecutor(jobs=2).map(jobs)}
    assert rows["Crashing"].status == "failed" and "SIGSEGV" in (rows["Crashing"].reason or "")
    assert rows["Hanging"].status == "timed out" and "1 s" in (rows["Hanging"].reason or "")
    assert rows["Exiting"].status == "failed" and "exited with code 7" in (rows["Exiting"].reason or "")


def test_a_model_too_large_for_the_scan_is_a_row_naming_its_size() -> None:
    pytest.importorskip("transformers")
    from stability.run.scan import scan_one

    row = scan_one("transformers", "GPT2Model", (), ScanOptions(max_parameters=1000))
    assert row.status == "not built" and row.model is None
    assert "more than the scan's limit of 1,000" in (row.reason or "")


def test_resume_skips_the_rows_stored_for_this_release_and_code(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from stability.families.library_support import installed
    from stability.run.scan_plan import plan_scan
    from stability.run.scan_store import ScanStore
    from stability.run.store_keys import code_version

    with ScanStore(tmp_path / "r.sqlite") as store:
        store.put(installed("transformers"), code_version(), _row("BertModel"))
        store.put("0.0.1", code_version(), _row("GPT2Model"))  # another release: not reused
        store.put(installed("transformers"), code_version(), _row("LlamaModel", status="timed out"))  # tried again
        plan = plan_scan("transformers", only="BertModel,GPT2Model,LlamaModel", store=store, resume=True)
        assert plan.names == ["BertModel", "LlamaModel", "GPT2Model"]
        assert [j.name for j in plan.jobs] == ["LlamaModel", "GPT2Model"]
        assert plan.stored["BertModel"] == _row("BertModel")
        fresh = plan_scan("transformers", only="BertModel,GPT2Model", store=store, resume=False)
        assert [j.name for j in fresh.jobs] == ["BertModel", "GPT2Model"]


def test_select_matches_shell_patterns_in_any_case() -> None:
    assert select(["GPT2Model", "BertModel", "ViTModel"], "vit*,BERT*") == ["BertModel", "ViTModel"]
    assert select(["A"], None) == ["A"]


def test_a_pattern_that_matches_no_model_judges_nothing_exit_5_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("transformers")
    argv = ["scan", "transformers", "--only", "zzzz*", "--in-process", "-q", "--db", str(tmp_path / "s.sqlite")]
    assert main(argv) == 5
    out, err = capsys.readouterr()
    assert not out and err == (
        "stability: error: nothing was judged (no transformers model matches --only zzzz*); exit code 5\n"
    )


def test_the_headline_counts_one_model_in_the_singular() -> None:
    assert headline("timm", "1", [_row("A")], (), 2.0).startswith("timm 1: 1 model tried, 1 built and judged (100.0 %)")
    assert headline("timm", "1", [_row("A"), _row("B")], (), 2.0).startswith("timm 1: 2 models tried")


def test_triage_marks_known_deviations_and_the_scan_fails_only_on_new_ones(tmp_path: Path) -> None:
    dev = Deviation(parameter="encoder.top_bn.weight", recorded="r", declared="d", source="s")
    rows = [_row("EfficientNetModel", deviations=(dev,)), _row("BertModel")]
    known = (Known(library="transformers", model="Efficient*", parameter="*_bn.weight", verdict="bug", source="#1"),)
    assert untriaged(rows, known) == []
    assert untriaged(rows, ()) == [(rows[0], dev)]
    assert "1 with deviations, 0 deviation(s) not triaged" in headline("transformers", "5", rows, known, 1.0)
    md = markdown("transformers", "5", rows, known, 1.0)
    assert md.startswith("### stability scan: transformers 5\n")
    assert (
        "| EfficientNetModel | judged | reduced, 1,000 parameters | encoder.top_bn.weight: r, declared d [s] (bug: #1)"
        in md
    )
    bad = tmp_path / "t.toml"
    bad.write_text('[[known]]\nlibrary = "timm"\nmodel = "x"\nparameter = "y"\nverdict = "maybe"\nsource = "s"\n')
    from stability.errors import UsageError

    with pytest.raises(UsageError, match=r'known\[0\]: verdict = .maybe.; write "bug" or "intended"'):
        load_triage(bad)
    assert isinstance(load_triage(), tuple)  # the shipped file reads


def test_a_computed_law_is_compared_by_its_values_not_by_how_they_were_written() -> None:
    from types import SimpleNamespace

    from stability.measure.init_trace_law import RecordedLaw as Law
    from stability.measure.init_trace_law import computed
    from stability.run.scan_init import exact_law

    stats = SimpleNamespace(mean=1.5, var=0.25, min=1.0, max=2.0)
    assert exact_law(computed("set at creation"), stats) == exact_law(computed("copied from a tensor"), stats)
    assert exact_law(computed("x"), stats) == "computed(mean=1.5, var=0.25, min=1, max=2)"
    assert exact_law(Law(kind="normal", std=0.02 / 8**0.5)) == f"normal(std={0.02 / 8**0.5!r})"  # every digit
    assert exact_law(Law(kind="constant", value=0.0)) == "constant()"


def test_groups_renamed_with_their_laws_unchanged_are_no_change_of_init() -> None:
    n = "normal(std=0.02)"
    a = [_row("V", laws={"cls": "normal(std=0.02)", "encoder.layer.*.q.weight": n, "encoder.layer.*.q.bias": "c0"})]
    b = [_row("V", laws={"cls": "constant()", "layers.*.q_proj.weight": n, "layers.*.q_proj.bias": "c0"})]
    c = compare_rows(a, b)
    from stability.report.scan_compare import change_text

    assert [change_text(x) for x in c.changes] == ["V: cls: normal(std=0.02) → constant()"]
    assert c.renamed == (
        ("V", "encoder.layer.*.q.weight", "layers.*.q_proj.weight"),
        ("V", "encoder.layer.*.q.bias", "layers.*.q_proj.bias"),
    )
    b2 = [
        _row(
            "V",
            laws={
                "cls": "normal(std=0.02)",
                "layers.*.q_proj.weight": "normal(std=0.01)",
                "layers.*.q_proj.bias": "c0",
            },
        )
    ]
    assert len(compare_rows(a, b2).changes) == 4  # a law that differs: nothing is paired, every group is named


def test_the_warm_up_scans_until_a_stream_is_measured_and_leaves_the_process_as_it_found_it(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    import signal
    from types import SimpleNamespace

    from stability.families import library_scan
    from stability.run import scan

    names = ["Broken", "Audio", "Tokens", "Images", "Late"] + [f"M{i}" for i in range(scan.WARM_UP_MODELS)]
    monkeypatch.setattr(library_scan, "scan_targets", lambda library: [SimpleNamespace(name=n) for n in names])
    scanned: list[str] = []

    def scan_one(library: str, name: str, also: Any, options: ScanOptions) -> ScanRow:
        scanned.append(name)
        print(f"noise of {name}")  # the server's output is the user's terminal: none of it shows
        os.write(2, b"C-level noise\n")
        if name == "Broken":
            raise RuntimeError("does not build")
        row = _row(name)
        return row if name != "Audio" else dataclasses.replace(row, stream=(StreamAt(depth=2, error="audio"),))

    monkeypatch.setattr(scan, "scan_one", scan_one)
    handler = signal.getsignal(signal.SIGALRM)
    scan.warm_up("transformers:")
    assert scanned == ["Broken", "Audio", "Tokens"]  # a failure and a row without a stream: the next model
    assert signal.getsignal(signal.SIGALRM) is handler and signal.alarm(0) == 0
    print("after")
    assert capfd.readouterr() == ("after\n", "")
    scanned.clear()
    few = ",".join(names[: scan.WARM_UP_MODELS - 1])
    scan.warm_up(f"transformers:{few}")  # too few models to share the warm-up: nothing scanned
    assert scanned == []
    assert scan.warm_up_spec("timm", "vit_*") == "stability.run.scan:warm_up:timm:vit_*"


@pytest.mark.slow  # imports timm
def test_a_timm_swiglu_gate_starts_as_its_module_declares_it() -> None:
    pytest.importorskip("timm")
    from timm.layers import SwiGLU

    from stability.run.scan_init import judge_init

    config = {"img_size": 32, "patch_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 2, "mlp_layer": SwiGLU}
    judged = judge_init("timm:VisionTransformer", config, seed=0, file="<test>")
    laws = {x.parameter: x.exact for x in judged.laws or ()}
    assert (
        laws["blocks.*.mlp.fc1_g.weight"] == "normal(std=1e-06)"
        and laws["blocks.*.mlp.fc1_g.bias"] == "constant(value=1.0)"
    )
    assert judged.deviations == ()  # timm's SwiGLU.init_weights, not init_weights_vit_timm's Linear rows


def test_every_triaged_bug_described_in_the_docs_has_its_section_there() -> None:
    import re

    docs = (Path(__file__).resolve().parents[1] / "docs" / "scan.md").read_text(encoding="utf-8")
    headings = set(re.findall(r"^#+ (.+)$", docs, flags=re.MULTILINE))
    cited = [m.group(1) for k in load_triage() if (m := re.search(r"docs/scan\.md, '(.*)'$", k.source))]
    assert cited, "the shipped triage file cites no section of docs/scan.md"
    assert [c for c in cited if c not in headings] == []


def test_the_warm_up_is_named_to_the_server_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing.forkserver

    from stability.run import processes

    seen: list[str | None] = []
    monkeypatch.setattr(
        multiprocessing.forkserver, "ensure_running", lambda: seen.append(os.environ.get("STABILITY_WARM_UP"))
    )
    monkeypatch.delenv("STABILITY_WARM_UP", raising=False)
    processes.start_server(warm_up="stability.run.scan:warm_up:timm:")
    assert seen == ["stability.run.scan:warm_up:timm:"] and "STABILITY_WARM_UP" not in os.environ


@pytest.mark.slow  # imports timm, builds a model
def test_a_builder_that_makes_a_backbone_inside_a_partial_builds_it_again_at_the_reduced_size() -> None:
    pytest.importorskip("timm")
    from stability.families.library_scan import ScanTarget, plan_build
    from stability.run.scan_init import judge_init

    build = plan_build(ScanTarget(library="timm", name="vit_tiny_r_s16_p8_224"))  # partial(HybridEmbed, backbone=…)
    assert (
        build.model == "timm:vit_tiny_r_s16_p8_224"
    )  # the registered builder, not VisionTransformer with a meta backbone
    judged = judge_init(build.model, build.config(2), seed=0, file="<test>")
    assert judged.judged > 0 and judged.note is None
