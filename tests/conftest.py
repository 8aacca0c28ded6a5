"""Shared fixtures: paths to the real traces bundled under tests/data, the nsys CLI, and the git
repository the H200 commit-suspects captures ran at."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# polars on one thread in the suite's processes (the CLI server and its calls, Dask's workers and
# every subprocess inherit it; a test may set another): three pytest-xdist workers share the 2-core
# CI machine, so threads inside a process only add hand-offs and spinning. Measured on tests/golden
# + tests/cli at -n 3, two A/B pairs: 212 -> 190 and 190 -> 176 CPU-s, wall 110 -> 99, 99 -> 91 s.
# Several threads stay covered: test_same_every_run (1 and 2), test_machine_independent (4).
os.environ.setdefault("POLARS_MAX_THREADS", "1")

from tests.support.nsys import can_hide_kallsyms, tests_nsys  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"


def nsys_path() -> str | None:
    """The nsys tracediff itself would run (nsys_tool.find_nsys: $TRACEDIFF_NSYS, PATH, /opt)."""
    from tracediff.base import nsys_tool
    from tracediff.base.errors import ToolError

    try:
        return str(nsys_tool.find_nsys())
    except ToolError:
        return None


def pytest_report_header() -> str:
    hidden = "empty (a mount namespace of its own)" if can_hide_kallsyms() else "as the machine's"
    return f"nsys: {nsys_path()}; /proc/kallsyms for its captures: {hidden}"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def nsys(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The real nsys, run with /proc/kallsyms empty where this machine allows (tests/support/nsys.py:
    its daemon parses the kernel's symbols at every capture, over a fifth of the suite's CPU)."""
    path = nsys_path()
    if path is None:
        pytest.fail("nsys is not installed: run `make nsys` (tools/install-nsys.sh)")
    return tests_nsys(path, tmp_path_factory.mktemp("nsys"))


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


@pytest.fixture(autouse=True)
def _environment_kept() -> Iterator[None]:
    """Each test leaves os.environ as it found it. A Dask LocalCluster run in the test process sets
    its nannies' variables there (OMP_NUM_THREADS, MALLOC_TRIM_THRESHOLD_, PYTHONHASHSEED, ...:
    distributed's pre-spawn environment), and every later CLI call of that test process then ran
    as a fresh process instead of a fork (tests/support/cli.py: 59 calls in a suite run)."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


# The longest modules first (pytest-xdist hands out whole modules, --dist loadfile, in this order
# with --no-loadscope-reorder; its default order, most tests first, left the bisect modules of 2-3
# tests each, 40-130 s, to the end of the run). Seconds on one worker, a 3-worker run of session 14;
# N: serial captures on nsys (tests/support/schedule.py keeps them off one worker), C: CPU.
LONGEST_FIRST = [
    "integration/test_bisect_failures.py",  # N 110
    "integration/test_dask_ranks.py",  # C 80
    "integration/test_bisect_bad_itself.py",  # N 95
    "integration/test_bisect_suspects.py",  # N 95
    "hostile/test_hostile.py",  # C 45
    "integration/test_bisect.py",  # N 85
    "integration/test_bisect_pools.py",  # N 73
    "integration/test_dask.py",  # C 57
    "integration/test_capture_runsets.py",  # N 61
    "integration/test_bisect_resume.py",  # N 50
    "hostile/test_fuzz.py",  # C 44
    "integration/test_calibration_captures.py",  # N 49
    "integration/test_bisect_retry.py",  # N 40
    "integration/test_h200_bisect_pool.py",  # C 36
    "unit/parse/test_kineto_chunks.py",  # C 33
    "golden/test_cut_correspond.py",  # C 31
]


@pytest.hookimpl(optionalhook=True)  # pytest -p no:xdist knows no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """`--dist loadfile`: xdist's own, but a worker takes a CPU module rather than a serial-capture
    one while every other worker holds one (tests/support/schedule.py)."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from tests.support.schedule import CaptureAwareScheduling

    return CaptureAwareScheduling(config, log)  # type: ignore[arg-type]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/tui/ drives or snapshots the Textual app: marked `tui`. The modules
    of LONGEST_FIRST go first, in its order; the others keep theirs."""
    for item in items:
        if "tui" in item.path.parts[-2:-1]:
            item.add_marker(pytest.mark.tui)
    from tests.support.schedule import SERIAL_CAPTURES

    rank = {ROOT / "tests" / m: i for i, m in enumerate(LONGEST_FIRST)}
    gone = [
        str(m) for m in [*rank, *(ROOT / "tests" / m for m in SERIAL_CAPTURES)] if not m.is_file()
    ]
    if gone:  # a module renamed or split: name it here again
        raise pytest.UsageError(f"tests/conftest.py or support/schedule.py: no such module {gone}")
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda it: (rank.get(it.path, len(rank)), order[id(it)]))


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

        group = _cgroup()
        before, tree = now(), _usage(group)
        yield
        after = now()
        log_cpu("self", item.nodeid, after[0] - before[0], test=item.nodeid)
        log_cpu("children", item.nodeid, after[1] - before[1], test=item.nodeid)
        if group is not None:
            log_cpu("tree", item.nodeid, _usage(group) - tree, test=item.nodeid)

    def _cgroup() -> Path | None:
        """With TD_TEST_CGROUP (a cgroup-v1 cpuacct folder, e.g. /sys/fs/cgroup/cpuacct/tdsuite,
        root only): this worker's own cgroup under it, joined once. Every process started from
        here on is in it, nsys's daemons and Dask's workers too, so a test's `tree` CPU is all of
        its processes' (and whatever an earlier test left running)."""
        root = os.environ.get("TD_TEST_CGROUP")
        if not root:
            return None
        group = Path(root) / os.environ.get("PYTEST_XDIST_WORKER", "main")
        if not group.is_dir():
            group.mkdir(parents=True)
        if str(os.getpid()) not in (group / "cgroup.procs").read_text().split():
            (group / "cgroup.procs").write_text(str(os.getpid()))
        return group

    def _usage(group: Path | None) -> float:
        return int((group / "cpuacct.usage").read_text()) / 1e9 if group is not None else 0.0
