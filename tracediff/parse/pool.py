"""Reading many files at once: one worker process per file, up to the cores.

Stage: parse (the driver of `load` over several files). Input: paths; output: their `Run`s, in
the order given. Used by load.load_files (one run from many files).

`Executor` is the one seam: `map(fn, items)` yields (index, result) as each finishes. `Local`
runs in this process; `Processes` in a spawned process pool (spawn, not fork: polars and
pyarrow hold threads a fork would copy mid-lock); `OnDask` on a Dask distributed cluster
(`parse --scheduler ADDRESS`; the connection: tracediff/base/daskclient.py): each worker reads one
file, so the workers must see the same filesystem, and the runs come back to be joined here.

Memory: each worker's Kineto parse is given available memory / workers
(`TRACEDIFF_MEMORY_BYTES`, which the Kineto reader's budget honours: it reads in chunks when its
share is small) and one scanner thread, so N workers together stay within what one would use.
Run files are not sent to workers: they are memory-mapped, and reading one costs only its footer.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Protocol

from tracediff.runs.runfile import Run

PARALLEL_MIN_BYTES = 256 << 20
"""Input per worker below which a pool costs more than it saves: a spawned worker imports
polars (~0.5-1 s) and its tables come back pickled. Measured on the 2-core development machine
(load ~10): 16 one-rank nsys exports of 3 MB (0.48 M kernels in all) read in 1.6-1.9 s here and
in 5.2-5.7 s by 2 workers; the nsys page decoder and the Kineto scanner already use a second
core within one file."""


class Executor(Protocol):
    def map(self, fn: Callable[[Any], Any], items: list[Any]) -> Iterator[tuple[int, Any]]:
        """(index in items, fn(item)) for each item, in the order they finish; an exception of
        fn is raised here."""
        ...


class Local:
    """Each item in turn, in this process."""

    def map(self, fn: Callable[[Any], Any], items: list[Any]) -> Iterator[tuple[int, Any]]:
        for i, it in enumerate(items):
            yield i, fn(it)


class Processes:
    """A spawned process pool of `workers`, each given `env` (settings for the worker)."""

    def __init__(self, workers: int, env: dict[str, str]) -> None:
        self.workers, self.env = workers, env

    def map(self, fn: Callable[[Any], Any], items: list[Any]) -> Iterator[tuple[int, Any]]:
        with ProcessPoolExecutor(
            self.workers, mp_context=get_context("spawn"), initializer=_setenv, initargs=(self.env,)
        ) as ex:
            futs: dict[Future[Any], int] = {ex.submit(fn, it): i for i, it in enumerate(items)}
            try:
                while futs:
                    done, _ = wait(futs, return_when=FIRST_COMPLETED)
                    for f in done:
                        yield futs.pop(f), f.result()
            finally:
                for f in futs:
                    f.cancel()


class OnDask:
    """Each item a task on the Dask cluster of `connection` (a daskclient.Connection). A task
    whose worker died is run again by Dask; an item whose task failed twice is a ClusterError
    naming it; a tracediff refusal on the worker is raised here as it is."""

    def __init__(self, connection: Any) -> None:
        self.client = connection.client

    def map(self, fn: Callable[[Any], Any], items: list[Any]) -> Iterator[tuple[int, Any]]:
        from tracediff.base.daskclient import each_done

        # a path as the workers see it: their working folder need not be this one
        yield from each_done(
            self.client, fn, [_absolute(it) for it in items], [f"{it}" for it in items]
        )


def _absolute(item: Any) -> Any:
    return item.absolute() if isinstance(item, Path) else item


def _setenv(env: dict[str, str]) -> None:
    os.environ.update(env)


def executor_for(sizes: list[int], workers: int | None = None) -> Executor:
    """Processes for several report files of `sizes` bytes (run files are read here: give no
    sizes for them) on a machine with more than one core; else Local. `workers`: at most this
    many (default: the cores)."""
    from tracediff.parse.kineto.source import available_memory

    n = min(workers or os.cpu_count() or 1, len(sizes), sum(sizes) // PARALLEL_MIN_BYTES)
    if n < 2:
        return Local()
    share = available_memory() // n
    return Processes(n, {"TRACEDIFF_MEMORY_BYTES": str(share), "TRACEDIFF_KINETO_THREADS": "1"})


def read_all(
    paths: list[Path],
    reader: Callable[[Path], Run],
    executor: Executor,
    progress: Callable[[str], None] | None = None,
) -> list[Run]:
    """`reader(path)` for each path through `executor`, in the given order; `progress` gets a
    line per file as it finishes (`read 3/8 rank-2.json.gz: 1154 kernels, 0.4 s`)."""
    t0 = time.perf_counter()
    out: list[Run | None] = [None] * len(paths)
    for k, (i, run) in enumerate(executor.map(reader, list(paths)), start=1):
        out[i] = run
        if progress is not None:
            progress(
                f"read {k}/{len(paths)} {paths[i].name}: {run.table('kernels').num_rows} kernels, "
                f"{time.perf_counter() - t0:.1f} s"
            )
    return [r for r in out if r is not None]
