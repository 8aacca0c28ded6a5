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
CPUs are busy (`workers`): it then costs more than it saves. The temp files (a gzip's inflated
text, the worker's pickled results) have no name, only open fds that the worker inherits: a
reader killed with SIGKILL leaves nothing on disk (`_temp_file`).
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import events, scan, source
from .clock import Clock
from .roles import Roles
from .source import Source

if TYPE_CHECKING:
    import subprocess

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
    path: Path, exact: bool, start: int, stop: int | None, fd: int | None = None
) -> tuple[Roles, list[events.Doc]]:
    """One segment's per-role columns and the document keys it holds (head and/or tail); `fd`:
    the text is that open file's (the inflated temp file), `path` names the trace."""
    src = Source(path, fd)
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
_MAX_RATIO = 256  # text bytes per gzip byte past which a sample is no trace (bomb): one pass

_LARGE_TMP: tuple[str, ...] = ("/var/tmp",)
"""Where the inflated text goes when the temp folder keeps its files in memory (tmpfs, the
default /tmp of several distributions): the place for large temp files (systemd's
file-hierarchy(7)), used when it is on a disk with room. The file has no name there either."""


class NoRoom(Exception):
    """No temp file for the inflated text (no worker to run, no room on disk or in memory, or a
    gzip whose text size is unknown): read the gzip stream in one pass."""


def read_gzip(path: Path, exact: bool, size_hint: int) -> tuple[Roles, events.Doc]:
    """A large gzip trace: inflated here (streaming) into a private temp file, whose segments
    the worker process reads as soon as the inflate has passed their end, and this process too
    once the inflate is done -- so the inflate overlaps the worker's decoding.

    The temp file has no name (`_temp_file`): a SIGKILL leaves nothing behind. Everything that
    decides against it is known before a byte is written: raises NoRoom when no worker would
    run, when the text's size is not known (a gzip trailer that the first MB's inflate does not
    agree with: several members, a truncated file -- source.gzip_size), when the sample looks
    like no trace (a bomb of spaces), or when no folder has room (`_place`); and NoRoom as well
    when the text outgrows that room while inflating. Raises events.NotChunked (no cut near a
    boundary twice in a row) for the caller to read the trace in one pass; InputError for a
    corrupt stream or a text over the memory budget."""
    if not workers(2):
        raise NoRoom
    src = Source(path)
    try:
        if not src.measure().known or src.ratio > _MAX_RATIO:
            raise NoRoom
        folder, room = _place(max(size_hint, src.size_hint))
        try:
            fd = _temp_file(folder)
        except OSError:
            raise NoRoom from None
        try:
            parts = _parallel(path, exact, _inflate_to(src, fd, room), fd, folder)
            if parts is None:  # no worker started: the file is whole, read it here
                raise NoRoom
            return _merged(parts)
        finally:
            os.close(fd)
    finally:
        src.close()  # (also when the inflate never started)


def _place(size: int) -> tuple[str, int]:
    """The folder for `size` bytes of inflated text, and the bytes it may take there: the temp
    folder when it is on a disk with room; when it is tmpfs/ramfs (its files are memory), the
    first of _LARGE_TMP on a disk with room, else the temp folder if the text fits in memory
    beside its parse -- the file's bytes count against the memory budget (memory for the text
    and its parse: (1 + PEAK_PER_JSON_BYTE) x the text). Raises NoRoom."""
    import shutil
    import tempfile

    ram: tuple[str, int] | None = None
    for k, folder in enumerate((tempfile.gettempdir(), *_LARGE_TMP)):
        if k and ram is None:
            break  # the temp folder is a disk: other places are not looked at
        try:
            room = shutil.disk_usage(folder).free - _ROOM
        except OSError:
            continue
        if not _in_ram(folder):
            if room >= size:
                return folder, room
        elif ram is None:
            memory = source.available_memory() // (1 + source.PEAK_PER_JSON_BYTE)
            ram = (folder, min(room, memory))
    if ram is not None and ram[1] >= size:
        return ram
    raise NoRoom


def _in_ram(folder: str) -> bool:
    """Whether `folder` is on tmpfs or ramfs (its files held in memory): the file system of the
    longest mount point above it in /proc/self/mounts (the last one mounted there); False where
    that cannot be read (not Linux)."""
    import re

    real = os.path.realpath(folder)
    best, kind = "", ""
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                fields = line.split()
                if len(fields) < 3:
                    continue
                mnt = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[1])
                if real == mnt or real.startswith(mnt.rstrip("/") + "/"):
                    if len(mnt) >= len(best):
                        best, kind = mnt, fields[2]
    except OSError:
        return False
    return kind in ("tmpfs", "ramfs")


def _temp_file(folder: str) -> int:
    """A new file in `folder` with no name, open for reading and writing: nothing is left behind
    however this process ends, a SIGKILL included -- its space goes when the last process holding
    it (this one, the worker) ends. Where O_TMPFILE is missing (not Linux, or a file system
    without it) the file is named and unlinked at once: only a kill in those microseconds would
    leave it behind."""
    import tempfile

    try:
        return os.open(folder, os.O_TMPFILE | os.O_RDWR, 0o600)
    except (AttributeError, OSError):
        pass
    fd, name = tempfile.mkstemp(prefix="tracediff-kineto-", dir=folder)
    try:
        os.unlink(name)
    except OSError:
        os.close(fd)
        raise
    return fd


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


def _serve() -> None:
    """The worker process (`python -c`, argv: JSON of the job): asks for a segment, reads it,
    appends the pickled result to the job's results file (an inherited fd: the file has no
    name) and says where with the next request, until the main process answers None or is gone.
    (Results go through a file: sent through the pipe, 10 MB a segment took ~160 wake-ups of the
    main process's receiving thread, each waiting for the GIL while that process decodes, and
    the worker stalled.)"""
    import json
    import pickle
    import sys
    from multiprocessing.connection import Connection

    gc.disable()  # as in read_kineto: the records form no cycles
    job = json.loads(sys.argv[1])
    events.CHUNK_BYTES = job["chunk"]
    scan.THREADS = 1  # two processes already keep two CPUs busy
    path, exact, fd, out = Path(job["path"]), job["exact"], job["fd"], job["out"]
    down = Connection(job["down"], writable=False)
    up = Connection(job["up"], readable=False)
    msg: tuple[int, Any] = (-1, None)
    end = 0  # bytes of results written
    try:
        while True:
            up.send(msg)
            got = down.recv()
            if got is None:
                break
            k, start, stop = got
            try:
                part = read_segment(path, exact, start, stop, fd)
                # a file object per result: one that failed (a full disk) leaves no buffered
                # bytes behind, and the next result is written over it from `end`
                with open(out, "wb", closefd=False) as f:
                    f.seek(end)
                    pickle.dump(part, f, protocol=pickle.HIGHEST_PROTOCOL)
                    f.flush()
                    n = f.tell() - end
                del part
                msg = (k, (end, n))
                end += n
            except events.NotChunked:
                msg = (k, _NOT_CHUNKED)
            except Exception:  # noqa: BLE001 - the main process reads that segment and says why
                msg = (k, None)
    except (EOFError, OSError):  # the main process is gone (killed, say): so is this one
        pass


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


def _start_worker(
    path: Path, exact: bool, fd: int | None, out: int
) -> tuple[subprocess.Popen[bytes], int, int] | None:
    """The worker process of `_parallel`: a fresh interpreter running `_serve` on `path`,
    writing its results to `out`. Returns it, the write end of the pipe that feeds it segments
    and the read end of the pipe it answers on; None when it cannot start (the pipes and `out`
    then closed)."""
    import json
    import subprocess
    import sys

    import tracediff

    down_r, down_w = os.pipe()
    up_r, up_w = os.pipe()
    job = {
        "path": str(path),
        "exact": exact,
        "chunk": events.CHUNK_BYTES,
        "down": down_r,
        "up": up_w,
        "fd": fd,
        "out": out,
    }
    root = str(Path(tracediff.__file__).resolve().parents[1])
    code = (
        f"import sys; sys.path.insert(0, {root!r}); "
        "from tracediff.parse.kineto.segments import _serve; _serve()"
    )
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, json.dumps(job)],
            pass_fds=(down_r, up_w, out) + (() if fd is None else (fd,)),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except OSError:
        for f in (down_r, down_w, up_r, up_w, out):
            os.close(f)
        return None
    os.close(down_r)
    os.close(up_w)
    return proc, down_w, up_r


def _parallel(
    path: Path,
    exact: bool,
    segs: Iterator[tuple[int, int | None]],
    fd: int | None = None,
    folder: str | None = None,
) -> list[Any] | None:
    """Segments read here and in a worker process (a fresh interpreter running `_serve`, which
    neither forks this process's threads nor runs its __main__); None when none can start.
    `segs` is iterated here first, while the worker reads the segments it has yielded (a gzip
    trace's, as they are inflated); then this process reads the rest alongside it. `fd`: the
    text is that open file's (`read_segment`); the worker's results go to a file with no name
    in `folder` (the temp folder by default), so a kill leaves nothing of them either."""
    import pickle
    import tempfile
    from multiprocessing.connection import Connection

    feed = _Feed()
    try:
        out = _temp_file(folder or tempfile.gettempdir())
    except OSError:  # nowhere to put the worker's results: read alone
        return None
    started = _start_worker(path, exact, fd, out)
    if started is None:  # no process can be started here: read alone
        return None
    proc, down_w, up_r = started
    down, up = Connection(down_w, readable=False), Connection(up_r, writable=False)
    parts: dict[int, Any] = {}
    failed: list[bool] = []
    held: list[int | None] = [None]  # the segment the worker is reading
    done: dict[int, tuple[int, int]] = {}  # the worker's results: segment -> (offset, bytes)

    def serve() -> None:  # the worker's requests and results, answered while this one reads
        try:
            while True:
                k, part = up.recv()
                if part == _NOT_CHUNKED:  # stop both
                    failed.append(True)
                    feed.drain()
                elif isinstance(part, tuple):
                    done[k] = part
                held[0] = feed.take(wait=True)
                down.send(None if held[0] is None else (held[0], *feed.segs[held[0]]))
        except (EOFError, OSError):  # the worker ended (or died: its segments are read here)
            pass

    thread = threading.Thread(target=serve, name="kineto-segments", daemon=True)
    thread.start()
    threads, scan.THREADS = scan.THREADS, 1  # (x50 replica at load 1.4-1.8: 2.6 s vs 3.5 s)
    try:
        for seg in segs:
            if failed:
                break
            feed.add(seg)
        feed.close()
        while READ_HERE and not failed and (k := feed.take(wait=False)) is not None:
            parts[k] = read_segment(path, exact, *feed.segs[k], fd)
        with feed.cond:
            idle = READ_HERE and held[0] is None
        if idle:  # the worker holds no segment (still starting, say): it is not waited for
            proc.kill()
        thread.join()
        if failed:
            raise events.NotChunked
        with open(out, "rb", closefd=False) as results:  # (the worker writes no more)
            for k, (at, n) in done.items():
                try:
                    results.seek(at)
                    parts[k] = pickle.load(results)
                    if results.tell() != at + n:
                        del parts[k]
                except (OSError, EOFError, pickle.UnpicklingError):
                    pass  # read here below
        for k, (a, b) in enumerate(feed.segs):  # segments the worker failed or did not finish
            if k not in parts:
                parts[k] = read_segment(path, exact, a, b, fd)
    finally:
        scan.THREADS = threads
        feed.drain()  # (an error while iterating `segs`: the worker's thread stops waiting)
        down.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        up.close()
        os.close(out)
        thread.join(timeout=5)
    return [parts[k] for k in range(len(feed.segs))]
