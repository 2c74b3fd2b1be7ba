"""What a spec's own code prints (stability/run/worker.py): captured in its worker, never between the
report's lines; shown with the spec's failures and kept, bounded, in the JSON and JUnit reports;
let through as it runs with `--no-capture`."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from gate_support import custom, run_check

from stability.run.worker import OUTPUT_HEAD, OUTPUT_TAIL, _Output

FACTORIES = """
import os
import sys

from torch import nn


def chatty(depth, width):
    print("PY-STDOUT building", depth, flush=True)
    print("PY-STDERR warning", file=sys.stderr, flush=True)
    os.write(1, b"C-LEVEL write\\n")
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Sigmoid()) for _ in range(depth)])


def flood(depth, width):
    for i in range(200_000):
        print(f"FLOOD line {i:06d}")
    sys.stdout.flush()
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])


def last_words(depth, width):
    print("LAST-WORDS before the exit", flush=True)
    os._exit(0)
"""

PASSING = "[expect.gradient_arrival]\nlo = 1e-6\nhi = 1e6\n"
FAILING = "[expect.gradient_arrival]\nlo = 0.9\nhi = 1.1\n"  # a sigmoid stack of depth 6: ~0.25 per block


def _folder(tmp: Path, specs: dict[str, str]) -> Path:
    (tmp / "stability_gate_chatty.py").write_text(FACTORIES, encoding="utf-8")
    for name, text in specs.items():
        (tmp / f"{name}.toml").write_text(text, encoding="utf-8")
    return tmp


def _check(folder: Path, *extra: str) -> tuple[Any, dict[str, Any], str]:
    proc = run_check(
        folder,
        "--json",
        folder / "r.json",
        "--junit",
        folder / "r.xml",
        "--profile",
        "ci",
        "-j",
        "2",
        *extra,
        cwd=folder,
    )
    data = json.loads((folder / "r.json").read_text())
    return proc, {s["name"]: s for s in data["specs"]}, (folder / "r.xml").read_text()


@pytest.mark.slow  # check subprocesses; nightly
def test_a_passing_specs_output_stays_out_of_the_terminal_and_a_failing_ones_is_shown_with_it(tmp_path: Path) -> None:
    folder = _folder(
        tmp_path,
        {
            "quiet-pass": custom("quiet-pass", "stability_gate_chatty:chatty", depth="[1, 2]", expect=PASSING),
            "loud-fail": custom("loud-fail", "stability_gate_chatty:chatty", depth="6", expect=FAILING),
        },
    )
    proc, specs, junit = _check(folder)
    assert proc.returncode == 1, proc.stderr
    terminal = proc.stdout + proc.stderr
    for spec in specs.values():  # every print of the spec's code, whichever stream and layer, is in the JSON
        assert (
            "PY-STDOUT building" in spec["output"]
            and "PY-STDERR warning" in spec["output"]
            and "C-LEVEL write" in spec["output"]
        )
    # In the terminal: only the failing spec's output, after its failure, as quoted lines.
    assert (
        terminal.count("PY-STDOUT building 6") >= 1
        and "PY-STDOUT building 1" not in terminal
        and "building 2" not in terminal
    )
    block = terminal[terminal.index("loud-fail.toml::gradient_arrival: expected to hold") :]
    assert (
        "loud-fail.toml's code (3 line(s)" in block
        and "    | PY-STDOUT building 6" in block
        and "    | C-LEVEL write" in block
    )
    assert all(line.startswith("    | ") for line in terminal.splitlines() if "PY-STD" in line or "C-LEVEL" in line)
    # JUnit: the failing testcase carries it as system-out; the passing one does not.
    cases = {Path(tc.get("classname", "")).name: tc for tc in ET.fromstring(junit).iter("testcase")}
    assert "PY-STDOUT building 6" in (cases["loud-fail.toml"].findtext("system-out") or "")
    assert cases["quiet-pass.toml"].find("system-out") is None


@pytest.mark.slow  # a subprocess run read as it prints
def test_no_capture_lets_the_output_through_as_it_runs(tmp_path: Path) -> None:
    folder = _folder(
        tmp_path, {"quiet-pass": custom("quiet-pass", "stability_gate_chatty:chatty", depth="[1, 2]", expect=PASSING)}
    )
    proc, specs, _ = _check(folder, "--no-capture")
    assert proc.returncode == 0, proc.stderr
    assert "PY-STDOUT building" in proc.stdout and "C-LEVEL write" in proc.stdout and "PY-STDERR warning" in proc.stderr
    assert specs["quiet-pass"]["output"] == ""


@pytest.mark.slow  # a factory printing megabytes through a worker
def test_a_flood_of_output_is_kept_bounded_and_the_run_finishes(tmp_path: Path) -> None:
    folder = _folder(
        tmp_path,
        {
            "flood": custom("flood", "stability_gate_chatty:chatty", depth="2", expect=FAILING).replace(
                ":chatty", ":flood"
            )
        },
    )
    proc, specs, _ = _check(folder)  # 200,000 lines (3.4 MB) per case, through a 64 KiB pipe
    assert proc.returncode in (0, 1), proc.stderr
    out = specs["flood"]["output"]
    assert out.startswith("FLOOD line 000000\n") and out.rstrip().endswith("FLOOD line 199999")
    assert "bytes left out ...]" in out and len(out.encode()) <= OUTPUT_HEAD + OUTPUT_TAIL + 100


@pytest.mark.slow  # a subprocess run whose spec exits
def test_the_last_words_of_a_spec_that_exits_are_shown_with_the_error(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"last-words": custom("last-words", "stability_gate_chatty:last_words", depth="2")})
    proc, specs, _ = _check(folder)
    assert proc.returncode == 2, proc.stderr
    assert "LAST-WORDS before the exit" in specs["last-words"]["output"]
    assert "    | LAST-WORDS before the exit" in proc.stdout


@pytest.mark.parametrize("chunks", [[b"abc"], [b"x" * 5000, b"y" * 30000], [b"z" * 10] * 5000])
def test_output_keeps_its_head_and_tail_and_counts_what_it_leaves_out(chunks: list[bytes]) -> None:
    out = _Output()
    for c in chunks:
        out.add(c)
    whole = b"".join(chunks)
    if len(whole) <= OUTPUT_HEAD + OUTPUT_TAIL:
        assert out.text() == whole.decode()
    else:
        dropped = len(whole) - OUTPUT_HEAD - OUTPUT_TAIL
        assert (
            out.text()
            == whole[:OUTPUT_HEAD].decode() + f"\n[... {dropped} bytes left out ...]\n" + whole[-OUTPUT_TAIL:].decode()
        )
