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

from tracediff.base.errors import InputError
from tracediff.parse.kineto import events, read_kineto, segments
from tracediff.runs.runfile import Run

DATA = Path(__file__).parent.parent.parent / "data"
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
    """Records the temp files made (they have no name: their fds), the segments the inflate
    handed out, and what is left in the temp folder."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, tmp: Path, segment_bytes: int) -> None:
        self.segs: list[tuple[int, int | None]] = []
        self.inflates = 0  # inflates into a temp file started
        self.fds: list[tuple[int, str]] = []  # each temp file's fd and folder
        self.tmp = tmp
        tmp.mkdir(exist_ok=True)
        monkeypatch.setattr(tempfile, "tempdir", str(tmp))  # what gettempdir() answers
        monkeypatch.setattr(segments, "GZIP_MIN_BYTES", 1)
        monkeypatch.setattr(segments, "SEGMENT_BYTES", segment_bytes)
        monkeypatch.setattr(segments, "LOAD_GATE", False)
        monkeypatch.setattr(segments, "_LARGE_TMP", ())
        real = segments._inflate_to

        def spying(*a: Any) -> Any:
            self.inflates += 1
            for seg in real(*a):
                assert self.open_temps()  # written to a temp file, which has no name
                assert self.left() == []
                self.segs.append(seg)
                yield seg

        monkeypatch.setattr(segments, "_inflate_to", spying)
        real_temp = segments._temp_file

        def recording(folder: str) -> int:
            fd = real_temp(folder)
            self.fds.append((fd, folder))
            return fd

        monkeypatch.setattr(segments, "_temp_file", recording)

    def open_temps(self) -> list[int]:
        """The temp files still open here: an fd whose file is in the folder, unlinked."""
        out = []
        for fd, folder in self.fds:
            try:
                link = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if link.startswith(folder + "/") and link.endswith(" (deleted)"):
                out.append(fd)
        return out

    def left(self) -> list[str]:
        return sorted(p.name for p in self.tmp.iterdir())

    def clean(self) -> None:
        """Nothing left: no name in the temp folder, no temp file open."""
        assert self.left() == []
        assert self.open_temps() == []


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_gzip_segments_equal_one_sequential_read(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    want = read_kineto(path)  # small: one pass over the gzip stream
    size = len(gzip.decompress(path.read_bytes()))
    spy = _Spy(monkeypatch, tmp_path / "tmp", max(size // 5, 2000))
    monkeypatch.setattr(segments, "READ_HERE", False)  # the worker reads every segment
    # passed on: many pieces per segment (~20; 3000 bytes made the 35 MB traces 11,000 pieces)
    monkeypatch.setattr(events, "CHUNK_BYTES", max(3000, size // 100))
    got = read_kineto(path)
    _identical(got, want)
    reads = 1 + path.name.startswith("rank-0.")  # NeedExact: twice
    if want.metadata["event_count"] > 100:  # (the smallest traces are one segment)
        assert len(spy.segs) >= 3 * reads, spy.segs
    assert spy.segs[-1][1] is None
    assert len(spy.fds) == 2 * reads  # the inflated text, the worker's results
    spy.clean()

    monkeypatch.setattr(segments, "READ_HERE", True)  # both read (or this one, all of them)
    _identical(read_kineto(path), want)
    spy.clean()


def test_temp_file_removed_after_a_corrupt_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cut after several segments were handed out (the trailer kept, so it is believed): one
    InputError naming the trace, the worker stopped, no temp file left."""
    data = RESNET.read_bytes()
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(data[: len(data) * 3 // 4] + data[-8:])
    spy = _Spy(monkeypatch, tmp_path / "tmp", 2 << 20)
    monkeypatch.setattr(segments, "READ_HERE", False)
    with pytest.raises(InputError, match="gzip data is truncated or corrupt") as e:
        read_kineto(bad)
    assert str(bad) in str(e.value) and "tracediff-kineto" not in str(e.value)
    assert len(spy.segs) >= 3  # the worker had segments to read when the stream broke
    spy.clean()


def test_temp_file_removed_after_an_error_in_a_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure while this process reads a segment: the error goes up, the file goes."""
    spy = _Spy(monkeypatch, tmp_path / "tmp", 2 << 20)
    monkeypatch.setattr(segments, "WORKERS", 1)

    def broken(*a: Any) -> Any:
        assert len(spy.open_temps()) == 2  # the text and the results exist while segments are read
        raise RuntimeError("boom")

    monkeypatch.setattr(segments, "read_segment", broken)
    with pytest.raises(RuntimeError, match="boom"):
        read_kineto(RESNET)
    assert len(spy.segs) >= 3
    spy.clean()


def test_budget_still_refuses_a_text_that_outgrows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trailer that understates the text but is believed (within the sample's factor: 18 MiB
    for 35 MB): the budget is passed while inflating to the temp file -- refused at once, the
    temp file gone."""
    data = RESNET.read_bytes()
    low = tmp_path / "low.json.gz"
    low.write_bytes(data[:-4] + (18 << 20).to_bytes(4, "little"))
    spy = _Spy(monkeypatch, tmp_path / "tmp", 2 << 20)
    monkeypatch.setenv("TRACEDIFF_MEMORY_BYTES", str(3 * (20 << 20)))  # budget: 20 MiB of JSON
    with pytest.raises(InputError, match="more than 21.0 MB of JSON"):
        read_kineto(low)
    assert spy.segs  # it was on the segment path, and stopped there
    spy.clean()


@pytest.mark.parametrize("members", [1, 10])
def test_gzip_bomb_of_spaces_is_read_with_no_temp_file(
    members: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """~1000 bytes of text per gzip byte is no trace: read in one pass before any temp file is
    written (it used to write two segments' worth of spaces, 129 MB at the real segment size,
    before the missing cuts sent it to the one-pass read). As one member (64 MiB, under the
    budget: its trailer tells its size) it is a trace with no events; as 10 members (the
    trailer tells the last one's size) the budget refuses it while inflating."""
    spaces = b" " * (8 << 20)
    bomb = tmp_path / "bomb.json.gz"
    if members == 1:
        bomb.write_bytes(gzip.compress(b'{"traceEvents": [' + spaces * 8 + b"]}", 9, mtime=0))
    else:
        space = gzip.compress(spaces, compresslevel=9, mtime=0)
        bomb.write_bytes(
            gzip.compress(b'{"traceEvents": [', mtime=0) + space * 8 + gzip.compress(b"]}")
        )
    spy = _Spy(monkeypatch, tmp_path / "tmp", 2 << 20)
    if members == 1:
        monkeypatch.setenv("TRACEDIFF_MEMORY_BYTES", str(3 * (80 << 20)))  # budget: 80 MiB
        assert read_kineto(bomb).metadata["event_count"] == 0
    else:
        monkeypatch.setenv("TRACEDIFF_MEMORY_BYTES", str(3 * (40 << 20)))  # budget: 40 MiB
        with pytest.raises(InputError, match="more than 41.9 MB of JSON; parsing it needs"):
            read_kineto(bomb)
    assert spy.inflates == 0 and spy.fds == []
    spy.clean()


def test_no_room_reads_in_one_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    want = read_kineto(RESNET)
    spy = _Spy(monkeypatch, tmp_path / "tmp", 2 << 20)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(1 << 40, 1 << 40, 270 << 20))
    _identical(read_kineto(RESNET), want)  # 256 MiB kept free: 14 MiB is too little for 35 MB
    assert spy.inflates == 0 and spy.fds == []
    spy.clean()


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
    spy.clean()


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
