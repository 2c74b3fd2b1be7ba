"""Library releases: the support matrix (stability/families/library_support.py), names resolved by
the libraries' public API, releases installed beside the pinned torch (stability/run/releases.py)
and `stability zoo --compare A B` (stability/zoo_cli.py, stability/report/zoo_compare.py).

The slow tests install releases from PyPI on their first run (cached in .cache/, offline after)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from spec_support import ROOT, ZOO

from stability.errors import SpecError, UsageError
from stability.families import library, library_lookup, library_support
from stability.families.library import resolve
from stability.report.zoo_compare import direction_text, markdown, moved, terminal_rows
from stability.run.releases import CACHE, Release, environment, matrix_specs, parse_release, requirements_to_add
from stability.run.report_model import CompareRow


def test_a_release_is_library_equals_version_or_a_folder(tmp_path: Path) -> None:
    assert parse_release("transformers==4.53.3") == Release("transformers==4.53.3", "transformers", "4.53.3")
    assert parse_release(str(tmp_path)).path == tmp_path.resolve()
    for bad, why in [
        ("transformers>=4.5", "not LIBRARY==VERSION"),
        ("torch==2.13.0", "not LIBRARY==VERSION"),
        ("no/such/folder", "no such folder"),
    ]:
        with pytest.raises(UsageError, match=f"release '{bad}': {why}"):
            parse_release(bad)


def test_a_folder_goes_first_on_the_path_and_a_virtual_environment_runs_its_own_python(tmp_path: Path) -> None:
    python, env = environment(Release("x", path=tmp_path))
    assert python == sys.executable and env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path)
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").write_text("", encoding="utf-8")
    assert environment(Release("v", path=tmp_path / "venv"))[0] == str(tmp_path / "venv" / "bin" / "python")


def _wheel(tmp_path: Path, requires: list[str]) -> Path:
    path = tmp_path / "lib-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(
            "lib-1.0.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: lib\nVersion: 1.0\n" + "".join(f"Requires-Dist: {r}\n" for r in requires),
        )
    return path


def test_a_release_folder_holds_its_requirements_this_environment_does_not_meet(tmp_path: Path) -> None:
    from importlib import metadata

    have = metadata.version("packaging")
    wheel = _wheel(
        tmp_path,
        [
            "torch>=1.0",
            "timm",
            "torchvision<0.2",
            f"packaging=={have}",
            "packaging<1.0; extra == 'dev'",
            "packaging<1.0",
            "no-such-package-here>=1",
            'pytest; python_version < "3.0"',
        ],
    )
    # torch and the matrix's libraries never; a met requirement never; an extra's or another Python's never
    assert requirements_to_add(wheel) == ["packaging<1.0", "no-such-package-here>=1"]


def _named_wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(
            f"{name}-{version}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + "".join(f"Requires-Dist: {r}\n" for r in requires),
        )
    return path


def test_a_requirement_of_a_requirement_the_environment_lacks_goes_into_the_folder_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """transformers 5.0.0 wants huggingface-hub 1.x, whose own httpx this environment (hub 2.x) does
    not have: the folder gets both, once each, from the newest cached wheel that meets each requirement."""
    from stability.run import releases

    fetched: list[str] = []
    monkeypatch.setattr(releases, "_fetch", lambda requirement, wheels: fetched.append(requirement))
    _named_wheel(tmp_path, "no_such_hub", "1.3", ["no-such-httpx>=0.2", "no-such-filelock"])
    _named_wheel(tmp_path, "no_such_hub", "2.0", ["no-such-other"])  # newer, but outside the requirement
    _named_wheel(tmp_path, "no_such_httpx", "0.28", ["no-such-filelock", "no-such-hub<2"])
    assert releases._closure(["no-such-hub<2,>=1.0"], tmp_path) == [
        "no-such-hub<2,>=1.0",
        "no-such-httpx>=0.2",
        "no-such-filelock",
    ]
    assert fetched == ["no-such-hub<2,>=1.0", "no-such-httpx>=0.2", "no-such-filelock"]


def test_the_matrix_runs_each_release_on_the_zoo_specs_of_its_library() -> None:
    transformers = matrix_specs(Release("t", "transformers", "5.0.0"), ZOO)
    assert ZOO / "bert.toml" in transformers and not any(p.stem.startswith(("timm_", "tv_")) for p in transformers)
    assert {p.stem for p in matrix_specs(Release("v", "torchvision", "0.15.2"), ZOO)} == {
        p.stem for p in ZOO.glob("t[iv]*_*.toml")
    }
    assert [p.stem for p in matrix_specs(Release("t", "timm", "0.9.0"), ZOO, sample=["timm_vit", "bert"])] == [
        "timm_vit"
    ]
    assert set(library_support.ZOO_FIRST) <= {
        p.name for p in ZOO.glob("*.toml")
    }  # the support matrix names shipped specs


def test_a_release_older_than_the_supported_floor_is_refused_in_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("transformers")
    monkeypatch.setattr(library_support, "installed", lambda name: "4.22.0")
    with pytest.raises(SpecError) as e:
        resolve("transformers:ViTModel", file="s.toml")
    assert str(e.value) == (
        "s.toml: model = 'transformers:ViTModel': needs transformers >= 4.40.0, the oldest release the "
        "library family supports (this environment has 4.22.0); "
        "pip install --no-deps 'transformers>=4.40.0'"
    )


def test_a_class_added_after_the_installed_release_is_refused_naming_its_first_release(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("transformers")
    monkeypatch.setattr(library_lookup, "hf_names", lambda: ["BertModel"])  # as a release without Qwen3 lists its names
    monkeypatch.setattr(library, "installed", lambda name: "4.45.2")
    monkeypatch.setattr(library_support, "installed", lambda name: "4.45.2")
    with pytest.raises(
        SpecError,
        match=r"needs transformers >= 4.51.0, the release that added Qwen3Model \(this environment has 4.45.2\)",
    ):
        resolve("transformers:Qwen3Model", file="s.toml")
    assert library_support.expected_refusal("qwen3.toml") == "transformers >= 4.51.0"
    assert library_support.expected_refusal("bert.toml") is None


@pytest.mark.parametrize(
    ("spec", "have", "differs"),
    [
        ("mamba.toml", "4.40.2", True),
        ("mamba.toml", "4.53.3", True),
        ("mamba.toml", "4.54.1", False),
        ("gpt2.toml", "4.57.6", False),
        ("gpt2.toml", "5.0.0", True),
        ("gpt2.toml", "5.14.1", True),
        ("gpt2.toml", "5.15.0", False),
        ("bert.toml", "4.40.2", False),
    ],
)
def test_a_release_that_builds_another_init_than_the_zoo_spec_declares_is_named(
    monkeypatch: pytest.MonkeyPatch, spec: str, have: str, differs: bool
) -> None:
    """Under such a release the matrix requires the spec's gate to fail (stability/run/releases.py)."""
    monkeypatch.setattr(library_support, "installed", lambda name: have)
    why = library_support.expected_init_difference(spec)
    assert (why is not None) == differs, why
    if differs:
        assert why.startswith(f"transformers {have} (releases ") and "huggingface/transformers#" in why


def test_the_init_differences_name_shipped_specs_and_agree_with_the_corpus() -> None:
    """A corpus bug (benchmarks/corpus.toml) whose spec the matrix also runs: its buggy release lies in a
    range of other init and its fixed release ends it."""
    from packaging.version import Version

    from benchmarks.corpus import load_bugs

    assert set(library_support.INIT_DIFFERS) <= {p.name for p in ZOO.glob("*.toml")}
    for bug in load_bugs():
        for lib, first, end, _ in library_support.INIT_DIFFERS.get(Path(bug.spec).name, ()):
            assert lib == bug.library and Version(first) <= Version(bug.buggy) < Version(end) == Version(bug.fixed), (
                bug.id
            )


def test_transformers_names_resolve_by_its_public_api() -> None:
    pytest.importorskip("transformers")
    vit = resolve("transformers:ViTModel", file="s")
    assert (vit.kind, vit.module) == (
        "model",
        "models.vit.configuration_vit",
    )  # its config class, by its model type: no model module imported
    assert (
        resolve("transformers:LlamaModel", file="s").kind == "model"
    )  # an Auto class of several model types builds it; its own is llama
    assert resolve("transformers:T5EncoderModel", file="s").module == "models.t5.configuration_t5"
    assert resolve("transformers:BartConfig", file="s").kind == "config"
    for name in ("AutoModel", "PreTrainedModel", "pipeline", "GenerationConfig", "LlamaPreTrainedModel"):
        with pytest.raises(SpecError, match="is not a transformers model or config class"):
            resolve(f"transformers:{name}", file="s")


ROWS = [
    CompareRow.model_validate(row)
    for row in [
        {
            "file": "z.toml",
            "spec": "zoo-x",
            "invariant": "variance_growth",
            "case": "depth=4",
            "shown": "depth=4",
            "before": 1.7,
            "after": 2.4e5,
            "change": 1.4e5,
            "limit": 0.1,
            "status": "drift",
            "why": "w",
            "direction": "up",
            "toward_bound": True,
        },
        {
            "file": "z.toml",
            "spec": "zoo-x",
            "invariant": "rank_collapse",
            "case": "depth=4",
            "shown": "depth=4",
            "before": 0.05,
            "after": 0.046,
            "change": -0.08,
            "limit": 0.1,
            "status": "within",
            "why": "w",
            "direction": "down",
            "toward_bound": False,
        },
        {
            "file": "z.toml",
            "spec": "zoo-x",
            "invariant": "gradient_arrival",
            "case": "depth=4",
            "shown": "depth=4",
            "before": 1.45,
            "after": 8.8e3,
            "change": 6e3,
            "limit": 0.1,
            "status": "drift",
            "why": "w",
            "direction": "up",
            "toward_bound": False,
        },
    ]
]


def test_the_comparison_lists_the_rule_s_drifts_with_their_direction() -> None:
    assert [r.invariant for r in moved(ROWS)] == ["variance_growth", "gradient_arrival"]
    assert direction_text(ROWS[0]) == "up, toward its bound" and direction_text(ROWS[2]) == "up, away from its bound"
    assert terminal_rows(ROWS)[0][:7] == (
        "zoo-x",
        "variance_growth",
        "depth=4",
        "1.70 → 2.40e+05",
        "+14000000.0%",
        "10%",
        "up, toward its bound",
    )
    md = markdown(
        "transformers==1",
        "transformers==2",
        ROWS,
        {"transformers==1": {"q.toml": "q.toml: block.model = 'x': needs transformers >= 2"}},
        {"transformers==1": {"transformers": "1"}},
        compared=3,
    )
    assert "2 number(s) moved past their drift limit, of 3 compared" in md
    assert "| zoo-x | variance_growth | depth=4 | 1.70 → 2.40e+05 | +14000000.0% | 10% | up, toward its bound |" in md
    assert "- not compared, refused under transformers==1: `q.toml`: block.model = 'x': needs transformers >= 2" in md


def test_zoo_compare_refuses_a_bad_release_with_exit_2(cli: Callable[..., tuple[int, str, str]]) -> None:
    code, _, err = cli("zoo", "--compare", "transformers==4.53.3", "transformers>=5", str(ZOO / "bert.toml"))
    assert code == 2 and err.count("\n") == 1 and "release 'transformers>=5': not LIBRARY==VERSION" in err


def _installable(*releases: str) -> None:
    from stability.run.releases import install

    for r in releases:
        try:
            install(parse_release(r))
        except UsageError as exc:
            pytest.skip(f"{r} cannot be installed here: {exc}")


@pytest.mark.slow  # installs two transformers releases (cached) and runs Mamba and BERT under each
def test_zoo_compare_finds_the_mamba_init_change_of_transformers_4_54(tmp_path: Path) -> None:
    """transformers 4.54 (huggingface/transformers#38987, "Fix missing initializations for models
    created in 2024") made MambaPreTrainedModel._init_weights draw every nn.Linear weight from
    N(0, initializer_range²) = N(0, 0.1²) where 4.53 kept PyTorch's default U(±1/√fan-in): the
    mixer's in_proj and x_proj gains rise from σ²·fan-in 1/3 to 0.01·fan-in (7.7 at the shipped
    width 768), so the stream's gradient ratio g₁/g_L grows much faster with depth. specs/zoo/mamba.toml
    declares the init of 4.54 on: under 4.53 its linears break the declared rules, and under 4.54
    they conform. BERT's init did not change."""
    _installable("transformers==4.53.3", "transformers==4.54.1")
    md = tmp_path / "compare.md"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "stability",
            "zoo",
            "--compare",
            "transformers==4.53.3",
            "transformers==4.54.1",
            str(ZOO / "mamba.toml"),
            str(ZOO / "bert.toml"),
            "--depths",
            "4",
            "--md",
            str(md),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    text = md.read_text(encoding="utf-8")
    assert (
        "- transformers==4.53.3: transformers 4.53.3," in text
        and "- transformers==4.54.1: transformers 4.54.1," in text
    )
    rows = {
        tuple(cell.strip() for cell in line.split("|")[1:3]): line
        for line in text.splitlines()
        if line.startswith("| zoo-")
    }

    def moved(invariant: str) -> tuple[float, float]:
        cells = rows["zoo-mamba", invariant].split(" | ")
        before, after = (float(x) for x in cells[3].split(" → "))
        return before, after

    before, after = moved("residual_stream")
    assert before < 3 and after > 100  # g1/gL 1.31 → 303 at depth 4 on seed 0
    assert rows["zoo-mamba", "residual_stream"].endswith(
        "| up, away from its bound |"
    )  # into the band the spec declares
    before, after = moved("init_conformance")
    assert before > 0 and after == 0  # the parameters off the declared init: 12 under 4.53, none under 4.54
    assert not any(key[0] == "zoo-bert" for key in rows)  # nothing of BERT moved


@pytest.mark.slow  # installs transformers 4.40.2 (cached) and runs the zoo's ViT under it
def test_the_oldest_supported_transformers_runs_vit_and_refuses_newer_families_naming_their_release(
    tmp_path: Path,
) -> None:
    """Under 4.40 the lazy index maps ViTModel to "models.vit", not its modeling module: a check
    that read the index refused `transformers:ViTModel`; the public API resolves it."""
    _installable("transformers==4.40.2")
    python, env = environment(parse_release("transformers==4.40.2"))
    run = subprocess.run(
        [
            python,
            "-W",
            "ignore",
            "-m",
            "stability.report.release_side",
            "--out",
            str(tmp_path),
            "--depths",
            "2",
            str(ZOO / "vit.toml"),
            str(ZOO / "qwen3.toml"),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads((tmp_path / "versions.json").read_text())["transformers"] == "4.40.2"
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["errors"] == [] and [s["name"] for s in report["specs"]] == ["zoo-vit"]
    assert {i["name"]: i["verdict"] for i in report["specs"][0]["invariants"]}["gradient_arrival"] == "holds"
    refused = json.loads((tmp_path / "refused.json").read_text())
    assert list(refused.values()) == [
        f"{ZOO / 'qwen3.toml'}: block.model = 'transformers:Qwen3Model': needs transformers >= 4.51.0, the "
        "release that added Qwen3Model (this environment has 4.40.2); "
        "pip install --no-deps 'transformers>=4.51.0'"
    ]
    assert CACHE.name == ".cache"


def test_a_setting_that_a_release_cannot_build_is_refused_at_load_naming_the_release(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """timm 1.0.10 to 1.0.15 build resnetv2_18 but crash on its zero_init_last (PreActBasic has no conv3)."""
    monkeypatch.setattr(library_support, "installed", lambda name: "1.0.15")
    with pytest.raises(SpecError) as e:
        library_support.check_working(
            "timm", "resnetv2_18", {"layers": [1, 1, 1, 1], "zero_init_last": True}, file="s.toml", key="block.config"
        )
    assert str(e.value).startswith(
        "s.toml: block.config.zero_init_last = True: sets zero_init_last, which timm 1.0.15 cannot build"
    ) and "timm>=1.0.16" in str(e.value)
    library_support.check_working(
        "timm", "resnetv2_18", {"layers": [1, 1, 1, 1]}, file="s.toml", key="block.config"
    )  # without it: builds
    monkeypatch.setattr(library_support, "installed", lambda name: "1.0.16")
    library_support.check_working("timm", "resnetv2_18", {"zero_init_last": True}, file="s.toml", key="block.config")
    assert library_support.expected_refusal("timm_resnetv2_zero.toml") is None


def test_a_model_added_later_is_refused_naming_the_release_that_also_builds_its_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under timm 1.0.9 resnetv2_18 does not exist (added in 1.0.10), and its zero_init_last builds
    only from 1.0.16: the refusal names 1.0.16, so installing what it says is not refused again."""
    pytest.importorskip("timm")
    monkeypatch.setattr(library, "registry", lambda name: (["resnet18"], {}))  # as timm 1.0.9 lists its models
    monkeypatch.setattr(library, "installed", lambda name: "1.0.9")
    monkeypatch.setattr(library_support, "installed", lambda name: "1.0.9")
    with pytest.raises(SpecError) as e:
        resolve(
            "timm:resnetv2_18",
            file="s.toml",
            key="block.model",
            config={"layers": ["depth", 1, 1, 1], "zero_init_last": True},
        )
    assert (
        "needs timm >= 1.0.16, resnetv2_18 came in 1.0.10, and the config this spec sets builds from 1.0.16 "
        "(this environment has 1.0.9)" in str(e.value)
    )
    assert "timm>=1.0.16" in str(e.value)
    with pytest.raises(
        SpecError, match=r"needs timm >= 1.0.10, the release that added resnetv2_18 \(this environment has 1.0.9\)"
    ):
        resolve("timm:resnetv2_18", file="s.toml", key="block.model", config={"layers": [1, 1, 1, 1]})
    assert library_support.needed_release("timm", "resnetv2_18", {"zero_init_last": True}) == "1.0.16"
    monkeypatch.setattr(library_support, "installed", lambda name: "1.0.16")
    assert library_support.needed_release("timm", "resnetv2_18", {"zero_init_last": True}) is None


@pytest.mark.parametrize(
    ("spec", "have", "added", "says"),
    [
        (
            "mixtral.toml",
            "4.45.2",
            "head_dim",
            "block.config.head_dim = 128: needs transformers >= 4.47.0, the release that added "
            "MixtralConfig.head_dim (this environment has 4.45.2)",
        ),
        (
            "mistral.toml",
            "4.42.4",
            "head_dim",
            "block.config.head_dim = 128: needs transformers >= 4.43.0, the release that added "
            "MistralConfig.head_dim (this environment has 4.42.4)",
        ),
        ("llama.toml", "4.57.6", "rope_parameters", "block.config.rope_parameters = {"),
    ],
)
def test_a_config_key_added_after_the_installed_release_is_refused_naming_its_first_release(
    monkeypatch: pytest.MonkeyPatch, spec: str, have: str, added: str, says: str
) -> None:
    """A zoo family whose config key came later than the floor is refused in one line naming the
    release that added it (docs/library-models.md, "Supported releases"), not only as an unknown key."""
    pytest.importorskip("transformers")
    from stability.spec.load import load_spec

    shipped = library.config_keys

    def older(target: library_lookup.Target) -> tuple[list[str], bool]:  # as the release's config lists its keys
        keys, open_ended = shipped(target)
        return [k for k in keys if k != added], open_ended

    monkeypatch.setattr(library, "config_keys", older)
    monkeypatch.setattr(library, "installed", lambda name: have)
    monkeypatch.setattr(library_support, "installed", lambda name: have)
    with pytest.raises(SpecError) as e:
        load_spec(str(ZOO / spec))
    message = str(e.value)
    assert says in message and "\n" not in message, message
    assert "LlamaConfig.rope_parameters (this environment has 4.57.6)" in message or spec != "llama.toml", message
    first = library_support.ZOO_FIRST[spec][1]
    assert f"needs transformers >= {first}" in message and f"pip install --no-deps 'transformers>={first}'" in message
    assert library_support.expected_refusal(spec, "transformers") == f"transformers >= {first}"


def test_a_release_below_the_floor_is_the_matrix_s_expected_refusal_for_every_spec(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the release session (stability/run/releases.py) counts a refusal as expected only where the
    # support matrix says so: below the floor, every spec of that library
    monkeypatch.setattr(
        library_support, "installed", lambda name: {"transformers": "4.39.3", "timm": "0.8.19.dev0"}.get(name, "9")
    )
    assert library_support.expected_refusal("bert.toml", "transformers") == "transformers >= 4.40.0"
    assert library_support.expected_refusal("qwen3.toml", "transformers") == "transformers >= 4.40.0"
    assert library_support.expected_refusal("timm_vit.toml", "timm") == "timm >= 0.9.0"
    assert library_support.expected_refusal("tv_vit.toml", "torchvision") is None
