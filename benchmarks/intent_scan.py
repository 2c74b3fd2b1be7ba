"""The model's own declared intent, judged on real models: every zoo spec's model, models outside
the zoo, and the models of the corpus of shipped init bugs under their buggy and fixed releases
(docs/zoo.md, "Intent from the model itself").

Each model is constructed once (seed 0) with its init recorded (`stability.measure.init_trace`),
and init_conformance judges it with no spec rows: with `table = false` (the recorded intent alone)
and with the table its class chooses (`stability.judge.init_tables.choose_table`).

    python -m benchmarks.intent_scan --zoo [--extra] [--json FILE]
    python -m benchmarks.intent_scan --model transformers:OPTModel --config '{"hidden_size": 64}'
    python -m benchmarks.intent_scan --corpus      # each corpus bug, buggy and fixed release
    python -m benchmarks.intent_scan --zoo --extra --release transformers==4.56.2   # under another release
    python -m benchmarks.intent_scan --all transformers --all timm --all torchvision   # whole libraries

`--corpus` runs each release in a subprocess importing it from `.cache/corpus/` (benchmarks/corpus.py
installs it, and hides what the entry's `hide` lists: `corpus.hidden_env`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "specs" / "zoo"

#: Models outside the zoo, at small widths (target, config).
EXTRA: tuple[tuple[str, dict[str, Any]], ...] = (
    ("transformers:ConvNextV2Model", {"hidden_sizes": [16, 32], "depths": [2, 1], "num_stages": 2, "image_size": 32}),
    ("transformers:OPTModel", {"hidden_size": 64, "ffn_dim": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                               "vocab_size": 64, "word_embed_proj_dim": 64}),
    ("transformers:Phi3Model", {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                                "num_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 64,
                                "pad_token_id": 0}),
    ("transformers:Qwen2MoeModel", {"hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
                                    "shared_expert_intermediate_size": 64, "num_experts": 4, "num_experts_per_tok": 2,
                                    "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
                                    "vocab_size": 64}),
    ("transformers:ViTMAEModel", {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                                  "num_attention_heads": 2, "image_size": 32, "patch_size": 8}),
    ("transformers:Dinov2Model", {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                                  "num_attention_heads": 2, "image_size": 32, "patch_size": 8}),
    ("transformers:CLIPVisionModel", {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                                      "num_attention_heads": 2, "image_size": 32, "patch_size": 8}),
    ("transformers:WhisperModel", {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2,
                                   "encoder_attention_heads": 2, "decoder_attention_heads": 2,
                                   "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
                                   "vocab_size": 64, "num_mel_bins": 16, "max_source_positions": 16,
                                   "max_target_positions": 16, "pad_token_id": 0, "decoder_start_token_id": 1}),
    ("timm:convnextv2_atto", {}),
    ("timm:efficientnet_b0", {}),
    ("timm:vit_small_patch16_224", {"img_size": 32, "patch_size": 8, "embed_dim": 64, "depth": 2, "num_heads": 2,
                                    "init_values": 1e-5}),
    ("timm:cait_xxs24_224", {"img_size": 32, "patch_size": 8, "embed_dim": 64, "depth": 2, "num_heads": 2}),
    ("timm:eva02_tiny_patch14_224", {"img_size": 28, "embed_dim": 64, "depth": 2, "num_heads": 2}),
    ("torchvision:resnet50", {}),
    ("torchvision:convnext_tiny", {}),
    ("torchvision:swin_t", {}),
)  # fmt: skip


#: The widths a transformers config is built at where it has the key (`transformers_targets`).
TINY: dict[str, int] = {
    **dict.fromkeys(("hidden_size", "d_model", "n_embd", "embed_dim"), 64),
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers", "encoder_layers", "decoder_layers"), 2),
    **dict.fromkeys(("num_attention_heads", "n_head", "encoder_attention_heads", "decoder_attention_heads"), 2),
    **dict.fromkeys(("num_key_value_heads", "num_experts_per_tok"), 2),
    **dict.fromkeys(("intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff", "vocab_size"), 128),
    **dict.fromkeys(("num_experts", "num_local_experts"), 4),
    "max_position_embeddings": 64,
    "head_dim": 32,
    "d_kv": 32,
    "image_size": 32,
    "patch_size": 8,
    "moe_intermediate_size": 32,
}


def transformers_targets() -> list[tuple[str, dict[str, Any], str]]:
    """Every transformers base model class (`MODEL_MAPPING_NAMES`) whose config is not composite, at
    the widths of `TINY` where its config has the key (a config that does not build from them fails
    in the scan, said)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    out = []
    for model_type, name in sorted(MODEL_MAPPING_NAMES.items()):
        if not isinstance(name, str) or model_type not in CONFIG_MAPPING:
            continue
        try:
            base = CONFIG_MAPPING[model_type]()
        except Exception:  # a config without defaults: left out
            continue
        if getattr(base, "sub_configs", None):  # composite (vision + text): its parts are models of their own
            continue
        small = {
            k: v
            for k, v in TINY.items()
            if isinstance(getattr(base, k, None), int) and not isinstance(getattr(base, k), bool)
        }
        out.append((f"transformers:{name}", small, model_type))
    return out


def timm_targets() -> list[tuple[str, dict[str, Any], str]]:
    """One timm model of each of its model modules: the smallest by name (atto, femto, … tiny, small)."""
    import timm
    from timm.models import _registry

    prefer = ("atto", "femto", "pico", "nano", "xxtiny", "xxs", "tiny", "xs", "small", "_s_", "b0", "18", "mobile")
    by_module: dict[str, list[str]] = {}
    for name in timm.list_models():
        by_module.setdefault(_registry._model_to_module.get(name, "?"), []).append(name)

    def rank(n: str) -> tuple[int, int]:
        return next((i for i, p in enumerate(prefer) if p in n), len(prefer)), len(n)

    return [(f"timm:{min(names, key=rank)}", {}, module) for module, names in sorted(by_module.items())]


def torchvision_targets() -> list[tuple[str, dict[str, Any], str]]:
    """Every torchvision classification model."""
    from stability.families.library import quiet_imports

    with quiet_imports():
        import torchvision
    return [(f"torchvision:{n}", {}, n) for n in torchvision.models.list_models(module=torchvision.models)]


def judge_model(target: str, config: Mapping[str, Any], *, seed: int = 0) -> dict[str, Any]:
    """`target` built from `config` with its init recorded, judged with the recorded intent alone
    and with its class's table: the deviations, verdicts and the construction's time."""
    import torch

    from stability.families.library import resolve
    from stability.families.library_build import construct
    from stability.judge.init_conformance import init_conformance
    from stability.judge.init_intent import deviations
    from stability.measure.init_recorder import InitRecorder
    from stability.measure.init_stats import declared_config, init_record
    from stability.spec.init_expect import InitConformance

    spec_target = resolve(target, file="<scan>", config=config)
    recorder = InitRecorder()
    torch.manual_seed(seed)
    with recorder.recording():
        model = construct(spec_target, dict(config))
    trace = recorder.trace(model)
    record = init_record(model, declared_config(model, config, trace.model_args), trace=trace)

    class _M:
        extra = {"init_conformance": record}

    out: dict[str, Any] = {
        "target": target,
        "parameters": len(record.parameters),
        "seconds": trace.seconds,
        "deviations": [vars(d) for d in deviations(record)],
    }
    for label, table in (("intent", False), ("class", None)):
        v = init_conformance(_M(), InitConformance.model_validate({"table": table}))
        out[label] = {"passed": v.passed, "measured": v.measured, "detail": v.detail, "table": v.extra.get("table")}
    return out


def zoo_targets(*, loadable: bool = False) -> list[tuple[str, dict[str, Any], str]]:
    """(target, config, spec) for every zoo spec's model at depth 2 (or its shallowest); with
    `loadable`, the specs this environment's release cannot load are left out (said on stderr)."""
    out = []
    for path in sorted(ZOO.glob("*.toml")):
        try:
            out.append((*zoo_target_of(str(path)), path.stem))
        except Exception as exc:
            if not loadable:
                raise
            print(f"{path.stem}: not loaded here ({' '.join(str(exc).split())[-160:]})", file=sys.stderr)
    return out


def zoo_target_of(spec_path: str) -> tuple[str, dict[str, Any]]:
    """A spec's model and its config at depth 2 (or the spec's shallowest), its other keys at their first values."""
    from stability.families.library_family import library_model
    from stability.families.library_values import fill
    from stability.spec.case import parse_case_string
    from stability.spec.load import load_spec

    spec = load_spec(ROOT / spec_path)
    lib = library_model(spec)
    case = parse_case_string(f"depth={max(spec.space.depth[0], 2)}", spec)
    return str(lib.target), fill(lib.config, case.as_dict())


def corpus_rows() -> list[dict[str, Any]]:
    """Each corpus bug's model judged by its recorded intent under its buggy and fixed release."""
    from benchmarks.corpus import install_release, load_bugs, release_env

    rows = []
    for bug in load_bugs():
        row: dict[str, Any] = {"id": bug.id, "spec": bug.spec}
        for which in ("buggy", "fixed"):
            folder = install_release(bug.library, bug.release(which), pins=bug.pins)
            code = (
                "import json; from benchmarks.intent_scan import zoo_target_of, judge_model; "
                f"t, c = zoo_target_of({bug.spec!r}); print(json.dumps(judge_model(t, c)))"
            )
            env = release_env(folder, {**_environ(), "PYTHONPATH": str(ROOT)}, hide=bug.hide)
            done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
            if done.returncode != 0:
                row[which] = {"error": " ".join(done.stderr.split())[-600:]}
                continue
            row[which] = {"release": bug.release(which), **json.loads(done.stdout.strip().splitlines()[-1])}
        rows.append(row)
    return rows


def _under_release(release: str, argv: list[str]) -> int:
    """This scan in a subprocess importing `release` ("transformers==4.56.2") from `.cache/corpus/`
    (installed there on first use), this environment's `kernels` hidden from transformers < 5."""
    from benchmarks.corpus import install_release, release_env

    library, _, version = release.partition("==")
    folder = install_release(library, version)
    hide = ("kernels",) if library == "transformers" and version.split(".")[0] == "4" else ()
    env = release_env(folder, {**_environ(), "PYTHONPATH": str(ROOT)}, hide=hide)
    argv = [a for i, a in enumerate(argv) if not (a.startswith("--release") or (i > 0 and argv[i - 1] == "--release"))]
    return subprocess.run([sys.executable, "-m", "benchmarks.intent_scan", *argv], env=env, cwd=ROOT).returncode


def _environ() -> dict[str, str]:
    import os

    return dict(os.environ)


def _line(r: Mapping[str, Any]) -> str:
    if "error" in r:
        return f"error: {r['error']}"
    intent, cls = r["intent"], r["class"]
    mark = "✓" if intent["passed"] else ("✗" if intent["measured"] else "?")
    cmark = "✓" if cls["passed"] else ("✗" if cls["measured"] else "?")
    return f"intent {mark} class[{cls['table']}] {cmark} ({r['parameters']} parameters, {r['seconds']:.2f} s)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.intent_scan", description=__doc__.split("\n\n")[0])
    parser.add_argument("--zoo", action="store_true", help="every zoo spec's model")
    parser.add_argument("--extra", action="store_true", help="the models outside the zoo (EXTRA)")
    parser.add_argument("--corpus", action="store_true", help="the corpus bugs' models under their releases")
    parser.add_argument(
        "--all",
        choices=("transformers", "timm", "torchvision"),
        action="append",
        default=[],
        help="every base model of a library at a small config (transformers), one model per timm module, "
        "every torchvision classification model",
    )
    parser.add_argument("--model", help="one target, e.g. transformers:OPTModel")
    parser.add_argument("--config", default="{}", help="its config, as JSON")
    parser.add_argument("--json", type=Path, help="write every result here")
    parser.add_argument(
        "--release", help="LIBRARY==VERSION: run the scan in a subprocess importing that release (benchmarks/corpus.py)"
    )
    args = parser.parse_args(argv)
    if args.release:
        return _under_release(args.release, list(argv if argv is not None else sys.argv[1:]))
    results: list[dict[str, Any]] = []
    jobs: list[tuple[str, dict[str, Any], str]] = []
    if args.zoo:
        jobs += zoo_targets(loadable=True)
    if args.extra:
        jobs += [(t, c, t) for t, c in EXTRA]
    if args.model:
        jobs.append((args.model, json.loads(args.config), args.model))
    sources = {"transformers": transformers_targets, "timm": timm_targets, "torchvision": torchvision_targets}
    for library in args.all:
        jobs += sources[library]()
    for target, config, label in jobs:
        start = time.perf_counter()
        try:
            r = judge_model(target, config)
        except Exception as exc:  # a model this environment cannot build: said, and the scan goes on
            r = {"target": target, "error": f"{type(exc).__name__}: {exc}"}
        r["label"] = label
        results.append(r)
        print(f"{label}: {_line(r)} [{time.perf_counter() - start:.1f} s]", flush=True)
        for d in r.get("deviations", []):
            print(f"    {d['rule']}: {d['name']}: recorded {d['recorded']}, declared {d['declared']} [{d['source']}]")
        for key in ("intent", "class"):
            if key in r and not r[key]["passed"]:
                print(f"    {key}: {r[key]['detail'][:1500]}")
    if args.corpus:
        for row in corpus_rows():
            results.append(row)
            for which in ("buggy", "fixed"):
                r = row[which]
                print(f"{row['id']} {which} {r.get('release', '')}: {_line(r)}", flush=True)
                if "intent" in r:
                    print(f"    intent: {r['intent']['detail'][:800]}")
                    print(f"    class:  {r['class']['detail'][:800]}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
