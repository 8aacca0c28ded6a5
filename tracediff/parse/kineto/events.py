"""Kineto Chrome-trace JSON → lists of typed event records, one chunk of traceEvents at a time.

Stage: parse (inside the Kineto reader). Input: the trace's JSON text, streamed from a
`source.Source` through one reused buffer; output: the document's metadata (`Doc`) and an
iterator of event-record lists, each dropped by the caller once its columns exist, so at most
one chunk's records (CHUNK_BYTES of JSON) are alive at a time and the file is never held whole.

msgspec decodes into small typed records holding only the fields used: on the 35 MB ResNet50
trace that is 5x orjson's speed at a quarter of its memory; polars' read_ndjson and pyarrow's
JSON reader need 1.5-1.7x its CPU time, and one event per line, which Kineto does not write
(bench/README.md). Phase and category are Literals (no string per event); `args` stays raw
JSON, which msgspec skips in one go: decoding it into a record for every event would double
the decode's time (most events are operators and flows whose args are never read).

Chunking: `"traceEvents": [` is found in the bytes, the array is cut after an element's `}` where
`}`, `,` and `{` follow each other (whitespace aside), and each piece is decoded as a JSON array
of its own; the document before the array and the rest after the last cut are decoded as
documents. Every piece must decode strictly, so a cut that fell inside a string or a nested value
is caught (its piece is not valid JSON) and the next cut is tried; JSON's grammar then makes the
pieces' elements exactly the array's. Anything unexpected falls back to decoding the whole
document at once, which is also what names the place of a real error in its message.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from decimal import Decimal
from functools import partial
from typing import Any, Literal

import msgspec

from . import scan

# Phases of the Chrome trace format, and the categories Kineto writes (libkineto ActivityType
# names, flow and meta categories, the 2021 names). Decoded as Literals they cost no string per
# event; a trace with another category or phase is decoded again with plain strings.
_Phase = Literal[
    "B", "E", "X", "i", "I", "C", "b", "n", "e", "s", "t", "f", "P", "N", "O", "D", "M", "V", "v",
    "R", "c", "(", ")",
]  # fmt: skip
_Category = Literal[
    "cpu_op", "user_annotation", "gpu_user_annotation", "gpu_user_Annotation", "gpu_memcpy",
    "gpu_memset", "kernel", "external_correlation", "cuda_runtime", "cuda_driver",
    "cpu_instant_event", "python_function", "overhead", "mtia_runtime", "mtia_ccp_events",
    "mtia_insight", "mtia_counters", "cuda_sync", "cuda_event", "glow_runtime",
    "cuda_profiler_range", "hpu_op", "xpu_runtime", "xpu_driver", "collective_comm",
    "privateuse1_runtime", "privateuse1_driver", "mlu_user_annotation", "ac2g", "fwdbwd",
    "Trace", "async", "Operator", "Kernel", "Runtime", "Memcpy", "Memset", "Python",
]  # fmt: skip


def _event_type(exact: bool, lean: bool) -> type:
    time: Any = Decimal | None if exact else float | int | None
    fields: list[Any] = [
        ("ph", _Phase | None if lean else str | None, None),
        ("cat", _Category | None if lean else str | None, None),
        ("name", Any, None),
        ("pid", Any, None),
        ("tid", Any, None),
        ("ts", time, None),
        ("dur", time, None),
        # raw JSON: skipped in one go, decoded later only for the roles that read args
        ("args", msgspec.Raw, msgspec.Raw(b"{}")),
    ]
    return msgspec.defstruct("Event", fields, gc=False)


def _doc_type(event: type) -> type:
    return msgspec.defstruct(
        "Doc",
        [("traceEvents", list[event] | None, None)]  # type: ignore[valid-type]
        + [(k, Any, None) for k in DOC_KEYS],
    )


DOC_KEYS = (
    "deviceProperties",
    "distributedInfo",
    "baseTimeNanoseconds",
    "displayTimeUnit",
    "schemaVersion",
    "cuda_driver_version",
    "cuda_runtime_version",
    "cupti_version",
    "hip_runtime_version",
    "hip_driver_version",
    "roctracer_version",
    "trace_id",
)


class _Kind:
    """The decoders of one event type: for a JSON array of events and for a whole document."""

    def __init__(self, exact: bool, lean: bool) -> None:
        self.event = _event_type(exact, lean)
        self.events: Any = msgspec.json.Decoder(list[self.event])  # type: ignore[name-defined]
        self.doc: Any = msgspec.json.Decoder(_doc_type(self.event))


_KINDS = {(e, lean): _Kind(e, lean) for e in (False, True) for lean in (True, False)}


def decode_any(exact: bool, decode: Callable[[_Kind], Any]) -> Any:
    """decode(kind) with the leanest event type that holds the data: phase and category as
    Literals unless one is not listed."""
    try:
        return decode(_KINDS[exact, True])
    except msgspec.ValidationError as e:
        if not str(e).endswith(("].cat`", "].ph`")):
            raise
    return decode(_KINDS[exact, False])


class Doc:
    """The document's keys other than traceEvents (None where absent)."""

    def __init__(self, *parts: Any) -> None:
        for k in DOC_KEYS:  # a key written twice: the last one counts, as in a JSON parser
            vals = [getattr(p, k) for p in parts if getattr(p, k) is not None]
            setattr(self, k, vals[-1] if vals else None)

    def __getattr__(self, name: str) -> Any:  # for the type checker: keys are set in __init__
        raise AttributeError(name)


class NotChunked(Exception):
    """The chunked decode cannot vouch for this document: decode it whole."""


_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_CUT = re.compile(rb"\}\s*,\s*\{")
_TRIES = 8  # cuts tried per piece before giving up on chunking this document
_MAX_PIECE = 1 << 26  # 64 MB without a cut (a gzip bomb of spaces): decode whole, which refuses it
CHUNK_BYTES = 1 << 22  # 4 MB: a chunk's records are still in cache when their columns are read
_ERRORS = (msgspec.DecodeError, RecursionError, UnicodeDecodeError)  # ValidationError too


class _Window:
    """A sliding window over a stream: `buf[lo:hi]` holds the bytes not yet consumed. One
    buffer is reused (moved to its front as it is consumed), so the JSON is copied once.
    `base` is the stream offset of buf[0]."""

    def __init__(self, src: Any, size: int, base: int = 0) -> None:
        self.src = src
        self.buf = bytearray(size)
        self.lo = self.hi = 0
        self.base = base
        self.eof = False

    def fill(self, end: int) -> None:
        """Load bytes until buf[lo:end] is loaded (or the stream ends)."""
        if end > len(self.buf):
            keep = self.hi - self.lo
            if end - self.lo > len(self.buf):  # a piece larger than the buffer: grow it
                new = bytearray(end - self.lo + (end - self.lo) // 2)
                new[:keep] = memoryview(self.buf)[self.lo : self.hi]
                self.buf = new
            else:
                with memoryview(self.buf) as mv:
                    mv[:keep] = mv[self.lo : self.hi]
            end -= self.lo
            self.base += self.lo
            self.lo, self.hi = 0, keep
        while self.hi < end and not self.eof:
            with memoryview(self.buf) as mv:
                n = self.src.readinto(mv[self.hi :])
            self.eof = n == 0
            self.hi += n

    def decode(self, kind: _Kind, start: int, stop: int) -> Any:
        """buf[start:stop] as a JSON array of events; start and stop - 1 (bytes that are not part
        of any element) are made its brackets for the call. The records' raw `args` point into
        the buffer: they must be gone before the next `fill` moves its bytes."""
        buf = self.buf
        a, b = buf[start], buf[stop - 1]
        buf[start], buf[stop - 1] = 0x5B, 0x5D  # [ ]
        try:
            with memoryview(buf) as mv:
                return kind.events.decode(mv[start:stop])
        finally:
            buf[start], buf[stop - 1] = a, b


def _ops(exact: bool, data: bytes) -> list[Any]:
    ops: list[Any] = decode_any(exact, lambda k: k.events.decode(data))
    return ops


def _piece(w: _Window, exact: bool, start: int, stop: int) -> Any:
    """The events of buf[start:stop] (a JSON array but for its two end bytes): scanned into
    columns by the native scanner (scan.py) when it takes the piece, else decoded by msgspec."""
    if scan.ENABLED:
        got = scan.scan(w.buf, start + 1, stop - 1, partial(_ops, exact), exact=exact)
        if got is not None:
            return got
    return decode_any(exact, partial(w.decode, start=start, stop=stop))


def chunks(
    src: Any, exact: bool, out: list[Doc], start: int = 0, stop: int | None = None
) -> Iterator[Any]:
    """Event lists (or scan.Scanned pieces) of the traceEvents array, a piece at a time, read
    from `src` (a Source); appends the Doc of the document's keys it read to `out` at the end.
    Raises NotChunked (possibly after yielding) when the pieces cannot be vouched for.

    A segment of the array (segments.py) is read with `start` > 0, the offset of an element's
    `{` (src positioned there, the byte before it loaded as the first piece's `[`), and/or `stop`,
    the offset just past a cut's `}` and one separator byte: the last piece ends there. The
    segments' pieces tile the array, so when every piece decodes strictly the array's text is
    the pieces' elements joined by commas, and JSON's grammar makes them exactly its elements."""
    hint = src.size_hint if stop is None else stop - start + 1
    w = _Window(src, min(CHUNK_BYTES + (2 << 20), hint + 64), base=max(start - 1, 0))
    pos = _array_start(src, w, exact, out, start, stop)
    want = CHUNK_BYTES + (1 << 20)
    while True:
        w.lo = pos - 1
        w.fill(pos + want)
        pos = w.lo + 1
        end = None if stop is None else stop - w.base  # the segment's end, in buf
        if end is not None and end - pos <= want:  # the segment's last piece
            if w.hi < end:
                raise NotChunked  # the file is shorter than when the segments were cut
            try:
                events = _piece(w, exact, pos - 1, end)
            except _ERRORS:
                raise NotChunked from None
            yield events
            return
        limit = w.hi if end is None else min(w.hi, end)
        cut = _CUT.search(w.buf, pos + CHUNK_BYTES, limit) if limit > pos + CHUNK_BYTES else None
        events = None
        for _ in range(_TRIES):
            if cut is None:
                break
            cut_stop = cut.start() + 2  # the `}`, then one separator byte to hold the `]`
            try:
                events = _piece(w, exact, pos - 1, cut_stop)
                break
            except msgspec.ValidationError:
                raise NotChunked from None
            except _ERRORS as e:
                at = re.search(r"byte (\d+)", str(e))
                if at and int(at.group(1)) < cut_stop - pos:
                    # not at the cut: the array ended before it (the rest is decoded as a
                    # document below), or the JSON is broken (and that decode says so)
                    if stop is not None:
                        raise NotChunked from None  # not in a segment that ends in the array
                    cut = None
                    want = -1
                    break
                cut = _CUT.search(w.buf, cut.end(), limit)  # the cut was inside a value
        else:
            raise NotChunked
        if events is not None:
            yield events
            del events
            pos = cut.end() - 1  # type: ignore[union-attr]
            want = CHUNK_BYTES + (1 << 20)
        elif w.eof:
            if stop is not None:
                raise NotChunked
            break
        elif want < 0:  # the rest, whole
            while not w.eof:
                if w.hi - w.lo > _MAX_PIECE:
                    raise NotChunked
                w.fill(w.hi + CHUNK_BYTES)
            break
        else:
            want *= 2  # no cut in reach (a huge event, or none to find): look further
            if want > _MAX_PIECE:
                raise NotChunked
    scanned = (
        scan.scan(w.buf, pos, w.hi, partial(_ops, exact), closing=True, exact=exact)
        if scan.ENABLED
        else None
    )
    if scanned is not None:  # the array's last elements scanned; the document after its `]`
        rest = b"".join((b'{"traceEvents":[]', memoryview(w.buf)[scanned.close + 1 : w.hi]))
    else:
        rest = b"".join((b'{"traceEvents":[', memoryview(w.buf)[pos : w.hi]))
    w.buf = bytearray()  # the window's memory goes before the rest is decoded
    tail = _tail(rest, exact)
    del rest
    events = tail.traceEvents if scanned is None else scanned
    tail.traceEvents = None
    yield events
    out.append(Doc(tail))


def _array_start(
    src: Any, w: _Window, exact: bool, out: list[Doc], start: int, stop: int | None
) -> int:
    """Where `chunks`' first piece begins in `w`'s buffer (the byte before it is not part of a
    piece). The whole document (`start` 0): the traceEvents array's first byte, after checking
    that the key is the top-level one (the document up to it, closed, decodes: its Doc is
    appended to `out`). A segment: `src` positioned at the byte before `start`."""
    if start == 0:
        w.fill(CHUNK_BYTES)
        m = _KEY.search(w.buf, 0, w.hi)
        if m is None or (stop is not None and m.end() >= stop):
            raise NotChunked
        try:  # the document up to the array, closed: proves the key is the top-level one
            head = decode_any(exact, lambda k: k.doc.decode(bytes(w.buf[: m.end()]) + b"]}"))
        except _ERRORS:
            raise NotChunked from None
        out.append(Doc(head))
        return m.end()  # first byte of the array's content; buf[pos - 1] is not part of a piece
    src.seek(start - 1)
    return 1


def _tail(rest: bytes, exact: bool) -> Any:
    """The rest of the document from the last cut, as a document of its own."""
    if rest.count(b'"traceEvents"') != 1:  # the key again: a JSON parser keeps the last one
        raise NotChunked
    try:
        return decode_any(exact, lambda k: k.doc.decode(rest))
    except _ERRORS:
        raise NotChunked from None


def whole(doc: Any, size: int = 1 << 17) -> Iterator[list[Any]]:
    """A whole-document decode's events in pieces of `size` (the same code path as chunks)."""
    events = doc.traceEvents
    doc.traceEvents = None
    for i in range(0, len(events), size):
        yield events[i : i + size]
