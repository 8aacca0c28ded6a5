"""Shared by the tests (moved from tests/integration/test_dask.py, so no test module imports another)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import cli_run

ROOT = Path(__file__).resolve().parents[2]


BIN = Path(sys.executable).parent


def cli(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return cli_run(argv, timeout=timeout, cwd=ROOT)


def compare_json(base: Path, head: Path, *extra: str) -> str:
    p = cli("compare", str(base), str(head), "--format", "json", "--bootstrap", "100", *extra)
    assert p.returncode == 0, p.stderr
    return p.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[str, list[subprocess.Popen[bytes]]]]:
    """A `dask scheduler` and two `dask worker` processes on 127.0.0.1 (one thread each)."""
    port = _free_port()
    addr = f"tcp://127.0.0.1:{port}"
    log = open(tmp_path / "cluster.log", "wb")  # noqa: SIM115 (closed below)
    env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1"}
    procs = [
        subprocess.Popen(
            [
                str(BIN / "dask"),
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--no-dashboard",
            ],
            stdout=log,
            stderr=log,
            env=env,
        )  # fmt: skip
    ]
    workers = []
    try:
        from distributed import Client

        deadline = time.monotonic() + 60
        while True:  # the scheduler listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "cluster.log").read_text()
                time.sleep(0.3)
        for _ in range(2):
            workers.append(
                subprocess.Popen(
                    [
                        str(BIN / "dask"),
                        "worker",
                        addr,
                        "--nthreads",
                        "1",
                        "--no-nanny",
                        "--host",
                        "127.0.0.1",
                        "--no-dashboard",
                    ],
                    stdout=log,
                    stderr=log,
                    env=env,
                )  # fmt: skip
            )
        procs += workers
        with Client(addr, timeout="30s") as c:
            c.wait_for_workers(2, timeout=90)
        yield addr, workers
    finally:
        # SIGTERM, then SIGKILL after 5 s: a worker closing gracefully after a compare can take
        # longer than its test (20.3 and 42.5 s of teardown in two suites that waited up to 20 s
        # a process); nothing is asserted here (a killed worker leaves its scratch folder, as the
        # tests that SIGKILL one do)
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 5
        for p in procs:
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log.close()


def padded_kineto(src: Path, dst: Path, mib: int) -> None:
    """A copy of the Kineto trace `src` whose JSON carries a `mib`-MiB string field: a file of a few
    hundred KB that needs more than `mib` MiB to read (the reader holds the decompressed text), so a
    worker under a lower memory limit dies reading it whatever the machine's baseline."""
    import gzip

    raw = gzip.decompress(src.read_bytes())
    i = raw.index(b"{") + 1
    with gzip.open(dst, "wb", compresslevel=1) as f:
        f.write(raw[:i] + b'"padding": "')
        chunk = b"x" * (1 << 20)
        for _ in range(mib):
            f.write(chunk)
        f.write(b'", ' + raw[i:])
