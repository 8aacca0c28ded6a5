"""Kineto trace file → JSON text, as a stream or whole, refused when it cannot fit in memory.

Stage: parse (input). Input: a `.json` or `.json.gz` path (gzip known by its magic bytes, not
its name); output: the uncompressed JSON, through `Source.readinto` a buffer at a time (the
chunked decode) or as one bytes object (`read_json_bytes`, the whole-document decode).

A trace is refused when its JSON is larger than `memory_budget()` -- by the file size, the gzip
ISIZE trailer (where the first MB's inflate agrees with it: `gzip_size`), or the inflated size
passing the budget while inflating -- so the user gets one line at once instead of a machine that
swaps, and a gzip bomb stops as soon as it passes.
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from tracediff.base import settings
from tracediff.base.errors import InputError


def _inflater() -> Any:
    """ISA-L inflates gzip twice as fast as zlib (measured on the 35 MB ResNet50 trace)."""
    try:
        from isal import isal_zlib

        return isal_zlib
    except ImportError:  # pragma: no cover - isal is a dependency; zlib keeps a bare install going
        return zlib


_inflate: Any = _inflater()

PEAK_PER_JSON_BYTE = 3
"""Bound on a parse's peak memory per byte of JSON: the whole-document decode (the fallback)
peaks at ~2-3x the JSON; the chunked one stays far below (bench/kineto_ingest.py)."""


def available_memory() -> int:
    """Bytes of memory this process may fill: MemAvailable, capped by an address-space limit.

    $TRACEDIFF_MEMORY_BYTES overrides MemAvailable (containers whose limits /proc/meminfo does
    not show)."""
    avail = settings.memory_bytes()
    if avail is None:
        try:
            with open("/proc/meminfo") as f:
                info = dict(line.split(":", 1) for line in f)
            avail = int(info["MemAvailable"].split()[0]) * 1024
        except (OSError, KeyError, ValueError):
            avail = 1 << 62
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)  # an address-space limit caps it too
    if soft != resource.RLIM_INFINITY:
        avail = min(avail, soft)
    return avail


def memory_budget() -> int:
    """Bytes of JSON this machine can parse: available_memory() / PEAK_PER_JSON_BYTE."""
    return available_memory() // PEAK_PER_JSON_BYTE


def _size(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def _too_big(path: Path, size: int, budget: int) -> InputError:
    # size > budget: known (file size, gzip trailer); budget + 1: stopped while inflating
    what = f"more than {_size(budget)}" if size == budget + 1 else f"{_size(size)} or more"
    return InputError(
        f"{path}: the trace is {what} of JSON; parsing it needs about "
        f"{PEAK_PER_JSON_BYTE}x that and this machine has memory for {_size(budget)} of JSON",
        "profile fewer steps, or parse it on a machine with more memory",
    )


_SAMPLE_IN = 1 << 20  # compressed bytes from a gzip file's start inflated to size its text
_SAMPLE_OUT = 2 << 20  # text inflated from them at most (1 MB of a gzip bomb is 1 GB)
_TRUST = 4  # the trailer's size is believed within this factor of the sample's estimate
_SAMPLE_FROM = 64 << 20
"""A trailer that claims less text than this (and more than the file's size) is taken as the
size hint without the sample (1-6 ms): nothing large is planned on it (the temp-file path starts
at 128 MB) and the budget, when it is higher, cannot refuse it."""


class GzipSize(NamedTuple):
    """What a gzip file's trailer and first _SAMPLE_IN bytes tell of its text (`gzip_size`)."""

    size: int
    """Bytes of text: exact when the sample is the whole file; else the trailer's ISIZE (plus
    the multiple of 2**32 nearest the estimate: ISIZE is mod 2**32) when it agrees with the
    estimate, `ratio` x the file's size, within a factor _TRUST; else that estimate."""
    known: bool
    """`size` is exact or the trailer's, not an estimate."""
    ratio: float
    """Text bytes per compressed byte in the sample (real traces: 7-50; a bomb of spaces: ~1000)."""
    refuse: int
    """A size the text reaches if the file is valid (0: none to tell): the exact size, or the
    trailer's ISIZE when it agrees with the sample."""


def gzip_size(head: bytes, size: int, tail: bytes) -> GzipSize:
    """The text's size from the file's first bytes `head`, its size, and its last 4 bytes.

    The trailer alone cannot be trusted: it holds only the last member's size (a file of several
    members: concatenated, or a bomb of 128 members ending in a small one), and a truncated file
    ends in compressed bytes that read as any size (a truncated trace used to be refused as
    "2.8 GB or more of JSON"). So it is believed only when the sample's estimate agrees."""
    out = used = 0
    rest = head
    members = 0
    ended = False  # the last member read ended, and nothing but NUL padding followed it
    try:
        while rest and out < _SAMPLE_OUT:
            d = _inflate.decompressobj(wbits=31)
            members += 1
            out += len(d.decompress(rest, _SAMPLE_OUT - out))
            if not d.eof:
                used += len(rest) - len(d.unconsumed_tail)
                break
            used += len(rest) - len(d.unused_data)
            rest = d.unused_data.lstrip(b"\x00")
            ended = not rest
    except (zlib.error, _inflate.error):  # corrupt: the read says so
        ended = False
    ratio = out / used if out and used else 1.0
    estimate = max(round(ratio * size), out)
    if len(head) == size and out < _SAMPLE_OUT:  # the whole file was inflated
        return GzipSize(out, True, ratio, out) if ended else GzipSize(estimate, False, ratio, 0)
    if members > 1 or len(tail) < 4:  # the trailer tells the last member only
        return GzipSize(estimate, False, ratio, 0)
    isize = int.from_bytes(tail, "little")
    k = max(round((estimate - isize) / (1 << 32)), 0)
    best = min(
        (isize + j * (1 << 32) for j in (k - 1, k, k + 1) if j >= 0 and isize + j * (1 << 32)),
        key=lambda c: abs(math.log(c / estimate)),
        default=0,
    )
    if best and estimate / _TRUST <= best <= estimate * _TRUST:
        return GzipSize(best, True, ratio, isize)
    return GzipSize(estimate, False, ratio, 0)


def read_json_bytes(path: Path) -> bytes:
    """The trace's JSON text, inflated when it is gzip (by content, not by name)."""
    budget = memory_budget()
    try:
        size = path.stat().st_size
        if size > budget:  # fail before reading, not after swapping
            raise _too_big(path, size, budget)
        data = path.read_bytes()
    except OSError as e:
        raise InputError(
            f"{path}: cannot read: {e.strerror or e}", "check the path and permissions"
        ) from None
    if data[:2] == b"\x1f\x8b":
        # the gzip trailer, where the sample agrees with it: a bomb under 4 GiB is refused
        # without inflating it; others are stopped by the limit while inflating
        if len(data) >= 18 and int.from_bytes(data[-4:], "little") > budget:
            refuse = gzip_size(data[:_SAMPLE_IN], len(data), data[-4:]).refuse
            if refuse > budget:
                raise _too_big(path, refuse, budget)
        try:
            data = _gunzip(data, budget)
        except _Oversized:
            raise _too_big(path, budget + 1, budget) from None
        except (OSError, EOFError, zlib.error, _inflate.error) as e:
            raise InputError(
                f"{path}: gzip data is truncated or corrupt ({e})",
                "copy the trace again, or check it with `gzip -t`",
            ) from None
    return data


class _Oversized(Exception):
    pass


def _count_inflated(data: bytes, limit: int) -> None:
    """Inflate `data` (gzip members) 16 MB at a time, keeping nothing, and raise _Oversized as
    soon as the text passes `limit`: a gzip bomb is refused holding 16 MB, not `limit` bytes
    (many 64 MB members of spaces used to be inflated up to the whole budget first)."""
    total = 0
    while data:
        d = _inflate.decompressobj(wbits=31)
        rest = data
        while not d.eof:
            chunk = d.decompress(rest, 1 << 24)
            total += len(chunk)
            if total > limit:
                raise _Oversized()
            rest = d.unconsumed_tail
            if not chunk and not rest:
                raise EOFError("compressed stream ended before the end-of-stream marker")
        data = d.unused_data.lstrip(b"\x00")


def _gunzip(data: bytes, limit: int) -> bytes:
    """gzip → bytes in one C call per member (gzip.decompress adds a second CRC pass), refused
    (_Oversized) before any output is kept when the text would pass `limit` bytes."""
    _count_inflated(data, limit)
    out = []
    total = 0
    while data:
        d = _inflate.decompressobj(wbits=31)
        chunk = d.decompress(data, max(limit - total, 0) + 1)
        total += len(chunk)
        if total > limit or d.unconsumed_tail:
            raise _Oversized()
        out.append(chunk)
        if not d.eof:
            raise EOFError("compressed stream ended before the end-of-stream marker")
        data = d.unused_data.lstrip(b"\x00")
    return out[0] if len(out) == 1 else b"".join(out)


_BLOCK = 1 << 20  # compressed bytes read at a time


class _At:
    """A file read with pread at an offset of its own, so that the processes sharing the open
    file (segments.py: one writes the inflated text, both read segments of it) never move each
    other's position. Closing it leaves the fd open: it belongs to the caller."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pos = 0

    def read(self, n: int) -> bytes:
        data = os.pread(self.fd, n, self.pos)
        self.pos += len(data)
        return data

    def readinto(self, buf: memoryview) -> int:
        if _preadv is not None:
            n: int = _preadv(self.fd, [buf], self.pos)
        else:  # pragma: no cover - no preadv (macOS): one copy more
            data = os.pread(self.fd, len(buf), self.pos)
            n = len(data)
            buf[:n] = data
        self.pos += n
        return n

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self.pos = offset + (os.fstat(self.fd).st_size if whence == os.SEEK_END else 0)
        return self.pos

    def close(self) -> None:
        pass


_preadv = getattr(os, "preadv", None)


class Source:
    """The trace's JSON text as a stream: `readinto` fills a buffer, inflating gzip on the way,
    and refuses (InputError) a text larger than the memory budget as soon as it passes it."""

    def __init__(self, path: Path, fd: int | None = None) -> None:
        """`fd`: read the (plain) text from this open file instead, with pread at offsets of
        its own (segments.py's inflated temp file, which has no name); `path` names the trace
        in messages."""
        self.path = path
        self.budget = budget = memory_budget()
        self.total = 0
        self.size_hint = 0  # bytes of JSON to expect (a buffer larger than the text is waste)
        self.size_known = True  # size_hint is the text's size, not a guess (`measure`)
        self.ratio = 1.0  # text bytes per byte of the file (`measure`)
        self._gz: GzipSize | None = None
        try:
            size = path.stat().st_size if fd is None else os.fstat(fd).st_size
            if size > budget:  # fail before reading, not after swapping
                raise _too_big(path, size, budget)
            self._f: Any = (
                open(path, "rb", buffering=0)  # noqa: SIM115 - closed by close()
                if fd is None
                else _At(fd)
            )
            magic = self._f.read(2)
            self.gzip = magic == b"\x1f\x8b"
            self.size_hint = size
            if self.gzip and size >= 18:
                self._f.seek(-4, os.SEEK_END)
                isize = int.from_bytes(self._f.read(4), "little")
                self.size_hint, self.size_known = isize, False
                if not size < isize < _SAMPLE_FROM or isize > budget:
                    refuse = self.measure().refuse
                    if refuse > budget:
                        self._f.close()
                        raise _too_big(path, refuse, budget)
            self._f.seek(0)
        except OSError as e:
            raise InputError(
                f"{path}: cannot read: {e.strerror or e}", "check the path and permissions"
            ) from None
        self._d = _inflate.decompressobj(wbits=31)
        self._in = b""  # compressed input not yet given to the inflater
        self._out = memoryview(b"")  # inflated output not yet handed out

    def measure(self) -> GzipSize:
        """A gzip file's text size from its trailer and first MB (`gzip_size`), once; sets
        size_hint, size_known and ratio. Only before reading begins (it moves the file)."""
        if self._gz is None:
            size = self._f.seek(0, os.SEEK_END)
            self._f.seek(0)
            head = self._f.read(_SAMPLE_IN)
            self._f.seek(-4, os.SEEK_END)
            self._gz = gzip_size(head, size, self._f.read(4))
            self._f.seek(0)
            self.size_hint, self.size_known, self.ratio = self._gz[:3]
        return self._gz

    def close(self) -> None:
        self._f.close()

    def seek(self, offset: int) -> None:
        """Read on from `offset` of the JSON (plain files only: gzip cannot seek)."""
        if self.gzip:
            raise ValueError("a gzip stream cannot seek")
        try:
            self._f.seek(offset)
        except OSError as e:
            raise InputError(
                f"{self.path}: cannot read: {e.strerror or e}", "check the path and permissions"
            ) from None

    def readinto(self, buf: memoryview) -> int:
        """Fill `buf` from the start with the next JSON bytes; 0 at the end."""
        try:
            n: int
            if not self.gzip:
                n = self._f.readinto(buf)
            else:
                n = 0
                while n < len(buf):
                    if not self._out:
                        out = self._inflate(min(len(buf) - n, _BLOCK))
                        if not out:
                            break
                        self._out = memoryview(out)
                    k = min(len(self._out), len(buf) - n)
                    buf[n : n + k] = self._out[:k]
                    self._out = self._out[k:]
                    n += k
        except OSError as e:
            raise InputError(
                f"{self.path}: cannot read: {e.strerror or e}", "check the path and permissions"
            ) from None
        self.total += n
        if self.total > self.budget:
            raise _too_big(self.path, self.budget + 1, self.budget)
        return n

    def inflated(self, block: int = 4 << 20) -> Iterator[bytes]:
        """gzip: the JSON text a block (at most `block` bytes) at a time, refused as `readinto`
        refuses it once it passes the memory budget."""
        try:
            while out := self._inflate(block):
                self.total += len(out)
                if self.total > self.budget:
                    raise _too_big(self.path, self.budget + 1, self.budget)
                yield out
        except OSError as e:
            raise InputError(
                f"{self.path}: cannot read: {e.strerror or e}", "check the path and permissions"
            ) from None

    def _inflate(self, max_out: int) -> bytes:
        """The next inflated bytes (at most max_out); b"" after the last gzip member."""
        try:
            while True:
                d = self._d
                if d.eof:  # a member ended: another may follow (NUL padding between them)
                    rest = (d.unused_data + self._in).lstrip(b"\x00")
                    while not rest:
                        more = self._f.read(_BLOCK)
                        if not more:
                            return b""
                        rest = more.lstrip(b"\x00")
                    self._d, self._in = _inflate.decompressobj(wbits=31), rest
                    continue
                if d.unconsumed_tail:
                    data = d.unconsumed_tail
                elif self._in:
                    data, self._in = self._in, b""
                else:
                    data = self._f.read(_BLOCK)
                    if not data:
                        raise EOFError("compressed stream ended before the end-of-stream marker")
                out: bytes = d.decompress(data, max_out)
                if out:
                    return out
        except (EOFError, zlib.error, _inflate.error) as e:
            raise InputError(
                f"{self.path}: gzip data is truncated or corrupt ({e})",
                "copy the trace again, or check it with `gzip -t`",
            ) from None
