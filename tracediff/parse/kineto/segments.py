"""A large plain-JSON trace read in segments, by this process and one worker process at once.

Stage: parse (inside the Kineto reader). Input: a `.json` path, or a `.json.gz` one with at least
GZIP_MIN_BYTES of JSON (gzip cannot seek: `read_gzip` inflates it into a private temp file, and
cuts its segments as the inflate passes them); output: the merged per-role columns (`Roles`) and
the document's keys (`Doc`).

The traceEvents array is split at `}`, `,` and `{` meeting near every SEGMENT_BYTES of the file
(`bounds`: a few small reads, no decode); each segment is read, decoded and turned into Arrow
columns on its own (events.chunks with start/stop, roles.Roles), and the segments' columns are
concatenated in file order. Which process reads a segment does not change its columns, so the
tables are the same whether the worker runs or not. A boundary that is not between two elements
(inside a string holding `}, {`) fails a piece's strict decode, and the reader then reads the
file as one segment. The worker is a spawned interpreter (polars' thread pool does not survive a
fork, nor runs the caller's __main__); the two processes take segments from one feed, so a busy
core gets fewer of them. No worker starts on one usable CPU or when the load average says the
CPUs are busy (`workers`): it then costs more than it saves.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import events
from .clock import Clock
from .roles import Roles
from .source import Source

SEGMENT_BYTES = 64 << 20
"""JSON bytes per segment: large enough that a segment's fixed costs (its first and last
pieces, one pickled result) vanish, small enough that two processes finish close together."""

WORKERS = 1
"""Worker processes beside this one (0: read every segment here). Used only when this process
may run on two or more CPUs and the file has two or more segments."""

LOAD_GATE = True
"""Whether an oversubscribed machine (1-minute load average at or above twice the usable CPUs)
gets no worker (bench/kineto_ingest.py --no-load-gate turns it off to measure the worker
anyway)."""

READ_HERE = True
"""Whether this process reads segments too (tests turn it off so the worker reads them all)."""

Bounds = list[tuple[int, int | None]]


def bounds(src: Source, segment_bytes: int | None = None) -> Bounds:
    """[start, stop) of each segment: segment 0 starts at the document's beginning, the last
    one runs to its end (None); between them, a cut's `}` + one byte ends a segment and the
    next starts at the cut's `{`."""
    size = src.size_hint
    step = segment_bytes or SEGMENT_BYTES
    n = size // step
    if src.gzip or n < 2:
        return [(0, None)]
    cuts: list[tuple[int, int]] = []
    with open(src.path, "rb") as f:
        for k in range(1, n):
            off = k * size // n
            f.seek(off)
            m = events._CUT.search(f.read(1 << 20))
            if m is not None and (not cuts or off + m.start() > cuts[-1][1]):
                cuts.append((off + m.start() + 2, off + m.end() - 1))
    starts = [0] + [b for _, b in cuts]
    stops: list[int | None] = [a for a, _ in cuts]
    return list(zip(starts, [*stops, None], strict=True))


def workers(n_segments: int) -> int:
    """Worker processes for a read of `n_segments`: none unless this process may run on two or
    more CPUs and they are not oversubscribed -- the worker costs ~1.5 CPU-s more than reading
    alone (its interpreter, imports, a pickled result per segment), which pays while a CPU has
    time to spare. The gate is deliberately loose: the 1-minute average counts this reader's own
    last run, and a first gate at "CPUs - 0.5" switched the worker off on the 2-core
    development machine at load 1.6-1.8, where the ×50 trace then took 15-21 s instead of 7-10
    (bench/README.md); it only stops the worker at twice as many runnable tasks as CPUs."""
    if n_segments < 2 or WORKERS < 1:
        return 0
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    if cpus < 2:
        return 0
    if not LOAD_GATE or not READ_HERE:  # (READ_HERE off: only the worker reads, load or not)
        return WORKERS
    try:
        load = os.getloadavg()[0]
    except OSError:  # pragma: no cover - no load average to read
        load = 0.0
    return WORKERS if load < 2 * cpus else 0


def read_segment(
    path: Path, exact: bool, start: int, stop: int | None
) -> tuple[Roles, list[events.Doc]]:
    """One segment's per-role columns and the document keys it holds (head and/or tail)."""
    src = Source(path)
    docs: list[events.Doc] = []
    roles = Roles(Clock(path, exact))
    try:
        for evs in events.chunks(src, exact, docs, start, stop):
            roles.add(evs)
            del evs
    finally:
        src.close()
    roles.compact()
    return roles, docs


def read(path: Path, exact: bool, segs: Bounds) -> tuple[Roles, events.Doc]:
    """Every segment, merged in file order; raises events.NotChunked as events.chunks does."""
    parts = _parallel(path, exact, iter(segs)) if workers(len(segs)) else None
    if parts is None:
        parts = [read_segment(path, exact, a, b) for a, b in segs]
    return _merged(parts)


def _merged(parts: list[Any]) -> tuple[Roles, events.Doc]:
    roles = parts[0][0]
    for r, _ in parts[1:]:
        roles.merge(r)
    return roles, events.Doc(*(d for _, docs in parts for d in docs))


GZIP_MIN_BYTES = 128 << 20
"""A gzip trace whose JSON is at least this large (by its gzip trailer) is inflated to a temp
file and read in segments (`read_gzip`); smaller ones are read in one pass."""

_ROOM = 256 << 20  # free space left on the temp file's disk beyond the inflated text
_WINDOW = 1 << 20  # bytes after a segment boundary searched for a cut (as in `bounds`)


class NoRoom(Exception):
    """The temp folder has no room for the inflated text: read the gzip stream in one pass."""


def read_gzip(path: Path, exact: bool, size_hint: int) -> tuple[Roles, events.Doc]:
    """A large gzip trace: inflated here (streaming) into a private temp file, whose segments
    the worker process reads as soon as the inflate has passed their end, and this process too
    once the inflate is done -- so the inflate overlaps the worker's decoding. The temp file is
    removed on every way out. Raises NoRoom (no worker to run, or not enough free space for
    `size_hint` bytes, or the text outgrew the space) and events.NotChunked (no cut near a
    boundary twice in a row: a gzip bomb of spaces, say), for the caller to read the trace in
    one pass; InputError for a corrupt stream or a text over the memory budget."""
    import shutil
    import tempfile

    if not workers(2):
        raise NoRoom
    tmpdir = tempfile.gettempdir()
    try:
        free = shutil.disk_usage(tmpdir).free - _ROOM
        if free < size_hint:
            raise NoRoom
        fd, name = tempfile.mkstemp(prefix="tracediff-kineto-", suffix=".json", dir=tmpdir)
    except OSError:
        raise NoRoom from None
    tmp = Path(name)
    try:
        parts = _parallel(tmp, exact, _inflate_to(Source(path), fd, free))
        if parts is None:  # no worker started: the file is whole, read it here
            raise NoRoom
        roles, doc = _merged(parts)
        roles.clock.path = path  # messages name the trace, not the temp file
        return roles, doc
    finally:
        try:
            os.close(fd)
        except OSError:  # pragma: no cover - closed already
            pass
        tmp.unlink(missing_ok=True)


def _inflate_to(src: Source, fd: int, room: int) -> Any:
    """Inflate `src` into the file `fd`, yielding each segment's [start, stop) once its bytes
    are written; segments end at a cut (`bounds`' rule) searched in the first _WINDOW bytes
    after every SEGMENT_BYTES of text."""
    step = SEGMENT_BYTES
    target = step  # the next boundary
    window = bytearray()  # the text from `target` on, while it is searched for a cut
    start = pos = misses = 0
    try:
        for out in src.inflated():
            if pos + len(out) > room:
                raise NoRoom
            view = memoryview(out)
            while view:
                try:
                    n = os.write(fd, view)
                except OSError:  # a full disk, say: read the stream in one pass instead
                    raise NoRoom from None
                view = view[n:]
            end = pos + len(out)
            width = min(_WINDOW, step)  # windows never overlap: each cut is past the last
            while end > target:
                window += memoryview(out)[max(target - pos, 0) : target + width - pos]
                if len(window) < width:
                    break
                m = events._CUT.search(window)
                window = bytearray()
                if m is None:
                    misses += 1
                    if misses > 1:
                        raise events.NotChunked  # no element boundaries: no segments
                else:
                    misses = 0
                    yield start, target + m.start() + 2
                    start = target + m.end() - 1
                target += step
            pos = end
    finally:
        src.close()
    yield start, None


_NOT_CHUNKED = "not chunked"
_DONE = "done"


def _serve() -> None:
    """The worker process (`python -c`, argv: JSON of the job): asks for a segment, reads it,
    writes the result to the job's folder and says so with the next request, until the main
    process answers None. (Results go through files: sent through the pipe, 10 MB a segment
    took ~160 wake-ups of the main process's receiving thread, each waiting for the GIL while
    that process decodes, and the worker stalled.)"""
    import json
    import pickle
    import sys
    from multiprocessing.connection import Connection

    gc.disable()  # as in read_kineto: the records form no cycles
    job = json.loads(sys.argv[1])
    events.CHUNK_BYTES = job["chunk"]
    path, exact = Path(job["path"]), job["exact"]
    down = Connection(job["down"], writable=False)
    up = Connection(job["up"], readable=False)
    msg: tuple[int, Any] = (-1, None)
    while True:
        up.send(msg)
        got = down.recv()
        if got is None:
            break
        k, start, stop = got
        try:
            part = read_segment(path, exact, start, stop)
            with open(Path(job["dir"]) / f"{k}.pickle", "wb") as f:
                pickle.dump(part, f, protocol=pickle.HIGHEST_PROTOCOL)
            del part
            msg = (k, _DONE)
        except events.NotChunked:
            msg = (k, _NOT_CHUNKED)
        except Exception:  # noqa: BLE001 - the main process reads that segment and says why
            msg = (k, None)
    up.close()


class _Feed:
    """The segments known so far, handed out in file order to this process and the worker's
    thread; the worker's thread waits for the next one while the feed is open."""

    def __init__(self) -> None:
        self.segs: Bounds = []
        self.given = 0
        self.open = True
        self.cond = threading.Condition()

    def add(self, seg: tuple[int, int | None]) -> None:
        with self.cond:
            self.segs.append(seg)
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.open = False
            self.cond.notify_all()

    def drain(self) -> None:
        """Hand out nothing more (the worker is told to stop)."""
        with self.cond:
            self.given = len(self.segs)
            self.open = False
            self.cond.notify_all()

    def take(self, wait: bool) -> int | None:
        with self.cond:
            while wait and self.open and self.given == len(self.segs):
                self.cond.wait()
            if self.given == len(self.segs):
                return None
            self.given += 1
            return self.given - 1


def _parallel(path: Path, exact: bool, segs: Iterator[tuple[int, int | None]]) -> list[Any] | None:
    """Segments read here and in a worker process (a fresh interpreter running `_serve`, which
    neither forks this process's threads nor runs its __main__); None when none can start.
    `segs` is iterated here first, while the worker reads the segments it has yielded (a gzip
    trace's, as they are inflated); then this process reads the rest alongside it."""
    import json
    import pickle
    import shutil
    import subprocess
    import sys
    import tempfile
    from multiprocessing.connection import Connection

    import tracediff

    feed = _Feed()
    try:
        folder = tempfile.mkdtemp(prefix="tracediff-kineto-")
    except OSError:  # nowhere to put the worker's results: read alone
        return None
    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()
    job = {
        "path": str(path),
        "exact": exact,
        "chunk": events.CHUNK_BYTES,
        "down": down_r,
        "up": up_w,
        "dir": folder,
    }
    root = str(Path(tracediff.__file__).resolve().parents[1])
    code = (
        f"import sys; sys.path.insert(0, {root!r}); "
        "from tracediff.parse.kineto.segments import _serve; _serve()"
    )
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, json.dumps(job)],
            pass_fds=(down_r, up_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except OSError:  # no process can be started here: read alone
        for fd in (down_r, down_w, up_r, up_w):
            os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
        return None
    os.close(down_r)
    os.close(up_w)
    down, up = Connection(down_w, readable=False), Connection(up_r, writable=False)
    parts: dict[int, Any] = {}
    failed: list[bool] = []
    held: list[int | None] = [None]  # the segment the worker is reading
    done: list[int] = []  # the segments whose results the worker wrote

    def serve() -> None:  # the worker's requests and results, answered while this one reads
        try:
            while True:
                k, part = up.recv()
                if part == _NOT_CHUNKED:  # stop both
                    failed.append(True)
                    feed.drain()
                elif part == _DONE:
                    done.append(k)
                held[0] = feed.take(wait=True)
                down.send(None if held[0] is None else (held[0], *feed.segs[held[0]]))
        except (EOFError, OSError):  # the worker ended (or died: its segments are read here)
            pass

    thread = threading.Thread(target=serve, name="kineto-segments", daemon=True)
    thread.start()
    try:
        for seg in segs:
            if failed:
                break
            feed.add(seg)
        feed.close()
        while READ_HERE and not failed and (k := feed.take(wait=False)) is not None:
            parts[k] = read_segment(path, exact, *feed.segs[k])
        with feed.cond:
            idle = READ_HERE and held[0] is None
        if idle:  # the worker holds no segment (still starting, say): it is not waited for
            proc.kill()
        thread.join()
        if failed:
            raise events.NotChunked
        for k in done:
            try:
                with open(Path(folder) / f"{k}.pickle", "rb") as f:
                    parts[k] = pickle.load(f)
            except (OSError, EOFError, pickle.UnpicklingError):
                pass  # read here below
        for k, (a, b) in enumerate(feed.segs):  # segments the worker failed or did not finish
            if k not in parts:
                parts[k] = read_segment(path, exact, a, b)
    finally:
        feed.drain()  # (an error while iterating `segs`: the worker's thread stops waiting)
        down.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        up.close()
        shutil.rmtree(folder, ignore_errors=True)
        thread.join(timeout=5)
    return [parts[k] for k in range(len(feed.segs))]
