"""tracediff/cli.py `end`: how the `tracediff` command ends. It skips the interpreter's teardown
but must still do what an exit does (non-daemon threads joined, atexit handlers run, the streams
flushed), and an output that cannot be written is one line and a failing status, never a
traceback. Fresh processes: the script's own ending is what is tested."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "samples" / "runs"
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def test_end_joins_threads_runs_atexit_and_flushes(tmp_path: Path) -> None:
    done = tmp_path / "thread-done"
    code = f"""
import atexit, sys, threading, time
import tracediff.cli
def late():
    time.sleep(0.3)
    open({str(done)!r}, "w").write("joined")
threading.Thread(target=late).start()
atexit.register(lambda: print("atexit ran"))
sys.stdout.write("buffered, not yet flushed")
tracediff.cli.end(3)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 3
    assert p.stdout == "buffered, not yet flushedatexit ran\n"
    assert done.read_text() == "joined"


def test_a_full_disk_is_one_line_and_status_1() -> None:
    argv = ["compare", str(RUNS / "good"), str(RUNS / "bad"), "--format", "json"]
    with open("/dev/full", "w") as full:
        p = subprocess.run(
            [sys.executable, "-m", "tracediff", *argv],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    assert p.returncode == 1, p.stderr
    assert p.stderr == "tracediff: error: writing the output: No space left on device\n"


def test_a_pipe_closed_early_is_success() -> None:
    """`tracediff compare ... | head -c 1`: the reader went away; not an error. The pipe holds
    4 KiB (the report is ~30 KiB), so the writer meets the closed pipe."""
    argv = ["compare", str(RUNS / "good"), str(RUNS / "bad"), "--format", "json"]
    p = subprocess.Popen(
        [sys.executable, "-m", "tracediff", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert p.stdout is not None and p.stderr is not None
    fcntl.fcntl(p.stdout.fileno(), F_SETPIPE_SZ, 4096)  # before the child's imports are done
    assert p.stdout.read(1) == b"{"
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 0, err
    assert "Traceback" not in err
