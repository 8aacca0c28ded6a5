"""The per-file work on a Dask distributed cluster (`--scheduler ADDRESS`), or a local pool.

Stage: engine (scheduling; engine/executor.py's `Executor` on other processes). Input:
`FileTask`s; a run read from a run file goes as its path (engine/reduce.py `portable`: the
workers read the files themselves, so they must see the same filesystem); output: their
`Reduced` tables, the only thing that travels back.

The connection (tracediff/daskclient.py, shared with `parse --scheduler`): `tcp://host:8786`
connects to a running scheduler (`dask scheduler` / `dask worker`, or dask-jobqueue); `local:N` starts a LocalCluster of N worker processes, one thread each, each with
`memory_limit` (Dask's nanny restarts a worker past it). A task whose worker dies is run again by
Dask on another worker; a file whose task fails twice (its worker died twice, or it raised twice)
is reported by name as a `ClusterError`. A file the tracediff code refuses (a damaged report,
a run that base's rule cannot cut) is not retried: the refusal comes back as it is.

Dask is an optional dependency (`pip install 'tracediff[dask]'`); without it `open_executor`
says how to install it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

from tracediff.daskclient import (
    RETRIES,
    ClusterError,
    Connection,
    failed_twice,
    on_worker,
    raise_refusal,
)
from tracediff.engine.executor import progress_line
from tracediff.engine.reduce import FileTask, Reduced, portable, reduce_file

__all__ = ["ClusterError", "Dask", "open_executor"]


class Dask:
    """An `Executor` on a Dask distributed client (module doc; the connection: daskclient.py)."""

    def __init__(self, address: str, memory_limit: str | None = None) -> None:
        self.address = address
        self._conn = Connection(address, memory_limit)
        self.client = self._conn.client

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Dask:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run_one(self, task: FileTask) -> Reduced:
        return next(iter(self.map([task], lambda _m: None)))

    def map(self, tasks: Sequence[FileTask], say: Callable[[str], None]) -> Iterator[Reduced]:
        """Every task submitted at once; results in task order once all are back (they are
        the small tables)."""
        from distributed import as_completed

        if not tasks:
            return iter(())
        futures = {
            self.client.submit(
                on_worker, reduce_file, replace(t, source=portable(t.source)), key=_key(t),
                retries=RETRIES, pure=False,
            ): i
            for i, t in enumerate(tasks)
        }  # fmt: skip
        total = {s: sum(t.side == s for t in tasks) for s in ("base", "head")}
        done = dict.fromkeys(total, 0)
        out: list[Reduced | None] = [None] * len(tasks)
        try:
            for fut in as_completed(futures):  # type: ignore[no-untyped-call]
                i = futures[fut]
                task = tasks[i]
                try:
                    kind, value = fut.result()
                except Exception as e:  # the task raised twice, or its worker died twice
                    raise failed_twice(f"{task.name}: its {task.side} file", e) from None
                if kind != "ok":
                    raise_refusal(kind, *value)
                out[i] = value
                done[task.side] += 1
                say(progress_line(done, total))
        finally:
            for fut in futures:
                fut.release()  # type: ignore[no-untyped-call]
        return iter([r for r in out if r is not None])


def _key(task: FileTask) -> str:
    import uuid

    return f"tracediff-reduce-{task.side}-{task.index}-{uuid.uuid4().hex[:8]}"


def open_executor(address: str, memory_limit: str | None = None) -> Dask:
    """The executor `--scheduler ADDRESS` names (module doc)."""
    return Dask(address, memory_limit)
