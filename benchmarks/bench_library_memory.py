"""The library models' memory estimate against the measured peak (docs/library-models.md).

    python -m benchmarks.bench_library_memory [NAME ...]

Each row writes a spec (GPT-2 or Llama configs at shipped widths, 1-4 layers), then runs, one at a
time, `stability check SPEC --in-process --case …` twice: once with `--memory-budget 1MiB`, whose
refusal prints the guard's estimate (computed in that process, as in a real run), and once with a
budget that lets it run, under `/usr/bin/time -v` for its peak resident set ("Maximum resident set
size"). Prints one Markdown row per run: estimate, measured, estimate/measured, and the load
average. Keep each row under ~8 GB peak on a shared machine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

GPT2 = (
    'model = "transformers:GPT2Model"\nconfig = {{ n_embd = "width", n_layer = "depth", n_head = '
    '"width/64", n_positions = 1024, vocab_size = 50257 }}'
)
LLAMA = (
    'model = "transformers:LlamaModel"\n'
    'config = {{ hidden_size = "width", intermediate_size = {ffn}, num_hidden_layers = "depth", '
    'num_attention_heads = "width/128", num_key_value_heads = "width/128", '
    "vocab_size = 32000 }}"
)
ENSEMBLE = '\n[probe]\nensemble = 2\n\n[expect.variance_growth]\nmax_growth = "exponential"\n'
#: name → (model block, width, depth, tokens, an ensemble besides the case)
ROWS = {
    "gpt2-768-1": (GPT2, 768, 1, 128, False),
    "gpt2-768-4": (GPT2, 768, 4, 128, False),
    "gpt2-768-12": (GPT2, 768, 12, 128, False),
    "gpt2-1600-4": (GPT2, 1600, 4, 128, False),
    "gpt2-768-4-ensemble": (GPT2, 768, 4, 128, True),
    "llama-2048-2": (LLAMA.replace("{ffn}", "5632"), 2048, 2, 128, False),
    "llama-4096-1": (LLAMA.replace("{ffn}", "11008"), 4096, 1, 128, False),
    "llama-4096-2": (LLAMA.replace("{ffn}", "11008"), 4096, 2, 128, False),
    "llama-4096-4": (LLAMA.replace("{ffn}", "11008"), 4096, 4, 128, False),
    "llama-2048-2-ensemble": (LLAMA.replace("{ffn}", "5632"), 2048, 2, 128, True),
    "gpt2-768-4-512": (GPT2, 768, 4, 512, False),
    "llama-4096-2-512": (LLAMA.replace("{ffn}", "11008"), 4096, 2, 512, False),
}
SPEC = """\
name = "{name}"
description = "memory measurement"
family = "library"

[block]
layer = "tokens"
{model}

[space]
depth = {depth}
width = {width}
batch = 1
tokens = {tokens}

[expect.gradient_arrival]
lo = 1e-30
hi = 1e30
{extra}"""
SIZE = re.compile(r"needs about ([\d.]+) (B|KiB|MiB|GiB|TiB)")
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def stability(*args: str) -> list[str]:
    return [sys.executable, "-m", "stability", "check", *args, "--in-process", "--profile", "ci", "--case-timeout", "0"]


def row(name: str, folder: Path) -> str:
    model, width, depth, tokens, ensemble = ROWS[name]
    spec = folder / f"{name}.toml"
    spec.write_text(
        SPEC.format(
            name=name, model=model.format(), depth=depth, width=width, tokens=tokens, extra=ENSEMBLE if ensemble else ""
        )
    )
    case = f"depth={depth},width={width},batch=1,tokens={tokens},seed=0"
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "GITHUB_ACTIONS", "STABILITY_PROFILE")}
    refused = subprocess.run(
        stability(str(spec), "--case", case, "--memory-budget", "1MiB"),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    m = SIZE.search(refused.stdout + refused.stderr)
    if m is None:
        return f"| {name} | no estimate: {(refused.stdout + refused.stderr)[-300:]!r} |"
    estimate = float(m.group(1)) * UNITS[m.group(2)]
    load = Path("/proc/loadavg").read_text().split()[0]
    run = subprocess.run(
        ["/usr/bin/time", "-v", *stability(str(spec), "--case", case, "--memory-budget", "20GiB")],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    peak = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", run.stderr).group(1)) * 1024  # type: ignore[union-attr]
    seconds = re.search(r"Elapsed \(wall clock\) time.*: ([\d:.]+)", run.stderr).group(1)  # type: ignore[union-attr]
    numbers = (
        f"{estimate / 2**30:.2f} GiB | {peak / 2**30:.2f} GiB | {estimate / peak:.2f} | {seconds} | "
        f"{load} | exit {run.returncode}"
    )
    return f"| {name} | {width} | {depth} | {tokens} | {'2' if ensemble else '1'} | {numbers} |"


def main() -> None:
    names = sys.argv[1:] or list(ROWS)
    print(
        "| config | width | layers | tokens | models | estimate | measured peak RSS | ratio | wall | load (1 min) | |"
    )
    print("| --- | --: | --: | --: | --: | --: | --: | --: | --: | --: | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            print(row(name, Path(tmp)), flush=True)


if __name__ == "__main__":
    main()
