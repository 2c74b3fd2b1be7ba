"""Stage 6 (pictures, in the background): a spec's PNG plots rendered in a worker process while
the check goes on.

matplotlib draws a report figure in ~40-90 ms of one core, nearly all of it text layout and glyph
rasterisation (FreeType); two or three figures per spec made `stability check --html` ~1.5-2.5×
slower than the same check without it. `Renderer.submit` hands each finished `SpecResult` to
one worker process (started with `forkserver`/`spawn`, never `fork`: the checking process has
torch's and rich's threads) that renders its figures with exactly the code `render_html` uses
inline (`spec_pngs`), so the pictures are the same bytes; by the time the last spec is checked,
the others' plots are ready. A worker that cannot start or fails leaves that spec to be rendered
inline: the report is never missing a plot, only slower.
"""

from __future__ import annotations

import multiprocessing
import sys
from concurrent.futures import Future, ProcessPoolExecutor
from types import TracebackType

from stability.run.results import SpecResult

__all__ = ["Renderer", "spec_pngs"]


def spec_pngs(result: SpecResult) -> dict[str, bytes]:
    """{figure name: PNG bytes} for one spec, in the order `spec_figures` gives them."""
    from stability.report.figures import to_png
    from stability.report.spec_plots import spec_figures

    return {key: to_png(fig) for key, fig in spec_figures(result).items()}


def _context() -> multiprocessing.context.BaseContext:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context(
        "forkserver" if "forkserver" in methods and sys.platform != "darwin" else "spawn"
    )


class Renderer:
    """Renders submitted SpecResults' figures in one background process; `pngs` collects them."""

    def __init__(self, *, workers: int = 1) -> None:
        self._jobs: dict[int, Future[dict[str, bytes]]] = {}
        try:
            self._pool: ProcessPoolExecutor | None = ProcessPoolExecutor(max_workers=workers, mp_context=_context())
        except (OSError, ValueError):  # no process support here: render inline
            self._pool = None

    def submit(self, result: SpecResult) -> None:
        if self._pool is None:
            return
        try:
            self._jobs[id(result)] = self._pool.submit(spec_pngs, result)
        except Exception:  # a broken pool: render inline later
            self._pool = None

    def pngs(self, result: SpecResult) -> dict[str, bytes]:
        """The spec's PNGs: from the worker when it rendered them, else rendered here."""
        job = self._jobs.pop(id(result), None)
        if job is not None:
            try:
                return job.result()
            except Exception:  # the worker died or could not unpickle: the same call inline
                pass
        return spec_pngs(result)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> Renderer:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
