"""The per-file work on a Dask distributed cluster (`--scheduler ADDRESS`), or a local pool.

Stage: engine (scheduling; engine/executor.py's `Executor` on other processes). Input:
`FileTask`s; a run read from a run file goes as its path (engine/reduce.py `portable`: the
workers read the files themselves, so they must see the same filesystem); output: their `Reduced` tables, the only thing that travels back.

`tcp://host:8786` connects to a running scheduler (`dask scheduler` / `dask worker`, or
dask-jobqueue); `local:N` starts a LocalCluster of N worker processes, one thread each, each with
`memory_limit` (Dask's nanny restarts a worker past it). A task whose worker dies is run again by
Dask on another worker; a file whose task fails twice (its worker died twice, or it raised twice)
is reported by name as a `ClusterError`. A file the tracediff code refuses (a damaged report,
a run that base's rule cannot cut) is not retried: the refusal comes back as it is.

Dask is an optional dependency (`pip install 'tracediff[dask]'`); without it `open_executor`
says how to install it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from tracediff.engine.executor import progress_line
from tracediff.engine.reduce import FileTask, Reduced, portable, reduce_file
from tracediff.errors import TracediffError, UsageError

INSTALL = "pip install 'tracediff[dask]' (dask and distributed 2026.8.0)"
RETRIES = 1
"""Times a task is run again after it raised or its worker died: a file fails twice at most."""


class ClusterError(TracediffError):
    """A file's task failed on the cluster twice, or the cluster cannot be reached."""


def _remote(task: FileTask) -> tuple[str, Any]:
    """Run on a worker: the reduced file, or the tracediff refusal as (kind, (message, hint)),
    since an exception's hint does not survive pickling, and a refusal is not worth a retry."""
    try:
        return "ok", reduce_file(task)
    except TracediffError as e:
        return type(e).__name__, (e.message, e.hint)


def _raise_refusal(kind: str, message: str, hint: str | None) -> None:
    from tracediff import errors

    cls = getattr(errors, kind, None)
    if not (isinstance(cls, type) and issubclass(cls, TracediffError)):
        cls = TracediffError
    raise cls(message, hint)


class Dask:
    """An `Executor` on a Dask distributed client (module doc)."""

    def __init__(self, address: str, memory_limit: str | None = None) -> None:
        try:
            import dask
            from distributed import Client, LocalCluster
        except ModuleNotFoundError:
            raise UsageError(
                f"--scheduler {address}: Dask is not installed", f"install it: {INSTALL}"
            ) from None
        self.address = address
        self._cluster: Any = None
        if address.startswith("local:"):
            n = address[len("local:") :]
            if not n.isdigit() or int(n) < 1:
                raise UsageError(
                    f"--scheduler {address}: give local:N with N >= 1 worker processes",
                    "e.g. --scheduler local:2, or tcp://HOST:8786 for a running scheduler",
                )
            # a task whose worker died once more than this is given up (KilledWorker)
            with dask.config.set({"distributed.scheduler.allowed-failures": RETRIES}):
                self._cluster = LocalCluster(  # type: ignore[no-untyped-call]
                    n_workers=int(n),
                    threads_per_worker=1,
                    processes=True,
                    memory_limit=memory_limit or "auto",
                    dashboard_address=None,
                    # stderr keeps to tracediff's lines: a file that failed twice is one line
                    silence_logs=logging.CRITICAL,
                )
            self.client = Client(self._cluster)  # type: ignore[no-untyped-call]
        else:
            try:
                self.client = Client(address, timeout="20s")  # type: ignore[no-untyped-call]
            except (OSError, TimeoutError) as e:
                raise ClusterError(
                    f"--scheduler {address}: cannot reach the Dask scheduler ({e})",
                    "start one (dask scheduler; dask worker ADDRESS) or give local:N",
                ) from None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()  # type: ignore[no-untyped-call]
        if self._cluster is not None:
            with contextlib.suppress(Exception):
                self._cluster.close()

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
                _remote, replace(t, source=portable(t.source)), key=_key(t), retries=RETRIES,
                pure=False,
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
                    raise ClusterError(
                        f"{task.name}: its {task.side} file failed twice on the cluster "
                        f"({_why(e)})",
                        "check the file reads with `tracediff info FILE`; a worker killed for "
                        "memory needs a higher limit (--memory-limit) or fewer threads",
                    ) from None
                if kind != "ok":
                    _raise_refusal(kind, *value)
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


def _why(e: BaseException) -> str:
    name = type(e).__name__
    text = str(e).splitlines()[0][:160] if str(e) else ""
    if name == "KilledWorker":
        return "its worker died each time it ran it"
    return f"{name}: {text}" if text else name


def open_executor(address: str, memory_limit: str | None = None) -> Dask:
    """The executor `--scheduler ADDRESS` names (module doc)."""
    return Dask(address, memory_limit)
