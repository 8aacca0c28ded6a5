"""A plain-JSON Kineto trace read in segments, here or by the worker process, gives exactly the
tables of one sequential read.

The reader splits large files (segments.SEGMENT_BYTES, 64 MB) at element boundaries and reads the
segments in this process and one worker process; these tests shrink the segments so every real
trace is split several ways, and make the worker read every segment (segments.READ_HERE off) so
its path is the one compared.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tracediff.base.errors import InputError
from tracediff.parse.kineto import events, read_kineto, segments
from tracediff.runs.runfile import Run

DATA = Path(__file__).parent.parent.parent / "data"
REAL = [
    DATA / "kineto" / "resnet50_num_workers_0.worker0.1623143566756.pt.trace.json.gz",  # 2021
    DATA / "kineto" / "step_based_trace_2543932.json.gz",  # gpu_user_annotation, flows
    DATA / "kineto" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz",  # ROCm
    DATA / "kineto" / "sampled_rank-0.json.gz",  # minified, one line
    DATA / "kineto" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",  # exact decimals (NeedExact)
    DATA / "kineto" / "nccl_data.json.gz",  # collectives
    DATA / "h200" / "k_good.json.gz",
    DATA / "h200" / "k_bad.json.gz",
]


def _identical(a: Run, b: Run) -> None:
    assert a.warnings == b.warnings
    assert {k: v for k, v in a.metadata.items() if k != "source"} == {
        k: v for k, v in b.metadata.items() if k != "source"
    }
    assert list(a.tables) == list(b.tables)
    for name in a.tables:
        assert a.tables[name].schema == b.tables[name].schema, name
        assert a.tables[name].equals(b.tables[name]), name


def _plain(path: Path, tmp_path: Path) -> Path:
    out = tmp_path / (path.name.removesuffix(".gz"))
    out.write_bytes(gzip.decompress(path.read_bytes()))
    return out


class _Count:
    """Counts the segments this process reads (the rest were read by the worker)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.here: list[tuple[int, int | None]] = []
        real = segments.read_segment

        def counting(
            path: Path, exact: bool, start: int, stop: int | None, fd: int | None = None
        ) -> Any:
            self.here.append((start, stop))
            return real(path, exact, start, stop, fd)

        monkeypatch.setattr(segments, "read_segment", counting)
        self.bounds: list[segments.Bounds] = []
        real_bounds = segments.bounds

        def recording(src: Any, segment_bytes: int | None = None) -> segments.Bounds:
            b = real_bounds(src, segment_bytes)
            self.bounds.append(b)
            return b

        monkeypatch.setattr(segments, "bounds", recording)


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_segments_read_by_the_worker_equal_one_sequential_read(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = _plain(path, tmp_path)
    want = read_kineto(plain)  # small: one segment, read here
    assert read_kineto(path).tables["kernels"].equals(want.tables["kernels"])
    monkeypatch.setattr(segments, "SEGMENT_BYTES", plain.stat().st_size // 5)
    count = _Count(monkeypatch)
    monkeypatch.setattr(segments, "WORKERS", 0)  # every segment read here, one after the other
    here = read_kineto(plain)
    assert len(count.bounds[-1]) >= 3
    assert len(count.here) == len(count.bounds[-1]) * (
        1 + path.name.startswith("rank-0.")
    )  # NeedExact: twice
    _identical(here, want)

    monkeypatch.setattr(segments, "WORKERS", 1)
    monkeypatch.setattr(segments, "READ_HERE", False)
    # passed on: many pieces per segment (~20; 3000 bytes made the 15 MB trace 5000 pieces, 18 s)
    monkeypatch.setattr(events, "CHUNK_BYTES", max(3000, plain.stat().st_size // 100))
    count.here.clear()
    there = read_kineto(plain)
    assert count.here == []  # the worker read them all, and its columns came back
    _identical(there, want)

    monkeypatch.setattr(segments, "READ_HERE", True)  # both read (or this one, all of them)
    _identical(read_kineto(plain), want)


def test_gzip_is_one_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segments, "SEGMENT_BYTES", 1000)
    count = _Count(monkeypatch)
    read_kineto(REAL[0])
    assert count.bounds == [[(0, None)]]


def _trace(name: str, n: int = 400) -> bytes:
    evs = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": name,
            "pid": 0,
            "tid": 7,
            "ts": 1000 + 10 * i,
            "dur": 5,
            "args": {"device": 0, "stream": 7, "correlation": i},
        }
        for i in range(n)
    ]
    return json.dumps({"schemaVersion": 1, "traceEvents": evs}, indent=1).encode()


def test_a_boundary_inside_a_string_reads_the_file_as_one_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # names made of `}, {`: the cut found after each segment offset lies inside a name
    path = tmp_path / "t.json"
    path.write_bytes(_trace("k}, {" * 200))
    want = read_kineto(path)
    assert want.tables["kernels"].num_rows == 400
    monkeypatch.setattr(segments, "SEGMENT_BYTES", path.stat().st_size // 4)
    calls: list[int] = []
    real = segments.read

    def recording(p: Path, exact: bool, segs: segments.Bounds) -> Any:
        calls.append(len(segs))
        return real(p, exact, segs)

    monkeypatch.setattr(segments, "read", recording)
    monkeypatch.setattr(segments, "READ_HERE", False)  # the worker meets the bad boundary
    got = read_kineto(path)
    assert calls == [4, 1]
    _identical(got, want)


@pytest.fixture
def worker_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Run]:
    """A plain trace of 4 segments, its tables from one sequential read, and the worker set to
    read every segment (READ_HERE off)."""
    path = tmp_path / "t.json"
    path.write_bytes(_trace("kern"))
    want = read_kineto(path)
    monkeypatch.setattr(segments, "SEGMENT_BYTES", path.stat().st_size // 4)
    monkeypatch.setattr(segments, "READ_HERE", False)
    return path, want


def _all_read_here(path: Path, want: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker could not help: this process read all 4 segments, and the tables are right."""
    count = _Count(monkeypatch)
    got = read_kineto(path)
    assert len(count.here) == 4
    _identical(got, want)


@pytest.mark.parametrize("exe", ["/bin/false", "/nonexistent/python"])
def test_a_worker_that_dies_or_cannot_start_leaves_the_segments_to_this_process(
    exe: str, worker_only: tuple[Path, Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", exe)
    _all_read_here(*worker_only, monkeypatch)


def test_broken_json_in_a_worker_segment_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _trace("kern")
    mid = data.index(b'"correlation": 200')
    path = tmp_path / "t.json"
    path.write_bytes(data[:mid] + b"!" + data[mid + 1 :])
    monkeypatch.setattr(segments, "SEGMENT_BYTES", path.stat().st_size // 4)
    monkeypatch.setattr(segments, "READ_HERE", False)
    with pytest.raises(InputError, match=r"t\.json: not valid JSON") as e:
        read_kineto(path)
    assert "\n" not in str(e.value)


def test_id_columns_switching_between_strings_and_numbers() -> None:
    # a column read as strings in one chunk is tried as strings first in the next one
    from tracediff.parse.kineto.clock import Clock, to_int64
    from tracediff.parse.kineto.roles import Roles

    r = Roles(Clock(Path("t.json"), exact=False))
    chunks: list[list[Any]] = [
        ["stream 7", "8", None, "stream 7"],
        [1, 2, None],
        ["stream 9", "x"],
        ["3", 4, 5.0],  # mixed: read one by one
        [None, None],
        ["10"],
    ]
    for values in chunks:
        got = r._int64(values, "kernel.tid").to_pylist()
        assert got == to_int64(list(values)).to_pylist()
    assert r._int64(["stream 7", "8"], "kernel.tid").to_pylist() == [7, 8]
    assert "kernel.tid" in r._stringy
    assert r._int64([1, 2], "kernel.tid").to_pylist() == [1, 2]
    assert "kernel.tid" not in r._stringy


def test_no_place_for_the_workers_results_reads_here(
    worker_only: tuple[Path, Run], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    _all_read_here(*worker_only, monkeypatch)
