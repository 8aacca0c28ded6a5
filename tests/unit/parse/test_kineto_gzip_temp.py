"""What decides a large gzip trace's temp file, where it goes, and what it leaves behind
(segments.read_gzip): a SIGKILL leaves nothing, a temp folder in memory (tmpfs) is counted as
memory or avoided, and a gzip whose trailer does not tell its size is read in one pass before
any temp file is written.

Thresholds are lowered (segments.GZIP_MIN_BYTES, SEGMENT_BYTES) so that a few MB of generated
trace takes the temp-file path.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tracediff.base.errors import InputError
from tracediff.parse.kineto import read_kineto, segments, source
from tracediff.runs.runfile import Run

from .test_kineto_gzip_segments import _identical, _Spy


def _text(n: int) -> bytes:
    """A Kineto trace of `n` kernels with their launches (~300 bytes of JSON each)."""
    evs: list[dict[str, Any]] = []
    for i in range(n):
        ts = 1_000_000 + 37 * i
        evs.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": ts, "dur": 4 + i % 5, "args": {"correlation": i, "external id": i // 3}}
        )  # fmt: skip
        evs.append(
            {"ph": "X", "cat": "kernel", "name": f"gemm_{i % 17}", "pid": 0, "tid": 7,
             "ts": ts + 9, "dur": 20 + i % 23,
             "args": {"device": 0, "stream": 7, "correlation": i, "grid": [i % 64, 1, 1]}}
        )  # fmt: skip
    return json.dumps({"schemaVersion": 1, "traceEvents": evs}, indent=1).encode()


@pytest.fixture(scope="module")
def text() -> bytes:
    return _text(12_000)  # ~5 MB


@pytest.fixture(scope="module")
def want(text: bytes, tmp_path_factory: pytest.TempPathFactory) -> Run:
    path = tmp_path_factory.mktemp("plain") / "t.json"
    path.write_bytes(text)
    return read_kineto(path)


def _same(got: Run, want: Run) -> None:
    _identical(Run(got.tables, {**got.metadata, "source": ""}, got.warnings),
               Run(want.tables, {**want.metadata, "source": ""}, want.warnings))  # fmt: skip


# ---------------------------------------------------------------- a SIGKILL leaves nothing

_CHILD = """
import os, sys, time
from pathlib import Path
from tracediff.parse.kineto import read_kineto, segments
segments.GZIP_MIN_BYTES = 1
segments.SEGMENT_BYTES = 512 << 10
segments.LOAD_GATE = False
segments._LARGE_TMP = ()
real = segments._inflate_to
def stalled(*a):
    for n, seg in enumerate(real(*a)):
        yield seg
        if n == 1:  # the worker has two segments; the inflate stops here until the kill
            Path(sys.argv[2]).write_text("inflating")
            time.sleep(60)
segments._inflate_to = stalled
read_kineto(Path(sys.argv[1]))
"""


def _worker(parent: int) -> tuple[int, dict[str, Any]] | None:
    """The segment worker that `parent` started: its pid and its job."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and any(b"_serve()" in a for a in argv):
            return int(d.name), json.loads(argv[3])
    return None


def _has_result(pid: int, job: dict[str, Any]) -> bool:
    """The worker has written a segment's result (a results file with no name now; a folder of
    pickles before)."""
    try:
        if "out" in job:
            return os.stat(f"/proc/{pid}/fd/{job['out']}").st_size > 0
        return any(Path(job["dir"]).glob("*.pickle"))
    except OSError:  # it ended
        return False


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to find the worker")
def test_a_killed_reader_leaves_no_temp_file(text: bytes, tmp_path: Path) -> None:
    """SIGKILL while the text is half inflated and the worker has written a result: nothing is
    left in the temp folder (there used to be the inflated text and the results folder), and
    the worker ends, so the space of the files it held goes too."""
    trace = tmp_path / "t.json.gz"
    trace.write_bytes(gzip.compress(text, 1, mtime=0))
    tmp, marker = tmp_path / "tmp", tmp_path / "marker"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(trace), str(marker)], env=env, cwd=Path.cwd()
    )
    found = None
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and child.poll() is None:
            found = found or _worker(child.pid)
            if marker.exists() and found and _has_result(*found):
                break
            time.sleep(0.02)
        assert child.poll() is None and found, "the reader did not get to the middle of a read"
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert sorted(p.name for p in tmp.iterdir()) == []
        deadline = time.monotonic() + 10
        while not _gone(found[0]) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _gone(found[0]), "the worker outlived the reader"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if found and not _gone(found[0]):
            os.kill(found[0], signal.SIGKILL)


# ---------------------------------------------------------------- a temp folder in memory


def _fs_type(path: Path) -> str:
    """The file system type by statfs (coreutils' stat), to check segments._in_ram against."""
    r = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True)
    return r.stdout.strip()


@pytest.fixture
def shm(tmp_path: Path) -> Any:
    """A private folder on a tmpfs (/dev/shm), removed afterwards."""
    import shutil
    import tempfile

    if not Path("/dev/shm").is_dir() or _fs_type(Path("/dev/shm")) not in ("tmpfs", "ramfs"):
        pytest.skip("no tmpfs mounted at /dev/shm here")
    if _fs_type(tmp_path) in ("tmpfs", "ramfs"):
        pytest.skip("the test's own folder is tmpfs too: no disk to compare with")
    if shutil.disk_usage("/dev/shm").free < segments._ROOM + (64 << 20):
        pytest.skip("/dev/shm is too full to hold a temp file beside segments._ROOM")
    folder = Path(tempfile.mkdtemp(prefix="tracediff-test-", dir="/dev/shm"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_tmpfs_is_told_from_a_disk(shm: Path, tmp_path: Path) -> None:
    assert segments._in_ram(str(shm))
    assert segments._in_ram("/dev/shm")
    assert not segments._in_ram(str(tmp_path))


def test_a_tmpfs_temp_folder_sends_the_text_to_a_disk(
    text: bytes, want: Run, shm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The temp folder is tmpfs: the inflated text goes to the large-temp place on disk
    (/var/tmp by default) instead, and the worker's results with it."""
    trace = tmp_path / "t.json.gz"
    trace.write_bytes(gzip.compress(text, 1, mtime=0))
    spy = _Spy(monkeypatch, shm / "tmp", 1 << 20)
    disk = tmp_path / "disk"
    disk.mkdir()
    monkeypatch.setattr(segments, "_LARGE_TMP", (str(disk),))
    _same(read_kineto(trace), want)
    assert len(spy.segs) >= 4
    assert [f for _, f in spy.fds] == [str(disk), str(disk)]
    spy.clean()
    assert list(disk.iterdir()) == []


def test_a_tmpfs_temp_folder_counts_against_memory(
    text: bytes, want: Run, shm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The temp folder is tmpfs and there is no disk to use instead: the text's bytes in the
    temp file are memory too. With memory for the parse (3x the text) but not also for the file
    (4x), the trace is read in one pass, no temp file written (it used to be written to the
    tmpfs regardless); with memory for both, the tmpfs is used."""
    trace = tmp_path / "t.json.gz"
    trace.write_bytes(gzip.compress(text, 1, mtime=0))
    spy = _Spy(monkeypatch, shm / "tmp", 1 << 20)
    monkeypatch.setenv("TRACEDIFF_MEMORY_BYTES", str(len(text) * 7 // 2))
    _same(read_kineto(trace), want)
    assert spy.inflates == 0 and spy.fds == []
    spy.clean()

    monkeypatch.setenv("TRACEDIFF_MEMORY_BYTES", str(len(text) * 5))
    _same(read_kineto(trace), want)
    assert len(spy.segs) >= 4
    assert [f for _, f in spy.fds] == [str(shm / "tmp")] * 2
    spy.clean()


# ---------------------------------------------------------------- a trailer that does not tell


def test_gzip_size_believes_the_trailer_only_where_the_sample_agrees(text: bytes) -> None:
    one = gzip.compress(text, 1, mtime=0)

    def size(data: bytes, file_size: int | None = None) -> source.GzipSize:
        return source.gzip_size(data[: source._SAMPLE_IN], file_size or len(data), data[-4:])

    assert size(one)[:2] == (len(text), True)  # the trailer, believed
    assert size(one).refuse == len(text)
    small = gzip.compress(text[:100_000], mtime=0)
    assert size(small)[:2] == (100_000, True)  # inflated whole
    # several members: the trailer tells the last one's size; the sample estimates the rest
    two = gzip.compress(text[:-100], 1, mtime=0) + gzip.compress(text[-100:], mtime=0)
    got = size(two)
    assert not got.known and got.refuse == 0 and len(text) / 2 < got.size < 2 * len(text)
    # cut: the last 4 bytes are compressed data, read as any size
    cut = one[: len(one) * 3 // 4]
    assert not size(cut).known and size(cut).refuse == 0
    # over 4 GiB the trailer is the size mod 2**32: the sample tells which multiple
    spaces = gzip.compress(b" " * (32 << 20), 9, mtime=0)
    big = (6 << 30) + 123
    file_size = big * len(spaces) // (32 << 20)  # as compressible as the sample
    tail = (big % (1 << 32)).to_bytes(4, "little")
    got = source.gzip_size(spaces[: source._SAMPLE_IN], file_size, tail)
    assert got.known and got.size == big and got.refuse == big % (1 << 32)
    assert got.ratio > segments._MAX_RATIO


def test_several_members_read_in_one_pass_without_a_temp_file(
    text: bytes, want: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two members, the last one small: the trailer says 100 bytes, so the size is not known;
    the one-pass read takes it, decided before any temp file (the reader used to assume 1 GiB,
    start the worker and write the whole text to the temp file, whatever its size)."""
    trace = tmp_path / "two.json.gz"
    trace.write_bytes(gzip.compress(text[:-100], 1, mtime=0) + gzip.compress(text[-100:], mtime=0))
    spy = _Spy(monkeypatch, tmp_path / "tmp", 1 << 20)
    _same(read_kineto(trace), want)
    assert spy.inflates == 0 and spy.fds == []
    spy.clean()


def test_a_truncated_gzip_is_truncated_not_too_big(
    text: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cut where its last 4 bytes read as a size over the budget: it used to be refused as
    "N GB or more of JSON"; now "truncated or corrupt", read in one pass with no temp file
    (with a larger budget it used to be inflated into the temp file until it broke)."""
    one = gzip.compress(text, 1, mtime=0)
    n = len(one) * 3 // 4
    while int.from_bytes(one[n - 4 : n], "little") < 64 << 20:  # a size over 64 MiB
        n -= 1
    trace = tmp_path / "cut.json.gz"
    trace.write_bytes(one[:n])
    spy = _Spy(monkeypatch, tmp_path / "tmp", 1 << 20)
    for budget in (32 << 20, 1 << 40):
        monkeypatch.setenv("TRACEDIFF_MEMORY_BYTES", str(3 * budget))
        with pytest.raises(InputError, match="gzip data is truncated or corrupt"):
            read_kineto(trace)
        assert spy.inflates == 0 and spy.fds == []
    spy.clean()
