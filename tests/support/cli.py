"""`tracediff ARGV` as a process of its own, without paying for the imports each time.

The suite runs the real CLI hundreds of times; each `python -m tracediff` spends ~0.6-0.9 CPU-s
importing polars, pyarrow, numpy and tracediff before it reads a byte (measured: 0.85 CPU-s for
the command modules). Here one server process per test process imports them once, with every
module of tracediff and capture a command may import when it runs and Dask's client (session 17:
tests/cli + test_hostile's 257 calls 90.6 / 76.9 -> 67.1 / 64.2 CPU-s, two A/B pairs), and forks a
child per call: the child is a process of its own as before (its own pid, exit status,
environment, working directory, file descriptors 0-2, atexit handlers), only its imports are
already done. What differs from a fresh `python -m tracediff`:

- import-time reads of the environment happened in the server, under the test process's
  environment: a call whose environment differs from the server's in a variable read at import
  or library load (INHERITED_AT_LOAD) runs as a fresh process instead;
- stdout and stderr are files, not pipes (neither is a terminal, as with capture_output).

The child runs `tracediff.cli.main` and ends as the `tracediff` script does (`tracediff.cli.end`:
non-daemon threads joined, atexit handlers run, streams flushed, no interpreter teardown).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

# both change os.environ when imported (polars its jemalloc options, tracediff.cli its allocator
# defaults): imported before _BASE_ENV is taken
import polars  # noqa: F401

from tracediff.base.settings import SET_ALLOC
from tracediff.cli import ALLOCATOR_ENV

# Read when a library loads or a module is imported: a call that changes one gets a fresh process.
INHERITED_AT_LOAD = (
    "PYTHON", "LD_", "_RJEM_", "JE_", "ARROW_", "NPY_", "OPENBLAS", "OMP_", "MKL_", "MALLOC",
    "POLARS_", "TRACEDIFF_SET_ALLOC",
)  # fmt: skip

CALL_LOG = os.environ.get("TD_TEST_CALL_LOG")
"""A file: each forked call appends a JSON line (the test, the command, its CPU seconds: the
child's and those of the processes it waited for) to it; bench/suite_cpu.py sums them."""

_BASE_ENV = dict(os.environ)
"""The test process's environment once polars and tracediff.cli are imported: each server
starts under it, not under what a test running at that moment has changed (test_capture's
allocator test removes the allocator variables: a server started then differed from every later
call, and all of them ran as fresh processes)."""

FRESH = bool(os.environ.get("TD_TEST_FRESH_PROCESSES"))
"""Set (any value) to run every call as a fresh `python -m tracediff` (to check that both ways
give the same results)."""

_SERVER = r"""
import importlib, json, os, sys, traceback
LEFT_OUT = ("tracediff.tui", "capture.shim", "capture.workload")

import pkgutil
import capture, tracediff
import tracediff.cli  # sets the allocator variables before polars and pyarrow load, as the CLI does
for name in ("numpy", "polars", "pyarrow", "pyarrow.compute", "pyarrow.ipc",
             *(module for module, _ in tracediff.cli.COMMANDS.values())):
    importlib.import_module(name)
# and every module a command imports when it runs (the engine, the readers, the reports: ~180,
# ~0.05-0.1 CPU-s a call), but the TUI's (Textual) and what capture loads into the workload; and
# Dask's client (~0.45 CPU-s a `--scheduler` call; importing it starts no thread)
importlib.import_module("distributed")
for package in (tracediff, capture):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not module.name.startswith(LEFT_OUT) and not module.name.endswith(".__main__"):
            importlib.import_module(module.name)
from tracediff.cli import main

requests, replies = os.fdopen(0, "rb", buffering=0), int(sys.argv[1])
for line in iter(requests.readline, b""):
    call = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setpgid(0, 0)
            os.chdir(call["cwd"])
            os.environ.clear()
            os.environ.update(call["env"])
            tracediff.cli._set_allocators()  # what importing it does in a fresh process
            null = os.open(os.devnull, os.O_RDONLY)
            out = os.open(call["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            err = os.open(call["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            for fd, to in ((null, 0), (out, 1), (err, 2)):
                os.dup2(fd, to)
                os.close(fd)
            os.close(replies)
            sys.argv = ["tracediff", *call["argv"]]
            try:
                code = main(call["argv"])
            except SystemExit as x:
                code = x.code
            except BaseException:
                traceback.print_exc()
                code = 1
            if code is None:
                code = 0
            elif not isinstance(code, int):
                print(code, file=sys.stderr)
                code = 1
            tracediff.cli.end(code)  # as the `tracediff` script ends
        finally:
            os._exit(code)
    os.write(replies, (json.dumps({"pid": pid}) + "\n").encode())
    _, status, use = os.wait4(pid, 0)
    cpu = use.ru_utime + use.ru_stime
    os.write(replies, (json.dumps({"status": os.waitstatus_to_exitcode(status), "cpu": cpu})
                       + "\n").encode())
"""


class _Server:
    def __init__(self) -> None:
        r, w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, str(w)],
            env=_BASE_ENV,
            stdin=subprocess.PIPE,
            pass_fds=(w,),
        )
        os.close(w)
        self.replies = os.fdopen(r, "rb", buffering=0)
        self.buf = b""
        self.lock = threading.Lock()
        self.tmp = Path(tempfile.mkdtemp(prefix="tracediff-cli-"))
        self.calls = 0
        self.at_load = _at_load(_BASE_ENV)
        self.owner = os.getpid()  # a forked test process starts a server of its own

    def close(self) -> None:
        """End the server (its input closed) and wait for it, so its CPU time is counted."""
        if self.owner != os.getpid():
            return
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(60)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _line(self, timeout: float | None) -> dict | None:
        while b"\n" not in self.buf:
            ready, _, _ = select.select([self.replies], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(self.replies.fileno(), 65536)
            if not chunk:
                raise RuntimeError("the tracediff CLI server died")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        reply: dict = json.loads(line)
        return reply

    def run(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        timeout: float | None,
        text: bool,
        errors: str,
    ) -> subprocess.CompletedProcess:
        with self.lock:
            self.calls += 1
            out, err = self.tmp / f"{self.calls}.out", self.tmp / f"{self.calls}.err"
            call = {"argv": argv, "env": env, "cwd": cwd, "out": str(out), "err": str(err)}
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(call) + "\n").encode())
            self.proc.stdin.flush()
            started = self._line(60)
            assert started is not None, "the tracediff CLI server did not fork"
            done = self._line(timeout)
            if done is None:
                os.killpg(started["pid"], signal.SIGKILL)
                self._line(60)
            if CALL_LOG and done is not None:
                log_cpu("call", argv[0] if argv else "", done["cpu"])
            stdout, stderr = out.read_bytes(), err.read_bytes()
            out.unlink()
            err.unlink()
            if done is None:
                raise subprocess.TimeoutExpired(["tracediff", *argv], timeout or 0, stdout, stderr)
            if text:  # as subprocess's text mode reads them: universal newlines
                return subprocess.CompletedProcess(
                    ["tracediff", *argv],
                    done["status"],
                    _text(stdout, errors),
                    _text(stderr, errors),
                )
            return subprocess.CompletedProcess(["tracediff", *argv], done["status"], stdout, stderr)


def log_cpu(kind: str, what: str, cpu: float, test: str | None = None) -> None:
    """One line of TD_TEST_CALL_LOG (appended whole: xdist workers share the file)."""
    if test is None:
        test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
    line = json.dumps({"kind": kind, "test": test, "what": what, "cpu": round(cpu, 3)}) + "\n"
    assert CALL_LOG is not None
    fd = os.open(CALL_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _at_load(env: Mapping[str, str]) -> dict[str, str]:
    """What a `python -m tracediff` started with env loads under: its load-time variables, after
    tracediff.cli has set its allocator defaults where env has none (as _set_allocators does,
    which the server ran on import and each forked child runs again)."""
    out = {k: v for k, v in env.items() if k.startswith(INHERITED_AT_LOAD)}
    unset = [k for k in ALLOCATOR_ENV if k not in out]
    out.update({k: ALLOCATOR_ENV[k] for k in unset})
    if unset:
        out[SET_ALLOC.name] = ",".join(unset)
    return out


def _text(data: bytes, errors: str) -> str:
    return data.decode(errors=errors).replace("\r\n", "\n").replace("\r", "\n")


_server: _Server | None = None


def cli_run(
    argv: Sequence[object],
    env: Mapping[str, str] | None = None,
    timeout: float | None = 600,
    cwd: str | Path | None = None,
    text: bool = True,
    errors: str = "strict",
) -> subprocess.CompletedProcess:
    """`python -m tracediff ARGV` with env added to this process's environment, stdout and
    stderr captured (text or bytes), killed past `timeout` (subprocess.TimeoutExpired)."""
    global _server
    args = [str(a) for a in argv]
    full = {**os.environ, **(env or {})}
    if not FRESH and (
        _server is None or _server.owner != os.getpid() or _server.proc.poll() is not None
    ):
        _server = _Server()  # under _BASE_ENV: its imports read that one
        atexit.register(_server.close)
    load = _at_load(full)
    if FRESH or _server is None or load != _server.at_load:
        if CALL_LOG and _server is not None:
            then = _server.at_load
            why = sorted(k for k in load.keys() | then.keys() if load.get(k) != then.get(k))
            log_cpu("fresh", f"{args[0] if args else ''} ({','.join(why)})", 0.0)
        return subprocess.run(
            [sys.executable, "-m", "tracediff", *args],
            capture_output=True,
            text=text,
            errors=errors if text else None,
            timeout=timeout,
            cwd=cwd,
            env=full,
        )
    return _server.run(args, full, str(cwd or os.getcwd()), timeout, text, errors)
