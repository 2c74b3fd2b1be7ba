"""Worker processes: every job (a spec, a sweep point) runs in a fresh child process that the
parent supervises (the `WorkerExecutor` of stability.run.executor's contract).

Children are forked from a multiprocessing *forkserver* that has already imported torch, Hypothesis
and the harness and run one tiny probe (`stability.run._forkserver`), and has never imported user
code. So a child starts in milliseconds, and nothing a spec's factory does to the process (torch's
default dtype, thread count, deterministic flags, RNG state, `sys.path`, `sys.modules`, threads it
leaves running, signal handlers) can reach another job: each job gets its own child, which dies
when the job is done.

The job goes to the child as pickled bytes, unpickled only after the child has imported the run's
plugins (stability.run.plugins), so a plugin's invariants and families exist there too. The protocol
back is one pipe per child carrying JSON text, never pickles (the spec's code runs in the child, and
unpickling what it sends could run code in the parent), child → parent: the job's own events
(`Job.execute`: `{"kind": "start", "case": …}` before a case, `{"kind": "case", "record": …}` after
it, and any others, e.g. a spec's `{"kind": "result", …}`), then

    {"kind": "cpu", "seconds": …}      the child's own CPU seconds, just before it is done
    {"kind": "done", "final": …}       the job's final data
    {"kind": "crash", "what": …}       the job's code exited or raised what the harness did not expect

and, unless capture is off, a second pipe carrying the child's file descriptors 1 and 2: what the
spec's factory and blocks print (Python, warnings and C-level writes alike) never reaches the
terminal between the report's lines; the parent keeps the first `OUTPUT_HEAD` and the last
`OUTPUT_TAIL` bytes of it in the trace, which the reports show with the spec's failures. The
parent concludes every job itself (`Job.conclude`: a spec's expectations are judged again from the
streamed records, stability.run.audit).

The parent enforces the per-case time limit itself: a case still running `case_timeout` +
`KILL_AFTER_S` seconds after its "start" is stopped (SIGTERM, then SIGKILL after `TERM_GRACE_S`),
whatever the child's code does with the in-process timeout exception. That case fails with its
reason (and the job's unfinished work with it), and the other jobs go on. A child that exits, is
killed by a signal (the kernel's out-of-memory killer, a segfault) or raises something the harness
did not expect, before it reported, makes a spec error (exit code 2) naming the case it was
running. After "done" the child leaves with `os._exit`, so a thread the factory left running
cannot keep anything alive; the parent kills it if it lingers.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import multiprocessing.connection
import multiprocessing.spawn
import os
import pickle
import resource
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from stability.run.executor import Executor, Job, Outcome, Trace
from stability.run.guard import past_limit
from stability.run.processes import get_context
from stability.run.streams import Tolerant

__all__ = ["WorkerExecutor", "KILL_AFTER_S", "TERM_GRACE_S", "default_threads", "deep_stack"]

#: How long past the per-case time limit the parent waits before stopping the child (the child's
#: own alarm normally ends the case at the limit, with a cleaner message).
KILL_AFTER_S = 0.5
#: Between SIGTERM and SIGKILL.
TERM_GRACE_S = 0.2
#: How much of a spec's own output the reports keep: its first and its last this many bytes.
OUTPUT_HEAD = 4096
OUTPUT_TAIL = 16384


class _Output:
    """A child's captured output, bounded however much the spec's code writes: the first
    `OUTPUT_HEAD` bytes, the last `OUTPUT_TAIL`, and how many were left out between."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = OUTPUT_HEAD - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        if len(self.tail) > OUTPUT_TAIL:
            cut = len(self.tail) - OUTPUT_TAIL
            self.dropped += cut
            del self.tail[:cut]

    def text(self) -> str:
        middle = f"\n[... {self.dropped} bytes left out ...]\n" if self.dropped else ""
        return bytes(self.head).decode(errors="replace") + middle + bytes(self.tail).decode(errors="replace")


def default_threads() -> int:
    """Threads per worker: $STABILITY_THREADS if set, else 1 (one worker per core is faster on a
    shared runner than a few workers each spinning several intra-op threads)."""
    raw = os.environ.get("STABILITY_THREADS", "").strip()
    if not raw:
        return 1
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        from stability.errors import UsageError

        raise UsageError(f"STABILITY_THREADS={raw!r}: write a whole number of threads, at least 1")
    return n


# ----------------------------------------------------------------------------- the child


def _json(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), allow_nan=True).encode()


def _child_main(
    conn: Connection, payload: bytes, env: dict[str, str], cwd: str, threads: int, output: Connection | None = None
) -> None:
    """Runs in the child: send file descriptors 1 and 2 into `output` (when capturing), adopt the
    parent's environment and folder, load the run's plugins, set the threads, run the job, send
    everything back, and leave without waiting for anything the job's code left running."""
    code = 0
    if output is not None:
        os.dup2(output.fileno(), 1)
        os.dup2(output.fileno(), 2)
        output.close()
    else:  # --no-capture: the spec's prints reach the terminal, which may be a closed pipe
        sys.stdout, sys.stderr = Tolerant(sys.stdout), Tolerant(sys.stderr)
    deep_stack()
    try:
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        import torch

        from stability.run.plugins import load_plugins

        load_plugins()  # the run's plugins ($STABILITY_PLUGINS), before the job names their entries
        job: Job = pickle.loads(payload)
        torch.set_num_threads(threads)
        if getattr(getattr(job, "options", None), "deterministic", False):
            torch.use_deterministic_algorithms(True)
        final = job.execute(lambda message: conn.send_bytes(_json(message)))
        usage = resource.getrusage(resource.RUSAGE_SELF)
        conn.send_bytes(_json({"kind": "cpu", "seconds": usage.ru_utime + usage.ru_stime}))
        conn.send_bytes(_json({"kind": "done", "final": final}))
    except KeyboardInterrupt:
        code = 130
    except SystemExit as exc:  # sys.exit in a block's forward: the spec's code may not end the run
        code = 3
        _send(conn, {"kind": "crash", "what": f"the spec's code called sys.exit({exc.code!r})"})
    except BaseException as exc:  # noqa: BLE001 -- anything else is reported, never a traceback
        code = 4
        _send(conn, {"kind": "crash", "what": " ".join(f"{type(exc).__name__}: {exc}".split())})
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 -- a closed pipe must not change the result
                pass
        os._exit(code)


#: The C stack a worker's main thread may grow to: torch frees an autograd graph that carries
#: Python hooks (the probe's, at every boundary) recursively, ~100 bytes of stack per node, so
#: glibc's usual 8 MiB limit ended a depth-62,500 stack in SIGSEGV (reproduced in plain torch with
#: `Tensor.register_hook` on every block); with this limit a depth-1,000,000 graph frees.
STACK_BYTES = 512 << 20


def deep_stack() -> None:
    """Raise this process's soft stack limit to `STACK_BYTES` (never above the hard limit, never
    lower than it was). Only the limit: no memory is taken until the stack grows."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
        want = STACK_BYTES if hard == resource.RLIM_INFINITY else min(hard, STACK_BYTES)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_STACK, (want, hard))
    except (ValueError, OSError):  # a platform or sandbox that refuses: the usual limit stays
        pass


def _send(conn: Connection, message: dict[str, Any]) -> None:
    try:
        conn.send_bytes(_json(message))
    except Exception:  # noqa: BLE001 -- the parent then reports the exit code instead
        pass


# ----------------------------------------------------------------------------- the parent


@contextlib.contextmanager
def _without_main() -> Iterator[None]:
    """Start a child without re-running the parent's `__main__` in it. multiprocessing normally
    re-imports the main script in every child (as `__mp_main__`), which re-runs a user's
    unguarded script, costs an import per child, and fails outright for `python - < script` or a
    REPL. A child here only ever runs `stability.run.worker._child_main`, so it needs none of it."""
    real = multiprocessing.spawn.get_preparation_data

    def preparation_data(name: str) -> dict[str, Any]:
        data = real(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        return data

    multiprocessing.spawn.get_preparation_data = preparation_data
    try:
        yield
    finally:
        multiprocessing.spawn.get_preparation_data = real


@dataclass
class _Running:
    index: int
    job: Job
    proc: BaseProcess
    conn: Connection
    started: float
    case_started: float = 0.0
    deadline: float | None = None
    trace: Trace = field(default_factory=Trace)
    done: bool = False
    crash: str | None = None
    timed_out: str | None = None
    out: Connection | None = None  # the read end of the child's captured output, until its end
    output: _Output = field(default_factory=_Output)


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class WorkerExecutor(Executor):
    """One child process per job, `jobs` at a time, each with `threads` intra-op threads."""

    isolation = (
        "each job runs in its own child process, forked from a clean server: torch's global state, sys.path and "
        "threads cannot leak between jobs; the per-case time limit is enforced by killing the child; a child that "
        "exits or crashes is reported and the other jobs go on"
    )

    def __init__(
        self, *, jobs: int = 1, threads: int = 1, env: dict[str, str] | None = None, capture: bool = True
    ) -> None:
        if jobs < 1 or threads < 1:
            raise ValueError("jobs and threads must be at least 1")
        self.jobs, self.threads, self.env, self.capture = jobs, threads, env, capture
        self.workers = jobs
        #: CPU seconds (user + system) the children that finished reported for themselves.
        self.cpu_seconds = 0.0

    def map(self, tasks: Sequence[Job], *, on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
        ctx = get_context()
        env = dict(os.environ if self.env is None else self.env)
        cwd = os.getcwd()
        pending = deque(enumerate(tasks))
        running: dict[Connection, _Running] = {}
        outcomes: dict[int, Outcome] = {}
        try:
            while pending or running:
                while pending and len(running) < self.jobs:
                    index, task = pending.popleft()
                    parent_conn, child_conn = ctx.Pipe(duplex=False)
                    out_r, out_w = (
                        ctx.Pipe(duplex=False) if self.capture else (None, None)
                    )  # raw bytes: only the descriptors are used
                    payload = pickle.dumps(task)
                    proc = ctx.Process(
                        target=_child_main,
                        args=(child_conn, payload, env, cwd, self.threads, out_w),
                        daemon=True,
                        name=f"stability-{task.label}",
                    )
                    with _without_main():
                        proc.start()
                    child_conn.close()
                    if out_w is not None:
                        out_w.close()  # the child's copy is the only writer: its exit ends the output
                    running[parent_conn] = _Running(index, task, proc, parent_conn, time.monotonic(), out=out_r)
                now = time.monotonic()
                deadlines = [r.deadline for r in running.values() if r.deadline is not None]
                timeout = max(0.0, min(deadlines) - now) if deadlines else None
                waitables: list[Any] = [
                    *running,
                    *(r.proc.sentinel for r in running.values()),
                    *(r.out for r in running.values() if r.out is not None),
                ]
                multiprocessing.connection.wait(waitables, timeout)
                for conn, run in list(running.items()):
                    finished = self._drain(run)
                    if not finished and run.deadline is not None and time.monotonic() >= run.deadline:
                        self._stop(run)
                        limit = run.job.case_timeout or 0.0
                        run.timed_out = past_limit(limit, " and was stopped")
                        finished = True
                    if finished:
                        del running[conn]
                        outcome = self._finish(run)
                        outcomes[run.index] = outcome
                        if on_done is not None:
                            on_done(outcome)
        finally:
            for run in running.values():
                self._stop(run)
                run.conn.close()
                if run.out is not None:
                    run.out.close()
        return [outcomes[i] for i in range(len(tasks))]

    @staticmethod
    def _read_output(run: _Running, *, chunks: int = 64) -> None:
        """Move what the child has written so far into `run.output` (up to `chunks` reads of 64 KiB,
        so a spec that prints without pause cannot hold the loop), closing the pipe at its end."""
        for _ in range(chunks):
            if run.out is None or not run.out.poll():
                return
            try:
                data = os.read(run.out.fileno(), 1 << 16)
            except OSError:
                data = b""
            if not data:  # every writer is gone
                run.out.close()
                run.out = None
                return
            run.output.add(data)

    def _drain(self, run: _Running) -> bool:
        """Read every message waiting from `run`'s child; True when the child is finished (it
        sent "done", or it is gone)."""
        self._read_output(run)
        while True:
            try:
                if not run.conn.poll():
                    break
                raw = run.conn.recv_bytes()
            except (EOFError, OSError):
                return True  # the child closed its end: it has exited
            try:
                message = json.loads(raw)
                if self._receive(run, message):
                    return True
            except Exception as exc:  # noqa: BLE001 -- a message that does not read as the protocol's
                run.crash = (
                    f"sent a message that cannot be read ({' '.join(f'{type(exc).__name__}: {exc}'.split())[:300]})"
                )
                return True
        if not run.proc.is_alive():
            return not run.conn.poll()  # exited: finished once its last messages are read
        return False

    def _receive(self, run: _Running, message: dict[str, Any]) -> bool:
        """Take one message of the protocol (module docstring); True when the child is done."""
        kind = message["kind"]
        if kind == "cpu":
            self.cpu_seconds += float(message["seconds"])
        elif kind == "done":
            run.trace.final = message["final"]
            run.done = True
            return True
        elif kind == "crash":
            run.crash = str(message["what"])
        else:
            run.trace.take(message)
            if kind == "start":
                run.case_started = time.monotonic()
                timeout = run.job.case_timeout
                run.deadline = run.case_started + timeout + KILL_AFTER_S if timeout else None
            elif kind == "case":
                run.deadline = None
        return False

    def _stop(self, run: _Running) -> None:
        if run.proc.is_alive():
            run.proc.terminate()
            run.proc.join(TERM_GRACE_S)
        if run.proc.is_alive():
            run.proc.kill()
        run.proc.join()

    def _close_output(self, run: _Running) -> None:
        """Read the rest of a stopped child's output (what is in the pipe: a process the spec
        started may still hold it open, so this never waits for its end), then close it."""
        self._read_output(run, chunks=1 << 12)
        if run.out is not None:
            run.out.close()
            run.out = None

    def _finish(self, run: _Running) -> Outcome:
        """Collect the child and conclude its job from what it sent."""
        if run.done:  # reported: collect the child (it leaves by itself; kill a lingering one)
            run.proc.join(1.0)
        self._stop(run)
        self._close_output(run)
        run.conn.close()
        trace = run.trace
        trace.seconds = time.monotonic() - run.started
        trace.output = run.output.text()
        if not run.done:
            if run.timed_out is not None:
                trace.failure, trace.spec_error = run.timed_out, False
            else:
                code = run.proc.exitcode
                if run.crash is not None:
                    what = run.crash
                elif code is not None and code < 0:
                    name = _signal_name(code)
                    what = f"the worker was killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
                else:
                    what = (
                        f"the worker exited with code {code} before reporting (sys.exit or os._exit in the "
                        "spec's code?)"
                    )
                where = f" while running case {trace.current}" if trace.current is not None else ""
                trace.failure, trace.spec_error = f"{what}{where}", True
        return run.job.conclude(trace)
