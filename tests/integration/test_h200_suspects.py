"""Commit suspects on real H200 captures (issue 19's device case, tests/data/h200-suspects).

The repo is rebuilt here by tools/device/suspects_repo.py (fixed dates: the hashes must be the
captured ones, commits.txt); `compare --repo --commits` of the base and head PyTorch-profiler
traces (with_stack=True) must rank the commit that changed the function launching the slower
kernels (layers.mlp) first, clearly above the caller, the sibling and the unused-branch commits.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "h200-suspects"


def commits() -> dict[str, str]:
    """role -> full hash, as captured on the device."""
    rows = [line.split()[:2] for line in (DATA / "commits.txt").read_text().splitlines()]
    return {role: sha for sha, role in rows}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("minispec") / "ms"
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "device" / "suspects_repo.py"), str(dest)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    built = {line.split()[1]: line.split()[0] for line in out.stdout.splitlines()}
    assert built == commits(), "suspects_repo.py no longer builds the captured commits"
    return dest


def suspects(repo: Path, mode: str) -> dict:
    c = commits()
    p = subprocess.run(
        [sys.executable, "-m", "tracediff", "compare",
         str(DATA / "kineto" / f"c1_base_{mode}.json.gz"),
         str(DATA / "kineto" / f"c5_unused_{mode}.json.gz"),
         "--repo", str(repo), "--commits", f"{c['base']}..{c['unused']}", "--format", "json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_eager_the_changing_commit_ranks_first_by_a_clear_margin(repo: Path) -> None:
    c = commits()
    ranked = suspects(repo, "eager")["suspects"]
    order = [s["commit"] for s in ranked]
    assert order[0] == c["culprit"], [s["subject"] for s in ranked]
    top = ranked[0]
    assert "minispec/layers.py:mlp" in top["functions"]
    # measured 2026-12-01: culprit 1.03, caller 0.38, sibling 0.13, unused 0.04
    assert top["score"] >= 2 * ranked[1]["score"]
    assert c["unused"] not in order or order.index(c["unused"]) > 0
    # the slower kernels' change (fp32 casts and GEMV: about +1.1 ms/cycle of GPU work)
    assert top["delta_ms_per_cycle"] > 0.5


@pytest.mark.xfail(
    strict=True,
    reason="CUDA-graph replays carry only the cudaGraphLaunch stack (bench.py); the node's "
    "capture-time launch (recorded in this trace) is not mapped yet, so no commit is suspected",
)
def test_graph_the_changing_commit_ranks_first(repo: Path) -> None:
    ranked = suspects(repo, "graph")["suspects"]
    assert ranked and ranked[0]["commit"] == commits()["culprit"]
