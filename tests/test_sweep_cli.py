"""`stability sweep` refuses what `stability check` refuses, with the same exit codes, before
anything runs: the factory rule, bad options, bad scheduler addresses, unbounded workers, seeds
and grids. Each attack is a real CLI call (`stability.cli.main`, or a subprocess where the run must
be timed), with its exit code and its one line asserted, and nothing created beside the inputs."""

from __future__ import annotations

import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from gate_support import SCALAR_CHAIN

from stability.cli import main
from stability.cli.arg_types import cores
from stability.cli.sweep import MAX_SEEDS
from stability.cli.sweep_backend import WORKERS_PER_CORE
from stability.run.store import Store

LINEAR = SCALAR_CHAIN

CUSTOM = """\
name = "{name}"
description = "a custom factory"
family = "custom"
[block]
factory = "{factory}"
{extra}
[space]
depth = [1, 8]
width = 4
batch = 2
[expect.gradient_arrival]
lo = 1e-6
hi = 1e6
"""

LINEAR_FACTORY = (
    "from torch import nn\n\n\ndef make(depth, width):\n    return "
    "nn.Sequential(*[nn.Linear(width, width) for _ in range(depth)])\n"
)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"" for p in sorted(folder.rglob("*"))}


@pytest.fixture
def sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """sweep(*args) → (exit code, stdout, stderr) of `stability sweep` run in tmp_path."""
    monkeypatch.chdir(tmp_path)

    def run(*args: str | Path) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["sweep", *map(str, args)])
        out, err = capsys.readouterr()
        return code, out, err

    yield run


def _refused(sweep: object, tmp_path: Path, args: list[str], words: str, *, spec: str = LINEAR) -> str:
    path = tmp_path / "spec.toml"
    path.write_text(spec, encoding="utf-8")
    before = _files(tmp_path)
    code, out, err = sweep("spec.toml", *args, "--db", "r.sqlite")  # type: ignore[operator]
    assert code == 2, out + err
    assert err.startswith("stability: error: ") and err.count("\n") == 1 and "Traceback" not in out + err, err
    assert words in err, err
    assert _files(tmp_path) == before  # no store, no report, nothing else: refused before anything ran
    return str(err)


def test_a_factory_outside_your_code_is_refused_as_check_refuses_it(sweep: object, tmp_path: Path) -> None:
    marker = tmp_path / "owned"
    spec = CUSTOM.format(name="evil", factory="os:system", extra=f'factory_args = {{ command = "touch {marker}" }}')
    err = _refused(
        sweep,
        tmp_path,
        ["--over", "depth=1,2", "--serial"],
        "block.factory = 'os:system': module 'os' was not found as a .py file of your own code",
        spec=spec,
    )
    assert "Threat model" in err and not marker.exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ["--workers", "10000"],
            f"--workers 10000: give 1 to {WORKERS_PER_CORE * cores()} ({WORKERS_PER_CORE} per usable core), "
            "or --serial",
        ),
        (["--workers", "0"], "--workers 0: give 1 to"),
        (
            ["--workers", "2", "--scheduler", "tcp://127.0.0.1:8786"],
            "--workers sizes a local cluster, and --scheduler uses a running one",
        ),
        (["--seeds", "300000"], f"--seeds 300000: give at least 1 seed per point, and at most {MAX_SEEDS:,}"),
        (["--seeds", "-3"], "--seeds -3: give at least 1 seed per point"),
        (
            ["--first-seed", "9223372036854775807"],
            "--first-seed 9223372036854775807: seeds lie in [0, 2**63 - 1], so with --seeds 8 the first is "
            "at most 9223372036854775800",
        ),
        (["--first-seed", "-1"], "--first-seed -1: seeds lie in [0, 2**63 - 1]"),
        (
            [
                "--over",
                "width=lin:1:1000:1000",
                "--over",
                "batch=lin:1:1000:1000",
                "--over",
                "init_gain=lin:0.5:1:1000",
            ],
            "--over: the grid has 1000 × 1000 × 1000 = 1,000,000,000 points; a sweep takes at most 100,000",
        ),
        (
            ["--over", "init_gain=lin:0.5:3:1000000000"],
            "--over init_gain=lin:0.5:3:1000000000: 1000000000 values; an axis has at most 10,000",
        ),
        (
            ["--over", "width=lin:1:1000:1000", "--over", "batch=lin:1:100:100", "--seeds", "20"],
            "--seeds 20 on 100,000 grid point(s) is 2,000,000 probes; a sweep runs at most 1,000,000",
        ),
        (["--over", "depth=1e300"], "--over depth=1e300: 1e+300 is more than depth can be"),
        (["--scheduler", "garbage"], "--scheduler 'garbage': not an address; give tcp://HOST:PORT"),
        (["--scheduler", "tcp://"], "--scheduler tcp://: needs a host and a port number (1-65535)"),
        (
            ["--scheduler", "http://example.com:80"],
            "--scheduler http://example.com:80: 'http' is not a Dask scheme (tcp, tls, ws, wss, ucx)",
        ),
        (
            ["--scheduler", "tcp://127.0.0.1:notaport"],
            "--scheduler tcp://127.0.0.1:notaport: needs a host and a port number (1-65535)",
        ),
        (["--scheduler", "tcp://127.0.0.1:99999"], "--scheduler tcp://127.0.0.1:99999: needs a host and a port number"),
        (["--case-timeout", "-1"], "is not a time limit; give seconds ≥ 0"),
        (["--html", ""], "--html '': an empty value"),
        (
            ["--over", "weight_init=identity,orthogonal", "--over", "init_gain=0.5"],
            "--over init_gain: it applies to weight_init = \"identity\", and this point's init is 'orthogonal'",
        ),
        (
            ["--over", "weight_init=kaiming_normal", "--over", "init_std=0.1,0.2"],
            "--over init_std: it applies to weight_init = \"normal\", and this point's init is 'kaiming_normal'",
        ),
        (["--compare", "a", "b"], "--compare reads budgets from the store and runs nothing; drop SPEC"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(
    sweep: object, tmp_path: Path, args: list[str], words: str
) -> None:
    base = [] if "--over" in args or "--compare" in args else ["--over", "depth=1,2"]
    _refused(sweep, tmp_path, [*base, *args], words)


def test_an_axis_that_cannot_change_a_custom_factory_is_refused_up_front(sweep: object, tmp_path: Path) -> None:
    (tmp_path / "stability_hardening_linear.py").write_text(LINEAR_FACTORY, encoding="utf-8")
    spec = CUSTOM.format(name="custom", factory="stability_hardening_linear:make", extra="")
    words = "--over init_std: spec.toml is a custom factory, which builds its own init, so init_std changes nothing"
    _refused(sweep, tmp_path, ["--over", "depth=1,2", "--over", "init_std=0.1,0.2"], words, spec=spec)


def test_a_bad_memory_budget_in_the_environment_is_refused_as_check_refuses_it(
    sweep: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STABILITY_MEMORY_BUDGET", "lots")
    _refused(
        sweep,
        tmp_path,
        ["--over", "depth=1,2", "--serial"],
        "STABILITY_MEMORY_BUDGET='lots': write a size like 4GiB or 512MiB",
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_scheduler_is_one_line_naming_the_time_limit_dask_was_given(
    sweep: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Structural, without waiting it out: the client is asked to give up after the time the
    message states, and what it raises then is the one line."""
    pytest.importorskip("distributed")
    import distributed

    from stability.run.sweep_exec import CONNECT_TIMEOUT_S

    asked: list[object] = []

    def client(address: str, *, timeout: object) -> None:
        asked.append((address, timeout))
        raise OSError(f"Timed out trying to connect to {address} after {timeout}")

    monkeypatch.setattr(distributed, "Client", client)
    port = _free_port()
    words = f"--scheduler tcp://127.0.0.1:{port}: no Dask scheduler answered there within {CONNECT_TIMEOUT_S:g} s"
    _refused(sweep, tmp_path, ["--over", "depth=1", "--scheduler", f"tcp://127.0.0.1:{port}"], words)
    assert asked == [(f"tcp://127.0.0.1:{port}", f"{CONNECT_TIMEOUT_S}s")]


def test_an_address_that_answers_but_is_not_dask_is_one_line(sweep: object, tmp_path: Path) -> None:
    """A web server (or anything else) at the address: Dask's handshake reads its bytes as a frame
    length; the sweep says the address is not a scheduler."""
    pytest.importorskip("distributed", reason="Dask distributed is not installed: pip install -e '.[sweep]'")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(30)
    port = server.getsockname()[1]

    def answer() -> None:
        try:
            conn, _ = server.accept()
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n" * 4)
                time.sleep(0.3)
        except OSError:
            pass

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        _refused(
            sweep,
            tmp_path,
            ["--over", "depth=1", "--scheduler", f"tcp://127.0.0.1:{port}"],
            f"--scheduler tcp://127.0.0.1:{port}: no Dask scheduler answered there",
        )
    finally:
        server.close()
        thread.join(5)


def test_the_largest_seed_a_spec_may_name_runs_and_is_stored(sweep: object, tmp_path: Path) -> None:
    (tmp_path / "spec.toml").write_text(LINEAR, encoding="utf-8")
    db = tmp_path / "r.sqlite"
    code, out, err = sweep(
        "spec.toml",
        "--over",
        "depth=1,2",
        "--seeds",
        "1",
        "--first-seed",
        str(2**63 - 1),
        "--serial",
        "--no-budget",
        "-q",
        "--db",
        db,
    )  # type: ignore[operator]
    assert code == 0, out + err
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT DISTINCT seed FROM probes").fetchall() == [(2**63 - 1,)]


OTHER = LINEAR.replace('name = "scalar-chain"', 'name = "other-chain"').replace("init_gain = 0.9", "init_gain = 0.8")


def test_resume_with_a_spec_and_a_grid_runs_that_sweep_not_another_specs(sweep: object, tmp_path: Path) -> None:
    (tmp_path / "spec.toml").write_text(LINEAR, encoding="utf-8")
    (tmp_path / "other.toml").write_text(OTHER, encoding="utf-8")
    db = tmp_path / "r.sqlite"
    other_args = ["sweep", "other.toml", "--over", "depth=1,2", "--seeds", "1", "--no-budget", "--db", str(db)]
    with Store(db) as store:
        other_id = store.start_sweep("v", other_args)  # another spec's sweep, interrupted
    code, out, err = sweep(
        "spec.toml", "--over", "depth=1,2", "--seeds", "1", "--no-budget", "--db", db, "--resume", "--serial", "-q"
    )  # type: ignore[operator]
    assert code == 0, out + err
    assert "no unfinished sweep of this spec and grid is recorded" in out and "resuming" not in out
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT DISTINCT spec_name FROM probes").fetchall() == [("scalar-chain",)]
    with Store(db) as store:
        assert store.last_unfinished() == (other_id, other_args)  # still waiting for its own --resume
    # and the same command with --resume again now resumes nothing of the other spec either
    code, out, _ = sweep(*other_args[1:], "--resume", "--serial", "-q")  # type: ignore[operator]
    assert code == 0 and f"resuming sweep {other_id}: " in out
    with Store(db) as store:
        assert store.last_unfinished() is None


def test_resume_with_a_spec_picks_the_unfinished_sweep_of_exactly_that_command(sweep: object, tmp_path: Path) -> None:
    (tmp_path / "spec.toml").write_text(LINEAR, encoding="utf-8")
    db = "r.sqlite"  # (in tmp_path, the sweep's folder)
    mine = ["sweep", "spec.toml", "--over", "depth=1,2", "--seeds", "1", "--no-budget", "--db", db]
    with Store(db) as store:
        mine_id = store.start_sweep("v", mine)
        store.start_sweep(
            "v", ["sweep", "spec.toml", "--over", "depth=3", "--seeds", "1", "--no-budget", "--db", str(db)]
        )  # a later one, another grid
    # the per-case time limit is the current command's, like the backend, and not part of what is matched
    code, out, err = sweep(*mine[1:], "--resume", "--serial", "--case-timeout", "60", "-q")  # type: ignore[operator]
    assert code == 0, out + err
    assert f"resuming sweep {mine_id}: stability {' '.join(mine)} --serial --case-timeout 60 -q" in out
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT DISTINCT point FROM probes ORDER BY point").fetchall() == [
            ('{"depth":1}',),
            ('{"depth":2}',),
        ]
        assert conn.execute("SELECT id FROM sweeps WHERE finished IS NULL").fetchall() == [(mine_id + 1,)]


def test_a_store_path_with_brackets_is_shown_as_written_not_read_as_markup(sweep: object, tmp_path: Path) -> None:
    """`x[/y].sqlite` is a file name: every line naming the store shows it, none reads its `[/y]` as
    rich's closing tag (MarkupError, a traceback after the sweep ran)."""
    (tmp_path / "spec.toml").write_text(LINEAR, encoding="utf-8")
    db = "x[/y]##[add-mask]z.sqlite"
    code, out, err = sweep(
        "spec.toml", "--over", "depth=1,2", "--seeds", "1", "--no-budget", "--db", db, "--resume", "--serial", "-q"
    )  # type: ignore[operator]
    assert code == 0, out + err
    assert "Traceback" not in out + err
    assert out.count("x[/y]##\\[add-mask]z.sqlite") == 2, out  # the --resume line and the summary line
    assert (tmp_path / db).is_file()
