"""A large gzip Kineto trace is inflated to a private temp file whose segments two processes read
(segments.read_gzip): the tables equal one sequential read, the temp file goes on every way out,
the memory budget still refuses a text that outgrows it, and the worker is skipped on a busy
machine (the load gate).

The path starts at segments.GZIP_MIN_BYTES of JSON (128 MB); these tests lower it and the
segment size so every real trace takes it, split several ways.
"""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
from collections import namedtuple
from pathlib import Path
from typing import Any

import pytest

from tracediff.errors import InputError
from tracediff.parse.kineto import events, read_kineto, segments
from tracediff.runfile import Run

DATA = Path(__file__).parent.parent / "data"
REAL = sorted((DATA / "kineto").glob("*.json.gz")) + sorted((DATA / "h200").glob("*.json.gz"))
RESNET = DATA / "kineto" / "resnet50_num_workers_0.worker0.1623143566756.pt.trace.json.gz"


def _identical(a: Run, b: Run) -> None:
    assert a.warnings == b.warnings
    assert a.metadata == b.metadata
    assert list(a.tables) == list(b.tables)
    for name in a.tables:
        assert a.tables[name].schema == b.tables[name].schema, name
        assert a.tables[name].equals(b.tables[name]), name


class _Spy:
    """Records the segments the inflate handed out and the temp folder's use."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, tmp: Path, segment_bytes: int) -> None:
        self.segs: list[tuple[int, int | None]] = []
        self.tmp = tmp
        tmp.mkdir(exist_ok=True)
        monkeypatch.setattr(tempfile, "tempdir", str(tmp))  # what gettempdir() answers
        monkeypatch.setattr(segments, "GZIP_MIN_BYTES", 1)
        monkeypatch.setattr(segments, "SEGMENT_BYTES", segment_bytes)
        monkeypatch.setattr(segments, "LOAD_GATE", False)
        real = segments._inflate_to

        def spying(*a: Any) -> Any:
            for seg in real(*a):
                assert sorted(p.name for p in tmp.iterdir() if p.suffix == ".json")  # written
                self.segs.append(seg)
                yield seg

        monkeypatch.setattr(segments, "_inflate_to", spying)

    def left(self) -> list[str]:
        return sorted(p.name for p in self.tmp.iterdir())


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_gzip_segments_equal_one_sequential_read(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    want = read_kineto(path)  # small: one pass over the gzip stream
    size = len(gzip.decompress(path.read_bytes()))
    spy = _Spy(monkeypatch, tmp_path / "tmp", max(size // 5, 2000))
    monkeypatch.setattr(segments, "READ_HERE", False)  # the worker reads every segment
    monkeypatch.setattr(events, "CHUNK_BYTES", 3000)  # passed on: many pieces per segment
    got = read_kineto(path)
    _identical(got, want)
    if want.metadata["event_count"] > 100:  # (the smallest traces are one segment)
        assert len(spy.segs) >= 3 * (1 + path.name.startswith("rank-0.")), spy.segs
    assert spy.segs[-1][1] is None
    assert spy.left() == []  # the temp file and the worker's results folder are gone

    monkeypatch.setattr(segments, "READ_HERE", True)  # both read (or this one, all of them)
    _identical(read_kineto(path), want)
    assert spy.left() == []


def test_temp_file_removed_after_a_corrupt_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Truncated after several segments were handed out: one InputError naming the trace, the
    worker stopped, nothing left in the temp folder."""
    data = RESNET.read_bytes()
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(data[: len(data) * 3 // 4])
    spy = _Spy(monkeypatch, tmp_path / "tmp", 2 << 20)
    monkeypatch.setattr(segments, "READ_HERE", False)
    with pytest.raises(InputError, match="gzip data is truncated or corrupt") as e:
        read_kineto(bad)
    assert str(bad) in str(e.value) and "tracediff-kineto" not in str(e.value)
    assert len(spy.segs) >= 3  # the worker had segments to read when the stream broke
    assert spy.left() == []


def test_temp_file_removed_after_an_error_in_a_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure while this process reads a segment: the error goes up, the file goes."""
    spy = _Spy(monkeypatch, tmp_path / "tmp", 2 << 20)
    monkeypatch.setattr(segments, "WORKERS", 1)

    def broken(*a: Any) -> Any:
        assert spy.left()  # the temp file exists while segments are read
        raise RuntimeError("boom")

    monkeypatch.setattr(segments, "read_segment", broken)
    with pytest.raises(RuntimeError, match="boom"):
        read_kineto(RESNET)
    assert len(spy.segs) >= 3
    assert spy.left() == []


def _members(*parts: bytes) -> bytes:
    return b"".join(gzip.compress(p, mtime=0) for p in parts)


def test_budget_still_refuses_a_text_that_outgrows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two gzip members: the trailer tells only the last one's size (small), so the budget is
    passed while inflating to the temp file -- refused at once, the temp file removed."""
    text = gzip.decompress(RESNET.read_bytes())
    cut = len(text) - 1000
    two = tmp_path / "two.json.gz"
    two.write_bytes(_members(text[:cut], text[cut:]))
    spy = _Spy(monkeypatch, tmp_path / "tmp", 2 << 20)
    monkeypatch.setenv("TRACEDIFF_MEMORY_BYTES", str(3 * (20 << 20)))  # budget: 20 MiB of JSON
    with pytest.raises(InputError, match="more than 21.0 MB of JSON"):
        read_kineto(two)
    assert spy.segs  # it was on the segment path, and stopped there
    assert spy.left() == []


def test_gzip_bomb_of_spaces_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No element boundary near two segment ends in a row: the one-pass read takes over and the
    budget refuses the text, as without the segment path."""
    space = gzip.compress(b" " * (8 << 20), compresslevel=9, mtime=0)
    bomb = tmp_path / "bomb.json.gz"
    with open(bomb, "wb") as f:
        f.write(gzip.compress(b'{"traceEvents": [', mtime=0))
        for _ in range(8):
            f.write(space)
        f.write(gzip.compress(b"]}", mtime=0))
    spy = _Spy(monkeypatch, tmp_path / "tmp", 2 << 20)
    monkeypatch.setenv("TRACEDIFF_MEMORY_BYTES", str(3 * (40 << 20)))  # budget: 40 MiB
    with pytest.raises(InputError, match="of JSON; parsing it needs"):
        read_kineto(bomb)
    assert spy.segs == []
    assert spy.left() == []


def test_no_room_reads_in_one_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    want = read_kineto(RESNET)
    spy = _Spy(monkeypatch, tmp_path / "tmp", 2 << 20)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(1 << 40, 1 << 40, 270 << 20))
    _identical(read_kineto(RESNET), want)  # 256 MiB kept free: 14 MiB is too little for 35 MB
    assert spy.segs == []
    assert spy.left() == []


def test_a_full_disk_while_inflating_reads_in_one_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    want = read_kineto(RESNET)
    spy = _Spy(monkeypatch, tmp_path / "tmp", 2 << 20)
    real, written = os.write, [0]

    def filling(fd: int, data: Any) -> int:
        written[0] += len(data)
        if written[0] > 10 << 20:
            raise OSError(28, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(os, "write", filling)
    _identical(read_kineto(RESNET), want)
    assert 0 < len(spy.segs) < 10
    assert spy.left() == []


def test_load_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """No worker on one usable CPU, or when the 1-minute load is at least twice the CPUs."""
    cpus, load = [{0, 1}], [0.2]
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: cpus[0])
    monkeypatch.setattr(os, "getloadavg", lambda: (load[0], 0.0, 0.0))
    monkeypatch.setattr(segments, "WORKERS", 1)
    assert segments.workers(5) == 1
    assert segments.workers(1) == 0
    load[0] = 3.99
    assert segments.workers(5) == 1
    load[0] = 4.0
    assert segments.workers(5) == 0
    cpus[0] = {0, 1, 2, 3}
    assert segments.workers(5) == 1
    load[0] = 8.1
    assert segments.workers(5) == 0
    monkeypatch.setattr(segments, "LOAD_GATE", False)
    assert segments.workers(5) == 1
    cpus[0] = {0}
    load[0] = 0.0
    assert segments.workers(5) == 0


def test_busy_machine_reads_gzip_in_one_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _Spy(monkeypatch, tmp_path / "tmp", 2 << 20)
    monkeypatch.setattr(segments, "LOAD_GATE", True)
    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    want = read_kineto(RESNET)
    assert spy.segs == []  # no temp file without a worker to read it
    monkeypatch.setattr(segments, "LOAD_GATE", False)
    _identical(read_kineto(RESNET), want)
    assert spy.segs
