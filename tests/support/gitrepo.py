"""Shared set-up of the capture and bisect integration tests (test_capture*.py, test_bisect.py).

Throwaway git repositories holding a workload at successive commits (the real git, a fixed
identity so commits work on any machine), the tracediff CLI run as a subprocess (or stopped by a
signal once it is under way), and an nsys with no QdstrmImporter beside it (what a GPU host with
only nsys's target package has).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from tests.support.cli import cli_run
from tests.support.nsys import real_nsys, write_nsys

IDENTITY = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
}


def per_process_offset(noise_ms: float) -> str:
    """Workload source lines (needing `os` and `random`): append the commit this process runs at
    to $COUNTER (the test's count of captures), and draw `offset_ms`, this process's offset on
    every cycle, uniform in [0, noise_ms] from $SEED and that count (so seeded runs repeat)."""
    return f"""\
counter = os.environ.get("COUNTER")
n = 0
if counter:
    with open(counter, "a") as f:
        f.write(os.environ["TRACEDIFF_CAPTURE_COMMIT"] + "\\n")
    with open(counter) as f:
        n = len(f.read().splitlines())
rng = random.Random(f"{{os.environ.get('SEED', '0')}}-{{n}}")
offset_ms = rng.uniform(0, {noise_ms!r})  # this process's offset: same on every cycle
"""


def git(repo: Path, *args: str) -> str:
    """`git -C repo ARGS`, checked; its stdout, stripped."""
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **IDENTITY},
    ).stdout.strip()


def commit_files(repo: Path, files: Mapping[str, str], message: str, tag: str | None = None) -> str:
    """Write files (path -> text) into repo, commit them (git init first when repo has no .git;
    branch main) and tag the commit; returns its full hash."""
    if not (repo / ".git").exists():
        repo.mkdir(parents=True, exist_ok=True)
        git(repo, "init", "-q", "-b", "main")
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", *files)
    git(repo, "commit", "-qm", message)
    if tag is not None:
        git(repo, "tag", tag)
    return git(repo, "rev-parse", "HEAD")


def make_repo(
    root: Path, commits: Sequence[tuple[str, Mapping[str, str]]], tags: bool = False
) -> list[str]:
    """One commit per (message, files), in order; with tags, each tagged with its message.
    Returns the hashes."""
    return [commit_files(root, files, msg, msg if tags else None) for msg, files in commits]


def tracediff(
    *argv: str, env: Mapping[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """`python -m tracediff ARGV` with env added to this process's environment (a process of its
    own, forked with its imports done: tests/support/cli.py)."""
    return cli_run(argv, env=env, timeout=timeout)


def signalled(
    argv: Sequence[str], marker: str, sig: signal.Signals, env: Mapping[str, str] | None = None
) -> tuple[int, str]:
    """Run the command line ARGV in a new session (it stands in for a terminal: Ctrl-C goes to the
    whole foreground group), with env added to this process's environment; once a line of its
    stderr holds `marker`, send `sig` (SIGINT to the whole group, any other to the process alone).
    Returns its exit status and its stderr."""
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    seen: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            seen.append(line)
            if marker in line:
                ready.set()

    t = threading.Thread(target=read, daemon=True)
    t.start()
    try:
        assert ready.wait(120), "".join(seen)
        time.sleep(0.3)
        os.killpg(proc.pid, sig) if sig == signal.SIGINT else proc.send_signal(sig)
        rc = proc.wait(120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    t.join(10)
    return rc, "".join(seen)


def target_only_nsys(nsys: str, dest: Path) -> Path:
    """A copy of nsys's target folder with no QdstrmImporter anywhere near it (hard links where
    the filesystem allows): its captures leave a .qdstrm that nothing imported."""
    real, lib = real_nsys(nsys)
    target = real.parent
    if not (target / "nsys").is_file():
        pytest.fail(f"cannot find the target folder of {nsys}: expected {target}/nsys")
    copy = dest / "target-linux-x64"
    try:
        shutil.copytree(target, copy, copy_function=os.link, symlinks=True)
    except OSError:  # another filesystem: a real copy (about 225 MB) still works
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(target, copy, symlinks=True)
    (dest / "bin").mkdir()
    wrapper = write_nsys(dest / "bin" / "nsys", copy / "nsys", lib)  # kallsyms as the tests' nsys
    return wrapper
