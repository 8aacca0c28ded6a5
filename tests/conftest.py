"""Shared fixtures: paths to the real traces bundled under tests/data, the nsys CLI, and the git
repository the H200 commit-suspects captures ran at."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"


def nsys_path() -> str | None:
    env = os.environ.get("TRACEDIFF_NSYS")
    if env and Path(env).exists():
        return env
    for cand in (shutil.which("nsys"), "/opt/nsys-2024.2.3/bin/nsys"):
        if cand and Path(cand).exists():
            return cand
    return None


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def nsys() -> str:
    path = nsys_path()
    if path is None:
        pytest.fail("nsys is not installed: run `make nsys` (tools/install-nsys.sh)")
    return path


@pytest.fixture(scope="session")
def nvtx_dropped() -> Path:
    """A folder holding the Python nvtx package 0.2.17, whose ranges nsys 2024.2.3 drops (put it
    first on a workload's PYTHONPATH); `make setup` installs it beside the venv."""
    path = Path(sys.prefix) / "nvtx-0.2.17"
    if not (path / "nvtx").is_dir():
        pytest.fail(f"no nvtx 0.2.17 in {path}: run `make setup` (the Makefile installs it)")
    return path


@pytest.fixture(scope="session")
def minispec_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The minispec repository the H200 suspects captures ran at (tests/data/h200-suspects),
    rebuilt once a session by tools/device/suspects_repo.py (fixed dates: the same hashes, checked
    against the captures' commits.txt), and its role -> full hash. Shared: suspects only read it."""
    dest = tmp_path_factory.mktemp("minispec") / "minispec"
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "device" / "suspects_repo.py"), str(dest)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    built = {line.split()[1]: line.split()[0] for line in out.splitlines()}
    captured = (DATA / "h200-suspects" / "commits.txt").read_text().splitlines()
    want = {line.split()[1]: line.split()[0] for line in captured}
    assert built == want, "suspects_repo.py no longer builds the captured commits"
    return dest, built


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/tui/ drives or snapshots the Textual app: marked `tui`."""
    for item in items:
        if "tui" in item.path.parts[-2:-1]:
            item.add_marker(pytest.mark.tui)


if os.environ.get("TD_TEST_CALL_LOG"):  # bench/suite_cpu.py: where the suite's CPU goes

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        """Each test's CPU in the test process itself and in the processes it waited for (git,
        fresh CLI processes, Dask's); the forked CLI calls log their own (tests/support/cli.py)."""
        import resource

        from tests.support.cli import log_cpu

        def now() -> tuple[float, float]:
            own = resource.getrusage(resource.RUSAGE_SELF)
            kids = resource.getrusage(resource.RUSAGE_CHILDREN)
            return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime

        before = now()
        yield
        after = now()
        log_cpu("self", item.nodeid, after[0] - before[0], test=item.nodeid)
        log_cpu("children", item.nodeid, after[1] - before[1], test=item.nodeid)
