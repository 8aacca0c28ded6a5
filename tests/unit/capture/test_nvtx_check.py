"""capture/nvtxcheck.py: which workload files import nvtx, and the check of a parsed run (issue 30).

On the bundled H200 run samples/g_good.arrow (own `cycle`/`draft`/`verify` ranges and NCCL's
`ncclAllReduce` ranges); "no range of its own" is that run with only NCCL's ranges left, as a
trace whose workload ranges nsys dropped. The real nsys case: test_capture_nvtx_dropped.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

from capture import nvtxcheck
from tracediff.runs.runfile import Run, read_run

SAMPLE = Path(__file__).resolve().parent.parents[2] / "samples" / "g_good.arrow"


def _manifest(version: str | None) -> dict[str, Any]:
    return {"workload_python": {"nvtx_version": version}}


@pytest.fixture(scope="module")
def full() -> Run:
    return read_run(SAMPLE)


@pytest.fixture(scope="module")
def nccl_only() -> Run:
    run = read_run(SAMPLE)
    t = run.table("nvtx_ranges")
    keep = pc.equal(pc.cast(t["domain"], "string"), "NCCL")
    run.tables["nvtx_ranges"] = t.filter(pc.fill_null(keep, False))
    assert 0 < run.tables["nvtx_ranges"].num_rows < t.num_rows
    return run


def test_a_dropping_version_is_named_with_the_fix(nccl_only: Run) -> None:
    m = _manifest("0.2.17")
    w = nvtxcheck.check(m, nccl_only, ["bench.py"], "cuda,nvtx")
    assert w is not None and "nvtx 0.2.17" in w and "pin nvtx==0.2.10" in w
    assert m["nvtx"]["own_events"] == 0 and m["nvtx"]["problem"] in w
    assert m["nvtx"]["workload_imports"] == ["bench.py"]


def test_another_version_is_not_blamed(nccl_only: Run) -> None:
    m = _manifest("0.2.10")
    w = nvtxcheck.check(m, nccl_only, ["bench.py"], "cuda,nvtx")
    assert w is not None and "not one nsys 2024.2 is known to drop" in w
    assert "pin nvtx" not in w


def test_nothing_is_said_without_an_import_or_with_own_ranges(full: Run, nccl_only: Run) -> None:
    m = _manifest("0.2.17")
    assert nvtxcheck.check(m, nccl_only, [], "cuda,nvtx") is None  # the workload uses no nvtx
    assert m["nvtx"]["problem"] is None
    m = _manifest("0.2.17")
    assert nvtxcheck.check(m, full, ["bench.py"], "cuda,nvtx") is None
    assert m["nvtx"]["own_events"] == 36  # 12 cycles of cycle, draft, verify; not NCCL's 72


def test_a_trace_without_nvtx_is_not_checked(nccl_only: Run) -> None:
    m = _manifest("0.2.17")
    assert nvtxcheck.check(m, nccl_only, ["bench.py"], "cuda") is None
    assert m["nvtx"]["problem"].startswith("not checked")


def test_what_the_check_counted_is_no_environment_difference(full: Run) -> None:
    """manifest.nvtx follows the code (its NVTX events, which files import nvtx), like
    manifest.stacks; the version stays an environment difference (workload_python)."""
    from tracediff.engine.env import env_diffs

    runs = []
    for own, version in ((36, "0.2.10"), (48, "0.2.17")):
        run = read_run(SAMPLE)
        m = {"workload_python": {"nvtx_version": version}}
        nvtxcheck.check(m, full, ["bench.py"], "cuda,nvtx")
        m["nvtx"]["own_events"] = own
        run.metadata["manifest"] = m
        runs.append(run)
    keys = [d.key for d in env_diffs(*runs)]
    assert keys == ["manifest.workload_python.nvtx_version"], keys


@pytest.mark.git
def test_importers_are_found_in_the_worktree_and_the_command(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "a.py").write_text("import os\nimport nvtx\n")
    (tree / "pkg" / "b.py").write_text("def f():\n    from nvtx import annotate\n")
    (tree / "pkg" / "c.py").write_text("# uses nvtx_plugins, not nvtx\nimport nvtx_plugins\n")
    (tree / "pkg" / "d.txt").write_text("import nvtx\n")
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    subprocess.run(["git", "-C", str(tree), "add", "."], check=True)
    outside = tmp_path / "bench.py"
    outside.write_text("import nvtx\n")
    found = nvtxcheck.importers(tree, ["python", str(outside), "--n", "3"])
    assert found == ["pkg/a.py", "pkg/b.py", str(outside)]
