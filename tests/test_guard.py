"""No case can take the run down: a case too big for memory is refused, with its estimate, before
anything is built; a case that runs too long is stopped at the per-case time limit; either way the
run goes on and the case is reported as what it is; a limit longer than the timers can hold is no limit."""

from __future__ import annotations

import re
import signal
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_support import PLAIN, Cli
from spec_support import make_spec

import stability.run.probing
from stability.cli.arg_types import seconds
from stability.errors import CaseError
from stability.families.build import channel_counts
from stability.families.memory import OVERHEAD_PER_BLOCK as _OVERHEAD_PER_BLOCK
from stability.families.memory import SAVED_PER_BLOCK as _SAVED_PER_BLOCK
from stability.run.engine import RunOptions, evaluate, judge
from stability.run.guard import (
    LONGEST_LIMIT_S,
    CaseTimeout,
    case_limit,
    check_budget,
    estimate_bytes,
    memory_budget,
    parse_size,
    time_limit,
)
from stability.spec.case import corner_case
from stability.spec.load import parse_spec
from stability.spec.schema import Spec

SIZE = re.compile(r"\d+(\.\d+)? (KiB|MiB|GiB|TiB)")

SPECS_DIR = Path(__file__).resolve().parent.parent / "specs"


def passing_spec(base: str, name: str) -> str:
    """A spec that passes: orthogonal weights and no activation, so the gradient arrives whole."""
    return (
        base.replace('name = "base"', f'name = "{name}"')
        .replace('family = "plain"', 'family = "plain"\n[block]\nactivation = "identity"')
        .replace("batch = 2", 'batch = 2\nweight_init = ["orthogonal"]')
    )


def _spec(family: str, space: str, block: str = "", path: str = "<string>") -> Spec:
    return make_spec(family, block=block, space=space, file=path, name="g", description="d")


# ----------------------------------------------------------------------------- memory


def test_depth_ten_million_is_refused_through_check(cli: Cli, write_spec: Callable[..., Path], base_spec: str) -> None:
    if memory_budget("cpu") > 400 * 2**30:
        pytest.skip("this machine's default budget would hold 10**7 blocks")
    path = write_spec(base_spec.replace("depth = [1, 4]", "depth = 10000000"))
    code, out, err = cli("check", path, "--profile", "ci")
    assert code == 1, err
    assert "refused: this case needs at least" in out and SIZE.search(out), out
    assert "10000000 blocks" in out and "the memory budget is" in out


def test_depth_ten_million_is_refused_before_anything_grows_with_it(
    cli: Cli, write_spec: Callable[..., Path], base_spec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal comes from the per-block lower bound (guard.check_least): neither the family's
    full estimate (a list of 10**7 channel counts) nor the build runs. Checked by what is called,
    in-process, not by a wall-clock bound."""
    from stability.run import engine, guard

    if memory_budget("cpu") > 400 * 2**30:
        pytest.skip("this machine's default budget would hold 10**7 blocks")

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("ran for a case the lower bound refuses")

    monkeypatch.setattr(guard, "estimate_bytes", never)
    monkeypatch.setattr(engine, "measure_case", never)
    code, out, err = cli(
        "check", write_spec(base_spec.replace("depth = [1, 4]", "depth = 10000000")), "--profile", "ci", "--in-process"
    )
    assert code == 1 and "refused: this case needs at least" in out and "ran for a case" not in out, out + err


def test_width_a_million_is_refused_through_check(cli: Cli, write_spec: Callable[..., Path], base_spec: str) -> None:
    text = (
        base_spec.replace("depth = [1, 4]", "depth = 2")
        .replace("width = [4, 8]", "width = 1000000")
        .replace("batch = 2", "batch = 1")
    )
    code, out, err = cli("check", write_spec(text), "--profile", "ci")
    assert code == 1, err
    assert "refused: this case needs about" in out and re.search(r"\d+\.\d TiB", out), out


@pytest.mark.parametrize(
    ("family", "space", "block"),
    [
        ("plain", "depth = 10000000\nwidth = 4", ""),
        ("plain", "depth = 1\nwidth = 1000000", ""),
        ("preact", "depth = 10000000\nwidth = 4", ""),
        ("highway", "depth = 1000000000\nwidth = 4", ""),
        ("dense", "depth = 10000000\nwidth = 4", ""),  # the dense estimate walks its depth: the bound comes first
        ("postnorm", "depth = 4\nwidth = 64\nbatch = 100000\nspatial = 1000", 'layer = "conv2d"'),
        ("custom", "depth = 100000000\nwidth = 4", 'factory = "custom_blocks:residual_mlp"'),
    ],
    ids=["deep-plain", "wide-plain", "deep-preact", "deeper-highway", "deep-dense", "big-conv", "deep-custom"],
)
def test_a_refused_case_allocates_nothing_and_builds_nothing(
    monkeypatch: pytest.MonkeyPatch, family: str, space: str, block: str
) -> None:
    spec = _spec(family, space, block, path=str(SPECS_DIR / "huge.toml"))

    def must_not_build(*args: object) -> None:
        raise AssertionError("the case was built although it is over the budget")

    monkeypatch.setattr(stability.run.probing, "build", must_not_build)
    case = corner_case(spec)
    tracemalloc.start()
    try:
        record = evaluate(spec, case, RunOptions(memory_budget=8 * 2**30))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2**20, f"the estimate itself allocated {peak} bytes"
    assert record.measurements is None and record.error is not None
    assert record.error.startswith("refused: this case needs") and SIZE.search(record.error)
    verdict = judge(spec, "gradient_arrival", record)
    assert not verdict.passed and "refused" in verdict.detail


@pytest.mark.parametrize(
    ("family", "space", "block"),
    [
        ("plain", "depth = 7\nwidth = 5\nbatch = 3\ninput_width = 2", ""),
        ("postnorm", "depth = 5\nwidth = 6\nbatch = 2\ninput_width = 3", 'skip = "projection"'),
        ("preact", "depth = 4\nwidth = 4\nbatch = 2\nspatial = 5", 'layer = "conv2d"'),
        ("highway", "depth = 9\nwidth = 3\nbatch = 4", ""),
        (
            "dense",
            "depth = 7\nwidth = 4\nbatch = 2\nspatial = 3",
            'layer = "conv2d"\ngrowth = 3\ntransition_every = 2\ncompression = 0.5',
        ),
    ],
)
def test_the_estimate_sums_every_boundary_plus_the_per_block_overhead(family: str, space: str, block: str) -> None:
    """The closed form (no per-block list for non-dense families) equals the plain per-boundary sum."""
    spec = _spec(family, space, block)
    case = corner_case(spec)
    item = 2 if case.dtype in ("bfloat16", "float16") else 8 if case.dtype == "float64" else 4
    conv = spec.block.layer == "conv2d"
    k2 = spec.block.kernel_size**2 if conv else 1
    pixels = case.spatial**2 if conv else 1
    counts = channel_counts(spec, case)
    params = acts = 0
    for c_in, c_out in zip(counts[:-1], counts[1:], strict=True):
        if family == "dense":
            params += c_in * spec.block.growth * k2
        else:
            params += (1 if family == "plain" else 2) * c_in * c_out * k2 + (
                c_in * c_out if spec.block.skip == "projection" else 0
            )
        acts += _SAVED_PER_BLOCK[family] * case.batch * max(c_in, c_out) * pixels
    expected = (3 * params + acts) * item + case.depth * _OVERHEAD_PER_BLOCK[family]
    assert estimate_bytes(spec, case) == expected


def test_a_case_inside_the_budget_is_not_refused() -> None:
    spec = _spec("plain", "depth = 3\nwidth = 4\nbatch = 2")
    check_budget(spec, corner_case(spec), 2**30)
    with pytest.raises(CaseError, match="refused"):
        check_budget(spec, corner_case(spec), 2**10)


#: Every form the hand-written parser took, with the meaning it had: a lone letter is binary.
OLD_FORMS = {
    "4GiB": 4 * 2**30,
    "4gib": 4 * 2**30,
    " 4 GiB ": 4 * 2**30,
    "4G": 4 * 2**30,
    "4 g": 4 * 2**30,
    "512MiB": 512 * 2**20,
    "512M": 512 * 2**20,
    "64k": 64 * 2**10,
    "64KiB": 64 * 2**10,
    "2T": 2 * 2**40,
    "2TiB": 2 * 2**40,
    "1.5GiB": 3 * 2**29,
    "1e3MiB": 1000 * 2**20,
    "1e9": 10**9,
    "4096": 4096,
    "1.5": 1,
}
#: What pydantic's ByteSize adds: decimal units with a B, the binary ones past TiB, bits.
NEW_FORMS = {"4GB": 4 * 10**9, "4gb": 4 * 10**9, "512MB": 512 * 10**6, "64kB": 64_000, "2b": 2, "1PiB": 2**50}
NEW_FORMS |= {"8Gbit": 10**9, "8Gibit": 2**30}


@pytest.mark.parametrize(("text", "size"), [*OLD_FORMS.items(), *NEW_FORMS.items()])
def test_a_size_is_read_as_pydantic_bytesize_reads_it_and_a_lone_letter_stays_binary(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("inf", "'inf' is not a unit of size"),
        ("nan", "'nan' is not a unit of size"),
        ("4XB", "'xb' is not a unit of size"),
        ("4GiB of RAM", "'gibofram' is not a unit of size"),
        ("1,5GiB", "'1,5' is not a number"),
        ("GiB", "'' is not a number"),
        ("1e400", "is not a finite size"),
        ("-1", "is not a positive size"),
        ("0", "is not a positive size"),
        ("0.5", "is not a positive size"),
        ("1bit", "is not a positive size"),
    ],
)
def test_what_is_not_a_size_is_refused_saying_why(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)):
        parse_size(text)


def test_check_takes_a_decimal_size_and_refuses_a_case_over_it(
    cli: Cli, write_spec: Callable[..., Path], base_spec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`4GB` was refused as not a size; now it is 4·10⁹ bytes, on the command line and in the variable."""
    spec = write_spec(base_spec)
    code, out, err = cli("check", spec, "--profile", "ci", "--in-process", "--memory-budget", "1kB")
    assert code == 1 and "the memory budget is 1000 B" in out, (out, err)
    monkeypatch.setenv("STABILITY_MEMORY_BUDGET", "4GB")
    assert memory_budget("cpu") == 4 * 10**9


def test_batch_norm_on_one_value_per_channel_is_refused_by_the_loader(
    cli: Cli, write_spec: Callable[..., Path], base_spec: str
) -> None:
    """Batch norm in train mode with one value per channel raises inside torch (a ValueError, not
    the RuntimeError the probe wraps); it once escaped as a traceback. The loader now refuses the
    spec up front, naming the key and the fix."""
    text = base_spec.replace('family = "plain"', 'family = "plain"\n[block]\nnorm = "batch"').replace(
        "batch = 2", "batch = 1"
    )
    bad = write_spec(text, "a_batch_of_one.toml")
    code, out, err = cli("check", bad, "--profile", "ci")
    assert code == 2 and "Traceback" not in out + err, err
    assert f"{bad}: space.batch = [1, 1]: batch norm in train mode needs more than one value per channel" in err
    assert "start the range at 2" in err


# ----------------------------------------------------------------------------- time


def test_a_slow_case_is_stopped_at_the_case_timeout_and_the_run_goes_on(
    cli: Cli, custom_spec: Callable[..., Path], factory_dir: Path, base_spec: str
) -> None:
    slow = custom_spec("slow", depth="3")
    fine = factory_dir / "zz_fine.toml"  # runs after the slow one (paths are checked in order)
    fine.write_text(passing_spec(base_spec, "fine-after-slow"))
    code, out, err = cli("check", slow, fine, "--case-timeout", "0.5", "--profile", "ci")
    assert code == 1, err  # stopped by the limit (the message below), not after its blocks' 10 s sleeps
    assert "ran past the per-case time limit of 0.5 s" in out
    assert "raise --case-timeout" in out
    row = next(line for line in out.splitlines() if "fine-after-slow" in line)
    assert "✓" in row, out
    assert "1 met, 1 not met" in out


def test_a_factory_that_is_slow_to_build_is_a_timeout_not_a_bad_spec(
    cli: Cli, custom_spec: Callable[..., Path]
) -> None:
    code, out, err = cli("check", custom_spec("slow_to_build", depth="2"), "--case-timeout", "0.3", "--profile", "ci")
    assert code == 1, err
    assert "ran past the per-case time limit" in out


@pytest.mark.parametrize("where", ["--in-process", pytest.param("--jobs=1", marks=pytest.mark.slow)])
def test_a_spec_raises_the_run_case_timeout_to_its_own(cli: Cli, custom_spec: Callable[..., Path], where: str) -> None:
    """`[probe] case_timeout` raises the run's limit for the spec's cases (guard.case_limit), on the
    in-process path and in the parent that stops a worker alike; without it the same case is stopped."""
    expect = "\n[expect.gradient_arrival]\nlo = 1e-6\nhi = 1e6\n"
    plain_case = custom_spec("built_in_a_second", depth="2", expect=expect)
    code, out, err = cli("check", plain_case, "--case", "depth=2", "--case-timeout", "0.3", where)
    assert code == 1 and "ran past the per-case time limit of 0.3 s" in out, out + err
    assert "[probe] case_timeout" in out
    own = custom_spec("built_in_a_second", depth="2", expect="\n[probe]\ncase_timeout = 60\n" + expect)
    code, out, err = cli("check", own, "--case", "depth=2", "--case-timeout", "0.3", where)
    assert code == 0 and "1 met, 0 not met" in out, out + err


def test_a_spec_case_timeout_never_lowers_the_run_limit() -> None:
    from stability.run.guard import case_limit

    spec = parse_spec(
        'name = "t"\ndescription = "t"\nfamily = "plain"\n[space]\ndepth = 2\nwidth = '
        "4\n[probe]\ncase_timeout = "
        "10\n[expect.gradient_arrival]\n"
    )
    assert case_limit(spec, 120.0) == 120.0
    assert case_limit(spec, 1.0) == 10.0
    assert case_limit(spec, None) is None  # --case-timeout 0: no limit, whatever the spec says


@pytest.mark.parametrize("where", ["--in-process", "--jobs=1"])
def test_a_spec_raises_the_run_threads_to_its_own(cli: Cli, custom_spec: Callable[..., Path], where: str) -> None:
    """`[probe] threads` gives the spec's cases that many torch threads (guard.case_threads, asked by
    engine.evaluate) in a worker and in-process alike; without it they run with the run's one."""
    import torch

    before = torch.get_num_threads()
    expect = "\n[expect.gradient_arrival]\nlo = 1e-6\nhi = 1e6\n"
    code, out, err = cli(
        "check", custom_spec("needs_three_threads", depth="2", expect=expect), "--case", "depth=2", where
    )
    assert code == 1 and "ran with 1 torch threads" in out, out + err
    own = custom_spec("needs_three_threads", depth="2", expect="\n[probe]\nthreads = 3\n" + expect)
    code, out, err = cli("check", own, "--case", "depth=2", where)
    assert code == 0 and "1 met, 0 not met" in out, out + err
    torch.set_num_threads(before)


def test_a_spec_threads_never_lower_the_run_threads_and_are_put_back() -> None:
    import torch

    from stability.run.guard import case_threads

    spec = parse_spec(
        'name = "t"\ndescription = "t"\nfamily = "plain"\n[space]\ndepth = 2\nwidth = 4\n[probe]\nthreads = '
        "2\n[expect.gradient_arrival]\n"
    )
    before = torch.get_num_threads()
    try:
        for run, inside in ((1, 2), (2, 2), (3, 3)):
            torch.set_num_threads(run)
            with case_threads(spec):
                assert torch.get_num_threads() == inside
            assert torch.get_num_threads() == run
        with pytest.raises(RuntimeError), case_threads(spec):  # put back when the case raises, too
            raise RuntimeError
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_time_limit_interrupts_a_python_loop_and_restores_the_alarm() -> None:
    previous = signal.getsignal(signal.SIGALRM)
    t0 = time.perf_counter()
    with pytest.raises(CaseTimeout, match="per-case time limit of 0.2 s"):
        with time_limit(0.2):
            while True:
                time.sleep(0.01)
    assert time.perf_counter() - t0 > 0.15  # never early (a loaded machine only makes it later); the loop is endless
    assert signal.getsignal(signal.SIGALRM) is previous
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


@pytest.mark.parametrize("seconds", [None, 0, float("inf"), float("nan")])
def test_no_time_limit(seconds: float | None) -> None:
    with time_limit(seconds):
        time.sleep(0.05)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_time_limit_is_a_no_op_off_the_main_thread() -> None:
    errors: list[BaseException] = []

    def body() -> None:
        try:
            with time_limit(0.01):
                time.sleep(0.1)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    worker = threading.Thread(target=body)
    worker.start()
    worker.join()
    assert errors == []


def test_the_time_limit_never_breaks_an_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An import cut short leaves a half-initialised module in sys.modules for the rest of the run
    (this happened with torch's lazy import of sympy during a first backward pass): the alarm
    waits for the import to finish, then fires."""
    (tmp_path / "stability_slow_import.py").write_text(
        "import time\nfor _ in range(40):\n    time.sleep(0.01)\nLAST = 'fully imported'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "stability_slow_import", raising=False)
    t0 = time.perf_counter()
    with pytest.raises(CaseTimeout):
        with time_limit(0.1):
            import stability_slow_import  # noqa: F401

            while True:
                time.sleep(0.01)
    assert time.perf_counter() - t0 >= 0.4  # the import's 0.4 s ran to the end
    assert sys.modules["stability_slow_import"].LAST == "fully imported"


# ----------------------------------------------------------------------------- a time limit longer than the timers hold


def test_a_limit_longer_than_the_timers_hold_is_no_limit() -> None:
    spec = parse_spec(PLAIN.format(extra="[probe]\ncase_timeout = 1e308\n", expect=""))
    assert case_limit(spec, 120.0) is None  # raised to 1e308: no limit, not an overflow
    assert case_limit(spec, 0.0) is None
    small = parse_spec(PLAIN.format(extra="[probe]\ncase_timeout = 900\n", expect=""))
    assert case_limit(small, 120.0) == 900.0 and case_limit(small, LONGEST_LIMIT_S * 2) is None
    with time_limit(1e308):  # the in-process timer (and a train.seconds = 1e308) sets nothing it cannot hold
        pass
    assert seconds("1e308") == 1e308


def test_case_timeout_1e308_runs_the_spec_in_workers_and_exits_0(write_spec: Callable[..., Path], cli: Cli) -> None:
    """It was an OverflowError in the parent's wait on its workers, exit 3 (the spec's limit and the
    option's meet in `case_limit`)."""
    path = write_spec(PLAIN.format(extra="[probe]\ncase_timeout = 1e308\n", expect=""))
    code, out, err = cli("check", path, "--profile", "ci", "-q", "--jobs", "1", "--case-timeout", "1e308")
    assert code == 0 and "1 met" in out and "Traceback" not in err, (code, out, err)
