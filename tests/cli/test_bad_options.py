"""The bad options a new user hit (issue 30): each a one-line error, exit 1 or 2, nothing written
or changed. Through the real CLI, on copies of the bundled H200 run set (samples/runs/good, bad),
samples/g_good.arrow and HTA's two-rank job (tests/data/kineto).

Before: `--scheduler` with an unknown scheme or no port, an unparseable `--memory-limit` and
`--top` past 64 bits ended in tracebacks; a `--memory-limit` below what a worker holds hung with
nothing printed; `--perfetto` wrote over a run set's runset.json (with --force) or into a rank
folder (which then no longer read as one run); `--perfetto -` wrote a file named `-`.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import cli_run

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
KINETO = ROOT / "tests" / "data" / "kineto"
TIMEOUT = 90  # s: each case is refused in seconds; reaching this is the hang it was


def td(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return cli_run(args, timeout=TIMEOUT, cwd=cwd)


def one_line_error(r: subprocess.CompletedProcess[str], code: int, *phrases: str) -> str:
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == code, r.stderr[-3000:]
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and ": error: " in lines[0], r.stderr[-3000:]
    for p in phrases:
        assert p in lines[0], lines[0]
    assert r.stdout == ""
    return lines[0]


def tree_state(folder: Path) -> dict[str, str]:
    """Every file under `folder` with its content hash: what must not change."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def runsets(tmp_path: Path) -> tuple[Path, Path]:
    for side in ("good", "bad"):
        shutil.copytree(SAMPLES / "runs" / side, tmp_path / side)
    return tmp_path / "good", tmp_path / "bad"


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("foo://host:8786", "unknown address scheme 'foo'"),
        ("tcp://127.0.0.1", "missing port number"),
        ("localhost", "missing port number"),
    ],
)
def test_a_scheduler_address_dask_cannot_use_is_refused(
    runsets: tuple[Path, Path], tmp_path: Path, address: str, why: str
) -> None:
    pytest.importorskip("distributed")
    before = tree_state(tmp_path)
    out = tmp_path / "trace.json.gz"
    r = td("compare", *runsets, "--format", "json", "--perfetto", out, "--scheduler", address)
    one_line_error(r, 2, f"--scheduler {address}", why, "tcp://HOST:PORT")
    assert tree_state(tmp_path) == before and not out.exists()


@pytest.mark.parametrize(
    ("limit", "why"),
    [("lots", "not a size"), ("1kB", "below what one worker holds"), ("75MB", "give at least")],
)
def test_a_memory_limit_dask_cannot_use_is_refused(
    runsets: tuple[Path, Path], tmp_path: Path, limit: str, why: str
) -> None:
    """75MB: an idle worker holds about 70 MB, and ~190 MB once it loads the readers; Dask
    restarted it without end and compare hung with nothing printed."""
    pytest.importorskip("distributed")
    before = tree_state(tmp_path)
    r = td("compare", *runsets, "--format", "json", "--scheduler", "local:1",
           "--memory-limit", limit)  # fmt: skip
    one_line_error(r, 2, f"--memory-limit {limit}", why)
    assert tree_state(tmp_path) == before


@pytest.mark.parametrize(
    "args",
    [
        ["compare", "--top", str(2**64)],
        ["compare", "--whatif", str(2**64)],
        ["compare", "--bootstrap", str(2**64)],
        ["compare", "--top", "0"],
        ["whatif", "--top", str(2**64)],
    ],
)
def test_a_count_out_of_range_is_a_usage_error(args: list[str]) -> None:
    run = SAMPLES / "g_good.arrow"
    r = td(args[0], run, run, *args[1:])
    one_line_error(r, 2, f"argument {args[1]}", "give a number from")


def test_perfetto_never_writes_over_a_run_set_s_index(runsets: tuple[Path, Path]) -> None:
    good, bad = runsets
    before = tree_state(good)
    r = td("compare", good, bad, "--format", "json", "--perfetto", good / "runset.json", "--force")
    one_line_error(r, 1, str(good / "runset.json"), "inside the input folder")
    assert tree_state(good) == before


def test_perfetto_never_writes_into_a_rank_folder(tmp_path: Path) -> None:
    sides = []
    for side in ("base", "head"):
        (tmp_path / side).mkdir()
        for rank in (0, 1):
            name = f"sampled_rank-{rank}.json.gz"
            shutil.copy(KINETO / name, tmp_path / side / name)
        sides.append(tmp_path / side)
    before = tree_state(tmp_path)
    out = sides[1] / "diff.json.gz"
    # two ranks of HTA's 128-rank job: the missing ranks allowed, so what is refused is the output
    allow = "--allow-missing-ranks"
    r = td("compare", *sides, allow, "--format", "json", "--perfetto", out)
    one_line_error(r, 1, str(out), "inside the input folder")
    r = td("compare", *sides, allow, "--format", "json", "--export", sides[0] / "export")
    one_line_error(r, 1, str(sides[0] / "export"), "inside the input folder")
    assert tree_state(tmp_path) == before
    info = td("info", sides[1], allow, "--format", "json")  # still one run of two ranks
    assert info.returncode == 0 and '"rank": 1' in info.stdout, info.stderr[-2000:]


def test_perfetto_to_stdout_is_refused_and_writes_no_file_named_dash(tmp_path: Path) -> None:
    run = SAMPLES / "g_good.arrow"
    r = td("compare", run, run, "--format", "json", "--perfetto", "-", cwd=tmp_path)
    one_line_error(r, 2, "--perfetto -", "stdout")
    assert list(tmp_path.iterdir()) == []
