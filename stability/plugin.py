"""pytest plugin (entry point `pytest11: stability`): spec files are collected as tests.

Each (spec, invariant) pair is one item, e.g. `specs/preact_mlp.toml::gradient_arrival`; with
`--stability-device all` the device is appended (`…::gradient_arrival[cuda]`). A spec that fails
validation is one failed item showing the loader's one-line error. The plugin only wires: the
work happens in `stability.run.engine`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stability.cli.arg_types import seconds
from stability.errors import LibraryMissing, SpecError, StabilityError
from stability.families.factory import check_factory, roots_environment, source_roots
from stability.report.text import LogSafe, printable
from stability.run.devices import CHOICES as DEVICE_CHOICES
from stability.run.devices import resolve_devices
from stability.run.engine import RunOptions
from stability.run.executor import Task
from stability.run.executors import executor_for
from stability.run.plugins import load_plugins, plugins_environment
from stability.run.profiles import PROFILES, default_profile_name
from stability.run.results import OUTPUT_LINES, InvariantResult
from stability.run.worker import deep_stack, default_threads
from stability.spec.load import load_spec
from stability.spec.registry import FAMILIES
from stability.spec.schema import Spec

__all__ = ["SpecFile", "SpecItem"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("stability", "stability: spec files as tests")
    group.addoption(
        "--stability-profile",
        choices=sorted(PROFILES),
        default=None,
        help="search budget for spec items (default: STABILITY_PROFILE, else ci under CI, else dev)",
    )
    group.addoption(
        "--stability-device",
        choices=list(DEVICE_CHOICES),
        default="cpu",
        help="device for spec items: cpu (default), cuda, auto (cuda when present), all (one item per device)",
    )
    group.addoption(
        "--stability-case-timeout",
        type=seconds,
        default=120.0,
        help="per-case time limit in seconds (default 120; 0 = none), as `stability check --case-timeout`",
    )
    group.addoption(
        "--stability-case",
        default=None,
        metavar="K=V,...",
        help="replay this case in every collected spec item instead of searching (keys left out take each "
        "spec's corner value), as `stability check --case`",
    )
    parser.addini(
        "stability_spec_dirs", "folder names whose *.toml files are collected as specs", type="args", default=["specs"]
    )
    parser.addini(
        "stability_source_roots",
        "folders (relative to the rootdir) custom factories may come from, besides each spec's folder",
        type="paths",
        default=[],
    )
    parser.addini(
        "stability_plugins",
        "modules (or .py files, relative to the rootdir) that register invariants or families (stability.run.plugins)",
        type="args",
        default=[],
    )


@pytest.hookimpl(trylast=True)  # after the terminal reporter is registered
def pytest_configure(config: pytest.Config) -> None:
    _log_safe_terminal(config)
    config.addinivalue_line("markers", "gpu: needs CUDA; skipped with a reason where it is absent")
    config.stash[_NAMES] = {}
    plugins: list[str] = [
        str(config.rootpath / p) if p.endswith(".py") else p for p in config.getini("stability_plugins")
    ]
    config.stash[_PLUGINS] = plugins
    load_plugins(plugins)
    if config.getoption("--stability-case", None) == "":  # an unset variable: never read as "search instead"
        raise pytest.UsageError("--stability-case '': an empty value; give a case, e.g. depth=4,seed=0")
    if os.environ.get("PYTEST_XDIST_WORKER") and not os.environ.get("OMP_NUM_THREADS"):
        # One intra-op thread per xdist worker: n workers × n threads would oversubscribe the cores.
        import torch

        torch.set_num_threads(1)


def _log_safe_terminal(config: pytest.Config) -> None:
    """pytest's terminal output through `LogSafe` (stability/report/text.py): node ids hold spec
    file names, and failures hold spec names, messages and the spec code's output, none of which
    may form a CI runner's workflow command. A test's own `print` under `-s` is not touched."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    writer = getattr(reporter, "_tw", None)
    inner = getattr(writer, "_file", None)
    if writer is not None and inner is not None and not isinstance(inner, LogSafe):
        writer._file = LogSafe(inner)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix != ".toml":
        return None
    dirs = set(parent.config.getini("stability_spec_dirs"))
    explicit = any(Path(str(a).split("::")[0]).resolve() == file_path.resolve() for a in parent.config.args)
    if explicit or dirs & _folders_below_root(file_path, parent.config.rootpath):
        return SpecFile.from_parent(parent, path=file_path)
    return None


def _folders_below_root(file_path: Path, root: Path) -> set[str]:
    """The names of the folders between the rootdir and `file_path`: a project that merely lies
    somewhere below a folder named `specs` (/home/me/specs/project) has none of its .toml files
    collected (pyproject.toml, ruff.toml), and a file outside the rootdir is collected only when named."""
    try:
        inside = file_path.resolve().relative_to(root.resolve())
    except ValueError:
        return set()
    return set(inside.parts[:-1])


def _relative(path: Path) -> Path:
    """The spec's path relative to the working directory when it lies below it, so that the
    reproduction commands printed in failures are short and can be pasted as they are."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def _devices(config: pytest.Config) -> list[str]:
    return resolve_devices(config.getoption("--stability-device"))


#: Spec names already collected in this session, by name → file: a second spec with one name is
#: refused, as `stability check` refuses it.
_NAMES = pytest.StashKey[dict[str, str]]()
#: The plugins of the ini option, for the worker processes' environment.
_PLUGINS = pytest.StashKey[list[str]]()


class SpecFile(pytest.File):
    def collect(self) -> Any:
        try:
            spec = load_spec(_relative(self.path))
        except SpecError as exc:
            yield SpecErrorItem.from_parent(self, name="load", error=exc)
            return
        names = self.config.stash.setdefault(_NAMES, {})
        first = names.setdefault(spec.name, spec.path)
        if first != spec.path:
            error = SpecError(
                spec.path, "name", f"is already used by {first}", value=spec.name, fix="give each spec a unique name"
            )
            yield SpecErrorItem.from_parent(self, name="load", error=error)
            return
        if (
            FAMILIES.get(spec.family).user_code and spec.block.factory
        ):  # as `stability check` does, before anything runs
            try:
                with source_roots([str(p) for p in self.config.getini("stability_source_roots")]):
                    check_factory(spec)
            except SpecError as exc:
                yield SpecErrorItem.from_parent(self, name="load", error=exc)
                return
        devices = _devices(self.config)
        for name, _ in spec.invariants():
            for device in devices:
                item_name = name if len(devices) == 1 else f"{name}[{device}]"
                item = SpecItem.from_parent(self, name=item_name, spec=spec, invariant=name, device=device)
                if device == "cuda":
                    item.add_marker(pytest.mark.gpu)
                yield item


class SpecErrorItem(pytest.Item):
    def __init__(self, *, error: SpecError, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error = error

    def runtest(self) -> None:
        if isinstance(self.error, LibraryMissing):  # an optional library, as the test suite's own tests skip
            pytest.skip(f"stability: {printable(str(self.error))}")
        raise self.error

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        return f"stability: error: {printable(str(excinfo.value))}"

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name  # see SpecItem.reportinfo


class _Unmet(Exception):
    def __init__(self, result: InvariantResult) -> None:
        super().__init__(result.message)
        self.result = result


@contextlib.contextmanager
def _spec_threads() -> Iterator[None]:
    """torch's intra-op threads while a spec item runs: what `stability check` gives each worker
    ($STABILITY_THREADS, else 1), unless OMP_NUM_THREADS says otherwise; the session's own count
    is put back afterwards, so the user's other tests keep theirs. torch's default (one thread per
    core) made a loaded 2-core box run two spec items 15× slower than with one thread."""
    import torch

    if os.environ.get("OMP_NUM_THREADS"):
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(default_threads())
    try:
        yield
    finally:
        torch.set_num_threads(before)


class SpecItem(pytest.Item):
    def __init__(self, *, spec: Spec, invariant: str, device: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec, self.invariant, self.device = spec, invariant, device
        self.output = ""  # what a custom spec's code printed in its worker (shown with a failure)
        self.result: InvariantResult | None = None  # what the item decided (for hooks and reports)

    def runtest(self) -> None:
        if self.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                pytest.skip("CUDA is not available on this machine (gpu item)")
        profile = self.config.getoption("--stability-profile") or default_profile_name()
        options = RunOptions(
            profile=profile, device=self.device, case_timeout=self.config.getoption("--stability-case-timeout")
        )
        case = self.config.getoption("--stability-case")
        roots = [str(p) for p in self.config.getini("stability_source_roots")]
        if FAMILIES.get(
            self.spec.family
        ).user_code:  # the user's own code: in a worker process, as `stability check` runs it
            result = self._in_worker(options, roots, case)
        else:  # the harness's own families run no user code: here, without a process to start
            # the stack a worker gets: freeing a very deep stack's graph recurses (stability/run/worker.py)
            deep_stack()
            with source_roots(roots), _spec_threads():  # the same cases (and threads) as `stability check`
                (outcome,) = executor_for("in-process").map([Task(self.spec, options, case=case, only=self.invariant)])
            if outcome.error is not None and not outcome.result.results:
                raise StabilityError(outcome.error)
            result = outcome.result.results[0]
        self.result = result
        if result.skipped:  # a training invariant outside its spec's train.profiles
            pytest.skip(printable(result.message))
        if not result.applicable:
            pytest.skip(printable(result.message))
        if not result.met:
            raise _Unmet(result)

    def _in_worker(self, options: RunOptions, roots: list[str], case: str | None) -> InvariantResult:
        """Run the item's spec in a worker process (stability/run/worker.py): whatever the factory or
        its blocks do (exit, crash, hang, leak global state, patch the harness) stays there, the
        pytest session goes on, and the parent judges the cases again. What the spec's code printed
        is shown with a failure."""
        plugins: list[str] = self.config.stash[_PLUGINS]
        env = plugins_environment(plugins, roots_environment(roots))
        (outcome,) = executor_for("workers", jobs=1, threads=default_threads(), env=env).map(
            [Task(self.spec, options, case=case, only=self.invariant)]
        )
        self.output = outcome.result.output
        if outcome.error is not None and not outcome.result.results:
            raise StabilityError(outcome.error)
        result: InvariantResult = outcome.result.results[0]
        return result

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        exc = excinfo.value
        shown = [
            f"output of the spec's code: | {printable(line)}"
            for line in self.output.rstrip().splitlines()[-OUTPUT_LINES:]
        ]
        if isinstance(exc, _Unmet):
            r = exc.result
            lines = [printable(r.message)]
            if r.error:
                lines.append(f"error: {printable(r.error)}")
            if r.reproduce:
                lines.append(f"reproduce: {printable(r.reproduce)}")
            lines.append(f"explain:   stability explain {r.name}")
            return "\n".join(lines + shown)
        if isinstance(exc, StabilityError):
            return "\n".join([f"stability: error: {printable(str(exc))}", *shown])
        return super().repr_failure(excinfo)  # type: ignore[return-value]  # a str or pytest's TerminalRepr, which pytest does not export

    def reportinfo(self) -> tuple[Path, int | None, str]:
        """The item's own name as its "domain": `pytest -v` prints the node id with the domain's
        dots turned into `::` (Python's `module.Class.test` convention), so a domain holding the
        file name printed `specs/x::toml::gradient_arrival`, which selects nothing when pasted
        back. With the name alone it prints the node id itself, `specs/x.toml::gradient_arrival`."""
        return self.path, None, self.name
