"""Kineto trace file → JSON text, as a stream or whole, refused when it cannot fit in memory.

Stage: parse (input). Input: a `.json` or `.json.gz` path (gzip known by its magic bytes, not
its name); output: the uncompressed JSON, through `Source.readinto` a buffer at a time (the
chunked decode) or as one bytes object (`read_json_bytes`, the whole-document decode).

A trace is refused when its JSON is larger than `memory_budget()` -- by the file size, the gzip
ISIZE trailer, or the inflated size passing the budget while inflating -- so the user gets one
line at once instead of a machine that swaps, and a gzip bomb stops as soon as it passes.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tracediff.errors import InputError


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


def memory_budget() -> int:
    """Bytes of JSON this machine can parse: available memory / PEAK_PER_JSON_BYTE.

    $TRACEDIFF_MEMORY_BYTES overrides the available memory (containers whose limits
    /proc/meminfo does not show)."""
    env = os.environ.get("TRACEDIFF_MEMORY_BYTES")
    avail = int(env) if env and env.isdigit() else None
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
    return avail // PEAK_PER_JSON_BYTE


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
        # ISIZE, the gzip trailer: the last member's size mod 2**32 -- a bomb under 4 GiB is
        # refused without inflating a byte; larger ones are stopped by the limit while inflating
        if len(data) >= 18 and int.from_bytes(data[-4:], "little") > budget:
            raise _too_big(path, int.from_bytes(data[-4:], "little"), budget)
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


class Source:
    """The trace's JSON text as a stream: `readinto` fills a buffer, inflating gzip on the way,
    and refuses (InputError) a text larger than the memory budget as soon as it passes it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.budget = budget = memory_budget()
        self.total = 0
        self.size_hint = 0  # bytes of JSON to expect (a buffer larger than the text is waste)
        try:
            size = path.stat().st_size
            if size > budget:  # fail before reading, not after swapping
                raise _too_big(path, size, budget)
            self._f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by close()
            magic = self._f.read(2)
            self.gzip = magic == b"\x1f\x8b"
            self.size_hint = size
            if self.gzip and size >= 18:  # ISIZE: see read_json_bytes
                self._f.seek(-4, os.SEEK_END)
                isize = int.from_bytes(self._f.read(4), "little")
                if isize > budget:
                    self._f.close()
                    raise _too_big(path, isize, budget)
                self.size_hint = isize if isize > size else 1 << 30  # (ISIZE is mod 2**32)
            self._f.seek(0)
        except OSError as e:
            raise InputError(
                f"{path}: cannot read: {e.strerror or e}", "check the path and permissions"
            ) from None
        self._d = _inflate.decompressobj(wbits=31)
        self._in = b""  # compressed input not yet given to the inflater
        self._out = memoryview(b"")  # inflated output not yet handed out

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
                out = d.decompress(data, max_out)
                if out:
                    return out
        except (EOFError, zlib.error, _inflate.error) as e:
            raise InputError(
                f"{self.path}: gzip data is truncated or corrupt ({e})",
                "copy the trace again, or check it with `gzip -t`",
            ) from None
