"""Connecting to a Dask distributed cluster (`--scheduler ADDRESS`), for parse and engine alike.

Stage: none of its own (scheduling set-up shared by parse/pool.py, which reads a run's files on
the workers, and engine/pipeline/cluster.py, which reduces them there; neither imports the other).
Input: the address (`tcp://host:8786` or `local:N`) and a per-worker memory limit; output: a
connected `Client` (and the LocalCluster it owns), plus the helpers that carry a tracediff
refusal back from a worker and name a file that failed twice.

`local:N` starts a LocalCluster of N worker processes, one thread each, each with
`memory_limit` (Dask's nanny restarts a worker past it). A task whose worker dies is run again
by Dask on another worker (RETRIES); a tracediff refusal is not retried: it comes back as it is.
Dask is an optional dependency (`pip install 'tracediff[dask]'`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tracediff.base.errors import TracediffError, UsageError

INSTALL = "pip install 'tracediff[dask]' (dask and distributed 2026.8.0)"
RETRIES = 1
"""Times a task is run again after it raised or its worker died: a file fails twice at most."""


class ClusterError(TracediffError):
    """A file's task failed on the cluster twice, or the cluster cannot be reached."""


class MemoryStall(ClusterError):
    """The workers were restarted past their memory limit while no task came back (`Watch`):
    the limit is the user's to raise, so a usage error (exit 2)."""

    exit_code = 2


STALL_S = 60.0
"""Seconds with no task back, RESTARTS worker restarts or more among them, after which
`each_done` gives up (`Watch`)."""
RESTARTS = 3
WATCH_S = 1.0
"""How often `Watch` asks the scheduler for its workers."""


class Connection:
    """A Dask client on `address` (module doc); `close` also stops a LocalCluster it started."""

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
            limit = memory_bytes(memory_limit)
            # a task whose worker died once more than this is given up (KilledWorker)
            # a worker paused for memory takes no task, and waits for ever when what it holds
            # stays: past the limit it is restarted instead (memory_bytes, RETRIES)
            never_paused = {"distributed.worker.memory.pause": False}
            with dask.config.set(
                {"distributed.scheduler.allowed-failures": RETRIES, **never_paused}
            ):
                self._cluster = LocalCluster(  # type: ignore[no-untyped-call]
                    n_workers=int(n),
                    threads_per_worker=1,
                    processes=True,
                    memory_limit=limit,
                    dashboard_address=None,
                    # its HTTP server (no dashboard) on a free port, not 8787: another cluster
                    # on this machine would make Dask warn on stderr
                    scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                    # stderr keeps to tracediff's lines: a file that failed twice is one line
                    silence_logs=logging.CRITICAL,
                )
            self.client = Client(self._cluster)  # type: ignore[no-untyped-call]
        else:
            check_address(address)
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


ADDRESS_HINT = "give tcp://HOST:PORT of a running scheduler (e.g. tcp://10.0.0.5:8786) or local:N"


def check_address(address: str) -> None:
    """Refuse, before anything is read, a scheduler address Dask cannot connect to: an unknown
    scheme, a host without a port (Dask raised ValueError from inside Client, a traceback)."""
    from distributed.comm import registry
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, where = parse_address(address)
        registry.get_backend(scheme)
        if scheme in ("tcp", "tls", "ws", "wss"):
            host, _ = parse_host_port(where)
            if not host:
                raise ValueError("no host")
    except ValueError as e:
        raise UsageError(
            f"--scheduler {address}: not a scheduler address ({e})", ADDRESS_HINT
        ) from None


WORKER_FLOOR_BYTES = 228 * 2**20
"""What one Dask worker holds once it has read a small file: Python, distributed, numpy, polars and
pyarrow imported (~130 MiB RSS idle) and the readers' first allocations (~205 MiB at the peak of
reading HTA's 120 KB Kineto ranks; measured 2026-12-02). Below this, a worker's memory stays past
the nanny's limit after its task, the worker is restarted between tasks (not while running one,
so Dask never gives the task up) and compare hung: at --memory-limit 215MiB, session 12; 228 MiB is
what Dask's 95 % kill line makes of 240MiB, the lowest limit that read them there. A fixed
figure, not this process's RSS: the driver may be a much larger process (a test runner, a
notebook: 1053 MiB under pytest, which refused a 1GiB limit that works)."""


def memory_bytes(text: str | None) -> int | str:
    """`--memory-limit` as bytes ("auto" when not given), refused when Dask cannot read it or
    when it is below what one worker holds before it reads a file: such a worker is restarted
    without end and nothing is ever read (compare hung with nothing printed). That floor is
    WORKER_FLOOR_BYTES."""
    if text is None or text.strip().lower() == "auto":
        return "auto"
    import dask
    from dask.utils import parse_bytes

    try:
        n = parse_bytes(text)
    except (ValueError, TypeError):
        raise UsageError(
            f"--memory-limit {text}: not a size", "e.g. --memory-limit 4GiB, 4000MB or auto"
        ) from None
    floor = WORKER_FLOOR_BYTES
    kill = float(dask.config.get("distributed.worker.memory.terminate") or 1.0)
    if n * kill < floor:
        mib = -(-floor // kill // 2**20 // 256) * 256  # rounded up to 256 MiB
        raise UsageError(
            f"--memory-limit {text}: below what one worker holds before it reads a file "
            f"(about {floor / 2**20:.0f} MiB: Python, Dask, polars and pyarrow), so no file "
            "could be read",
            f"give at least {mib:.0f}MiB, or leave --memory-limit out (the machine's memory / N)",
        )
    return int(n)


def on_worker(fn: Callable[[Any], Any], item: Any) -> tuple[str, Any]:
    """Run on a worker: ("ok", fn(item)), or the tracediff refusal as (kind, (message, hint)),
    since an exception's hint does not survive pickling, and a refusal is not worth a retry."""
    try:
        return "ok", fn(item)
    except TracediffError as e:
        return type(e).__name__, (e.message, e.hint)


def each_done(
    client: Any,
    fn: Callable[[Any], Any],
    items: Sequence[Any],
    names: Sequence[str],
    keys: Sequence[str] | None = None,
    workers: Sequence[str | None] | None = None,
    stall_s: float = STALL_S,
) -> Iterator[tuple[int, Any]]:
    """fn(item) for every item as a task on the cluster, (index, result) as each comes back: a
    task whose worker died is run again by Dask (RETRIES), an item whose task failed twice is a
    ClusterError naming it by `names`, a refusal on the worker is raised here as it is. Each
    result is released on the cluster once it is back (the workers need not keep it); `keys`:
    the tasks' keys (default: Dask's own); `workers`: the worker each item would best run on
    (any other may run it: its worker gone, or Dask balancing the load). Workers restarted
    while no task comes back for `stall_s` seconds: a `MemoryStall` (`Watch`)."""
    from distributed import as_completed

    def where(i: int) -> dict[str, Any]:
        w = workers[i] if workers is not None else None
        return {"workers": [w], "allow_other_workers": True} if w else {}

    futures = {
        client.submit(on_worker, fn, x, retries=RETRIES, pure=False,
                      **({"key": keys[i]} if keys is not None else {}), **where(i)): i
        for i, x in enumerate(items)
    }  # fmt: skip
    watch = Watch(client, list(futures), stall_s)
    try:
        for fut in as_completed(futures):  # type: ignore[no-untyped-call]
            i = futures[fut]
            try:
                kind, value = fut.result()
            except Exception as e:  # the task raised twice, or its worker died twice
                if watch.error is not None:  # the watch cancelled the tasks
                    raise watch.error from None
                raise failed_twice(names[i], e) from None
            watch.back()
            fut.release()
            if kind != "ok":
                raise_refusal(kind, *value)
            yield i, value
    finally:
        watch.stop()
        for fut in futures:
            fut.release()


class Watch:
    """Whether Dask's nannies keep restarting workers past their memory limit while no task
    comes back, looked at each second by a thread of its own. A task running when its worker
    is restarted counts a failure (twice: the file is named, `failed_twice`); a worker past the
    limit before or between tasks (what it holds at its start, or after a task; its result not
    yet fetched) is restarted with no task failing, and Dask waits for ever (compare
    --scheduler local:1 --memory-limit 215MiB on HTA's ranks, 2026-12-02). RESTARTS memory
    restarts or more (the nannies' `worker-restart-memory` events) and no task back for
    `stall_s` seconds: `error` is a `MemoryStall` naming the limit, and the tasks are cancelled
    (so the caller, waiting on them, raises it)."""

    def __init__(self, client: Any, futures: list[Any], stall_s: float) -> None:
        import threading

        self.client, self.futures, self.stall_s = client, futures, stall_s
        self.error: MemoryStall | None = None
        self.since = time.time()  # the scheduler's events carry time.time()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tracediff-watch", daemon=True)
        self._thread.start()

    def back(self) -> None:
        """A task came back."""
        self.since = time.time()

    def stop(self) -> None:
        self._done.set()

    def restarts(self) -> list[dict[str, Any]]:
        """The nannies' memory restarts since the last task came back."""
        try:
            got = self.client.get_events("worker-restart-memory")
        except Exception:  # the scheduler not answering: nothing learnt this time
            return []
        return [msg for t, msg in got if t >= self.since and isinstance(msg, dict)]

    def _run(self) -> None:
        while not self._done.wait(WATCH_S):
            waited = time.time() - self.since
            if waited < self.stall_s:
                continue
            restarts = self.restarts()
            if len(restarts) >= RESTARTS:
                self.error = stalled(restarts, waited, memory_limit(self.client))
                with contextlib.suppress(Exception):
                    self.client.cancel(self.futures)
                return


def memory_limit(client: Any) -> int | None:
    """The workers' memory limit in bytes, as the scheduler or the LocalCluster knows it."""
    from dask.utils import parse_bytes

    with contextlib.suppress(Exception):
        for w in client.scheduler_info()["workers"].values():
            if w.get("memory_limit"):
                return int(w["memory_limit"])
    spec = getattr(getattr(client, "cluster", None), "worker_spec", None) or {}
    for one in spec.values():
        n = (one.get("options") or {}).get("memory_limit")
        if isinstance(n, (int, float)) and n > 0:
            return int(n)
        with contextlib.suppress(ValueError, TypeError):
            return int(parse_bytes(n)) if isinstance(n, str) else None
    return None


def stalled(restarts: list[dict[str, Any]], secs: float, limit: int | None) -> MemoryStall:
    """The one-line error of `Watch`."""
    from dask.utils import format_bytes

    rss = max((int(r.get("rss") or 0) for r in restarts), default=0)
    where = f"--memory-limit {format_bytes(limit)} a worker" if limit else "its memory limit"
    at = f", at up to {format_bytes(rss)}" if rss else ""
    return MemoryStall(
        f"Dask restarted its workers {len(restarts)} times past {where} (Dask stops one at "
        f"95 % of it{at}) and no file came back in {secs:.0f} s: a worker holds more than "
        "the limit before it can finish a file",
        "give a higher --memory-limit (or leave it out: the machine's memory / N workers), or "
        "fewer workers per machine (local:N)",
    )


def raise_refusal(kind: str, message: str, hint: str | None) -> None:
    """Raise again, in the driver, the refusal `on_worker` carried back."""
    from tracediff.base import errors

    cls = getattr(errors, kind, None)
    if not (isinstance(cls, type) and issubclass(cls, TracediffError)):
        cls = TracediffError
    raise cls(message, hint)


def failed_twice(what: str, e: BaseException) -> ClusterError:
    """The one-line error for a file whose task failed twice (raised, or its worker died)."""
    return ClusterError(
        f"{what} failed twice on the cluster ({why(e)})",
        "check the file reads with `tracediff info FILE`; a worker killed for "
        "memory needs a higher limit (--memory-limit) or fewer threads",
    )


def why(e: BaseException) -> str:
    name = type(e).__name__
    text = str(e).splitlines()[0][:160] if str(e) else ""
    if name == "KilledWorker":
        return "its worker died each time it ran it"
    return f"{name}: {text}" if text else name
