"""A rank file's parse kept by the Dask worker that read it, for the same compare's later rounds.

Stage: engine (scheduling aid for engine/pipeline/rankunit.py's rounds on Dask workers). Input: a rank
file's path and the run its worker parsed from it in the scan round; output: that run again in
the reduce round, read from a run file (runfile.py, memory-mapped, checksummed) instead of
parsing the report a second time (a Kineto JSON parse is most of a file's work; its run file
reads back in a few per cent of that time).

The parse is written to the worker's own scratch folder (Dask's `local_directory`), in a folder
per compare (`tracediff-<token>`: the driver's executor draws the token and removes the folder
on every worker when it closes, engine/pipeline/cluster.py), under a name made of the file's absolute path,
size and modification time: a file changed between the rounds is parsed again. Nothing is kept
off a worker, with less than `FREE` bytes free (and 4x the file's size), or when writing fails.
Everything falls back to reading the report itself: a file's reduce task that runs on another
worker (its scanner died, or Dask moved it; engine/pipeline/cluster.py asks for the scanner first), a run
file that does not verify (each of its tables is read and checked before the run is used). So Dask's retries on a killed worker are unchanged: a task run again
elsewhere parses the file, as before.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from tracediff.base.errors import TracediffError
from tracediff.runs.runfile import Run

FREE = 1 << 30
"""Bytes a worker's scratch folder must keep free, beyond 4x the file, for a parse to be kept."""

_TOKEN: ContextVar[str | None] = ContextVar("tracediff_rank_cache", default=None)


def within(token: str, fn: Callable[[Any], Any], item: Any) -> Any:
    """fn(item) on a worker, its parses kept under compare `token` (module doc)."""
    was = _TOKEN.set(token)
    try:
        return fn(item)
    finally:
        _TOKEN.reset(was)


def _dask_worker() -> Any:
    """The Dask worker this runs on (None: not on one, or no distributed)."""
    try:
        from distributed import get_worker

        return get_worker()
    except (ImportError, ValueError):
        return None


def worker() -> str | None:
    """This Dask worker's address (None: not on a worker)."""
    w = _dask_worker()
    return None if w is None else str(w.address)


def _dir(local_directory: str, token: str) -> Path:
    """Compare `token`'s folder of kept parses in a worker's scratch folder."""
    return Path(local_directory) / f"tracediff-{token}"


def _folder() -> Path | None:
    token = _TOKEN.get()
    w = None if token is None else _dask_worker()  # (no import of distributed in-process)
    return None if token is None or w is None else _dir(w.local_directory, token)


def _name(path: str) -> str:
    st = os.stat(path)
    key = f"{os.path.abspath(path)}\0{st.st_size}\0{st.st_mtime_ns}".encode()
    return hashlib.sha256(key).hexdigest()[:32] + ".arrow"


def keep(path: str, run: Run) -> bool:
    """Keep file `path`'s parse `run` on this worker (module doc); whether it was kept."""
    from tracediff.runs.runfile import write_run

    folder = _folder()
    if folder is None:
        return False
    try:
        folder.mkdir(exist_ok=True)
        if shutil.disk_usage(folder).free < FREE + 4 * os.stat(path).st_size:
            return False
        write_run(run, folder / _name(path), force=True)
    except (OSError, TracediffError):
        return False
    return True


EVENT = "tracediff-rank-cache"
"""The Dask event topic of each reduce-round read on a worker: {"file", "kept"} (a test reads
them from the scheduler: `client.get_events(EVENT)`)."""


def load(path: str) -> Run:
    """File `path`'s run: its parse kept on this worker where there is one, else the file
    parsed (module doc)."""
    from tracediff.parse import load as parse

    folder = _folder()
    run = None
    if folder is not None:
        try:
            kept = folder / _name(path)
            if kept.is_file():  # every table read now: its checksum verified here, not later
                lazy = parse(kept)
                # keys(), not the dict: a run file's tables are in it only once read
                tables = {n: lazy.table(n) for n in lazy.tables.keys()}  # noqa: SIM118
                run = Run(tables=tables, metadata=lazy.metadata, warnings=list(lazy.warnings))
        except (OSError, TracediffError):  # gone, or it does not verify: read the file
            run = None
        _said(path, run is not None)
    return run if run is not None else parse(Path(path))


def _said(path: str, kept: bool) -> None:
    w = _dask_worker()
    if w is not None:
        w.log_event(EVENT, {"file": path, "kept": kept})


def clear(token: str, dask_worker: Any) -> int:
    """Remove compare `token`'s kept parses from a worker (`client.run(clear, token)`, which
    passes the worker); files removed."""
    folder = _dir(dask_worker.local_directory, token)
    if not folder.is_dir():
        return 0
    n = sum(1 for _ in folder.iterdir())
    shutil.rmtree(folder, ignore_errors=True)
    return n
